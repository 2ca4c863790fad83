"""cleanrl/ppo_rnd_envpool.py: RND's normalizers against numpy, EnvPool's reset step kept out of every RND statistic,
the two GAEs (episodic extrinsic, non-episodic intrinsic with the reset step spliced out), the networks, smoke with
every flag, a resumed run that continues the normalizers' statistics, bad inputs. No learning test: Montezuma's
Revenge gives its first reward after millions of steps (docs/algorithms/ppo_rnd_envpool.md)."""

import json

import numpy as np
import pytest
import torch
from helpers import (
    PPO_TAGS,
    check_bad_input_in_process,
    check_evaluations,
    load_checkpoint,
    load_script,
    only_run_dir,
    run_script,
    run_with_every_flag,
    scalar_tags,
    scalars,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

SCRIPT = "ppo_rnd_envpool.py"
STATISTICS = ["obs_rms", "reward_filter", "reward_rms"]


@pytest.fixture(scope="module")
def rnd():
    return load_script("ppo_rnd_envpool")


def test_running_mean_std_merges_batches_as_their_concatenation(rnd):
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, (n, 2)) for n in (1, 7, 30)]
    rms = rnd.RunningMeanStd(shape=(2,), epsilon=0.0)
    for batch in batches:
        rms.update(torch.as_tensor(batch))
    rms.update(torch.zeros((0, 2), dtype=torch.float64))  # an empty batch (every row a reset row) changes nothing
    everything = np.concatenate(batches)
    np.testing.assert_allclose(rms.mean, everything.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(rms.var, everything.var(axis=0), rtol=1e-12)
    assert rms.count == 38
    # upstream's start: a prior of 1e-4 samples with mean 0 and variance 1, merged with [1, 3] by hand
    rms = rnd.RunningMeanStd()
    rms.update(torch.tensor([1.0, 3.0], dtype=torch.float64))
    total = 2 + 1e-4
    assert rms.mean == pytest.approx(2 * 2 / total, rel=1e-12) and rms.count == pytest.approx(total)
    assert rms.var == pytest.approx((1e-4 * 1 + 2 * 1 + 2**2 * 1e-4 * 2 / total) / total, rel=1e-12)
    restored = rnd.RunningMeanStd()  # the checkpoint's copy: plain values, loaded in place
    restored.load_state_dict(rms.state_dict())
    assert restored.state_dict() == rms.state_dict()


def test_reward_forward_filter_keeps_discounted_sums_per_env(rnd):
    reward_filter = rnd.RewardForwardFilter(0.5, 2)
    rewards = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    real = np.array([[True, True], [False, True], [True, True]])  # env 0's second row is a reset step
    sums = reward_filter.update(rewards, real)
    # env 0: 1, (skipped: neither decays nor grows), 0.5 * 1 + 5; env 1: 2, 0.5 * 2 + 4, 0.5 * 5 + 6; in time order
    np.testing.assert_allclose(sums, [1.0, 2.0, 5.0, 5.5, 8.5])
    np.testing.assert_allclose(reward_filter.update(np.array([[2.0, 0.0]]), np.ones((1, 2), bool)), [4.75, 4.25])


def rnd_statistics(rnd, frames, curiosity, is_reset_step):
    obs_rms, reward_rms = rnd.RunningMeanStd(shape=(84, 84), epsilon=0.0), rnd.RunningMeanStd(epsilon=0.0)
    reward_filter = rnd.RewardForwardFilter(0.9, frames.shape[1])
    flat = torch.as_tensor(frames.reshape(-1, 84, 84))
    rnd.update_normalizers(obs_rms, reward_rms, reward_filter, flat, curiosity, is_reset_step)
    return obs_rms, reward_rms, reward_filter


def test_reset_steps_reach_no_rnd_statistic(rnd):
    """EnvPool's reset step (its frame the last of an episode, its bonus that of the next one's first frame) is no
    transition: extreme values there change neither normalizer nor the forward filter, and the statistics are those of
    the real rows alone."""
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 200, (5, 3, 84, 84), dtype=np.uint8)
    curiosity = rng.random((5, 3))
    is_reset_step = np.zeros((5, 3), dtype=bool)
    is_reset_step[2, 1] = is_reset_step[0, 2] = True
    extreme_frames, extreme_curiosity = frames.copy(), curiosity.copy()
    extreme_frames[is_reset_step], extreme_curiosity[is_reset_step] = 255, 1e9
    obs_rms, reward_rms, reward_filter = rnd_statistics(rnd, frames, curiosity, is_reset_step)
    for a, b in zip(
        (obs_rms, reward_rms, reward_filter), rnd_statistics(rnd, extreme_frames, extreme_curiosity, is_reset_step)
    ):
        for key, value in a.state_dict().items():
            np.testing.assert_array_equal(value, b.state_dict()[key])
    real_frames = frames[~is_reset_step].astype(np.float64)
    assert obs_rms.count == len(real_frames) == 13
    np.testing.assert_allclose(obs_rms.mean, real_frames.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(obs_rms.var, real_frames.var(axis=0), rtol=1e-4)
    sums, rewems = [], np.zeros(3)  # the forward filter by hand, skipping the reset rows
    for t in range(5):
        for i in range(3):
            if not is_reset_step[t, i]:
                rewems[i] = 0.9 * rewems[i] + curiosity[t, i]
                sums.append(rewems[i])
    np.testing.assert_allclose(reward_filter.rewems, rewems)
    assert reward_rms.mean == pytest.approx(np.mean(sums)) and reward_rms.var == pytest.approx(np.var(sums))


def test_extrinsic_gae_is_episodic_and_bootstraps_a_truncation_from_its_last_observation(rnd):
    """One env, gamma 0.5, lambda 0.5, by hand: rows 0-1 a life ending in a lost life (no bootstrap), rows 2-3 a game
    truncated at row 3 (bootstraps from row 4, its real last observation), row 4 the reset step (its advantage is left
    out of the update), row 5 a new game bootstrapping from the last value."""
    column = lambda *values: np.array(values, dtype=np.float32).reshape(-1, 1)  # noqa: E731
    rewards, values = column(1, 1, 0, 1, 0, 1), column(1, 2, 4, 2, 8, 2)
    terminations, episode_ends, never = column(0, 1, 0, 0, 0, 0), column(0, 1, 0, 1, 0, 0), np.zeros((6, 1), bool)
    advantages, returns = rnd.compute_gae(rewards, values, np.array([4.0]), terminations, episode_ends, never, 0.5, 0.5)
    delta = [1 + 0.5 * 2 - 1, 1 - 2, 0 + 0.5 * 2 - 4, 1 + 0.5 * 8 - 2, 0 + 0.5 * 2 - 8, 1 + 0.5 * 4 - 2]
    expected = [delta[0] + 0.25 * delta[1], delta[1], delta[2] + 0.25 * delta[3], delta[3], delta[4] + 0.25 * delta[5]]
    np.testing.assert_allclose(advantages.ravel(), [*expected, delta[5]])
    np.testing.assert_allclose(returns, advantages + values)


def test_intrinsic_gae_runs_on_across_a_game_over_without_the_reset_step(rnd):
    """Non-episodic: row 1 (a game's last) runs on into row 3 (the new game's first real row) as if row 2, EnvPool's
    reset step with a made-up bonus and value, were not there; by hand, gamma 0.5, lambda 0.5."""
    rewards, values = np.array([[1.0], [2.0], [100.0], [3.0], [4.0]]), np.array([[1.0], [1.0], [50.0], [2.0], [2.0]])
    never, spliced = np.zeros((5, 1), bool), np.array([[False], [False], [True], [False], [False]])
    advantages, returns = rnd.compute_gae(rewards, values, np.array([4.0]), never, never, spliced, 0.5, 0.5)
    delta = {4: 4 + 0.5 * 4 - 2, 3: 3 + 0.5 * 2 - 2, 1: 2 + 0.5 * 2 - 1, 0: 1 + 0.5 * 1 - 1}
    a4 = delta[4]
    a3 = delta[3] + 0.25 * a4
    a1 = delta[1] + 0.25 * a3
    np.testing.assert_allclose(advantages.ravel(), [delta[0] + 0.25 * a1, a1, 0.0, a3, a4])
    np.testing.assert_allclose(returns, advantages + values)


def test_networks_and_frame_normalization(rnd):
    torch.manual_seed(0)
    agent, model = rnd.Agent(type("Envs", (), {"action_space": type("Space", (), {"n": 18})})), rnd.RNDModel()
    frames = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    logits, ext_value, int_value = agent(frames)
    assert logits.shape == (3, 18) and ext_value.shape == int_value.shape == (3,)
    assert not any(p.requires_grad for p in model.target.parameters())  # the target stays random
    assert all(p.requires_grad for p in model.predictor.parameters())
    obs_rms = rnd.RunningMeanStd(shape=(84, 84))
    obs_rms.mean, obs_rms.var = np.full((84, 84), 100.0), np.full((84, 84), 4.0)
    x = rnd.normalize_frames(torch.tensor([0, 99, 104, 255], dtype=torch.uint8).reshape(4, 1, 1).expand(4, 84, 84), obs_rms)
    assert x.shape == (4, 1, 84, 84)
    np.testing.assert_allclose(x[:, 0, 0, 0], [-5.0, -0.5, 2.0, 5.0])  # (frame - mean) / std, clipped to [-5, 5]
    predicted, target = model(x)
    assert predicted.shape == target.shape == (4, 512)


FLAGS = ["--env-id", "Breakout-v5", "--num-envs", "2", "--num-steps", "32", "--num-iterations-obs-norm-init", "1"]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One run with every flag at once; the resume test extends it."""
    tmp_path = tmp_path_factory.mktemp("smoke")
    flags = [*FLAGS, "--total-timesteps", "640", "--capture-video", "--save-model", "--track"]
    flags += ["--eval-interval", "256", "--eval-episodes", "1", "--checkpoint-interval", "320"]
    return tmp_path, run_with_every_flag(SCRIPT, flags, tmp_path)


@pytest.mark.e2e
def test_smoke_with_every_flag(smoke_run):
    tmp_path, run_dir = smoke_run
    tags = scalar_tags(run_dir)
    assert {*PPO_TAGS, "losses/fwd_loss", "charts/episode_curiosity_reward"} <= tags, tags
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == list(range(64, 640 + 1, 64))
    assert all(value > 0 for _, value in scalars(run_dir, "charts/episode_curiosity_reward"))
    check_evaluations(run_dir, 256, 1, 640)
    lengths = [length for _, length in scalars(run_dir, "charts/episodic_length")]
    assert lengths and min(lengths) > 50, lengths  # whole games (all five lives), not lives
    saved = load_checkpoint(run_dir / "checkpoint.pt")
    assert sorted(saved["state"]) == sorted(["agent", "rnd_model", "optimizer", "global_step", *STATISTICS])
    # the normalizer saw the random play (64 steps) and the training rollouts' real rows (10 x 64, less the reset steps)
    assert 64 + 640 - 10 * 2 <= saved["state"]["obs_rms"]["count"] <= 64 + 640 + 1e-4
    model = torch.load(run_dir / "ppo_rnd_envpool.cleanrl_model")  # the policy alone
    assert {name.split(".")[0] for name in model} == {"network", "extra_layer", "actor", "critic_ext", "critic_int"}


@pytest.mark.e2e
def test_a_resumed_run_continues_the_rnd_statistics_with_new_games(smoke_run):
    """Extended with a larger budget, the run starts new games but no new random play: its normalizers go on from the
    checkpoint's statistics (each count grows by the real rows of the new rollouts only)."""
    tmp_path, run_dir = smoke_run
    before = load_checkpoint(run_dir / "checkpoint.pt")["state"]
    outputs_off = ["--no-capture-video", "--no-save-model", "--no-track", "--eval-interval", "0"]  # time: tested above
    result = run_script(SCRIPT, "--resume", str(run_dir), "--total-timesteps", "896", *outputs_off, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resumed at step 640: the games start anew" in result.stderr
    assert "random play" not in result.stdout
    assert only_run_dir(tmp_path) == run_dir
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == list(range(64, 896 + 1, 64))
    after = load_checkpoint(run_dir / "checkpoint.pt")
    assert after["global_step"] == 896 and json.loads((run_dir / "args.json").read_text())["args"]["total_timesteps"] == 896
    grown = after["state"]["obs_rms"]["count"] - before["obs_rms"]["count"]
    assert 4 * 64 - 4 * 2 <= grown <= 4 * 64 and grown == pytest.approx(round(grown), abs=1e-9), grown
    assert after["state"]["reward_rms"]["count"] - before["reward_rms"]["count"] == pytest.approx(grown)
    assert not np.array_equal(after["state"]["reward_filter"]["rewems"], before["reward_filter"]["rewems"])


BAD_INPUTS = [
    (["--update-proportion", "0"], ["--update-proportion must be in (0, 1]"]),
    (["--num-iterations-obs-norm-init", "0"], ["--num-iterations-obs-norm-init must be positive"]),
    (["--env-id", "MontezumaRevengeNoFrameskip-v4"], ["EnvPool names this game MontezumaRevenge-v5"]),
    (["--env-id", "CartPole-v1"], ["--env-id CartPole-v1 is not an Atari game"]),
    (["--seed", str(2**31)], ["--seed must be in [0, 2**31)"]),
    (["--num-minibatches", "3"], ["--num-minibatches 3 must divide", "16384"]),
]


@pytest.mark.parametrize("flags, fragments", BAD_INPUTS)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, flags, fragments):
    check_bad_input_in_process(SCRIPT, flags, fragments, tmp_path, monkeypatch, capsys)
