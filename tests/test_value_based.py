"""The value-based family on classic control, cleanrl/dqn.py, cleanrl/c51.py and cleanrl/pqn.py: their pure pieces by
hand, the replay buffer across resets, and for each script smoke, learning, determinism, resume and bad inputs."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import (
    assert_clean_failure,
    assert_same_model,
    check_bad_input_in_process,
    check_evaluations,
    check_killed_run_resumes_to_the_same_weights,
    check_sigterm_checkpoints_and_resumes,
    checkpoint_files,
    load_checkpoint,
    load_script,
    only_run_dir,
    run_script,
    scalar_tags,
    scalars,
)

# The learning tests' budgets (15-50 s each). On seeds 1-5 the last 20 episodes averaged 251-347 for dqn.py,
# 202-372 for dqn_jax.py, 187-433 for c51.py and 256-466 for c51_jax.py (50,000 steps, exploring over the first
# 10,000), and 148-500 for pqn.py (300,000 steps over 32 envs, exploring over the first 60,000). Random play scores
# about 22; a broken update, projection or return computation stays far below the bars.
REPLAY_LEARNING = ["--total-timesteps", "50000", "--learning-starts", "1000", "--exploration-fraction", "0.2"]
REPLAY_LEARNING += ["--train-frequency", "2", "--target-network-frequency", "250"]
LEARNING = {
    "dqn.py": (REPLAY_LEARNING, 150),
    "dqn_jax.py": (REPLAY_LEARNING, 150),
    "c51.py": (REPLAY_LEARNING, 100),
    "c51_jax.py": (REPLAY_LEARNING, 150),
    "pqn.py": (["--total-timesteps", "300000", "--exploration-fraction", "0.2"], 100),
}
SCRIPTS = ["dqn.py", "dqn_jax.py", "c51.py", "c51_jax.py", "pqn.py"]
REPLAY_SHORT = ["--total-timesteps", "2000", "--learning-starts", "500", "--buffer-size", "1000", "--batch-size", "32"]
# short runs that train from their first steps: 2,000 steps (pqn: 4 envs x 32 steps x 16 iterations)
SHORT = {
    "dqn.py": REPLAY_SHORT,
    "dqn_jax.py": REPLAY_SHORT,
    "c51.py": REPLAY_SHORT,
    "c51_jax.py": REPLAY_SHORT,
    "pqn.py": ["--total-timesteps", "2048", "--num-envs", "4", "--num-steps", "32", "--num-minibatches", "4"],
}
# long enough to be killed after the first checkpoint (at step 2,000)
RESUMABLE = {script: [*REPLAY_SHORT, "--total-timesteps", "20000", "--train-frequency", "4"] for script in SHORT}
RESUMABLE["pqn.py"] = [*SHORT["pqn.py"], "--total-timesteps", "40960"]
# an environment whose reward turns NaN at its 30th step, importable by the scripts as `nan_env:NanCartPole-v1`
NAN_ENV = """
import gymnasium as gym


class NanReward(gym.Wrapper):
    steps = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        NanReward.steps += 1
        return obs, float("nan") if NanReward.steps >= 30 else reward, terminated, truncated, info


