"""cleanrl/ppo_procgen.py: the reward scaling and the GAE with Procgen's dones (ppg_procgen.py's too), the IMPALA CNN,
by hand (in this environment, importing the script without Procgen); then, in Procgen's own environment (`.venv-procgen`, numpy < 2;
tests/helpers.py runs the script there), smoke with every flag, enjoy replaying the evaluation, an exact resume, and
bad inputs. No learning test: Procgen needs millions of steps (docs/algorithms/ppo_procgen.md)."""

import importlib.util
import shutil

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.wrappers.utils import RunningMeanStd
from helpers import (
    PPO_TAGS,
    assert_clean_failure,
    assert_same_model,
    check_bad_input_in_process,
    check_enjoy_replays_the_evaluation,
    check_evaluations,
    load_checkpoint,
    load_script,
    refused,
    run_script,
    run_with_every_flag,
    scalar_tags,
    scalars,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

SCRIPT = "ppo_procgen.py"
PROCGEN_COMMAND = "UV_PROJECT_ENVIRONMENT=.venv-procgen uv run --no-dev --extra procgen python cleanrl/ppo_procgen.py"
# fruitbot: a random policy's games end after 65 to 80 steps, with whole-number scores that differ from game to game
# (measured), so tiny runs see whole games and a replay is told apart; a rollout of 2 envs x 32 steps = 64 steps
SHORT = ["--env-id", "fruitbot", "--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1"]


def load_ppo():
    return load_script("ppo_procgen")


@pytest.mark.parametrize("script", ["ppo_procgen", "ppg_procgen"])  # the two scripts share these pieces
def test_reward_scaling_by_hand(script):
    """Gym's NormalizeReward: returns G = gamma * G + r per env, restarted after the reward where a game ended; each
    reward divided by sqrt(var + 1e-8), var the variance of every G seen so far (with RunningMeanStd's prior: weight
    1e-4 at mean 0, variance 1), then clipped to [-10, 10]."""
    scale_rewards = load_script(script).scale_rewards
    discounted_returns, return_rms = np.zeros(2), RunningMeanStd()
    steps = [([1.0, 2.0], [False, True]), ([4.0, 0.0], [False, False]), ([0.0, 1000.0], [False, False])]
    expected_returns = [[1.0, 2.0], [4.5, 0.0], [2.25, 1000.0]]  # env 1's game ended at step 0: its sum restarted
    seen = []
    for (reward, done), returns in zip(steps, expected_returns):
        scaled = scale_rewards(np.array(reward), np.array(done), discounted_returns, return_rms, 0.5)
        seen += returns
        mean = sum(seen) / (len(seen) + 1e-4)
        var = (1e-4 * 1.0 + sum(g * g for g in seen)) / (len(seen) + 1e-4) - mean**2
        np.testing.assert_allclose(scaled, np.clip(np.array(reward) / np.sqrt(var + 1e-8), -10, 10), rtol=1e-5)
    assert scaled.dtype == np.float32
    np.testing.assert_allclose(discounted_returns, [2.25, 1000.0])

    # a reward far above the spread of the returns so far is clipped to 10: here 1000 / 90 after 60 steps of nothing
    discounted_returns, return_rms = np.zeros(2), RunningMeanStd()
    for _ in range(60):
        scale_rewards(np.zeros(2), np.zeros(2, dtype=bool), discounted_returns, return_rms, 0.5)
    scaled = scale_rewards(np.array([1000.0, 0.0]), np.zeros(2, dtype=bool), discounted_returns, return_rms, 0.5)
    assert scaled.tolist() == [10.0, 0.0]


@pytest.mark.parametrize("script", ["ppo_procgen", "ppg_procgen"])
def test_gae_with_dones_by_hand(script):
    """gamma 0.5, lambda 0.5. Env 0's game ends at step 1 (obs[2] is the next game's first): no bootstrap from it and no
    advantage across it. Env 1 plays on: it bootstraps from last_value."""
    rewards = np.array([[1.0, 0.0], [2.0, 1.0], [0.0, 3.0]])
    values = np.array([[1.0, 2.0], [2.0, 4.0], [4.0, 2.0]])
    dones = np.array([[0, 0], [1, 0], [0, 0]], dtype=np.float32)
    last_value = np.array([8.0, 6.0])
    advantages, returns = load_script(script).compute_gae(rewards, values, last_value, dones, 0.5, 0.5)
    d2, d1, d0 = 0 + 0.5 * 8 - 4, 2 - 2, 1 + 0.5 * 2 - 1  # env 0: 0.0, 0.0 (the end), 1.0
    np.testing.assert_allclose(advantages[:, 0], [d0 + 0.25 * d1, d1, d2])
    e2, e1, e0 = 3 + 0.5 * 6 - 2, 1 + 0.5 * 2 - 4, 0 + 0.5 * 4 - 2  # env 1: 4.0, -2.0, 0.0
    np.testing.assert_allclose(advantages[:, 1], [e0 + 0.25 * (e1 + 0.25 * e2), e1 + 0.25 * e2, e2])
    np.testing.assert_allclose(returns, advantages + values)


def test_impala_cnn_shapes_parameters_and_input():
    """Three IMPALA blocks of 16, 32, 32 channels (conv 3x3, max-pool, two residual blocks of two convs 3x3) halve
    64x64 to 8x8, then 256 units; the (N, 64, 64, 3) uint8 frame is made channels-first and scaled by 1/255 inside."""
    ppo = load_ppo()
    spaces = {"single_observation_space": gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)}
    agent = ppo.Agent(type("Envs", (), {**spaces, "single_action_space": gym.spaces.Discrete(15)}))

    def block(c_in, c_out):  # a conv, then 4 convs in the residual blocks; weights and biases
        return c_in * c_out * 9 + c_out + 4 * (c_out * c_out * 9 + c_out)

    expected = block(3, 16) + block(16, 32) + block(32, 32) + (32 * 8 * 8 * 256 + 256) + (256 * 15 + 15) + (256 + 1)
    assert sum(p.numel() for p in agent.parameters()) == expected == 626_256
    frames = torch.randint(0, 256, (5, 64, 64, 3), dtype=torch.uint8)
    with torch.no_grad():
        assert agent.network(frames.permute(0, 3, 1, 2) / 255.0).shape == (5, 256)
        action, logprob, entropy, value = agent.get_action_and_value(frames)
        hidden = agent.network(frames.permute(0, 3, 1, 2).float() / 255.0)
        torch.testing.assert_close(value, agent.critic(hidden).flatten())
        torch.testing.assert_close(agent.get_value(frames), value)
        log_probs = agent.actor(hidden).log_softmax(-1)
    assert action.shape == logprob.shape == entropy.shape == value.shape == (5,) and action.dtype == torch.int64
    assert ((0 <= action) & (action < 15)).all() and agent.get_action(frames).shape == (5,)
    torch.testing.assert_close(logprob, log_probs[torch.arange(5), action])
    torch.testing.assert_close(entropy, -(log_probs.exp() * log_probs).sum(-1))


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One run with every flag at once: 3 rollouts of 64 steps, an evaluation after each, a checkpoint at step 128 (kept
    as checkpoint.prev.pt when the final one is written)."""
    tmp_path = tmp_path_factory.mktemp("smoke")
    flags = [*SHORT, "--total-timesteps", "192", "--seed", "1", "--checkpoint-interval", "128"]
    flags += ["--capture-video", "--save-model", "--track", "--eval-interval", "64", "--eval-episodes", "2"]
    return tmp_path, run_with_every_flag(SCRIPT, flags, tmp_path)


@pytest.mark.e2e
def test_smoke_with_every_flag(smoke_run):
    tmp_path, run_dir = smoke_run
    assert set(PPO_TAGS) <= scalar_tags(run_dir), set(PPO_TAGS) - scalar_tags(run_dir)
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == [64, 128, 192]
    # the raw game scores (fruitbot's points), not the scaled rewards the loss sees
    assert all(r == int(r) for _, r in scalars(run_dir, "charts/episodic_return"))
    check_evaluations(run_dir, 64, 2, 192)
    assert "rl-video-episode-0.mp4" in {p.name for p in (tmp_path / "videos" / run_dir.name).glob("*.mp4")}
    saved = load_checkpoint(run_dir / "checkpoint.pt")
    assert saved["global_step"] == 192 and saved["finished"]
    state = saved["state"]
    keys = ["agent", "discounted_returns", "envs", "global_step", "next_obs", "optimizer", "return_rms"]
    assert sorted(state) == keys
    assert len(state["envs"]["games"]) == 2  # Procgen's save states of the two games
    assert state["discounted_returns"].shape == (2,) and state["return_rms"].count > 192
    assert state["next_obs"].shape == (2, 64, 64, 3) and state["next_obs"].dtype == np.uint8


@pytest.mark.e2e
def test_enjoy_replays_the_evaluation(smoke_run):
    tmp_path, run_dir = smoke_run
    check_enjoy_replays_the_evaluation(run_dir, tmp_path)


@pytest.mark.e2e
def test_a_resume_from_a_mid_run_checkpoint_ends_with_the_same_weights(smoke_run, tmp_path):
    """The smoke run kept its checkpoint of step 128 as checkpoint.prev.pt: a copy of its folder resumed from it plays
    the last rollout again, and the games (Procgen's save states), the reward scaling and the RNGs coming back exactly
    make the same weights as the uninterrupted run's."""
    _, run_dir = smoke_run
    copy = tmp_path / "runs" / run_dir.name
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("*.cleanrl_model", "events.out.*"))
    (copy / "checkpoint.prev.pt").replace(copy / "checkpoint.pt")
    assert load_checkpoint(copy / "checkpoint.pt")["global_step"] == 128
    result = run_script(SCRIPT, "--resume", str(copy), "--no-capture-video", "--no-track", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resuming" in result.stdout and "at step 128 of 192" in result.stdout, result.stdout
    assert_same_model(run_dir / "ppo_procgen.cleanrl_model", copy / "ppo_procgen.cleanrl_model")


@pytest.mark.e2e
def test_an_unknown_game_is_refused_with_the_list_of_games(tmp_path):
    """In Procgen's environment: an Atari id (Procgen would abort the process on an unknown name) gets the 16 games."""
    result = run_script(SCRIPT, "--env-id", "BreakoutNoFrameskip-v4", cwd=tmp_path)
    games = "one of bigfish, bossfight, caveflyer, chaser, climber, coinrun, dodgeball, fruitbot, heist, jumper, leaper"
    assert_clean_failure(result, "--env-id BreakoutNoFrameskip-v4 is not a Procgen game", games, "plunder, starpilot")
    assert not (tmp_path / "runs").exists()


def test_without_procgen_the_script_names_the_command_that_runs_it(tmp_path, monkeypatch, capsys):
    """This (the dev) environment has numpy 2 and no Procgen: the script refuses with the one documented command."""
    assert importlib.util.find_spec("procgen") is None, "this test is about an environment without Procgen"
    check_bad_input_in_process(
        SCRIPT, [], ["procgen is not installed in this environment", PROCGEN_COMMAND], tmp_path, monkeypatch, capsys
    )


def test_without_procgen_enjoy_names_the_command_that_plays_the_model(tmp_path, monkeypatch, capsys):
    """enjoy in this (the dev) environment: a Procgen model is refused with the environment that plays it."""
    from cleanrl_utils import enjoy

    (tmp_path / "model.cleanrl_model").write_bytes(b"")
    flags = ["--model-path", str(tmp_path / "model.cleanrl_model"), "--exp-name", "ppo_procgen", "--env-id", "starpilot"]
    monkeypatch.setattr("sys.argv", ["enjoy", *flags])
    assert f"{PROCGEN_COMMAND.removesuffix(' cleanrl/ppo_procgen.py')} -m cleanrl_utils.enjoy" in refused(capsys, enjoy.main)


# the flag checks come before the Procgen check, so they run here in the dev environment, in process
BAD_INPUTS = [
    (["--num-envs", "0"], ["--num-envs must be positive"]),
    (["--seed", str(2**31)], ["--seed must be in [0, 2**31)"]),
    (["--eval-interval", "-1"], ["--eval-interval must be >= 0"]),
    (["--eval-episodes", "0"], ["--eval-episodes must be positive"]),
    (["--num-minibatches", "3"], ["--num-minibatches 3 must divide", "16384"]),  # 64 envs x 256 steps
    (["--total-timesteps", "1000"], ["--total-timesteps 1000 is less than one rollout", "16384"]),
    (["--batch-size", "5"], ["--batch-size"]),  # computed from --num-envs * --num-steps: not a flag
    (["--resume", "runs/never-ran"], ["--resume runs/never-ran: no such folder"]),
]


@pytest.mark.parametrize("flags, fragments", BAD_INPUTS)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, flags, fragments):
    check_bad_input_in_process(SCRIPT, flags, fragments, tmp_path, monkeypatch, capsys)
