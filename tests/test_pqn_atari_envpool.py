"""cleanrl/pqn_atari_envpool.py and pqn_atari_envpool_lstm.py: the Q(lambda) returns on EnvPool's autoreset (by hand),
the LSTM's resets and replay on real EnvPool games, the recurrent evaluator's resets, smoke with every flag (both
scripts), a resume that extends a finished run, bad inputs (both scripts)."""

import json

import cv2
import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import (
    check_bad_input_in_process,
    check_evaluations,
    load_checkpoint,
    load_script,
    run_script,
    run_with_every_flag,
    scalar_tags,
    scalars,
)

SCRIPTS = ["pqn_atari_envpool.py", "pqn_atari_envpool_lstm.py"]
PQN_TAGS = [
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/SPS",
    "charts/learning_rate",
    "charts/epsilon",
    "losses/td_loss",
    "losses/q_values",
]
# 2 envs x 32 steps (the LSTM script's minibatches are whole envs: one each); 256 steps per env finish a game of
# Breakout in env 0, so --capture-video has a training game to write
SMOKE = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--total-timesteps", "512"]
SMOKE += ["--exploration-fraction", "0.5", "--env-id", "Breakout-v5"]
EVERY_FLAG = ["--capture-video", "--save-model", "--track", "--checkpoint-interval", "256", "--eval-interval", "192"]
EVERY_FLAG += ["--eval-episodes", "1"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.mark.parametrize("name", [script[: -len(".py")] for script in SCRIPTS])
def test_q_lambda_returns_by_hand(name):
    """Two envs, gamma 0.9, lambda 0.5. EnvPool resets one step late: an episode's end at step t returns its real last
    observation (max_q[t + 1] is its max Q), and step t + 1 is the reset step (action ignored; a junk reward there
    must reach nothing). Env 0: a lost life at step 1, a truncation (a game over) at step 4, the new game at step 6.
    Env 1: a game over by termination at step 1."""
    compute_q_lambda = load_script(name).compute_q_lambda
    rewards = np.array([[1, 0], [0, 1], [100, 100], [1, 1], [0, 0], [100, 1], [1, 0]], dtype=np.float32)
    max_q = np.array([[10, 1], [20, 2], [30, 3], [40, 4], [50, 5], [60, 6], [70, 7]], dtype=np.float32)
    last_max_q = np.array([80, 8], dtype=np.float32)
    terminations = np.zeros((7, 2), dtype=np.float32)
    terminations[1, 0] = terminations[1, 1] = 1  # a lost life (env 0), the last life lost (env 1)
    episode_ends = terminations.copy()
    episode_ends[4, 0] = 1  # truncated
    is_reset_step = np.zeros((7, 2), dtype=bool)
    is_reset_step[2, 0] = is_reset_step[5, 0] = is_reset_step[2, 1] = True
    returns, in_loss = compute_q_lambda(rewards, max_q, last_max_q, terminations, episode_ends, is_reset_step, 0.9, 0.5)

    g0 = {6: 1 + 0.9 * 80, 4: 0 + 0.9 * 60}  # the new game bootstraps from after the rollout; the truncation alone
    g0[3] = 1 + 0.9 * (0.5 * g0[4] + 0.5 * 50)  # the new life's first step chains up to the truncation
    g0[1] = 0.0  # the lost life: no bootstrap
    g0[0] = 1 + 0.9 * (0.5 * g0[1] + 0.5 * 20)
    g1 = {6: 0 + 0.9 * 8}
    g1[5] = 1 + 0.9 * (0.5 * g1[6] + 0.5 * 7)
    g1[4] = 0 + 0.9 * (0.5 * g1[5] + 0.5 * 6)
    g1[3] = 1 + 0.9 * (0.5 * g1[4] + 0.5 * 5)
    g1[1] = 1.0  # the game over
    g1[0] = 0 + 0.9 * (0.5 * g1[1] + 0.5 * 2)
    expected = np.array([[g0.get(t, 0.0), g1.get(t, 0.0)] for t in range(7)], dtype=np.float32)  # reset rows: no target
    np.testing.assert_allclose(returns, expected, rtol=1e-6)
    np.testing.assert_array_equal(in_loss, ~is_reset_step)  # the reset steps stay out of the loss

    # lambda 0: one-step Q-learning targets, r + gamma * (1 - terminated) * max_q[t + 1], reset rows aside
    one_step, _ = compute_q_lambda(rewards, max_q, last_max_q, terminations, episode_ends, is_reset_step, 0.9, 0.0)
    next_max_q = np.concatenate([max_q[1:], last_max_q[None]])
    np.testing.assert_allclose(one_step[in_loss], (rewards + 0.9 * (1 - terminations) * next_max_q)[in_loss], rtol=1e-6)


def lstm_network(n_actions=4, seed=0):
    torch.manual_seed(seed)
    return load_script("pqn_atari_envpool_lstm").QNetwork(type("Envs", (), {"action_space": gym.spaces.Discrete(n_actions)}))


def test_a_reset_starts_the_sequence_from_zero_state():
    """Where done, the Q-values are those of the sequence from there started from the zero state, bit for bit
    whatever the state before; the envs without a reset carry their state through."""
    network = lstm_network()
    T, N = 6, 3
    frames = torch.randint(0, 256, (T * N, 1, 84, 84), dtype=torch.uint8)
    done = torch.zeros(T, N)
    done[2, 1] = done[0, 2] = done[4, 2] = 1
    state = (torch.randn(1, N, 128), torch.randn(1, N, 128))
    with torch.no_grad():
        q, last = network(frames, state, done.flatten())
        q = q.reshape(T, N, 4)
        by_step = frames.reshape(T, N, 1, 84, 84)

        def alone(env, start, stop, from_state):  # one env's steps, no reset inside
            h, c = from_state
            steps = by_step[start:stop, env].contiguous()
            return network(steps, (h[:, [env]], c[:, [env]]), torch.zeros(stop - start))[0]

        zeros = network.initial_state(N)
        torch.testing.assert_close(q[:, 0], alone(0, 0, T, state))
        torch.testing.assert_close(q[:2, 1], alone(1, 0, 2, state))
        torch.testing.assert_close(q[2:, 1], alone(1, 2, T, zeros))
        torch.testing.assert_close(q[:4, 2], alone(2, 0, 4, zeros))
        torch.testing.assert_close(q[4:, 2], alone(2, 4, T, zeros))
        other = (state[0] + 1.0, state[1] - 1.0)
        q_other = network(frames, other, done.flatten())[0].reshape(T, N, 4)
        assert torch.equal(q_other[2:, 1], q[2:, 1]) and torch.equal(q_other[:, 2], q[:, 2])
        assert not torch.equal(q_other[:2, 1], q[:2, 1])


def test_the_lstm_resets_once_per_episode_and_the_stored_state_replays_the_rollout():
    """Acting on EnvPool games as the script does (truncated at 60 steps so that game overs come soon, lives lost on
    the way): each new life and each new game starts from the zero state exactly once, at its first observation (the
    one EnvPool's reset step returns: the step whose elapsed_step did not advance), and the update's replay from the
    state stored at the rollout's start gives the Q-values acting saw, for the whole batch and for one env alone."""
    import envpool

    envs = envpool.make(
        "Breakout-v5", env_type="gymnasium", num_envs=2, seed=3, episodic_life=True, stack_num=1, max_episode_steps=60
    )
    network = lstm_network(seed=1)
    T, N = 120, 2
    next_obs, _ = envs.reset()
    next_state, next_done, next_reset = network.initial_state(N), torch.zeros(N), np.zeros(N, dtype=bool)
    rng, elapsed = np.random.default_rng(0), np.zeros(N, dtype=np.int64)

    def step(actions):  # the script's bookkeeping; and, from EnvPool's own counter, which step was a reset step
        nonlocal next_obs, next_done, next_reset, elapsed
        next_obs, _, terminated, truncated, info = envs.step(actions)
        next_done = torch.as_tensor(next_reset, dtype=torch.float32)
        next_reset = terminated | truncated
        was_reset, elapsed = info["elapsed_step"] != elapsed + 1, info["elapsed_step"]
        return was_reset, terminated | truncated

    with torch.no_grad():
        for _ in range(20):  # a first stretch, so the rollout starts from a state that is not zeros
            _, next_state = network(torch.as_tensor(next_obs), next_state, next_done)
            step(rng.integers(4, size=N))
        initial_state = next_state
        obs, dones, q_seen, was_reset, ended = [], [], [], [], []
        for _ in range(T):
            obs.append(next_obs)
            dones.append(next_done)
            q, next_state = network(torch.as_tensor(next_obs), next_state, next_done)
            q_seen.append(q)
            for record, value in zip((was_reset, ended), step(rng.integers(4, size=N))):
                record.append(value)
    envs.close()
    dones, q_seen, was_reset, ended = torch.stack(dones), torch.stack(q_seen), np.array(was_reset), np.array(ended)
    assert ended.sum() >= 4, "the rollout should lose lives and end games"
    # row t + 1 starts an episode exactly where step t was EnvPool's reset step, which follows each episode's end
    np.testing.assert_array_equal(dones[1:].numpy().astype(bool), was_reset[:-1])
    np.testing.assert_array_equal(was_reset[1:], ended[:-1])

    b_obs, b_dones = torch.as_tensor(np.concatenate(obs)), dones.flatten()
    with torch.no_grad():
        replayed, last_state = network(b_obs, initial_state, b_dones)
        torch.testing.assert_close(replayed.reshape(T, N, 4), q_seen)
        torch.testing.assert_close(last_state, next_state)
        mb_inds = torch.arange(T * N).reshape(T, N)[:, [1]].flatten()  # env 1 alone, from its own start state
        alone, _ = network(b_obs[mb_inds], tuple(s[:, [1]] for s in initial_state), b_dones[mb_inds])
        torch.testing.assert_close(alone, q_seen[:, 1])
        from_zeros, _ = network(b_obs, network.initial_state(N), b_dones)
        assert not torch.allclose(from_zeros.reshape(T, N, 4)[0], q_seen[0])  # the stored state matters


def test_the_recurrent_evaluator_resets_where_training_does(tmp_path):
    """The evaluator hears of episode ends (lost lives too) through play_games; its network must reset where training
    does, at the observation EnvPool's reset step returns."""
    from cleanrl_utils.evals.pqn_envpool_eval import evaluate

    script = load_script("pqn_atari_envpool_lstm")
    seen, ended = [], []

    class Recording(torch.nn.Module):
        def __init__(self, envs):
            super().__init__()
            self.n = envs.action_space.n

        def initial_state(self, num_envs, device=None):
            return (torch.zeros(1, num_envs, 1), torch.zeros(1, num_envs, 1))

        def forward(self, x, lstm_state, done):
            seen.append(bool(done[0]))
            return torch.zeros(len(x), self.n), lstm_state

    def make_env(*args, **kwargs):
        envs = script.make_env(*args, **kwargs)
        step = envs.step

        def recorded(actions):
            result = step(actions)
            ended.append(bool(result[2][0] or result[3][0]))  # terminated or truncated
            return result

        envs.step = recorded
        return envs

    torch.save({}, tmp_path / "model")  # the recording network has no weights
    scores = evaluate(str(tmp_path / "model"), make_env, "Breakout-v5", 1, "test", Recording, capture_video=False)
    assert len(scores) == 1
    # an episode's end, then EnvPool's reset step, then the observation that starts the next episode
    assert seen == [False, False] + ended[:-2] and sum(seen) >= 4  # Breakout's lives


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    """Each script once with every flag (module-scoped: the resume test extends the LSTM script's run)."""
    runs = {}
    for script in SCRIPTS:
        tmp_path = tmp_path_factory.mktemp(script[: -len(".py")])
        runs[script] = (run_with_every_flag(script, [*SMOKE, *EVERY_FLAG], tmp_path), tmp_path)
    return runs


@pytest.mark.e2e
@pytest.mark.parametrize("script", SCRIPTS)
def test_smoke_with_every_flag(smoke_runs, script):
    run_dir, tmp_path = smoke_runs[script]
    assert set(PQN_TAGS) <= scalar_tags(run_dir), set(PQN_TAGS) - scalar_tags(run_dir)
    video = cv2.VideoCapture(str(sorted((tmp_path / "videos" / run_dir.name).glob("*.mp4"))[0]))
    assert (video.get(cv2.CAP_PROP_FRAME_HEIGHT), video.get(cv2.CAP_PROP_FRAME_WIDTH)) == (210, 160)  # the screen
    # whole games (5 lives of Breakout), not the training episodes a lost life ends
    assert all(length > 60 for _, length in scalars(run_dir, "charts/episodic_length"))
    # epsilon falls from 1 to 0.01 over the first 256 steps (--exploration-fraction 0.5 of 512); the rate anneals
    epsilons = [value for _, value in scalars(run_dir, "charts/epsilon")]
    assert epsilons[0] == pytest.approx(1 - 0.99 * 64 / 256) and epsilons[-1] == pytest.approx(0.01)
    rates = [value for _, value in scalars(run_dir, "charts/learning_rate")]
    assert rates[0] == pytest.approx(2.5e-4) and rates[-1] == pytest.approx(2.5e-4 / 8)
    check_evaluations(run_dir, 192, 1, 512)  # at steps 256 and 384 (rollouts of 64 steps), then the final model's
    checkpoint = load_checkpoint(run_dir / "checkpoint.pt")
    assert checkpoint["finished"] and checkpoint["global_step"] == 512
    assert checkpoint["state"]["rng"]["bit_generator"] == "PCG64"  # epsilon-greedy's own generator
    assert json.loads((run_dir / "args.json").read_text())["args"]["q_lambda"] == 0.65


@pytest.mark.e2e
def test_a_finished_run_extends_with_new_games(smoke_runs):
    script = "pqn_atari_envpool_lstm.py"
    run_dir, tmp_path = smoke_runs[script]
    flags = ["--total-timesteps", "768", "--no-save-model", "--eval-interval", "0", "--no-capture-video", "--no-track"]
    result = run_script(script, "--resume", str(run_dir), *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resuming {run_dir} at step 512 of 768" in result.stdout
    assert "resumed at step 512: the games start anew" in result.stderr
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == list(range(64, 768 + 1, 64))
    checkpoint = load_checkpoint(run_dir / "checkpoint.pt")
    assert checkpoint["finished"] and checkpoint["global_step"] == 768


BAD_INPUTS = [
    (["--env-id", "CartPole-v1"], ["--env-id CartPole-v1 is not an Atari game", "use pqn.py"]),
    (["--env-id", "BreakoutNoFrameskip-v4"], ["EnvPool names this game Breakout-v5"]),
    (["--env-id", "NoSuchGame-v5"], ["--env-id NoSuchGame-v5 is not an EnvPool environment"]),
    (["--num-envs", "0"], ["--num-envs must be positive"]),
    (["--seed", str(2**31)], ["--seed must be in [0, 2**31)"]),
    (["--q-lambda", "1.5"], ["--q-lambda must be in [0, 1]"]),
    (["--exploration-fraction", "0"], ["--exploration-fraction must be in (0, 1]"]),
    (["--total-timesteps", "100"], ["--total-timesteps 100 is less than one rollout"]),
    (["--eval-interval", "-1"], ["--eval-interval must be >= 0"]),
    (["--batch-size", "5"], ["--batch-size"]),  # computed from --num-envs * --num-steps: not a flag
    (["--resume", "runs/never-ran"], ["--resume runs/never-ran: no such folder"]),
]


@pytest.mark.parametrize(
    "script, flags, fragments",
    [(script, flags, fragments) for script in SCRIPTS for flags, fragments in BAD_INPUTS]
    + [
        ("pqn_atari_envpool.py", ["--num-minibatches", "3"], ["--num-minibatches 3 must divide", "4096"]),
        # minibatches are whole envs: 4 divides the batch of 2 x 32 steps, not the 2 envs
        ("pqn_atari_envpool_lstm.py", ["--num-envs", "2", "--num-minibatches", "4"], ["must divide --num-envs 2"]),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, script, flags, fragments):
    check_bad_input_in_process(script, flags, fragments, tmp_path, monkeypatch, capsys)
