"""cleanrl/ppo_atari_envpool_xla_jax.py and ppo_atari_envpool_xla_jax_scan.py, the JAX twins of ppo_atari_envpool.py that
step EnvPool inside their compiled code: the pieces they share (with each other and with the torch twin), GAE against the
torch twin's, the zero weight of EnvPool's reset steps in the loss, and per script a smoke run with every flag, extended
by a resumed run that starts new games; bad inputs. EnvPool's autoreset itself is tested in test_ppo_atari_envpool.py."""

import ast

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    PPO_TAGS,
    REPO,
    check_bad_input_in_process,
    check_evaluations,
    load_checkpoint,
    load_script,
    only_run_dir,
    run_script,
    scalar_tags,
    scalars,
)

SCRIPTS = ["ppo_atari_envpool_xla_jax.py", "ppo_atari_envpool_xla_jax_scan.py"]
# the scan script unrolls its update on the CPU: 2 epochs of 2 minibatches keep its compile short
UPDATE = {
    SCRIPTS[0]: ["--update-epochs", "4", "--num-minibatches", "4"],
    SCRIPTS[1]: ["--update-epochs", "2", "--num-minibatches", "2"],
}

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def top_level_source(script, name):
    source = (REPO / "cleanrl" / script).read_text()
    return next(ast.get_source_segment(source, node) for node in ast.parse(source).body if getattr(node, "name", "") == name)


def test_the_twins_share_the_env_the_network_and_the_loss():
    """The two scripts differ only in how they loop; both take the torch twin's EnvPool env, and their flax Nature CNN
    has the torch twin's weights' count, one logit per action and a value."""
    for name in ["make_env", "Agent", "log_prob_and_entropy", "compute_gae", "masked_mean", "ppo_loss"]:
        assert top_level_source(SCRIPTS[0], name) == top_level_source(SCRIPTS[1], name), name
    assert top_level_source(SCRIPTS[0], "make_env") == top_level_source("ppo_atari_envpool.py", "make_env")
    torch_twin, script = load_script("ppo_atari_envpool"), load_script("ppo_atari_envpool_xla_jax")
    obs = np.random.default_rng(0).integers(0, 256, (2, 4, 84, 84), dtype=np.uint8)
    agent = script.Agent(action_dim=6)
    params = jax.eval_shape(agent.init, jax.random.PRNGKey(0), obs)  # shapes only: nothing to compile
    spaces = type("Envs", (), {"action_space": type("Space", (), {"n": 6})})
    count = sum(p.numel() for p in torch_twin.Agent(spaces).parameters())
    assert sum(leaf.size for leaf in jax.tree_util.tree_leaves(params)) == count
    logits, value = jax.eval_shape(agent.apply, params, obs)
    assert logits.shape == (2, 6) and value.shape == (2,)


def test_gae_is_the_torch_twins():
    """The reverse lax.scan gives ppo_atari_envpool.compute_gae's advantages and returns (float32 against float64) on a
    rollout with lost lives (terminations) and truncations (episode ends that bootstrap)."""
    torch_twin, scan = load_script("ppo_atari_envpool"), load_script("ppo_atari_envpool_xla_jax_scan")
    rng = np.random.default_rng(0)
    shape = (32, 3)
    terminations = (rng.random(shape) < 0.1).astype(np.float32)
    episode_ends = np.maximum(terminations, rng.random(shape) < 0.1).astype(np.float32)
    assert (episode_ends > terminations).any() and terminations.any()
    rewards, values, last_value = rng.normal(size=shape), rng.normal(size=shape), rng.normal(size=3)
    inputs = (rewards, values, last_value, terminations, episode_ends)
    expected = torch_twin.compute_gae(*inputs, 0.99, 0.95)
    actual = jax.jit(scan.compute_gae, static_argnums=(5, 6))(*(jnp.asarray(x, jnp.float32) for x in inputs), 0.99, 0.95)
    for x, y in zip(actual, expected):
        np.testing.assert_allclose(np.asarray(x), y, rtol=1e-5, atol=1e-5)


