"""cleanrl/ppo_continuous_action_brax_jax.py, PPO with the whole iteration in one jit over Brax envs: the autoreset on a
real Brax env (the transitions that reach GAE), GAE against the torch twin's, the observation statistics, the Gaussian;
one smoke run with every flag and one resumed run extending it exactly; bad inputs in process. MJX compiles slowly on
a CPU (10-20 s a program), so the runs are few and tiny, on inverted_pendulum, and share JAX's compilation cache."""

import functools
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from gymnasium.wrappers.utils import RunningMeanStd
from helpers import (
    PPO_TAGS,
    check_bad_input_in_process,
    check_enjoy_replays_the_evaluation,
    check_evaluations,
    load_checkpoint,
    load_script,
    only_run_dir,
    run_script,
    scalar_tags,
    scalars,
)

SCRIPT = "ppo_continuous_action_brax_jax.py"
# 4 rollouts of 8 envs x 16 steps, episodes truncated at 20 steps; a checkpoint at step 384 only, then the final one
FLAGS = ["--env-id", "inverted_pendulum", "--num-envs", "8", "--num-steps", "16", "--num-minibatches", "2"]
FLAGS += ["--update-epochs", "2", "--episode-length", "20", "--total-timesteps", "512", "--checkpoint-interval", "384"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT[: -len(".py")])


def test_the_env_ids_are_braxs(script):
    from brax import envs

    assert sorted(script.ENV_IDS) == sorted(set(envs._envs) - {"fast"})  # `fast` is Brax's test env


def test_the_autoreset_on_a_real_brax_env(script):
    """inverted_pendulum, 3 envs for 40 steps, episodes truncated at 30: env 0 pushed hard falls (terminates) every 2
    steps, envs 1 and 2 drift (env 2 falls at its 28th step, env 1 reaches 30). At every end the real last observation
    is kept (what a step without the reset gives), the env restarts from a fresh reset (Brax's start noise, +-0.01,
    another draw each time), the finished episode's return and length are reported, and GAE bootstraps a truncation
    from the value of the real last observation but not a termination."""
    env = script.make_env("inverted_pendulum")
    state = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), 3))
    episode = dict(returns=jnp.zeros(3), lengths=jnp.zeros(3, jnp.int32))
    step_envs = jax.jit(functools.partial(script.step_envs, env, episode_length=30))
    action, key = jnp.array([[1.0], [0.0], [0.0]]), jax.random.PRNGKey(1)
    rows, starts = [], list(np.asarray(state.obs))
    for _ in range(40):
        key, reset_key = jax.random.split(key)
        obs = np.asarray(state.obs)
        state, episode, step = jax.device_get(step_envs(state, action, episode, reset_key))
        rows.append(dict(obs=obs, next_obs=np.asarray(state.obs), **step))
        ended = step["terminated"] | step["truncated"]
        starts += [np.asarray(state.obs)[i] for i in np.flatnonzero(ended)]
        np.testing.assert_array_equal(episode["lengths"][ended], 0)
        assert (episode["lengths"][~ended] == step["lengths"][~ended]).all()
    terminated, truncated = (np.array([row[name] for row in rows]) for name in ["terminated", "truncated"])
    assert terminated[:, 0].sum() == 20 and terminated[1::2, 0].all()  # every 2 steps: a fresh start each time
    assert np.flatnonzero(truncated[:, 1]).tolist() == [29] and not terminated[:, 1].any()
    assert np.flatnonzero(terminated[:, 2]).tolist() == [27] and not truncated[:, 2].any()
    for t, i in zip(*np.nonzero(terminated | truncated)):
        assert rows[t]["lengths"][i] == rows[t]["returns"][i] == (2 if i == 0 else t + 1)  # a reward of 1 a step
        assert np.abs(rows[t]["next_obs"][i]).max() <= 0.01 < np.abs(rows[t]["final_obs"][i]).max()  # a fresh start
        assert (np.abs(rows[t]["final_obs"][i][1]) > 0.2) == terminated[t, i]  # only a fall passes Brax's 0.2 rad
    starts = np.array(starts)
    assert len(np.unique(starts, axis=0)) == len(starts)  # fresh keys: no start repeats

    # the transitions reaching GAE: lambda 0 leaves each step's TD error, worked out here by hand
    value = lambda obs: 1.0 + 10 * obs[..., 1]  # noqa: E731 (any value of the observation)
    obs, final_obs = np.array([row["obs"] for row in rows]), np.array([row["final_obs"] for row in rows])
    rewards = np.array([row["rewards"] for row in rows])
    ends = (terminated | truncated).astype(np.float32)
    inputs = (rewards, value(obs), value(state.obs), value(final_obs), terminated.astype(np.float32), ends)
    advantages, _ = script.compute_gae(*(jnp.asarray(x, jnp.float32) for x in inputs), 0.9, 0.0)
    np.testing.assert_allclose(advantages[29, 1], 1.0 + 0.9 * value(final_obs[29, 1]) - value(obs[29, 1]), rtol=1e-5)
    np.testing.assert_allclose(advantages[27, 2], 1.0 - value(obs[27, 2]), rtol=1e-5)  # a fall: no bootstrap
    np.testing.assert_allclose(advantages[10, 1], 1.0 + 0.9 * value(obs[11, 1]) - value(obs[10, 1]), rtol=1e-5)


