"""cleanrl/dqn_atari_jax.py and c51_atari_jax.py, the JAX twins of dqn_atari.py and c51_atari.py: the pieces they share
with their torch twins (make_env, real_next_observations, linear_schedule, cleanrl_utils.buffers' FrameReplayBuffer,
whose tests in test_value_based_atari.py therefore cover them), the flax Nature CNN on real frames, C51's projection in
jax.numpy against the torch one, and both scripts as a user runs them (smoke with every flag, a killed run resumed to
the same weights, bad inputs). Their SIGTERM test (a resume without the replay buffer refills it) and a bad input in a
new process are test_value_based_atari.py's, which runs the whole value-based Atari family."""

import ast

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from helpers import (
    REPO,
    check_bad_input_in_process,
    check_enjoy_replays_the_evaluation,
    check_evaluations,
    check_killed_run_resumes_to_the_same_weights,
    checkpoint_files,
    load_checkpoint,
    load_script,
    run_with_every_flag,
    scalar_tags,
    scalars,
)

SCRIPTS = ["dqn_atari_jax.py", "c51_atari_jax.py"]
LOSS_TAG = {"dqn_atari_jax.py": "losses/td_loss", "c51_atari_jax.py": "losses/loss"}
SMALL = ["--buffer-size", "1000", "--batch-size", "32"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def top_level_source(script, name):
    source = (REPO / "cleanrl" / script).read_text()
    return next(ast.get_source_segment(source, node) for node in ast.parse(source).body if getattr(node, "name", "") == name)


@pytest.mark.parametrize("script", SCRIPTS)
def test_shares_its_torch_twins_env_and_buffer(script):
    """The preprocessing and the transitions fed to the buffer are the torch twin's, character for character, and the
    frame-once replay buffer is the one of cleanrl_utils.buffers: the twins train on the same data."""
    twin = script.replace("_jax", "")
    for name in ["make_env", "real_next_observations", "linear_schedule"]:
        assert top_level_source(script, name) == top_level_source(twin, name), name
    from cleanrl_utils.buffers import FrameReplayBuffer

    assert load_script(script[: -len(".py")]).FrameReplayBuffer is FrameReplayBuffer


def flax_and_torch_networks(name):
    """The script's flax QNetwork, its parameters and its output on two real Breakout observations (uint8), with the
    torch twin's QNetwork built for the same env."""
    script, twin = load_script(name), load_script(name.replace("_jax", ""))
    envs = gym.vector.SyncVectorEnv([script.make_env("BreakoutNoFrameskip-v4", i, False, "test") for i in range(2)])
    obs, _ = envs.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(12):  # random play, past the reset's repeated frames
        obs, *_ = envs.step(rng.integers(envs.single_action_space.n, size=2))
    assert obs.dtype == np.uint8 and obs.shape == (2, 4, 84, 84) and (obs[0] != obs[1]).any()
    n_actions = envs.single_action_space.n
    q_network = script.QNetwork(action_dim=n_actions)
    params = q_network.init(jax.random.PRNGKey(0), obs)
    torch_network = twin.QNetwork(envs)
    envs.close()
    return q_network, params, obs, n_actions, torch_network


@pytest.mark.parametrize("name", ["dqn_atari_jax", "c51_atari_jax"])
def test_network_on_real_frames(name):
    """The flax Nature CNN has exactly the torch twin's layers (the same number of weights), gives one output per
    action (a distribution's logits over 51 atoms for C51) on uint8 frames, and the evaluators' float32 frames give
    the same outputs as training's uint8 ones."""
    q_network, params, obs, n_actions, torch_network = flax_and_torch_networks(name)
    n_params = sum(leaf.size for leaf in jax.tree_util.tree_leaves(params))
    assert n_params == sum(p.numel() for p in torch_network.parameters()), n_params
    out = q_network.apply(params, obs)
    assert out.shape == ((2, n_actions) if name == "dqn_atari_jax" else (2, n_actions, 51)), out.shape
    assert out.dtype == jnp.float32 and bool(jnp.isfinite(out).all())
    np.testing.assert_allclose(q_network.apply(params, obs.astype(np.float32)), out, rtol=1e-6, atol=1e-6)
    assert not np.allclose(out[0], out[1]), "two different observations should give different outputs"
    # it sees the frames scaled to [0, 1]: an all-white stack (255) stays in a sane range for a fresh network
    white = q_network.apply(params, np.full_like(obs, 255))
    assert float(jnp.abs(white).max()) < 100


def test_c51_projection_equals_the_torch_twins():
    """c51_atari_jax.project_distribution (jax.numpy, as c51_jax.py's) gives the target of c51_atari.py's torch one on
    random distributions, clipped and off-grid rewards beyond the support, and terminations; it keeps all the mass."""
    c51_atari_jax, c51_atari = load_script("c51_atari_jax"), load_script("c51_atari")
    rng = np.random.default_rng(0)
    atoms = np.linspace(-10, 10, 51, dtype=np.float32)
    logits = 3 * rng.standard_normal((256, 51)).astype(np.float32)
    next_pmfs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    rewards = np.concatenate([rng.integers(-1, 2, 128), 25 * rng.standard_normal(128)]).astype(np.float32)
    terminations = (rng.random(256) < 0.3).astype(np.float32)
    for gamma in [0.99, 1.0]:  # gamma 1 with reward 0 lands every atom exactly on itself (lower == upper)
        inputs = (next_pmfs, rewards, terminations)
        target = np.asarray(c51_atari_jax.project_distribution(*map(jnp.asarray, inputs), gamma, jnp.asarray(atoms)))
        expected = c51_atari.project_distribution(*map(torch.from_numpy, inputs), gamma, torch.from_numpy(atoms)).numpy()
        # float32: XLA and torch round the fractional atom index b (up to ~50) differently in its last bits
        np.testing.assert_allclose(target, expected, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(target.sum(axis=1), np.ones(256), rtol=1e-5)
        assert (target >= 0).all()
        done = terminations.astype(bool)  # a terminal target is r alone: its mean is r clipped to the support
        np.testing.assert_allclose((target[done] * atoms).sum(axis=1), rewards[done].clip(-10, 10), atol=1e-4)


@pytest.mark.e2e
@pytest.mark.parametrize("script", SCRIPTS)
def test_smoke_with_every_flag(tmp_path, script):
    flags = ["--total-timesteps", "600", "--learning-starts", "350", "--buffer-size", "500", "--batch-size", "32"]
    flags += ["--capture-video", "--save-model", "--track", "--checkpoint-interval", "300", "--checkpoint-buffer"]
    flags += ["--eval-interval", "250", "--eval-episodes", "2"]
    run_dir = run_with_every_flag(script, flags, tmp_path)
    assert [path.name for path in checkpoint_files(run_dir)] == ["checkpoint.pt"]
    checkpoint = load_checkpoint(checkpoint_files(run_dir)[0])
    state = checkpoint["state"]
    assert checkpoint["global_step"] == 600 and checkpoint["finished"] and state["rb"]["frames"].shape == (1, 500, 84, 84)
    # the flax TrainState as flax.serialization.to_state_dict writes it, as numpy arrays
    assert set(state["q_state"]) == {"step", "params", "target_params", "opt_state"}
    assert int(state["q_state"]["step"]) == 600 // 4 - 350 // 4  # a gradient step every 4th step after 350
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
    """With --checkpoint-buffer the resumed run has everything the uninterrupted one had (train state, buffer, RNGs,
    the emulators' states): the saved flax parameters are byte-identical at the end (JAX on the CPU computes the same
    jitted update bit for bit from the same inputs). c51_atari_jax.py checkpoints with the same code."""
    flags = ["--total-timesteps", "1200", "--learning-starts", "600", *SMALL, "--seed", "3"]
    flags += ["--checkpoint-interval", "400", "--checkpoint-buffer", "--save-model"]
    run_dir = check_killed_run_resumes_to_the_same_weights("dqn_atari_jax.py", flags, tmp_path, "losses/q_values")
    checkpoint = load_checkpoint(checkpoint_files(run_dir)[0])
    assert checkpoint["global_step"] == 1200 and checkpoint["state"]["envs"] is not None
    assert checkpoint["state"]["rb"]["counts"][0] > 1200  # a frame per step, plus one per episode start
    assert int(checkpoint["state"]["q_state"]["step"]) == 1200 // 4 - 600 // 4


BAD_INPUTS = [
    (["--env-id", "CartPole-v1"], ["--env-id CartPole-v1 is not an ALE Atari game", "{peer}"]),
    (["--env-id", "NoSuchGameNoFrameskip-v4"], ["--env-id NoSuchGameNoFrameskip-v4"]),
    (["--batch-size", "512", "--buffer-size", "100"], ["--batch-size 512 is larger than --buffer-size 100"]),
    (["--buffer-size", "0"], ["--buffer-size must be positive"]),
    (["--seed", "-1"], ["--seed must be in [0, 2**32)"]),
    (["--eval-episodes", "0"], ["--eval-episodes must be positive, got 0"]),
    (["--eval-interval", "-1"], ["--eval-interval must be >= 0, got -1"]),
    (["--learning-starts", "600", "--total-timesteps", "600"], ["--learning-starts 600", "--total-timesteps 600"]),
    (["--resume", "runs/never-ran"], ["--resume runs/never-ran: no such folder"]),
]
SPECIFIC_BAD_INPUTS = [
    ("dqn_atari_jax.py", ["--tau", "1.5"], ["--tau must be in (0, 1], got 1.5"]),
    ("dqn_atari_jax.py", ["--num-iterations", "5"], ["--num-iterations"]),  # computed from the budget: not a flag
    ("dqn_atari_jax.py", ["--upload-model"], ["--upload-model", "--save-model"]),
    ("c51_atari_jax.py", ["--n-atoms", "1"], ["--n-atoms must be at least 2, got 1"]),
    ("c51_atari_jax.py", ["--v-min", "10", "--v-max", "-10"], ["--v-min 10.0 must be below --v-max -10.0"]),
]
BAD_INPUT_CASES = [(script, *case) for script in SCRIPTS for case in BAD_INPUTS] + SPECIFIC_BAD_INPUTS


@pytest.mark.parametrize(
    "script, flags, fragments", BAD_INPUT_CASES, ids=[f"{c[0]} {' '.join(c[1])}" for c in BAD_INPUT_CASES]
)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, script, flags, fragments):
    peer = script.replace("_atari", "")  # the JAX script for vector observations: dqn_jax.py, c51_jax.py
    fragments = [fragment.format(peer=peer) for fragment in fragments]
    check_bad_input_in_process(script, flags, fragments, tmp_path, monkeypatch, capsys)