def test_a_reset_step_weighs_nothing_in_the_loss():
    """EnvPool's reset steps (`is_reset_step`) are in the fixed-size minibatches but not in the loss: whatever their data,
    the loss, its statistics and its gradient are the same, and they are those of the minibatch without them."""
    script = load_script("ppo_atari_envpool_xla_jax_scan")
    agent, args = script.Agent(action_dim=4), script.Args()
    rng = np.random.default_rng(1)

    def minibatch(n):
        obs = rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8)
        logprobs, values = np.log(rng.uniform(0.1, 0.4, n)), rng.normal(size=n)
        data = dict(logprobs=logprobs, values=values, advantages=rng.normal(size=n), returns=values + rng.normal(size=n))
        return dict(obs=obs, actions=rng.integers(0, 4, n), **{k: v.astype(np.float32) for k, v in data.items()})

    mb = minibatch(8) | {"is_reset_step": np.array([0, 0, 1, 0, 0, 0, 1, 0], dtype=bool)}
    params = jax.jit(agent.init)(jax.random.PRNGKey(0), mb["obs"])

    def ppo_loss(params, mb):
        return script.ppo_loss(params, agent, mb, args)

    loss_and_grad = jax.jit(jax.value_and_grad(ppo_loss, has_aux=True))
    (loss, stats), grads = loss_and_grad(params, mb)
    assert 0 < stats["clipfrac"] < 1  # the rollout policy is not this one: the clipped terms are reached
    other = minibatch(8) | {"is_reset_step": mb["is_reset_step"]}
    changed = {k: np.where(mb["is_reset_step"].reshape((-1,) + (1,) * (v.ndim - 1)), 100 * other[k], v) for k, v in mb.items()}
    changed["is_reset_step"] = mb["is_reset_step"]
    (loss_changed, stats_changed), grads_changed = loss_and_grad(params, changed)
    assert float(loss_changed) == float(loss)
    jax.tree.map(np.testing.assert_array_equal, (stats_changed, grads_changed), (stats, grads))
    real = {k: v[~mb["is_reset_step"]] for k, v in mb.items()}
    _, stats_real = jax.jit(ppo_loss)(params, real)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6), stats_real, stats)
    changed["advantages"] = mb["advantages"] + np.eye(8, dtype=np.float32)[1]  # a real transition: it counts
    assert float(loss_and_grad(params, changed)[0][0]) != float(loss)


