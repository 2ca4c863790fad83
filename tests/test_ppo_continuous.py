"""cleanrl/ppo_continuous_action.py and cleanrl/rpo_continuous_action.py: the pure pieces by hand (normalization,
action bounds, the Gaussian, RPO's perturbation, GAE), episode ends of MuJoCo and DeepMind Control, smoke with every
flag, learning, evaluation with the saved statistics, resume, SIGTERM, determinism, bad inputs. The environments'
state across a checkpoint is cleanrl_utils.run_state's (tests/test_run_state.py); here, on these scripts' own envs."""

import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import (
    PPO_TAGS,
    assert_clean_failure,
    check_bad_input_in_process,
    check_evaluations,
    check_killed_run_resumes_to_the_same_weights,
    check_sigterm_checkpoints_and_resumes,
    load_checkpoint,
    load_script,
    only_run_dir,
    run_script,
    scalar_tags,
    scalars,
)

SCRIPTS = ["ppo_continuous_action", "rpo_continuous_action"]
# a few small rollouts: 4 iterations of 256 steps, 2 epochs of 4 minibatches
TINY = ["--total-timesteps", "1024", "--num-steps", "256", "--num-minibatches", "4", "--update-epochs", "2"]
DM_CONTROL_TASK = "dm_control/cartpole-balance-v0"  # 1000-step episodes ended by dm_control's own time limit


def space_holder(observation_space, action_space):
    """What Agent reads of a vector env: its single observation and action spaces."""
    return type("Envs", (), {"single_observation_space": observation_space, "single_action_space": action_space})


# ---------------------------------------------------------------- pure pieces


@pytest.mark.parametrize("script", SCRIPTS)
def test_running_statistics_against_numpy(script):
    m = load_script(script)
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(n, 4)) for n in (1, 5, 2, 7, 1)]
    rms = m.RunningMeanStd(shape=(4,))  # gymnasium's, shared by all envs rather than per-env wrappers
    for batch in batches:
        rms.update(batch)
    data = np.concatenate(batches)
    n, mu = len(data), data.mean(axis=0)
    # the statistics start as a pseudo-sample of weight 1e-4 with mean 0 and variance 1 (as gymnasium's), pooled
    # with the data: mean and variance of the union of the two
    pseudo = 1e-4
    expected_mean = n * mu / (n + pseudo)
    expected_var = (pseudo * 1.0 + np.square(data - mu).sum(axis=0) + np.square(mu) * pseudo * n / (n + pseudo)) / (n + pseudo)
    np.testing.assert_allclose(rms.mean, expected_mean, rtol=1e-12)
    np.testing.assert_allclose(rms.var, expected_var, rtol=1e-12)
    assert rms.count == pytest.approx(n + pseudo)
    np.testing.assert_allclose(rms.mean, data.mean(axis=0), rtol=1e-4)  # the pseudo-sample hardly weighs
    np.testing.assert_allclose(rms.var, data.var(axis=0), rtol=1e-4)

    rms.mean, rms.var = np.array([1.0, -2.0]), np.array([4.0, 0.25])
    normalized = m.normalize_obs(np.array([[3.0, -2.0], [101.0, -10.0]]), rms)
    assert normalized.dtype == np.float32
    # (3 - 1) / 2 = 1; (101 - 1) / 2 = 50 and (-10 + 2) / 0.5 = -16 are clipped to +-10
    np.testing.assert_allclose(normalized, [[1.0, 0.0], [10.0, -10.0]], rtol=1e-6)