def test_gae_is_the_torch_twins(script):
    """The reverse lax.scan gives ppo_continuous_action.compute_gae's advantages and returns on a rollout with
    terminations and truncations (float32 against float64)."""
    torch_twin = load_script("ppo_continuous_action")
    rng = np.random.default_rng(0)
    shape = (32, 3)
    terminations = (rng.random(shape) < 0.1).astype(np.float32)
    episode_ends = np.maximum(terminations, rng.random(shape) < 0.1).astype(np.float32)
    assert (episode_ends > terminations).any() and terminations.any()
    rewards, values, final_values, last_value = (
        rng.normal(size=shape),
        rng.normal(size=shape),
        rng.normal(size=shape),
        rng.normal(size=3),
    )
    inputs = (rewards, values, last_value, final_values, terminations, episode_ends)
    expected = torch_twin.compute_gae(*inputs, 0.99, 0.95)
    actual = script.compute_gae(*(jnp.asarray(x, jnp.float32) for x in inputs), 0.99, 0.95)
    for x, y in zip(actual, expected):
        np.testing.assert_allclose(np.asarray(x), y, rtol=1e-5, atol=1e-5)


def test_the_observation_statistics_and_the_gaussian(script):
    """update_obs_rms is Gymnasium's RunningMeanStd; log_prob_and_entropy is torch's Normal, summed over actions."""
    rng = np.random.default_rng(2)
    reference, rms = RunningMeanStd(shape=(3,)), dict(mean=jnp.zeros(3), var=jnp.ones(3), count=jnp.float32(1e-4))
    for _ in range(3):
        batch = rng.normal(2.0, 3.0, (16, 3))
        reference.update(batch)
        rms = script.update_obs_rms(rms, jnp.asarray(batch, jnp.float32))
    np.testing.assert_allclose(rms["mean"], reference.mean, rtol=1e-5)
    np.testing.assert_allclose(rms["var"], reference.var, rtol=1e-4)
    mean, logstd, action = rng.normal(size=(5, 2)), rng.normal(size=2), rng.normal(size=(5, 2))
    normal = torch.distributions.Normal(torch.as_tensor(mean), torch.as_tensor(logstd).exp())
    logprob, entropy = script.log_prob_and_entropy(*(jnp.asarray(x, jnp.float32) for x in (mean, logstd, action)))
    np.testing.assert_allclose(logprob, normal.log_prob(torch.as_tensor(action)).sum(1).numpy(), rtol=1e-5)
    np.testing.assert_allclose(entropy, normal.entropy().sum(1).numpy(), rtol=1e-5)


