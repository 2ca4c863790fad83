"""cleanrl/dqn_atari.py and c51_atari.py: the frame-deduplicating replay buffer they share (cleanrl_utils.buffers)
against a real ALE game, the buffer's memory, C51's projection and distributional head, and both scripts as a user runs
them (smoke with every flag, resume with and without the buffer, SIGTERM, bad inputs); the SIGTERM test covers
rainbow_atari.py and the JAX twins too."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import (
    assert_clean_failure,
    check_bad_input_in_process,
    check_enjoy_replays_the_evaluation,
    check_evaluations,
    check_killed_run_resumes_to_the_same_weights,
    checkpoint_files,
    load_checkpoint,
    load_script,
    run_script,
    run_with_every_flag,
    scalar_tags,
    scalars,
    sigterm_mid_run,
)

from cleanrl_utils.buffers import FrameReplayBuffer

SCRIPTS = ["dqn_atari.py", "c51_atari.py"]
LOSS_TAG = {"dqn_atari.py": "losses/td_loss", "c51_atari.py": "losses/loss"}
SMALL = ["--buffer-size", "1000", "--batch-size", "32"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def test_buffer_returns_exactly_the_emitted_transitions_of_a_real_game():
    """Two Breakout envs built with the script's make_env, random actions, through many lost lives and whole games,
    into a buffer of 150 frames per env that wraps around many times. Every transition the buffer can return equals
    the one the env emitted (obs, action, clipped reward, real next obs, terminated), they are exactly each env's
    newest ones, and none pairs frames across an episode boundary."""
    dqn_atari = load_script("dqn_atari")
    num_envs, capacity = 2, 150
    envs = gym.vector.SyncVectorEnv(
        [dqn_atari.make_env("BreakoutNoFrameskip-v4", i, False, "test") for i in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    assert envs.single_observation_space.shape == (4, 84, 84) and envs.single_observation_space.dtype == np.uint8
    rb = FrameReplayBuffer(num_envs * capacity, num_envs, envs.single_observation_space)
    emitted = [[] for _ in range(num_envs)]  # (obs, action, reward, real next obs, terminated, episode ended)
    lives_lost, games, game_scores = 0, 0, []
    rng = np.random.default_rng(0)
    obs, _ = envs.reset(seed=0)
    for step in range(1200):
        actions = rng.integers(envs.single_action_space.n, size=num_envs)
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        real_next_obs = dqn_atari.real_next_observations(next_obs, infos)
        rb.add(obs, real_next_obs, actions, rewards, terminations, truncations)
        for i in range(num_envs):
            transition = (obs[i], actions[i], rewards[i], real_next_obs[i], terminations[i], terminations[i] or truncations[i])
            emitted[i].append(transition)
        ended_games = np.zeros(num_envs, dtype=bool)  # whole games: RecordEpisodeStatistics logged their score
        if "final_info" in infos and "episode" in infos["final_info"]:
            ended_games = infos["final_info"]["_episode"]
            game_scores += [float(r) for r in infos["final_info"]["episode"]["r"][ended_games]]
        games += int(ended_games.sum())
        lives_lost += int((terminations & ~ended_games).sum())  # the training episode ended, the game did not
        obs = next_obs
        if step == 149:  # before any wrap-around: everything but the first stack's frames is there
            assert len(rb) == sum(min(len(e) + 1 + sum(t[5] for t in e[:-1]), capacity) for e in emitted)
    envs.close()
    # a lost life ends the training episode, a game ends after five of them: the logged score counts whole games
    assert games >= 4 and lives_lost >= 3 * games, (games, lives_lost)
    assert sum(game_scores) > 0 and set(np.concatenate([[t[2] for t in e] for e in emitted])) <= {0.0, 1.0}
    assert (rb.counts > 5 * capacity).all(), "the ring should have wrapped around several times"

    valid_envs, valid_slots = rb.valid_indices()
    for i in range(num_envs):
        mine = valid_envs == i
        order = np.argsort(rb.positions[i, valid_slots[mine]])  # oldest first
        b_obs, b_actions, b_rewards, b_next_obs, b_terms = rb.get(valid_envs[mine][order], valid_slots[mine][order])
        newest = emitted[i][-len(b_obs) :]
        # all but the frames that start episodes and the oldest stack's: one frame per transition
        episode_starts = sum(t[5] for t in newest)
        assert capacity - episode_starts - 5 <= len(b_obs) <= capacity - 1, (len(b_obs), episode_starts)
        np.testing.assert_array_equal(b_obs, np.stack([t[0] for t in newest]))
        np.testing.assert_array_equal(b_actions, [t[1] for t in newest])
        np.testing.assert_array_equal(b_rewards, [t[2] for t in newest])
        np.testing.assert_array_equal(b_next_obs, np.stack([t[3] for t in newest]))
        np.testing.assert_array_equal(b_terms, [t[4] for t in newest])
        assert b_terms.sum() >= 2, "the window should hold lost lives"
        # no transition crosses an episode boundary: each next obs is its obs shifted by one frame, and the
        # transition after an episode's end starts from a stack of one repeated reset frame
        np.testing.assert_array_equal(b_next_obs[:, :-1], b_obs[:, 1:])
        for k in np.flatnonzero([t[5] for t in newest[:-1]]) + 1:
            assert (b_obs[k] == b_obs[k, :1]).all()

    # sample() draws only from those transitions
    all_rows = {np.concatenate([o.ravel(), n.ravel()]).tobytes() for o, n in zip(*rb.get(valid_envs, valid_slots)[::3])}
    np.random.seed(0)
    s_obs, s_actions, s_next_obs, s_rewards, s_terms = rb.sample(256, "cpu")
    assert s_obs.dtype == torch.uint8 and s_obs.shape == (256, 4, 84, 84) and s_actions.dtype == torch.int64
    assert s_rewards.dtype == s_terms.dtype == torch.float32 and s_rewards.shape == s_terms.shape == (256,)
    for o, n in zip(s_obs.numpy(), s_next_obs.numpy()):
        assert np.concatenate([o.ravel(), n.ravel()]).tobytes() in all_rows

    # a checkpoint's state_dict restores the same transitions
    restored = FrameReplayBuffer(num_envs * capacity, num_envs, envs.single_observation_space)
    restored.load_state_dict(rb.state_dict())
    for a, b in zip(rb.get(valid_envs, valid_slots), restored.get(*restored.valid_indices())):
        np.testing.assert_array_equal(a, b)


def test_buffer_holds_each_frame_once():
    """N transitions take about N frames (plus 33 bytes of bookkeeping each), not 8N as whole observation pairs."""
    n = 10_000
    rb = FrameReplayBuffer(n, 1, gym.spaces.Box(0, 255, (4, 84, 84), np.uint8))
    total = sum(value.nbytes for value in vars(rb).values() if isinstance(value, np.ndarray))
    assert rb.frames.nbytes == n * 84 * 84
    assert total <= n * 84 * 84 + n * 33 + 1024, total
    assert total < 2 * n * 4 * 84 * 84 / 7.5  # the naive buffer: obs and next obs, 4 frames each


def test_c51_atari_shares_the_buffer_and_c51s_projection():
    """Both scripts use cleanrl_utils.buffers.FrameReplayBuffer (so the buffer tests above cover them), and
    c51_atari.py's projection is c51.py's: on random distributions, rewards and terminations, over the Atari support,
    the two give the same target, which keeps all of its probability mass."""
    c51_atari, c51 = load_script("c51_atari"), load_script("c51")
    assert c51_atari.FrameReplayBuffer is load_script("dqn_atari").FrameReplayBuffer is FrameReplayBuffer
    generator = torch.Generator().manual_seed(0)
    atoms = torch.linspace(-10, 10, 51)
    next_pmfs = torch.softmax(3 * torch.randn(256, 51, generator=generator), dim=1)
    # clipped rewards as Atari gives them, and rewards off the grid and beyond the support
    rewards = torch.cat(
        [torch.randint(-1, 2, (128,), generator=generator).float(), 25 * torch.randn(128, generator=generator)]
    )
    terminations = (torch.rand(256, generator=generator) < 0.3).float()
    for gamma in [0.99, 1.0]:  # gamma 1 with reward 0 lands every atom exactly on itself (lower == upper)
        target = c51_atari.project_distribution(next_pmfs, rewards, terminations, gamma, atoms)
        torch.testing.assert_close(target, c51.project_distribution(next_pmfs, rewards, terminations, gamma, atoms))
        torch.testing.assert_close(target.sum(dim=1), torch.ones(256))
        assert (target >= 0).all()
        # where an episode terminated, the target is r alone: its mean is r clipped to the support
        done = terminations.bool()
        torch.testing.assert_close((target[done] * atoms).sum(dim=1), rewards[done].clamp(-10, 10), atol=1e-4, rtol=0)


def test_c51_atari_network_on_real_frames():
    """On Breakout's uint8 observations, a distribution over the 51 atoms of [-10, 10] per action, and the greedy
    action is the one of highest expected return."""
    c51_atari = load_script("c51_atari")
    envs = gym.vector.SyncVectorEnv([c51_atari.make_env("BreakoutNoFrameskip-v4", 0, False, "test")])
    obs, _ = envs.reset(seed=0)
    torch.manual_seed(0)
    q_network = c51_atari.QNetwork(envs)
    pmfs = q_network(torch.as_tensor(obs))
    assert pmfs.shape == (1, 4, 51) and torch.allclose(pmfs.sum(dim=2), torch.ones(1, 4))
    torch.testing.assert_close(q_network.atoms, torch.linspace(-10, 10, 51))
    action, action_pmf = q_network.get_action(torch.as_tensor(obs))
    assert action.item() == (pmfs * q_network.atoms).sum(dim=2).argmax(dim=1).item()
    torch.testing.assert_close(action_pmf, pmfs[0, action])
    # the float observations of the evaluator give the same distributions as the uint8 ones of training
    torch.testing.assert_close(q_network(torch.as_tensor(obs, dtype=torch.float32)), pmfs)
    envs.close()


@pytest.mark.e2e
@pytest.mark.parametrize("script", SCRIPTS)
def test_smoke_with_every_flag(tmp_path, script):
    flags = ["--total-timesteps", "600", "--learning-starts", "350", "--buffer-size", "500", "--batch-size", "32"]
    flags += ["--capture-video", "--save-model", "--track", "--checkpoint-interval", "300", "--checkpoint-buffer"]
    flags += ["--eval-interval", "250", "--eval-episodes", "2"]
    run_dir = run_with_every_flag(script, flags, tmp_path)
    checkpoint = load_checkpoint(checkpoint_files(run_dir)[0])
    assert checkpoint["global_step"] == 600 and checkpoint["state"]["rb"]["frames"].shape == (1, 500, 84, 84)
    tags = scalar_tags(run_dir)
    for tag in ["charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/epsilon"]:
        assert tag in tags, tag
    # logged every 100 gradient steps (every 400 env steps), once learning has started
    assert [step for step, _ in scalars(run_dir, LOSS_TAG[script])] == [400]
    assert [step for step, _ in scalars(run_dir, "losses/q_values")] == [400]
    # whole games: Breakout's five lives take far more than the ~30 agent steps of one
    assert all(length > 100 for _, length in scalars(run_dir, "charts/episodic_length"))
    check_evaluations(run_dir, 250, 2, 600)  # at steps 250 and 500, then the final model's at 600
    check_enjoy_replays_the_evaluation(run_dir, tmp_path)


@pytest.mark.e2e
def test_killed_run_resumes_to_the_same_weights_with_the_buffer(tmp_path):
    """With --checkpoint-buffer the resumed run has everything the uninterrupted one had, the emulators' states
    included (ALE envs do not pickle them): identical weights at the end. dqn_atari.py for both scripts: c51_atari.py
    checkpoints the same entries."""
    flags = ["--total-timesteps", "1200", "--learning-starts", "600", *SMALL, "--seed", "3", "--torch-deterministic"]
    flags += ["--checkpoint-interval", "400", "--checkpoint-buffer", "--save-model"]
    run_dir = check_killed_run_resumes_to_the_same_weights("dqn_atari.py", flags, tmp_path, "losses/q_values")
    checkpoint = load_checkpoint(checkpoint_files(run_dir)[0])
    assert checkpoint["global_step"] == 1200 and checkpoint["finished"] and checkpoint["state"]["envs"] is not None
    assert checkpoint["state"]["rb"]["counts"][0] > 1200  # a frame per step, plus one per episode start


# the same behaviour in the whole value-based Atari family (their other tests are in their own modules)
@pytest.mark.e2e
# dqn_atari.py, dqn_atari_jax.py and rainbow_atari.py resume after a kill in their own tests; the refill and the message
# are run_state's, so one script of the family checks them end to end
@pytest.mark.parametrize("script", ["c51_atari.py"])
def test_sigterm_checkpoints_then_the_resumed_run_refills_the_buffer(tmp_path, script):
    """SIGTERM mid-run: a checkpoint without the buffer (the default), exit code 143 and a line saying how to
    resume. The resumed run continues the games where they were, refills an empty buffer for --learning-starts
    steps without an update, then learns on."""
    flags = ["--total-timesteps", "1000000", "--learning-starts", "300", *SMALL]
    run_dir, checkpoint = sigterm_mid_run(script, flags, tmp_path)
    stopped = checkpoint["global_step"]
    assert 0 < stopped < 1_000_000 and checkpoint["state"]["rb"] is None and checkpoint["state"]["envs"] is not None

    end = stopped + 800
    result = run_script(script, "--resume", str(run_dir), "--total-timesteps", str(end), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"refilling it for 300 steps, learning again after step {stopped + 300}" in result.stderr
    assert "no env state" not in result.stderr  # the games go on where they were
    after = [step for step, _ in scalars(run_dir, "losses/q_values") if step > stopped]
    assert after == [step for step in range(400, end + 1, 400) if step > stopped + 300], (stopped, after)


BAD_INPUTS = [
    (["--env-id", "CartPole-v1"], ["CartPole-v1", "not an ALE Atari game", "{peer}"]),
    (["--env-id", "NoSuchGameNoFrameskip-v4"], ["--env-id NoSuchGameNoFrameskip-v4"]),
    (["--batch-size", "512", "--buffer-size", "100"], ["--batch-size 512 is larger than --buffer-size 100"]),
    (["--buffer-size", "0"], ["--buffer-size must be positive"]),
    (["--seed", "-1"], ["--seed must be in [0, 2**32)"]),
    (["--eval-episodes", "0"], ["--eval-episodes must be positive, got 0"]),
    (["--eval-interval", "-1"], ["--eval-interval must be >= 0, got -1"]),
    (["--learning-starts", "1000", "--total-timesteps", "1000"], ["--learning-starts 1000", "--total-timesteps 1000"]),
    (["--num-iterations", "5"], ["--num-iterations"]),  # a computed value, not a flag: tyro refuses it
    (["--upload-model"], ["--upload-model", "--save-model"]),
    (["--resume", "runs/never-ran"], ["--resume runs/never-ran: no such folder"]),
]
C51_BAD_INPUTS = [
    (["--n-atoms", "1"], ["--n-atoms must be at least 2, got 1"]),
    (["--v-min", "10", "--v-max", "-10"], ["--v-min 10.0 must be below --v-max -10.0"]),
]


BAD_INPUT_CASES = [(script, *case) for script in SCRIPTS for case in BAD_INPUTS]
BAD_INPUT_CASES += [("c51_atari.py", *case) for case in C51_BAD_INPUTS]


@pytest.mark.parametrize(
    "script, flags, fragments", BAD_INPUT_CASES, ids=[f"{c[0]} {' '.join(c[1])}" for c in BAD_INPUT_CASES]
)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, script, flags, fragments):
    peer = script.replace("_atari", "")  # the script for vector observations
    fragments = [fragment.format(peer=peer) for fragment in fragments]
    check_bad_input_in_process(script, flags, fragments, tmp_path, monkeypatch, capsys)


@pytest.mark.e2e
@pytest.mark.parametrize("script", [*SCRIPTS, "dqn_atari_jax.py", "c51_atari_jax.py"])
def test_vector_observations_in_a_new_process_are_one_clear_line(tmp_path, script):
    """A bad input as a user meets it, in a new process (the cases above and the JAX twins' run in this one)."""
    result = run_script(script, "--env-id", "CartPole-v1", cwd=tmp_path)
    assert_clean_failure(result, "--env-id CartPole-v1", script.replace("_atari", ""))
    assert not (tmp_path / "runs").exists(), "a bad input started a run"