def compilation_cache(tmp_path):
    """JAX's persistent compilation cache, shared by a smoke run and its resumed run (the resumed run still compiles
    the update again: its restored step counter is a strongly typed int32, the new run's a weakly typed one)."""
    return dict(JAX_COMPILATION_CACHE_DIR=str(tmp_path / "jax_cache"), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0.5")


@pytest.fixture(scope="module", params=SCRIPTS)
def smoke_run(request, tmp_path_factory):
    """One run of each script with every flag at once, 4 rollouts of 4 envs x 64 steps; the resume test extends it."""
    script = request.param
    tmp_path = tmp_path_factory.mktemp(script[: -len(".py")])
    flags = ["--env-id", "Breakout-v5", "--num-envs", "4", "--num-steps", "64", "--total-timesteps", "1024", *UPDATE[script]]
    flags += ["--capture-video", "--save-model", "--track", "--eval-interval", "512", "--eval-episodes", "1"]
    result = run_script(script, *flags, "--checkpoint-interval", "512", cwd=tmp_path, **compilation_cache(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return script, tmp_path, only_run_dir(tmp_path)


def gradient_steps(script, iterations):
    return iterations * int(UPDATE[script][1]) * int(UPDATE[script][3])


@pytest.mark.e2e
def test_smoke_with_every_flag(smoke_run):
    script, tmp_path, run_dir = smoke_run
    assert set(PPO_TAGS) <= scalar_tags(run_dir), set(PPO_TAGS) - scalar_tags(run_dir)
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == list(range(256, 1024 + 1, 256))
    learning_rates = [rate for _, rate in scalars(run_dir, "charts/learning_rate")]
    np.testing.assert_allclose(learning_rates, 2.5e-4 * np.array([1, 3 / 4, 2 / 4, 1 / 4]), rtol=1e-6)  # annealed
    check_evaluations(run_dir, 512, 1, 1024)
    # whole games (all five lives) of a random-like policy, each logged at the step it ended
    games = scalars(run_dir, "charts/episodic_length")
    assert games and min(length for _, length in games) > 100, games
    assert all(step % 4 == 0 for step, _ in games) and any(step % 256 for step, _ in games), games
    assert (run_dir / f"{script[: -len('.py')]}.cleanrl_model").stat().st_size > 0
    assert list((tmp_path / "wandb").glob("offline-run-*")), "--track with WANDB_MODE=offline wrote no W&B run"
    assert list((tmp_path / "videos").glob(f"{run_dir.name}-eval/*.mp4")), "the evaluation recorded no video"
    training_videos = list((tmp_path / "videos").glob(f"{run_dir.name}/*.mp4"))
    if script == "ppo_atari_envpool_xla_jax.py":  # rendered between two compiled steps
        assert "rl-video-episode-0.mp4" in {p.name for p in training_videos}
    else:  # the training games run inside a compiled scan: no frames
        assert not training_videos
    saved = load_checkpoint(run_dir / "checkpoint.pt")
    assert (
        saved["global_step"] == 1024 and saved["finished"] and sorted(saved["state"]) == ["agent_state", "global_step", "key"]
    )
    assert int(saved["state"]["agent_state"]["step"]) == gradient_steps(script, 4)


@pytest.mark.e2e
def test_a_resumed_run_continues_at_its_step_with_new_games(smoke_run):
    """A finished run extended with a larger budget: it continues from the checkpoint's train state (its optimizer
    steps, its learning-rate schedule) and step, logs no step twice, and says its games start anew."""
    script, tmp_path, run_dir = smoke_run
    outputs = ["--no-capture-video", "--no-track", "--no-save-model", "--eval-interval", "0"]
    flags = ["--resume", str(run_dir), "--total-timesteps", "1280", *outputs]
    result = run_script(script, *flags, cwd=tmp_path, **compilation_cache(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resumed at step 1024: the games start anew" in result.stderr
    assert only_run_dir(tmp_path) == run_dir
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == list(range(256, 1280 + 1, 256))
    rates = dict(scalars(run_dir, "charts/learning_rate"))
    np.testing.assert_allclose(rates[1280], 2.5e-4 / 5, rtol=1e-6)  # the last of 5 iterations
    saved = load_checkpoint(run_dir / "checkpoint.pt")
    assert saved["global_step"] == 1280 and int(saved["state"]["agent_state"]["step"]) == gradient_steps(script, 5)


BAD_INPUTS = [
    (["--env-id", "BreakoutNoFrameskip-v4"], ["--env-id BreakoutNoFrameskip-v4: EnvPool names this game Breakout-v5"]),
    (["--env-id", "CartPole-v1"], ["--env-id CartPole-v1 is not an Atari game", "use ppo.py"]),
    (["--seed", str(2**31)], ["--seed must be in [0, 2**31)"]),
    (["--num-minibatches", "3"], ["--num-minibatches 3 must divide", "1024"]),
    (["--cuda"], ["--cuda"]),  # JAX picks its device itself: no such flag
]


@pytest.mark.parametrize(
    "script, flags, fragments",
    [(script, flags, fragments) for script in SCRIPTS for flags, fragments in BAD_INPUTS]
    + [
        (SCRIPTS[1], ["--capture-video"], ["--capture-video records the games of the final evaluation only: add --save-model"])
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, script, flags, fragments):
    check_bad_input_in_process(script, flags, fragments, tmp_path, monkeypatch, capsys)