def compilation_cache(tmp_path):
    """JAX's persistent compilation cache, shared by the smoke run and the resumed run (MJX's programs compile slowly)."""
    return dict(JAX_COMPILATION_CACHE_DIR=str(tmp_path / "jax_cache"), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0.5")


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One run with every flag at once; the resume test continues it."""
    tmp_path = tmp_path_factory.mktemp("brax")
    flags = [*FLAGS, "--capture-video", "--save-model", "--track", "--eval-interval", "256", "--eval-episodes", "2"]
    result = run_script(SCRIPT, *flags, cwd=tmp_path, **compilation_cache(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return tmp_path, only_run_dir(tmp_path)


@pytest.mark.e2e
def test_smoke_with_every_flag(smoke_run):
    tmp_path, run_dir = smoke_run
    assert set(PPO_TAGS) <= scalar_tags(run_dir), set(PPO_TAGS) - scalar_tags(run_dir)
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == [128, 256, 384, 512]
    np.testing.assert_allclose([rate for _, rate in scalars(run_dir, "charts/learning_rate")], 0.0026)  # not annealed
    check_evaluations(run_dir, 256, 2, 512)
    lengths = [length for _, length in scalars(run_dir, "charts/episodic_length")]  # means of the episodes that ended
    assert lengths and all(1 <= length <= 20 for length in lengths), lengths
    returns = [value for _, value in scalars(run_dir, "eval/final_episodic_return")]
    assert all(value == int(value) and 1 <= value <= 20 for value in returns), returns  # a reward of 1 a step, <= 20
    assert (run_dir / "ppo_continuous_action_brax_jax.cleanrl_model").stat().st_size > 0
    assert list((tmp_path / "wandb").glob("offline-run-*")), "--track with WANDB_MODE=offline wrote no W&B run"
    assert list((tmp_path / "videos").glob(f"{run_dir.name}-eval/*.mp4")), "the evaluation recorded no video"
    saved = load_checkpoint(run_dir / "checkpoint.pt")
    assert saved["global_step"] == 512 and saved["finished"]
    assert sorted(saved["state"]) == ["agent_state", "global_step", "key", "running"]
    assert int(saved["state"]["agent_state"]["step"]) == 4 * 2 * 2  # iterations x epochs x minibatches
    assert load_checkpoint(run_dir / "checkpoint.prev.pt")["global_step"] == 384
    check_enjoy_replays_the_evaluation(run_dir, tmp_path, games=1)


@pytest.mark.e2e
def test_a_resumed_run_continues_exactly(smoke_run, tmp_path):
    """A copy of the smoke run put back at its step-384 checkpoint and resumed to 640 steps: at step 512 it holds
    exactly what the uninterrupted run ended with (parameters, optimizer, env physics, episode statistics,
    normalization, key), logs the same losses there, and goes on to the larger budget."""
    smoke_tmp, smoke_dir = smoke_run
    run_dir = tmp_path / "runs" / smoke_dir.name
    shutil.copytree(smoke_dir, run_dir)
    (run_dir / "checkpoint.prev.pt").replace(run_dir / "checkpoint.pt")
    outputs = ["--no-capture-video", "--no-track", "--no-save-model", "--eval-interval", "0", "--checkpoint-interval", "512"]
    flags = ["--resume", str(run_dir), "--total-timesteps", "640", *outputs]
    result = run_script(SCRIPT, *flags, cwd=tmp_path, **compilation_cache(smoke_tmp))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resuming {run_dir} at step 384 of 640" in result.stdout
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == [128, 256, 384, 512, 640]
    for tag in ["losses/value_loss", "losses/approx_kl", "charts/episodic_return"]:
        assert dict(scalars(run_dir, tag))[512] == dict(scalars(smoke_dir, tag))[512], tag
    at_512, uninterrupted = load_checkpoint(run_dir / "checkpoint.prev.pt"), load_checkpoint(smoke_dir / "checkpoint.pt")
    assert at_512["global_step"] == 512
    jax.tree.map(np.testing.assert_array_equal, at_512["state"], uninterrupted["state"])
    final = load_checkpoint(run_dir / "checkpoint.pt")
    assert final["global_step"] == 640 and final["finished"] and int(final["state"]["agent_state"]["step"]) == 5 * 2 * 2


@pytest.mark.slow
@pytest.mark.e2e
def test_it_learns_inverted_pendulum(tmp_path):
    """100 iterations of 64 envs x 16 steps (102,400 steps, about 20 s of compilation and 5 s of training on the CPU):
    the episodes ending in the last iterations average far above a random policy's 5-10 steps (seed 1 measured 890;
    the maximum is 1000)."""
    flags = ["--env-id", "inverted_pendulum", "--num-envs", "64", "--num-steps", "16", "--total-timesteps", "102400"]
    result = run_script(SCRIPT, *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    returns = [value for _, value in scalars(only_run_dir(tmp_path), "charts/episodic_return")]
    assert returns[-1] >= 300, returns


@pytest.mark.parametrize(
    "flags, fragments",
    [
        (["--env-id", "Hopper-v4"], ["--env-id Hopper-v4 is not a Brax environment", "hopper", "ppo_continuous_action.py"]),
        (["--backend", "warp"], ["--backend warp is not a Brax physics pipeline", "mjx"]),
        (["--episode-length", "0"], ["--episode-length must be positive"]),
        (["--num-envs", "8", "--num-minibatches", "3"], ["--num-minibatches 3 must divide", "128"]),
        (["--num-envs", "8", "--total-timesteps", "64"], ["--total-timesteps 64 is less than one rollout"]),
        (["--seed", str(2**32)], ["--seed must be in [0, 2**32)"]),
        (["--capture-video"], ["--capture-video records the final evaluation only: add --save-model"]),
        (["--cuda"], ["--cuda"]),  # JAX picks its device itself: no such flag
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, flags, fragments):
    check_bad_input_in_process(SCRIPT, flags, fragments, tmp_path, monkeypatch, capsys)