gym.register("NanCartPole-v1", entry_point=lambda: NanReward(gym.make("CartPole-v1")))
"""


def test_epsilon_schedule_endpoints():
    dqn = load_script("dqn")
    assert dqn.linear_schedule(1.0, 0.05, 250_000, 0) == 1.0
    assert dqn.linear_schedule(1.0, 0.05, 250_000, 125_000) == pytest.approx(0.525)
    assert dqn.linear_schedule(1.0, 0.05, 250_000, 250_000) == pytest.approx(0.05)
    assert dqn.linear_schedule(1.0, 0.05, 250_000, 400_000) == 0.05  # and it stays there


def test_td_target_bootstraps_through_truncation_not_termination():
    dqn = load_script("dqn")
    rewards = torch.tensor([1.0, 1.0, 0.5])
    next_q_target = torch.tensor([[1.0, 3.0], [2.0, 0.0], [-1.0, -2.0]])
    terminations = torch.tensor([1.0, 0.0, 0.0])  # the second transition was truncated, the third goes on
    target = dqn.td_target(rewards, next_q_target, terminations, gamma=0.9)
    torch.testing.assert_close(target, torch.tensor([1.0, 1.0 + 0.9 * 2.0, 0.5 + 0.9 * -1.0]))


def test_numpy_acting_is_the_q_networks_argmax():
    """dqn.py acts with the Q-network's layers in numpy: its greedy actions must be QNetwork's argmax, for any weights
    and for observations that need flattening; a layer it does not know is refused, not skipped."""
    dqn = load_script("dqn")
    spaces = {"single_observation_space": gym.spaces.Box(-1, 1, (2, 3)), "single_action_space": gym.spaces.Discrete(5)}
    q_network = dqn.QNetwork(type("Envs", (), spaces))
    torch.manual_seed(1)
    with torch.no_grad():
        for p in q_network.parameters():
            p.add_(torch.randn_like(p))
    obs = np.random.default_rng(0).normal(size=(500, 2, 3)).astype(np.float32)
    with torch.no_grad():
        expected = q_network(torch.as_tensor(obs)).argmax(dim=1).numpy()
    assert len(np.unique(expected)) >= 3, "the test needs several actions to be someone's argmax"
    np.testing.assert_array_equal(dqn.greedy_actions(dqn.numpy_layers(q_network.network), obs), expected)
    q_network.network[1] = torch.nn.Tanh()  # a fork's change
    with pytest.raises(TypeError, match="Tanh"):
        dqn.numpy_layers(q_network.network)


def test_dqn_jax_td_target():
    dqn_jax = load_script("dqn_jax")
    import jax.numpy as jnp

    target = dqn_jax.td_target(
        jnp.array([1.0, 1.0]), jnp.array([[1.0, 3.0], [2.0, 0.0]]), jnp.array([1.0, 0.0]), gamma=0.9
    )  # terminated, then truncated (stored as not terminated: it bootstraps)
    np.testing.assert_allclose(np.asarray(target), [1.0, 1.0 + 0.9 * 2.0], rtol=1e-6)


@pytest.mark.parametrize("script", ["c51", "c51_jax"])
def test_c51_projection_by_hand(script):
    c51 = load_script(script)
    if script == "c51":
        array = torch.tensor
    else:
        import jax.numpy as jnp

        array = jnp.array
    atoms = array([-1.0, 0.0, 1.0])  # v_min -1, v_max 1, atoms 1 apart
    next_pmfs = array([[0.2, 0.3, 0.5], [0.2, 0.3, 0.5], [0.2, 0.3, 0.5], [0.2, 0.3, 0.5]])
    rewards = array([0.5, -3.0, 0.25, 0.0])
    terminations = array([0.0, 1.0, 1.0, 0.0])
    target = np.asarray(c51.project_distribution(next_pmfs, rewards, terminations, 1.0, atoms))
    expected = np.array(
        [
            # 0.5 + z: -0.5 splits 0.2 evenly between -1 and 0; 0.5 splits 0.3 between 0 and 1; 1.5 is clipped to 1
            [0.1, 0.1 + 0.15, 0.15 + 0.5],
            # terminal: every atom collapses to r = -3, clipped to v_min: all the mass on -1
            [1.0, 0.0, 0.0],
            # terminal at r = 0.25, between atoms 0 and 1: 3/4 to 0, 1/4 to 1
            [0.0, 0.75, 0.25],
            # r = 0, gamma 1, not terminal: every atom lands exactly on itself (lower == upper)
            [0.2, 0.3, 0.5],
        ]
    )
    np.testing.assert_allclose(target, expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(target.sum(axis=1), np.ones(4), rtol=1e-6)


def test_pqn_q_lambda_returns_by_hand():
    pqn = load_script("pqn")
    gamma, lam = 0.9, 0.5
    # env 0 runs on through the rollout; env 1 is truncated at step 0 and terminates at step 2
    rewards = np.array([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]])
    max_q = np.array([[0.5, 0.7], [1.0, 3.0], [2.0, 5.0]])  # max_a Q(obs[t], a)
    last_max_q = np.array([4.0, 7.0])
    final_max_q = np.array([[0.0, 10.0], [0.0, 0.0], [0.0, 8.0]])  # of the real last observations, where ended
    terminations = np.array([[0.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    episode_ends = np.array([[0.0, 1.0], [0.0, 0.0], [0.0, 1.0]])
    returns = pqn.q_lambda_returns(rewards, max_q, last_max_q, final_max_q, terminations, episode_ends, gamma, lam)

    g0_2 = 3 + 0.9 * 4.0  # the rollout's last step: bootstrap from max Q after it, 6.6
    g0_1 = 2 + 0.9 * (0.5 * g0_2 + 0.5 * 2.0)  # blend the next return and the next state's max Q: 5.87
    g0_0 = 1 + 0.9 * (0.5 * g0_1 + 0.5 * 1.0)  # 4.0915
    g1_2 = 1.0  # terminated: no bootstrap (neither last_max_q 7 nor final_max_q 8)
    g1_1 = 1 + 0.9 * (0.5 * g1_2 + 0.5 * 5.0)  # 3.7
    g1_0 = 1 + 0.9 * 10.0  # truncated: its real last observation alone, not the next episode's returns
    np.testing.assert_allclose(returns, [[g0_0, g1_0], [g0_1, g1_1], [g0_2, g1_2]], rtol=1e-12)


@pytest.mark.parametrize("script", ["dqn", "dqn_jax", "c51", "c51_jax"])
def test_replay_buffer_holds_real_transitions_across_resets(script):
    """Two short-episode envs stepped through several resets, with the script's own make_env, vector env and
    real_next_observations into Stable-Baselines3's buffer built as the script builds it: every stored transition is
    one real step, the last step of an episode keeps its real last observation (read from infos["final_obs"]), and
    only a termination is stored as done."""
    from stable_baselines3.common.buffers import ReplayBuffer

    module = load_script(script)
    import custom_env  # noqa: F401  (registers Corridor-v0: exit at position 5, time limit 20)

    envs = gym.vector.SyncVectorEnv(
        [module.make_env("Corridor-v0", i, False, "test") for i in range(2)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    spaces = envs.single_observation_space, envs.single_action_space
    rb = ReplayBuffer(1000, *spaces, "cpu", 2, handle_timeout_termination=False)
    obs, _ = envs.reset(seed=0)
    for _ in range(45):  # env 0 walks to the exit (terminates every 5 steps), env 1 into the wall (truncated at 20)
        actions = np.array([1, 0])
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        rb.add(obs, module.real_next_observations(next_obs, infos), actions, rewards, terminations, infos)
        obs = next_obs
    envs.close()

    assert rb.pos == 45 and not rb.full  # one row a vector step, a column an env
    walker_obs, walker_next_obs, walker_dones = rb.observations[:45, 0, 0], rb.next_observations[:45, 0, 0], rb.dones[:45, 0]
    np.testing.assert_allclose(walker_next_obs - walker_obs, 0.2, rtol=1e-6)  # every stored transition moves one cell
    np.testing.assert_array_equal(walker_dones, (walker_next_obs == 1.0).astype(np.float32))
    np.testing.assert_array_equal(rb.rewards[:45, 0], walker_dones)
    assert walker_dones.sum() == 9
    np.testing.assert_array_equal(rb.observations[:45, 1], 0.0)
    np.testing.assert_array_equal(rb.next_observations[:45, 1], 0.0)
    assert rb.dones[:45, 1].sum() == 0  # the time limit cut its episodes: stored as not done

    torch.manual_seed(0)
    np.random.seed(0)
    data = rb.sample(64)
    assert data.observations.shape == (64, 1) and data.actions.dtype == torch.int64 and data.dones.shape == (64, 1)


@pytest.mark.e2e
@pytest.mark.parametrize("script", SCRIPTS)
def test_smoke_with_every_flag(tmp_path, script):
    flags = [*SHORT[script], "--capture-video", "--save-model", "--track", "--checkpoint-interval", "1000"]
    flags += ["--eval-interval", "600", "--eval-episodes", "2"]
    result = run_script(script, *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    assert list((tmp_path / "videos").rglob("*.mp4")), "--capture-video wrote no mp4"
    assert (run_dir / script.replace(".py", ".cleanrl_model")).stat().st_size > 0
    checkpoint = load_checkpoint(checkpoint_files(run_dir)[0])
    assert checkpoint["global_step"] == 2000 + 48 * (script == "pqn.py")
    assert checkpoint["finished"] and checkpoint["script"] == script  # the run's final checkpoint
    if script != "pqn.py":  # the replay buffer travels with the checkpoint: 2,000 steps filled its 1,000 slots
        assert checkpoint["state"]["rb"]["full"] and checkpoint["state"]["rb"]["observations"].shape == (1000, 1, 4)
    assert list((tmp_path / "wandb").glob("offline-run-*")), "--track with WANDB_MODE=offline wrote no W&B run"
    tags = scalar_tags(run_dir)
    loss_tag = "losses/loss" if script.startswith("c51") else "losses/td_loss"
    for tag in [
        "charts/episodic_return",
        "charts/episodic_length",
        "charts/SPS",
        "charts/epsilon",
        "losses/q_values",
        loss_tag,
    ]:
        assert tag in tags, tag
    check_evaluations(run_dir, 600, 2, checkpoint["global_step"])


@pytest.mark.e2e
@pytest.mark.parametrize("script", SCRIPTS)
def test_users_own_env_and_several_envs(tmp_path, script):
    result = run_script(script, "--env-id", "custom_env:Corridor-v0", *SHORT[script], "--num-envs", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lengths = [value for _, value in scalars(only_run_dir(tmp_path), "charts/episodic_length")]
    assert lengths and max(lengths) <= 20


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("script", SCRIPTS)
def test_learns_cartpole(tmp_path, script):
    flags, threshold = LEARNING[script]
    result = run_script(script, *flags, "--seed", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    returns = [value for _, value in scalars(only_run_dir(tmp_path), "charts/episodic_return")]
    assert np.mean(returns[-20:]) >= threshold, returns[-20:]


@pytest.mark.e2e
@pytest.mark.parametrize("script", ["c51.py", "c51_jax.py"])  # the others: their resumed run matches an uninterrupted one
def test_same_seed_same_run_with_evaluations_and_a_config_file(tmp_path, script):
    """Two runs of one seed learn identically, though the second takes its hyperparameters from a --config file
    (flags on the command line winning over it) and evaluates every 500 steps: evaluation does not touch training."""
    (tmp_path / "a").mkdir()
    result = run_script(script, *SHORT[script], "--seed", "7", "--save-model", "--eval-episodes", "2", cwd=tmp_path / "a")
    assert result.returncode == 0, result.stderr[-3000:]
    config = tmp_path / "b" / "config.yaml"
    config.parent.mkdir()
    # the file sets two of SHORT's values and a budget that the command line's overrides
    config.write_text("learning_starts: 500\nbuffer-size: 1000\ntotal_timesteps: 99999\nseed: 7\n")
    flags = ["--config", "config.yaml", "--total-timesteps", "2000", "--batch-size", "32", "--save-model"]
    result = run_script(script, *flags, "--eval-episodes", "2", "--eval-interval", "500", cwd=tmp_path / "b")
    assert result.returncode == 0, result.stderr[-3000:]
    run_a, run_b = only_run_dir(tmp_path / "a"), only_run_dir(tmp_path / "b")
    assert len(scalars(run_a, "charts/episodic_return")) > 20
    assert scalars(run_a, "charts/episodic_return") == scalars(run_b, "charts/episodic_return")
    model = f"{script[: -len('.py')]}.cleanrl_model"
    assert_same_model(run_a / model, run_b / model)
    assert len(scalars(run_b, "eval/episodic_return")) == 5  # at steps 500, 1000, 1500, 2000, then the final model
    saved = json.loads((run_b / "args.json").read_text())["args"]
    assert (saved["total_timesteps"], saved["learning_starts"], saved["buffer_size"]) == (2000, 500, 1000)


# one end-to-end resume per kind of checkpoint (DESIGN.md: the contract is run_state's, tested in test_run_state.py):
# torch with its replay buffer and the on-policy one without here; flax's state dict with its buffer after SIGTERM
# below (and in test_value_based_atari_jax.py)
@pytest.mark.e2e
@pytest.mark.parametrize("script", ["dqn.py", "pqn.py"])
def test_killed_run_resumes_to_the_same_weights(tmp_path, script):
    flags = [*RESUMABLE[script], "--seed", "3", "--save-model", "--checkpoint-interval", "2000"]
    check_killed_run_resumes_to_the_same_weights(script, flags, tmp_path, "losses/q_values")


@pytest.mark.e2e
def test_sigterm_checkpoints_and_exits_nonzero(tmp_path):
    check_sigterm_checkpoints_and_resumes("c51_jax.py", tmp_path, long_budget=500000, more_steps=30000)


@pytest.mark.e2e
@pytest.mark.parametrize("script", ["dqn.py", "pqn.py"])
def test_non_finite_reward_stops_the_run(tmp_path, script):
    """A reward that turns NaN stops the run: exit code 1, one line naming the reward and the step, no model saved."""
    (tmp_path / "nan_env.py").write_text(NAN_ENV)
    flags = ["--env-id", "nan_env:NanCartPole-v1", *SHORT[script], "--num-envs", "1", "--save-model"]
    result = run_script(script, *flags, cwd=tmp_path, PYTHONPATH=str(tmp_path))
    assert result.returncode == 1, result.stderr[-3000:]
    assert "non-finite reward at step 30" in result.stderr and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert not list((tmp_path / "runs").rglob("*.cleanrl_model"))


REPLAY_BAD_INPUTS = [
    (["--buffer-size", "0"], ["--buffer-size must be positive"]),
    (["--learning-starts", "2000", "--total-timesteps", "2000"], ["--learning-starts 2000", "--total-timesteps 2000"]),
    (["--train-frequency", "-1"], ["--train-frequency must be positive"]),
    (["--learning-starts", "-1"], ["--learning-starts must be >= 0"]),
    (["--batch-size", "512", "--buffer-size", "100"], ["--batch-size 512 is larger than --buffer-size 100"]),
]
C51_BAD_INPUTS = [
    *REPLAY_BAD_INPUTS,
    (["--n-atoms", "1"], ["--n-atoms must be at least 2"]),
    (["--v-min", "10", "--v-max", "-10"], ["--v-min 10.0 must be below --v-max -10.0"]),
]
BAD_INPUTS = {
    "dqn.py": [*REPLAY_BAD_INPUTS, (["--tau", "1.5"], ["--tau must be in (0, 1]"])],
    "dqn_jax.py": [*REPLAY_BAD_INPUTS, (["--tau", "1.5"], ["--tau must be in (0, 1]"])],
    "c51.py": C51_BAD_INPUTS,
    "c51_jax.py": C51_BAD_INPUTS,
    "pqn.py": [
        (["--num-minibatches", "3"], ["--num-minibatches 3 must divide", "2048"]),
        (["--q-lambda", "1.5"], ["--q-lambda must be in [0, 1]"]),
        (["--total-timesteps", "100"], ["--total-timesteps 100 is less than one rollout"]),
        (["--batch-size", "5"], ["--batch-size"]),  # computed at run time, not a flag: tyro refuses it
    ],
}
COMMON_BAD_INPUTS = [
    (["--env-id", "NoSuchEnv-v0"], ["--env-id NoSuchEnv-v0"]),
    (["--env-id", "FrozenLake-v1"], ["Discrete observation space", "FlattenObservation"]),
    (["--exploration-fraction", "0"], ["--exploration-fraction must be in (0, 1]"]),
    (["--seed", "-1"], ["--seed must be in [0, 2**32)"]),
    (["--resume", "runs/never-ran"], ["--resume runs/never-ran"]),
]


@pytest.mark.parametrize(
    "script, flags, fragments",
    [(script, *bad) for script in SCRIPTS for bad in BAD_INPUTS[script] + COMMON_BAD_INPUTS],
)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, script, flags, fragments):
    check_bad_input_in_process(script, flags, fragments, tmp_path, monkeypatch, capsys)


@pytest.mark.e2e
@pytest.mark.parametrize("script", SCRIPTS)
def test_continuous_env_is_one_clear_line(tmp_path, script):
    """A bad input as a user meets it, in a new process."""
    result = run_script(script, "--env-id", "Pendulum-v1", cwd=tmp_path)
    assert_clean_failure(result, "Box action space", "sac_continuous_action.py")
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    assert not (tmp_path / "runs").exists(), "a bad input started a run"
