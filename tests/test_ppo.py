"""cleanrl/ppo.py: smoke with every flag, learning, GAE by hand, resume, determinism, bad inputs."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import (
    PPO_TAGS,
    REPO,
    assert_clean_failure,
    check_bad_input_in_process,
    check_evaluations,
    check_killed_run_resumes_to_the_same_weights,
    check_sigterm_checkpoints_and_resumes,
    load_script,
    only_run_dir,
    run_script,
    scalar_tags,
    scalars,
)

SHORT = ["--total-timesteps", "1024", "--num-envs", "2", "--num-steps", "128"]


def load_ppo():
    return load_script("ppo")


def test_gae_by_hand_with_truncation_and_termination():
    ppo = load_ppo()
    gamma, lam = 0.9, 0.8
    # columns: env 0 is truncated at step 1 (then a new episode), env 1 terminates at step 2
    rewards = np.array([[1.0, 0.0], [2.0, 1.0], [0.0, 3.0], [1.0, 0.0]])
    values = np.array([[0.5, 1.0], [0.6, 1.1], [0.2, 1.2], [0.3, 0.4]])
    last_value = np.array([0.7, 0.9])
    final_values = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 9.0], [0.0, 0.0]])  # V(real last obs) where ended
    terminations = np.array([[0.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    episode_ends = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])

    advantages, returns = ppo.compute_gae(rewards, values, last_value, final_values, terminations, episode_ends, gamma, lam)

    # env 0, backwards: step 3 bootstraps from last_value; step 1 (truncated) from its final value 5.0,
    # not from values[2] (the next episode's reset state), and step 0 carries step 1's advantage
    a0_3 = 1 + 0.9 * 0.7 - 0.3  # 1.33
    a0_2 = (0 + 0.9 * 0.3 - 0.2) + 0.9 * 0.8 * a0_3  # 1.0276
    a0_1 = 2 + 0.9 * 5.0 - 0.6  # 5.9, nothing carried back across the episode end
    a0_0 = (1 + 0.9 * 0.6 - 0.5) + 0.9 * 0.8 * a0_1  # 5.288
    # env 1: step 2 terminates: no bootstrap at all (its final value 9.0 must be ignored)
    a1_3 = 0 + 0.9 * 0.9 - 0.4  # 0.41
    a1_2 = 3 - 1.2  # 1.8
    a1_1 = (1 + 0.9 * 1.2 - 1.1) + 0.9 * 0.8 * a1_2  # 2.276
    a1_0 = (0 + 0.9 * 1.1 - 1.0) + 0.9 * 0.8 * a1_1  # 1.62872
    expected = np.array([[a0_0, a1_0], [a0_1, a1_1], [a0_2, a1_2], [a0_3, a1_3]])
    np.testing.assert_allclose(advantages, expected, rtol=1e-12)
    np.testing.assert_allclose(returns, expected + values, rtol=1e-12)


def test_policy_samples_from_its_softmax():
    ppo = load_ppo()
    spaces = {"single_observation_space": gym.spaces.Box(-1, 1, (3,)), "single_action_space": gym.spaces.Discrete(2)}
    agent = ppo.Agent(type("Envs", (), spaces))
    torch.manual_seed(0)
    with torch.no_grad():
        agent.actor[-1].weight.zero_()
        agent.actor[-1].bias.copy_(torch.tensor([0.0, np.log(3.0)]))  # probabilities 1/4 and 3/4 for any input
        actions = agent.get_action(torch.zeros(40000, 3))
        logprobs, entropy, values = agent.evaluate_actions(torch.zeros(40000, 3), actions)
    assert abs(actions.float().mean().item() - 0.75) < 0.01  # the Gumbel-max sampler draws from softmax(logits)
    torch.testing.assert_close(logprobs, torch.where(actions == 1, np.log(0.75), np.log(0.25)).float())
    torch.testing.assert_close(entropy, torch.full((40000,), -(0.25 * np.log(0.25) + 0.75 * np.log(0.75))).float())
    assert values.shape == (40000,)


def test_rollout_sees_real_last_observations_across_resets():
    """The contract ppo.py's rollout relies on, through its own make_env: a short-episode env stepped through
    several resets. Where an episode ends, next_obs is already the reset observation, the real last one is in
    infos["final_obs"], termination and truncation are told apart, and the episode's statistics come with it."""
    ppo = load_ppo()
    import custom_env  # noqa: F401  (registers Corridor-v0: exit at position 5, time limit 20)

    envs = gym.vector.SyncVectorEnv(
        [ppo.make_env("Corridor-v0", i, False, "test") for i in range(2)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    next_obs, _ = envs.reset(seed=0)
    ends = []
    for step in range(45):  # env 0 walks right (ends by termination every 5 steps), env 1 left (truncated at 20)
        next_obs, rewards, terminated, truncated, infos = envs.step(np.array([1, 0]))
        if terminated[0]:
            assert infos["_final_obs"][0] and infos["final_obs"][0][0] == 1.0  # at the exit
            assert rewards[0] == 1.0 and next_obs[0][0] == 0.0  # the reward is the exit's; the obs is the reset one
            assert infos["final_info"]["episode"]["l"][0] == 5
            ends.append((step, "terminated"))
        if truncated[1]:
            assert not terminated[1] and infos["_final_obs"][1] and infos["final_obs"][1][0] == 0.0
            assert infos["final_info"]["episode"]["l"][1] == 20 and infos["final_info"]["episode"]["r"][1] == 0.0
            ends.append((step, "truncated"))
        if not (terminated[0] or truncated[0]):
            assert next_obs[0][0] == ((step % 5) + 1) / 5  # mid-episode: the observation moves on
    envs.close()
    assert [s for s, kind in ends if kind == "terminated"] == [4, 9, 14, 19, 24, 29, 34, 39, 44]
    assert [s for s, kind in ends if kind == "truncated"] == [19, 39]


@pytest.mark.e2e
def test_smoke_with_every_flag(tmp_path):
    flags = [*SHORT, "--capture-video", "--save-model", "--track", "--checkpoint-interval", "512"]
    result = run_script("ppo.py", *flags, "--eval-interval", "384", "--eval-episodes", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    assert list((tmp_path / "videos").rglob("*.mp4")), "--capture-video wrote no mp4"
    assert (run_dir / "ppo.cleanrl_model").stat().st_size > 0
    assert (run_dir / "checkpoint.pt").exists()
    saved = json.loads((run_dir / "args.json").read_text())
    assert saved["script"] == "ppo.py" and saved["args"]["total_timesteps"] == 1024
    assert list((tmp_path / "wandb").glob("offline-run-*")), "--track with WANDB_MODE=offline wrote no W&B run"
    assert set(PPO_TAGS) <= scalar_tags(run_dir), set(PPO_TAGS) - scalar_tags(run_dir)
    check_evaluations(run_dir, 384, 2, 1024)  # at steps 512 and 768 (rollouts of 256 steps), then the final model's
    assert all(r >= 1 for _, r in scalars(run_dir, "eval/final_episodic_return"))
    assert "evaluation at step 512: " in result.stdout and "final evaluation: " in result.stdout


@pytest.mark.e2e
def test_progress_bar_on_a_terminal_sparse_lines_elsewhere(tmp_path):
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    from helpers import script_env

    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal has a size: 24 x 100
    process = subprocess.Popen(
        [sys.executable, str(REPO / "cleanrl" / "ppo.py"), "--total-timesteps", "4096"],
        cwd=tmp_path, env=script_env(), stdin=terminal, stdout=terminal, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        output += chunk
    assert process.wait(timeout=120) == 0
    assert "100%" in output.decode(errors="replace") and "4096/4096" in output.decode(errors="replace")  # tqdm's bar

    (tmp_path / "piped").mkdir()
    result = run_script("ppo.py", "--total-timesteps", "40960", cwd=tmp_path / "piped")
    progress_lines = [line for line in result.stdout.splitlines() if line.startswith("step ")]
    assert len(progress_lines) == 20 and progress_lines[-1].startswith("step 40960/40960")


@pytest.mark.e2e
def test_users_own_env_by_module_path(tmp_path):
    result = run_script("ppo.py", "--env-id", "custom_env:Corridor-v0", *SHORT, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lengths = [value for _, value in scalars(only_run_dir(tmp_path), "charts/episodic_length")]
    assert lengths and max(lengths) <= 20  # the env's own time limit applies


@pytest.mark.slow
@pytest.mark.e2e
def test_learns_cartpole(tmp_path):
    # 122,880 steps (about 15 s): on seeds 1-8 the last 20 episodes averaged 220-353 (mean 289); a random policy
    # scores about 22, and a PPO with a broken loss, sampler or advantage stays far below the bar
    result = run_script("ppo.py", "--total-timesteps", "122880", "--seed", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    returns = [value for _, value in scalars(only_run_dir(tmp_path), "charts/episodic_return")]
    assert np.mean(returns[-20:]) >= 150, returns[-20:]


@pytest.mark.e2e
def test_killed_run_resumes_to_the_same_weights(tmp_path):
    flags = ["--total-timesteps", "40960", "--seed", "3", "--save-model", "--checkpoint-interval", "4096"]
    run_dir = check_killed_run_resumes_to_the_same_weights("ppo.py", flags, tmp_path, "charts/SPS")
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == list(range(512, 40960 + 1, 512))


@pytest.mark.e2e
def test_sigterm_checkpoints_and_exits_nonzero(tmp_path):
    check_sigterm_checkpoints_and_resumes("ppo.py", tmp_path, long_budget=200704, more_steps=10240)


@pytest.mark.parametrize(
    "flags, fragments",
    [
        (["--env-id", "NoSuchEnv-v0"], ["--env-id NoSuchEnv-v0"]),
        (["--env-id", "no_such_module:Thing-v0"], ["--env-id no_such_module:Thing-v0"]),
        (["--env-id", "Pendulum-v1"], ["a Box action space", "ppo_continuous_action.py"]),
        (["--env-id", "FrozenLake-v1"], ["Discrete observation space", "FlattenObservation"]),
        (["--num-minibatches", "3"], ["--num-minibatches 3 must divide", "512"]),
        (["--num-envs", "0"], ["--num-envs must be positive"]),
        (["--total-timesteps", "-5"], ["--total-timesteps must be positive"]),
        (["--update-epochs", "0"], ["--update-epochs must be positive"]),
        (["--checkpoint-interval", "-1"], ["--checkpoint-interval must be >= 0"]),
        (["--eval-interval", "-1"], ["--eval-interval must be >= 0"]),
        (["--eval-episodes", "0"], ["--eval-episodes must be positive"]),
        (["--seed", "-1"], ["--seed must be in [0, 2**32)"]),
        (["--seed", "4294967296"], ["--seed must be in [0, 2**32)"]),
        (["--batch-size", "5"], ["--batch-size"]),  # computed from --num-envs * --num-steps: not a flag
        (["--resume", "runs/never-ran"], ["--resume runs/never-ran: no such folder"]),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, flags, fragments):
    check_bad_input_in_process("ppo.py", flags, fragments, tmp_path, monkeypatch, capsys)


@pytest.mark.e2e
def test_bad_input_in_a_new_process(tmp_path):
    result = run_script("ppo.py", "--num-minibatches", "3", cwd=tmp_path)
    assert_clean_failure(result, "--num-minibatches 3 must divide")
    assert not (tmp_path / "runs").exists(), "a bad input started a run"