@pytest.mark.parametrize("script", SCRIPTS)
def test_reward_scaling_by_hand(script):
    m = load_script(script)
    gamma = 0.9
    return_rms = m.RunningMeanStd()
    discounted = np.zeros(2)
    seen_returns = []

    def expected_scale(rewards):
        # the std of every discounted return so far, pooled with the 1e-4 pseudo-sample of variance 1
        data = np.array(seen_returns)
        n, mu = len(data), data.mean()
        var = (1e-4 + np.square(data - mu).sum() + mu**2 * 1e-4 * n / (n + 1e-4)) / (n + 1e-4)
        return np.clip(rewards / np.sqrt(var + 1e-8), -10, 10)

    scaled = m.scale_rewards(np.array([1.0, 2.0]), discounted, np.array([False, False]), return_rms, gamma)
    seen_returns += [1.0, 2.0]
    np.testing.assert_allclose(scaled, expected_scale(np.array([1.0, 2.0])), rtol=1e-9)

    # env 0's episode ends here: its return is still counted, then restarts from 0
    scaled = m.scale_rewards(np.array([1.0, 4.0]), discounted, np.array([True, False]), return_rms, gamma)
    seen_returns += [0.9 * 1.0 + 1.0, 0.9 * 2.0 + 4.0]
    np.testing.assert_allclose(scaled, expected_scale(np.array([1.0, 4.0])), rtol=1e-9)
    np.testing.assert_allclose(discounted, [0.0, 5.8])

    scaled = m.scale_rewards(np.array([500.0, 0.0]), discounted, np.array([False, False]), return_rms, gamma)
    seen_returns += [500.0, 0.9 * 5.8]  # env 0 starts afresh: nothing of its previous episode carried over
    np.testing.assert_allclose(scaled, expected_scale(np.array([500.0, 0.0])), rtol=1e-9)
    assert return_rms.count == pytest.approx(6 + 1e-4)

    # after many small returns (std 0.1), a reward of 5 scales to 50, clipped to 10; -0.5 scales to -5
    return_rms.mean, return_rms.var, return_rms.count = np.array(0.0), np.array(0.01), 1e9
    scaled = m.scale_rewards(np.array([5.0, -0.5]), np.zeros(2), np.array([False, False]), return_rms, gamma)
    np.testing.assert_allclose(scaled, [10.0, -5.0], rtol=1e-5)  # the two new returns barely move the std


@pytest.mark.parametrize("script", SCRIPTS)
def test_actions_are_rescaled_to_asymmetric_bounds_and_clipped(script):
    m = load_script(script)
    box = gym.spaces.Box(low=np.array([-1.0, 0.0], dtype=np.float32), high=np.array([3.0, 5.0], dtype=np.float32))
    agent = m.Agent(space_holder(gym.spaces.Box(-np.inf, np.inf, (3,)), box))
    raw = np.array([[-1.0, -1.0], [1.0, 1.0], [0.0, 0.0], [0.5, -0.5], [5.0, -7.0]], dtype=np.float32)
    # [-1, 1] maps affinely onto [low, high]; beyond it the sample is clipped to the bounds
    expected = [[-1.0, 0.0], [3.0, 5.0], [1.0, 2.5], [2.0, 1.25], [3.0, 0.0]]
    np.testing.assert_allclose(agent.env_action(raw), expected, rtol=1e-6)
    assert box.contains(agent.env_action(raw)[4])

    # MuJoCo's usual [-1, 1] is the identity inside the bounds; Pendulum's [-2, 2] doubles
    unit = m.Agent(space_holder(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)))
    inside = np.array([[0.3, -0.7]], dtype=np.float32)
    np.testing.assert_array_equal(unit.env_action(inside), inside)  # exactly: what CleanRL's original and SB3 send
    pendulum = m.Agent(space_holder(gym.spaces.Box(-1, 1, (3,)), gym.make("Pendulum-v1").action_space))
    np.testing.assert_allclose(pendulum.env_action(np.array([[0.25]], dtype=np.float32)), [[0.5]])
    # a dimension without finite bounds passes through; a half-bounded one is clipped on its bounded side
    open_box = gym.spaces.Box(low=np.full(2, -np.inf, dtype=np.float32), high=np.array([np.inf, 1.0], dtype=np.float32))
    free = m.Agent(space_holder(gym.spaces.Box(-1, 1, (3,)), open_box))
    np.testing.assert_array_equal(free.env_action(np.array([[7.0, 3.0]], dtype=np.float32)), [[7.0, 1.0]])


