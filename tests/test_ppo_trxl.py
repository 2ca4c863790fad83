"""cleanrl/ppo_trxl.py: the proof-of-memory env (a memoryless policy is at chance), the attention mask, the memory's
reset at an episode start, the rollout's memory windows replaying the acting-time outputs, GAE, smoke with every flag,
resume (extended, and killed then resumed to the same weights), learning on the proof-of-memory env, bad inputs."""

import json
import types

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import (
    PPO_TAGS,
    assert_clean_failure,
    check_bad_input_in_process,
    check_enjoy_replays_the_evaluation,
    check_evaluations,
    check_killed_run_resumes_to_the_same_weights,
    load_checkpoint,
    load_script,
    only_run_dir,
    run_script,
    run_with_every_flag,
    scalar_tags,
    scalars,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

# a small transformer and memory: the proof-of-memory env's cue is 5 steps before its query
SMALL = ["--env-id", "ProofOfMemory-v0", "--trxl-num-layers", "1", "--trxl-dim", "32", "--trxl-num-heads", "2"]
SMALL += ["--trxl-memory-length", "8", "--num-envs", "8", "--num-steps", "32", "--num-minibatches", "4"]
LEARN = ["--learning-rate", "1e-3", "--ent-coef", "0.01", "--norm-adv", "--update-epochs", "4"]


def load_trxl():
    return load_script("ppo_trxl")


def small_agent(trxl, envs, memory_length=4, num_layers=2, positional_encoding="absolute", seed=0):
    torch.manual_seed(seed)
    args = types.SimpleNamespace(
        trxl_dim=16,
        trxl_num_heads=2,
        trxl_num_layers=num_layers,
        trxl_memory_length=memory_length,
        trxl_positional_encoding=positional_encoding,
    )
    return trxl.Agent(envs, args).eval()


def test_a_memoryless_policy_is_at_chance_on_the_proof_of_memory_env():
    trxl = load_trxl()
    env = gym.make("ProofOfMemory-v0", render_mode="rgb_array")
    episodes = {0: [], 1: []}  # cue -> (observations, reward per action at the query)
    for seed in range(20):
        for action in (0, 1):
            obs, _ = env.reset(seed=seed)
            cue, seen = env.unwrapped.cue, [obs]
            assert env.render().shape == (32, 64, 3)  # --capture-video's frames
            for _ in range(5):  # 4 blank steps, then the query
                obs, reward, terminated, truncated, _ = env.step(0)
                assert reward == 0 and not terminated and not truncated
                seen.append(obs)
            _, reward, terminated, _, _ = env.step(action)
            assert terminated and reward == float(action == cue)
            episodes[cue].append((np.stack(seen), action, reward))
    assert episodes[0] and episodes[1]
    # the cue is shown at the first step only: every later observation is the same for both cues
    cue0, cue1 = episodes[0][0][0], episodes[1][0][0]
    np.testing.assert_array_equal(cue0[0], [1, 0, 0])
    np.testing.assert_array_equal(cue1[0], [0, 1, 0])
    np.testing.assert_array_equal(cue0[1:], cue1[1:])
    np.testing.assert_array_equal(cue0[-1], [0, 0, 1])  # the query step
    # so a memoryless policy acts at the query whatever the cue: an action wins with one cue and loses with the other,
    # and with the cue drawn uniformly its success is exactly 1/2 (a mix of actions too)
    for cue in (0, 1):
        assert all(reward == float(action == cue) for _, action, reward in episodes[cue])
    # the id is the script's env (registered by whichever import of the script came first in this process)
    assert type(env.unwrapped).__name__ == trxl.ProofOfMemoryEnv.__name__
    env.close()


def test_attention_mask_hides_steps_before_the_episode_start_by_hand():
    trxl = load_trxl()
    # keys: the window of L = 4 earlier steps (oldest first), then the step itself; True = hidden
    mask = trxl.attention_mask(torch.tensor([0, 1, 2, 4, 9]), 4)
    expected = [
        [1, 1, 1, 1, 0],  # the episode's first step sees only itself
        [1, 1, 1, 0, 0],  # one step in: the last window entry is its episode's
        [1, 1, 0, 0, 0],
        [0, 0, 0, 0, 0],  # L steps in and later: the whole window
        [0, 0, 0, 0, 0],
    ]
    assert mask.tolist() == [[bool(v) for v in row] for row in expected]


def test_windows_hold_only_earlier_steps():
    trxl = load_trxl()
    memory = torch.arange(2 * 7).reshape(2, 7, 1, 1).float()  # 2 envs, L = 3 before the rollout + 4 steps, value = place
    windows = trxl.memory_windows(memory, torch.tensor([0, 1, 1]), torch.tensor([0, 2, 3]), 3)
    # step t's own layer inputs sit at L + t: its window is the L entries before, never it or a later step
    assert windows.flatten(1).tolist() == [[0, 1, 2], [9, 10, 11], [10, 11, 12]]


def test_the_memory_is_reset_at_an_episode_start():
    trxl = load_trxl()
    envs = type(
        "Envs", (), {"single_observation_space": gym.spaces.Box(0, 1, (3,)), "single_action_space": gym.spaces.Discrete(2)}
    )
    for encoding in ["absolute", "learned", "none"]:
        agent = small_agent(trxl, envs, positional_encoding=encoding)
        x, window = torch.rand(3, 3), torch.randn(3, 4, 2, 16)
        with torch.no_grad():
            first, inputs = agent.get_hidden(x, window, torch.zeros(3, dtype=torch.long))
            fresh, fresh_inputs = agent.get_hidden(x, torch.zeros_like(window), torch.zeros(3, dtype=torch.long))
            assert torch.equal(first, fresh) and torch.equal(inputs, fresh_inputs)  # the earlier episode reaches nothing
            # two steps in: only the window's last two entries count
            two = torch.full((3,), 2, dtype=torch.long)
            other = window.clone()
            other[:, :2] = torch.randn(3, 2, 2, 16)
            torch.testing.assert_close(agent.get_hidden(x, other, two)[0], agent.get_hidden(x, window, two)[0])
            other[:, 3] = torch.randn(3, 2, 16)  # (a constant shift would vanish in the layer norm)
            assert not torch.allclose(agent.get_hidden(x, other, two)[0], agent.get_hidden(x, window, two)[0])
            assert not torch.allclose(agent.get_hidden(x, window, two)[0], first)


def test_the_rollout_memory_replays_the_acting_time_outputs():
    """Acting as the script does (windows of a rollout memory, episodes ending mid-rollout), then recomputing shuffled
    minibatches from the stored memory, windows and episode steps, as the update does: the same logits and values."""
    trxl = load_trxl()
    N, T, L = 3, 20, 4
    envs = gym.vector.SyncVectorEnv(
        [trxl.make_env("ProofOfMemory-v0", i, False, "test") for i in range(N)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    agent = small_agent(trxl, envs, memory_length=L, seed=1)
    memory = torch.zeros(N, L + T, 2, 16)
    memory[:, :L] = torch.randn(N, L, 2, 16)  # an earlier rollout's last steps, of episodes 2 steps in
    next_obs, _ = envs.reset(seed=3)
    next_episode_step = torch.full((N,), 2, dtype=torch.long)
    obs, steps, logits, values, starts = [], [], [], [], 0
    with torch.no_grad():
        for t in range(T):
            obs.append(next_obs)
            steps.append(next_episode_step)
            hidden, memory[:, L + t] = agent.get_hidden(torch.as_tensor(next_obs), memory[:, t : t + L], next_episode_step)
            logits.append(agent.actor(hidden))
            values.append(agent.critic(hidden).flatten())
            next_obs, _, terminated, truncated, _ = envs.step(logits[-1].argmax(-1).numpy())
            ended = torch.as_tensor(terminated | truncated)
            starts += int(ended.sum())
            next_episode_step = torch.where(ended, 0, next_episode_step + 1)
        assert starts >= 2 * N  # episodes of 6 steps: every env starts new ones mid-rollout
        b_obs, b_steps = torch.as_tensor(np.concatenate(obs)), torch.stack(steps).flatten()
        flat = torch.randperm(T * N)
        windows = trxl.memory_windows(memory, flat % N, flat // N, L)
        hidden, _ = agent.get_hidden(b_obs[flat], windows, b_steps[flat])
        torch.testing.assert_close(agent.actor(hidden), torch.cat(logits)[flat])
        torch.testing.assert_close(agent.critic(hidden).flatten(), torch.cat(values)[flat])
        _, logprob, _, value, _ = agent.get_action_and_value(
            b_obs,
            trxl.memory_windows(memory, torch.arange(T * N) % N, torch.arange(T * N) // N, L),
            b_steps,
            torch.zeros(T * N, dtype=torch.long),
        )
        torch.testing.assert_close(logprob, torch.cat(logits).log_softmax(-1)[:, 0])
        # the stored windows matter: the memory of other episodes changes the outputs of the first rollout steps
        other = memory.clone()
        other[:, :L] = torch.randn(N, L, 2, 16)
        replayed = agent.get_hidden(
            b_obs[:N], trxl.memory_windows(other, torch.arange(N), torch.zeros(N, dtype=torch.long), L), b_steps[:N]
        )[0]
        assert not torch.allclose(agent.critic(replayed).flatten(), values[0])
    envs.close()


def test_gae_is_ppos():
    ppo, trxl = load_script("ppo"), load_trxl()  # ppo.py's compute_gae is checked by hand in test_ppo.py
    rng = np.random.default_rng(0)
    shape = (16, 3)
    terminations = (rng.random(shape) < 0.1).astype(np.float64)
    episode_ends = np.maximum(terminations, rng.random(shape) < 0.1)
    inputs = (rng.normal(size=shape), rng.normal(size=shape), rng.normal(size=3), rng.normal(size=shape))
    for x, y in zip(
        ppo.compute_gae(*inputs, terminations, episode_ends, 0.99, 0.95),
        trxl.compute_gae(*inputs, terminations, episode_ends, 0.99, 0.95),
    ):
        np.testing.assert_array_equal(x, y)


def test_minigrid_memory_tasks_are_84x84_pixels_of_a_3x3_view():
    trxl = load_trxl()
    env = trxl.make_env("MiniGrid-MemoryS9-v0", 0, False, "test")()
    obs, _ = env.reset(seed=0)
    assert obs.shape == (84, 84, 3) and obs.dtype == np.uint8 and env.spec.max_episode_steps == 96
    args = types.SimpleNamespace(
        trxl_dim=16, trxl_num_heads=2, trxl_num_layers=1, trxl_memory_length=4, trxl_positional_encoding="absolute"
    )
    envs = type("Envs", (), {"single_observation_space": env.observation_space, "single_action_space": env.action_space})
    agent = trxl.Agent(envs, args)
    with torch.no_grad():
        hidden, inputs = agent.get_hidden(
            torch.as_tensor(obs[None]), torch.zeros(1, 4, 1, 16), torch.zeros(1, dtype=torch.long)
        )
    assert hidden.shape == (1, 16) and inputs.shape == (1, 1, 16)
    env.close()


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One run with every flag; the resume test below extends it."""
    tmp_path = tmp_path_factory.mktemp("smoke")
    flags = [*SMALL, "--num-envs", "4", "--num-steps", "16", "--total-timesteps", "256", "--capture-video", "--save-model"]
    flags += ["--track", "--checkpoint-interval", "128", "--eval-interval", "96", "--eval-episodes", "2"]
    return run_with_every_flag("ppo_trxl.py", flags, tmp_path), tmp_path


@pytest.mark.e2e
def test_smoke_with_every_flag(smoke_run):
    run_dir, tmp_path = smoke_run
    assert set(PPO_TAGS) <= scalar_tags(run_dir), set(PPO_TAGS) - scalar_tags(run_dir)
    assert all(length == 6 for _, length in scalars(run_dir, "charts/episodic_length"))  # cue, 4 blanks, query
    check_evaluations(run_dir, 96, 2, 256)  # at steps 128 and 192 (rollouts of 64 steps), then the final model's
    saved = json.loads((run_dir / "args.json").read_text())
    assert saved["script"] == "ppo_trxl.py" and saved["args"]["trxl_memory_length"] == 8
    # the checkpoint carries each episode in progress: its observation, its last L steps' layer inputs, its step
    next_obs, live_memory, episode_step = load_checkpoint(run_dir / "checkpoint.pt")["state"]["memory"]
    assert next_obs.shape == (4, 3) and live_memory.shape == (4, 8, 1, 32) and episode_step.shape == (4,)
    assert live_memory.abs().sum() > 0 and episode_step.max() <= 5
    assert torch.load(run_dir / "ppo_trxl.cleanrl_model")["args"]["trxl_dim"] == 32  # the evaluator sizes the network
    check_enjoy_replays_the_evaluation(run_dir, tmp_path)


@pytest.mark.e2e
def test_resume_extends_the_finished_run(smoke_run):
    run_dir, tmp_path = smoke_run
    result = run_script("ppo_trxl.py", "--resume", str(run_dir), "--total-timesteps", "384", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resuming {run_dir} at step 256 of 384" in result.stdout
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == list(range(64, 384 + 1, 64))
    assert load_checkpoint(run_dir / "checkpoint.pt")["finished"]


@pytest.mark.e2e
def test_killed_run_resumes_to_the_same_weights(tmp_path):
    """Without video the envs pickle: the resumed run continues the same episodes with the same memory, to the same
    weights as an uninterrupted run."""
    flags = [*SMALL, "--total-timesteps", "8192", "--seed", "3", "--save-model", "--eval-episodes", "1"]
    run_dir = check_killed_run_resumes_to_the_same_weights(
        "ppo_trxl.py", [*flags, "--checkpoint-interval", "512"], tmp_path, "charts/SPS"
    )
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == list(range(256, 8192 + 1, 256))


@pytest.mark.slow
@pytest.mark.e2e
def test_learns_to_remember_the_cue(tmp_path):
    """Chance is a return of 0.5 (the test above): the greedy policy must name the cue in >= 90% of 100 episodes."""
    result = run_script(
        "ppo_trxl.py", *SMALL, *LEARN, "--total-timesteps", "8192", "--save-model", "--eval-episodes", "100", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    returns = [value for _, value in scalars(only_run_dir(tmp_path), "eval/final_episodic_return")]
    assert len(returns) == 100 and np.mean(returns) >= 0.9, np.mean(returns)


BAD_INPUTS = [
    (["--env-id", "Pendulum-v1"], ["--env-id Pendulum-v1 has a Box action space", "needs a Discrete one"]),
    (["--env-id", "NoSuchEnv-v0"], ["--env-id NoSuchEnv-v0"]),
    (["--env-id", "MortarMayhem-Grid-v0"], ["--env-id MortarMayhem-Grid-v0", "memory-gym ids are not supported"]),
    (["--env-id", "MiniGrid-NoSuchTask-v0"], ["--env-id MiniGrid-NoSuchTask-v0"]),
    (["--env-id", "Blackjack-v1"], ["--env-id Blackjack-v1 observes Tuple(", "takes 1-D vectors"]),
    (["--trxl-dim", "30", "--trxl-num-heads", "4"], ["--trxl-dim 30 must be a positive multiple of 2 * --trxl-num-heads (8)"]),
    (["--trxl-memory-length", "0"], ["--trxl-memory-length must be positive"]),
    (["--trxl-positional-encoding", "relative"], ["--trxl-positional-encoding must be absolute, learned or none"]),
    (["--num-minibatches", "3"], ["--num-minibatches 3 must divide", "16384"]),
    (["--seed", "-1"], ["--seed must be in [0, 2**32)"]),
    (["--batch-size", "5"], ["--batch-size"]),  # computed from --num-envs * --num-steps: not a flag
    (["--resume", "runs/never-ran"], ["--resume runs/never-ran: no such folder"]),
]


@pytest.mark.parametrize("flags, fragments", BAD_INPUTS)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, flags, fragments):
    check_bad_input_in_process("ppo_trxl.py", flags, fragments, tmp_path, monkeypatch, capsys)


@pytest.mark.e2e
def test_a_bad_input_in_a_new_process_is_one_clear_line(tmp_path):
    result = run_script("ppo_trxl.py", *BAD_INPUTS[0][0], cwd=tmp_path)
    assert_clean_failure(result, *BAD_INPUTS[0][1])
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()