@pytest.mark.parametrize("script", SCRIPTS)
def test_gaussian_policy_samples_and_log_probabilities(script):
    m = load_script(script)
    agent = m.Agent(space_holder(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,))))
    mean, std = torch.tensor([0.5, -1.0]), torch.tensor([0.5, 2.0])
    with torch.no_grad():
        agent.actor_mean[-1].weight.zero_()
        agent.actor_mean[-1].bias.copy_(mean)  # the same mean for any input
        agent.actor_logstd.copy_(std.log().unsqueeze(0))
    torch.manual_seed(0)
    with torch.no_grad():
        actions = agent.get_action(torch.zeros(40000, 3)).numpy()
    assert actions.dtype == np.float32 and actions.shape == (40000, 2)
    np.testing.assert_allclose(actions.mean(0), mean.numpy(), atol=0.03)
    np.testing.assert_allclose(actions.std(0), std.numpy(), atol=0.03)
    with torch.no_grad():
        logprobs, entropy, values = agent.evaluate_actions(torch.zeros(40000, 3), torch.as_tensor(actions))
    normal = torch.distributions.Normal(mean, std)
    torch.testing.assert_close(logprobs, normal.log_prob(torch.as_tensor(actions)).sum(-1))
    torch.testing.assert_close(entropy, normal.entropy().sum().expand(40000))
    assert values.shape == (40000,)
    with torch.no_grad():  # a NaN mean does not raise here: it reaches the loss check, which stops the run with one line
        agent.actor_mean[-1].bias.fill_(float("nan"))
        assert agent.evaluate_actions(torch.zeros(2, 3), torch.zeros(2, 2))[0].isnan().all()


def test_rpo_perturbs_the_mean_uniformly_in_the_update_only():
    rpo = load_script("rpo_continuous_action")
    agent = rpo.Agent(space_holder(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,))))
    with torch.no_grad():
        agent.actor_mean[-1].weight.zero_()
        agent.actor_mean[-1].bias.zero_()  # mean 0, std 1 (log std 0)
    x, action = torch.zeros(20000, 3), torch.ones(20000, 1)
    torch.manual_seed(0)
    with torch.no_grad():
        plain, _, values = agent.evaluate_actions(x, action)
        perturbed, _, perturbed_values = agent.evaluate_actions(x, action, rpo_alpha=0.5)
    # unperturbed: log N(1; 0, 1); perturbed by u: log N(1; u, 1), so u = 1 - sqrt(-2 logprob - log 2 pi)
    torch.testing.assert_close(plain, torch.full((20000,), -0.5 - 0.5 * math.log(2 * math.pi)))
    u = 1 - torch.sqrt(-2 * perturbed - math.log(2 * math.pi))
    assert u.abs().max() <= 0.5 + 1e-5 and u.abs().max() > 0.49
    assert abs(u.mean().item()) < 0.01
    assert abs(u.var().item() - 0.5**2 / 3) < 0.003  # the variance of U(-0.5, 0.5)
    torch.testing.assert_close(values, perturbed_values)  # the critic is not perturbed


@pytest.mark.parametrize("script", SCRIPTS)
def test_gae_by_hand_with_truncation_and_termination(script):
    m = load_script(script)
    gamma, lam = 0.9, 0.8
    # env 0 is truncated at step 1 (bootstrapped from its final value 5.0), env 1 terminates at step 2
    rewards = np.array([[1.0, 0.0], [2.0, 1.0], [0.0, 3.0]])
    values = np.array([[0.5, 1.0], [0.6, 1.1], [0.2, 1.2]])
    last_value = np.array([0.7, 0.9])
    final_values = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 9.0]])
    terminations = np.array([[0.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    episode_ends = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    advantages, returns = m.compute_gae(rewards, values, last_value, final_values, terminations, episode_ends, gamma, lam)
    a0_2 = 0 + 0.9 * 0.7 - 0.2
    a0_1 = 2 + 0.9 * 5.0 - 0.6  # nothing carried back across the episode end
    a0_0 = (1 + 0.9 * 0.6 - 0.5) + 0.9 * 0.8 * a0_1
    a1_2 = 3 - 1.2  # terminated: its final value 9.0 is ignored
    a1_1 = (1 + 0.9 * 1.2 - 1.1) + 0.9 * 0.8 * a1_2
    a1_0 = (0 + 0.9 * 1.1 - 1.0) + 0.9 * 0.8 * a1_1
    expected = np.array([[a0_0, a1_0], [a0_1, a1_1], [a0_2, a1_2]])
    np.testing.assert_allclose(advantages, expected, rtol=1e-12)
    np.testing.assert_allclose(returns, expected + values, rtol=1e-12)


# ---------------------------------------------------------------- environments


def test_episode_ends_of_mujoco_and_dm_control_through_make_env():
    """What the rollout relies on: a time limit is a truncation (bootstrapped), a fall a termination, the real last
    observation arrives in infos["final_obs"], and dm_control's dict observations come flat."""
    m = load_script("ppo_continuous_action")

    def vector(env_id):
        return gym.vector.SyncVectorEnv(
            [m.make_env(env_id, 0, False, "test")], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
        )

    # dm_control: shimmy reports its own 1000-step time limit (discount > 0 at the last step) as truncated
    envs = vector(DM_CONTROL_TASK)
    assert envs.single_observation_space.shape == (5,)  # position (3) and velocity (2), concatenated
    obs, _ = envs.reset(seed=0)
    ends = []
    for step in range(1000):
        obs, _, terminated, truncated, infos = envs.step(np.zeros((1, 1)))
        if terminated[0] or truncated[0]:
            ends.append((step, bool(terminated[0]), bool(truncated[0])))
            assert infos["_final_obs"][0] and infos["final_obs"][0].shape == (5,)
            assert infos["final_info"]["episode"]["l"][0] == 1000
    envs.close()
    assert ends == [(999, False, True)]

    # MuJoCo: HalfCheetah is cut by its TimeLimit at 1000 steps; InvertedPendulum terminates when the pole falls
    envs = vector("HalfCheetah-v4")
    envs.reset(seed=0)
    truncations = [step for step in range(1000) if envs.step(np.zeros((1, 6)))[3][0]]
    assert truncations == [999]
    envs = vector("InvertedPendulum-v4")
    envs.reset(seed=0)
    for step in range(100):
        obs, _, terminated, truncated, infos = envs.step(np.full((1, 1), 3.0))
        if terminated[0]:
            break
    assert terminated[0] and not truncated[0] and step < 50
    assert abs(infos["final_obs"][0][1]) > 0.2  # the real last observation: the pole past the limit
    assert abs(obs[0][1]) < 0.02  # while obs is already the next episode's start


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", DM_CONTROL_TASK])
def test_checkpointed_envs_continue_their_episodes_exactly(env_id):
    """A checkpoint's environments, as cleanrl_utils.run_state saves and restores them: Gymnasium's MuJoCo envs pickle
    as their constructor's arguments, so their physics state travels beside them; the restored envs, put into a fresh
    vector env as a resumed run does, continue the same episodes (and the next ones) bit for bit."""
    from cleanrl_utils.run_state import restore_envs, snapshot_envs

    m = load_script("ppo_continuous_action")

    def vector():
        return gym.vector.SyncVectorEnv(
            [m.make_env(env_id, i, False, "test") for i in range(2)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
        )

    envs, restored = vector(), vector()
    envs.reset(seed=1)
    restored.reset(seed=2)  # other episodes, replaced by the snapshot's
    rng = np.random.default_rng(0)
    for _ in range(990):
        envs.step(rng.uniform(-1, 1, (2,) + envs.single_action_space.shape))
    snapshot = snapshot_envs(envs)
    assert snapshot is not None
    restore_envs(restored, snapshot)
    saw_a_reset = False
    for action in rng.uniform(-1, 1, (30, 2) + envs.single_action_space.shape):
        expected, got = envs.step(action), restored.step(action)
        for a, b in zip(expected[:4], got[:4]):
            np.testing.assert_array_equal(a, b)
        saw_a_reset |= bool(expected[3].any())
    assert saw_a_reset  # the episodes crossed their time limit: the reset after it is the same too


# ---------------------------------------------------------------- evaluation


@pytest.mark.parametrize("script", SCRIPTS)
def test_evaluation_normalizes_with_the_saved_statistics_frozen(script, tmp_path):
    m = load_script(script)
    from cleanrl_utils.evals.ppo_continuous_action_eval import evaluate

    log = {"obs": [], "actions": [], "inputs": []}

    class RecordRaw(gym.Wrapper):
        """The raw observations the evaluation acts on, and the actions the env receives."""

        def reset(self, **kwargs):
            obs, info = self.env.reset(**kwargs)
            log["obs"].append(obs)
            return obs, info

        def step(self, action):
            log["actions"].append(np.array(action))
            obs, reward, terminated, truncated, info = self.env.step(action)
            if not (terminated or truncated):  # otherwise the reset's observation is the next one acted on
                log["obs"].append(obs)
            return obs, reward, terminated, truncated, info

    def make_env(env_id, idx, capture_video, run_name):
        thunk = m.make_env(env_id, idx, capture_video, run_name)
        return lambda: RecordRaw(thunk())

    class RecordingAgent(m.Agent):
        def __init__(self, envs):
            super().__init__(envs)
            self.actor_mean.register_forward_pre_hook(lambda module, args: log["inputs"].append(args[0].numpy().copy()))

    envs = gym.vector.SyncVectorEnv([m.make_env("InvertedPendulum-v4", 0, False, "test")])
    torch.manual_seed(3)
    trained = m.Agent(envs)
    with torch.no_grad():
        trained.actor_mean[-1].weight.mul_(30)  # a policy that pushes the cart, rather than the initial near-zero mean
    # dimension 0 has a tiny variance: its normalized values hit the clip at +-10
    stats = {
        "mean": torch.tensor([0.1, -0.2, 0.3, 0.05], dtype=torch.float64),
        "var": torch.tensor([1e-6, 1.0, 4.0, 0.25], dtype=torch.float64),
    }
    model_path = tmp_path / "model.cleanrl_model"
    torch.save(
        {
            "model_weights": trained.state_dict(),
            "obs_normalization": {**stats, "count": 5000.0, "epsilon": 1e-8, "clip": 10.0},
            "args": {},
        },
        model_path,
    )

    returns = evaluate(
        str(model_path),
        make_env,
        "InvertedPendulum-v4",
        eval_episodes=3,
        run_name="test",
        Model=RecordingAgent,
        capture_video=False,
        seed=5,
    )

    assert len(returns) == 3 and all(r >= 1 for r in returns)
    inputs = np.concatenate(log["inputs"])
    raw = np.stack(log["obs"])
    assert len(raw) == len(inputs) + 1 == len(log["actions"]) + 1  # the last reset is never acted on
    assert len(inputs) == sum(returns)  # one step per reward point on InvertedPendulum
    expected = np.clip((raw[:-1] - stats["mean"].numpy()) / np.sqrt(stats["var"].numpy() + 1e-8), -10, 10)
    # the same statistics for the first step and the last: evaluation never updates them
    np.testing.assert_allclose(inputs, expected, rtol=1e-5, atol=1e-6)
    assert (np.abs(inputs[:, 0]) == 10.0).any()
    with torch.no_grad():  # the mean action, mapped to the env's bounds ([-3, 3]) as in training
        expected_actions = trained.env_action(trained.actor_mean(torch.as_tensor(inputs)).numpy())
    np.testing.assert_allclose(np.stack(log["actions"]), expected_actions, rtol=1e-5, atol=1e-6)
    assert np.abs(expected_actions).max() > 0.1  # actions large enough for the mapping to show


# ---------------------------------------------------------------- the scripts run as a user runs them


@pytest.mark.e2e
@pytest.mark.parametrize("script", SCRIPTS)
def test_smoke_on_mujoco_with_every_flag(script, tmp_path):
    # InvertedPendulum: a MuJoCo v4 env whose early episodes are short, so the videos of training and of the
    # evaluation stay a few seconds long; HalfCheetah runs in the resume test. No display, as on a cluster node:
    # --capture-video renders through EGL (cleanrl_utils.rendering, tested in tests/test_rendering.py)
    flags = [
        *TINY,
        "--env-id",
        "InvertedPendulum-v4",
        "--capture-video",
        "--save-model",
        "--track",
        "--checkpoint-interval",
        "512",
        "--eval-interval",
        "384",
        "--eval-episodes",
        "2",
    ]
    result = run_script(f"{script}.py", *flags, cwd=tmp_path, DISPLAY="")
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    videos = {p.parent.name for p in (tmp_path / "videos").rglob("*.mp4")}
    assert videos == {run_dir.name, f"{run_dir.name}-eval"}, videos  # training and evaluation episodes
    assert (run_dir / "checkpoint.pt").exists()
    saved = json.loads((run_dir / "args.json").read_text())
    assert saved["script"] == f"{script}.py" and saved["args"]["total_timesteps"] == 1024
    assert list((tmp_path / "wandb").glob("offline-run-*")), "--track with WANDB_MODE=offline wrote no W&B run"
    tags = scalar_tags(run_dir)
    for tag in PPO_TAGS:
        assert tag in tags, tag
    check_evaluations(run_dir, 384, 2, 1024)  # at steps 512 and 768 (rollouts of 256 steps), then the final model's
    assert all(r >= 1 for _, r in scalars(run_dir, "eval/final_episodic_return"))
    assert "evaluation at step 512: " in result.stdout and "final evaluation: " in result.stdout
    assert "step 1024/1024" in result.stdout  # the sparse progress line when stdout is not a terminal
    model = torch.load(run_dir / f"{script}.cleanrl_model")
    normalization = model["obs_normalization"]
    # the statistics of every observation of the run (1024 steps and the resets) went into the model
    assert normalization["count"] > 1024 and normalization["mean"].shape == (4,)
    assert normalization["var"].min() > 0 and not torch.equal(normalization["mean"], torch.zeros(4))


@pytest.mark.e2e
@pytest.mark.parametrize("script", SCRIPTS)
def test_smoke_on_dm_control_with_video_and_tracking(script, tmp_path):
    # every flag but --save-model and --eval-interval, whose evaluations would play full 1000-step episodes (rendered
    # in software for the final one's video); the dm_control evaluation runs in the resume test
    flags = ["--total-timesteps", "256", "--num-steps", "256", "--num-minibatches", "4", "--update-epochs", "2"]
    flags += ["--env-id", DM_CONTROL_TASK, "--capture-video", "--track", "--checkpoint-interval", "256"]
    result = run_script(f"{script}.py", *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    assert run_dir.parent.name == "dm_control"  # the env id's "/" nests the run folder
    assert [p.parent.name for p in (tmp_path / "videos").rglob("*.mp4")] == [run_dir.name]
    assert list((tmp_path / "wandb").glob("offline-run-*"))
    assert load_checkpoint(run_dir / "checkpoint.pt")["state"]["envs"] is not None  # dm_control envs pickle, renderer and all
    assert "charts/SPS" in scalar_tags(run_dir)


# Learning: InvertedPendulum-v4 with the default hyperparameters, 40,960 steps (20 rollouts, about 20 s). On seeds
# 1-6 the last 20 episodes averaged 468-610 (PPO) and 357-595 (RPO); the first episodes of the initial policy last
# 5-15 steps, and a broken loss, sampler, normalization or action mapping stays far below the bar.
LEARNING_BAR = 200


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("script", SCRIPTS)
def test_learns_inverted_pendulum(script, tmp_path):
    result = run_script(
        f"{script}.py", "--env-id", "InvertedPendulum-v4", "--total-timesteps", "40960", "--seed", "1", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    returns = [value for _, value in scalars(only_run_dir(tmp_path), "charts/episodic_return")]
    assert np.mean(returns[-20:]) >= LEARNING_BAR, returns[-20:]
    assert np.mean(returns[:20]) < 50  # it started from a policy that drops the pole at once


@pytest.mark.e2e
@pytest.mark.parametrize(
    "script, env_id", [("ppo_continuous_action", "HalfCheetah-v4"), ("rpo_continuous_action", DM_CONTROL_TASK)]
)
def test_killed_run_resumes_to_the_same_weights_and_statistics(script, env_id, tmp_path):
    # the checkpoint falls mid-episode (1000-step episodes), so the restored physics, normalization statistics and
    # discounted returns all matter; then the saved model is evaluated from its file alone, as enjoy would
    flags = ["--env-id", env_id, "--total-timesteps", "8192", "--num-steps", "256", "--num-minibatches", "4"]
    flags += ["--update-epochs", "2", "--seed", "3", "--save-model", "--eval-episodes", "2", "--checkpoint-interval", "1024"]
    run_dir = check_killed_run_resumes_to_the_same_weights(f"{script}.py", flags, tmp_path, "charts/SPS")
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == list(range(256, 8192 + 1, 256))
    reference_dir = only_run_dir(tmp_path / "uninterrupted")
    reference = torch.load(reference_dir / f"{script}.cleanrl_model")
    resumed = torch.load(run_dir / f"{script}.cleanrl_model")
    for key in ["mean", "var"]:
        assert torch.equal(reference["obs_normalization"][key], resumed["obs_normalization"][key]), key
    assert reference["obs_normalization"]["count"] == resumed["obs_normalization"]["count"]
    state = load_checkpoint(run_dir / "checkpoint.pt")["state"]
    obs_rms, return_rms, discounted_returns = state["running"]  # the normalization's statistics travel with the run
    assert obs_rms.count > 8192 and return_rms.count > 8192 and discounted_returns.shape == (1,)
    assert state["envs"] is not None

    from cleanrl_utils.evals.ppo_continuous_action_eval import evaluate

    m = load_script(script)
    logged = [value for _, value in scalars(run_dir, "eval/final_episodic_return")]
    replayed = evaluate(
        str(run_dir / f"{script}.cleanrl_model"),
        m.make_env,
        env_id,
        2,
        "test",
        m.Agent,
        capture_video=False,
        seed=3 + 100_000,
    )
    assert len(logged) == 2
    np.testing.assert_allclose(replayed, logged, rtol=1e-5)  # the same policy, statistics and episodes


@pytest.mark.e2e
def test_sigterm_checkpoints_and_exits_nonzero(tmp_path):
    check_sigterm_checkpoints_and_resumes("rpo_continuous_action.py", tmp_path, long_budget=1_000_000, more_steps=8192)


COMMON_BAD_INPUTS = [
    (["--env-id", "CartPole-v1"], ["Discrete(2) actions", "ppo.py"]),
    (["--num-minibatches", "3"], ["--num-minibatches 3 must divide", "2048"]),
    (["--seed", "-1"], ["--seed must be in [0, 2**32)"]),
    (["--eval-interval", "-1"], ["--eval-interval must be >= 0"]),
    (["--eval-episodes", "0"], ["--eval-episodes must be positive"]),
    (["--batch-size", "5"], ["--batch-size"]),  # computed from --num-envs * --num-steps: not a flag
]
PPO_BAD_INPUTS = [
    (["--env-id", "NoSuchEnv-v0"], ["--env-id NoSuchEnv-v0"]),
    (["--env-id", "dm_control/no-such-task-v0"], ["--env-id dm_control/no-such-task-v0"]),
    (["--num-envs", "0"], ["--num-envs must be positive"]),
    (["--total-timesteps", "-5"], ["--total-timesteps must be positive"]),
    (["--total-timesteps", "1000"], ["--total-timesteps 1000 is less than one rollout"]),
    (["--checkpoint-interval", "-1"], ["--checkpoint-interval must be >= 0"]),
    (["--seed", str(2**32)], ["--seed must be in [0, 2**32)"]),
    (["--upload-model"], ["--upload-model uploads the model that --save-model saves"]),
    (["--resume", "runs/never-ran"], ["--resume runs/never-ran: no such folder"]),
]


@pytest.mark.parametrize(
    "script, flags, fragments",
    [("ppo_continuous_action", *case) for case in COMMON_BAD_INPUTS + PPO_BAD_INPUTS]
    + [("rpo_continuous_action", *case) for case in COMMON_BAD_INPUTS]
    + [("rpo_continuous_action", ["--rpo-alpha", "-0.1"], ["--rpo-alpha must be >= 0"])],
)
def test_bad_input_is_one_clear_line(script, flags, fragments, tmp_path, monkeypatch, capsys):
    check_bad_input_in_process(f"{script}.py", flags, fragments, tmp_path, monkeypatch, capsys)  # one `error:` line


@pytest.mark.e2e
@pytest.mark.parametrize("script", SCRIPTS)
def test_a_discrete_env_in_a_new_process_is_one_clear_line(script, tmp_path):
    """A bad input as a user meets it, in a new process (the cases above run in this one)."""
    result = run_script(f"{script}.py", "--env-id", "CartPole-v1", cwd=tmp_path)
    assert_clean_failure(result, "Discrete(2) actions", "ppo.py", f"{script}.py")  # itself and the script that fits
    assert not (tmp_path / "runs").exists(), "a bad input started a run"
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
