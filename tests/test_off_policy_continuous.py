"""The off-policy continuous-control family, cleanrl/ddpg_continuous_action.py, td3_continuous_action.py and
sac_continuous_action.py, and their JAX twins (*_jax.py): their pure pieces by hand, numerically and (JAX) against
the torch twins, action rescaling onto asymmetric bounds, the replay buffer across resets and time limits (MuJoCo,
dm_control), the JAX evaluator, and for each script smoke, learning, resume (SIGKILL and SIGTERM) and bad inputs.

A test runs on every script (or on both scripts of one algorithm); what differs between torch and JAX (arrays,
the actor's parameters, the checkpoint's keys) goes through the adapters below, `Torch` and `Jax`. Both write
cleanrl_utils.run_state's `checkpoint.pt`: the script's entries under "state"; both store their transitions in
Stable-Baselines3's ReplayBuffer."""

import importlib
import math
from types import SimpleNamespace

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from helpers import (
    assert_clean_failure,
    check_bad_input_in_process,
    check_evaluations,
    check_killed_run_resumes_to_the_same_weights,
    load_checkpoint,
    load_script,
    only_run_dir,
    run_script,
    scalar_tags,
    scalars,
    sigterm_mid_run,
)
from scipy.stats import norm

# torch before its JAX twin: the first dm_control task of a session then loads after torch's compiler (see
# register_env in the torch scripts), as it does in a torch run
SCRIPTS = [
    "ddpg_continuous_action.py",
    "ddpg_continuous_action_jax.py",
    "td3_continuous_action.py",
    "td3_continuous_action_jax.py",
    "sac_continuous_action.py",
    "sac_continuous_action_jax.py",
]
NAMES = [script[: -len(".py")] for script in SCRIPTS]
CORRIDOR = "off_policy_continuous_env:ContinuousCorridor-v0"  # asymmetric action bounds, exits at 10, time limit 8
CRITIC_TAGS = ["losses/qf1_values", "losses/qf2_values", "losses/qf1_loss", "losses/qf2_loss", "losses/qf_loss"]
LOSS_TAGS = {
    "ddpg": ["losses/qf1_values", "losses/qf1_loss", "losses/actor_loss"],
    "td3": [*CRITIC_TAGS, "losses/actor_loss"],
    "sac": [*CRITIC_TAGS, "losses/actor_loss", "losses/alpha", "losses/alpha_loss"],
}
# short runs that train from early on; 32-transition batches keep every update cheap
SHORT = ["--learning-starts", "200", "--batch-size", "32", "--buffer-size", "2000"]
# The learning tests' budgets (40-60 s each here for the torch scripts; 25-55 s for the JAX ones on a quiet machine,
# 45-100 s on a busy one). Pendulum-v1 (200-step episodes): random play scores about -1200, a policy that swings up
# and balances -100 to -300 (a start hanging down costs the most). Over seeds 1-3 the mean of the last 5 episodes
# was, torch / JAX: -146 to -217 / -148 to -182 for ddpg (8,000 steps), -154 to -360 / -147 to -181 for td3 (8,000
# steps) and -151 to -327 / -151 to -392 for sac (5,000 steps), all learning from step 1,000. Broken on purpose, seed 1
# scored (torch / JAX): td3 without the bootstrap -1372 / -1499 (--gamma 0), sac with the log-prob correction's sign
# flipped -1597 / -1597, ddpg's actor descending Q -1804 / -1788.
LEARNING = {
    "ddpg": (["--total-timesteps", "8000", "--learning-starts", "1000"], -500),
    "td3": (["--total-timesteps", "8000", "--learning-starts", "1000"], -500),
    "sac": (["--total-timesteps", "5000", "--learning-starts", "1000"], -500),
}


def algorithm(script):
    """ddpg, td3 or sac, of a script's file or module name."""
    return script.split("_")[0]


def of(algo):
    """The torch and the JAX script of one algorithm, as module names."""
    return [name for name in NAMES if algorithm(name) == algo]


def fake_envs(low, high, obs_dim=3):
    """What a torch script's networks read from a vector env: its single observation and action spaces."""
    return SimpleNamespace(
        single_observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32), single_action_space=box(low, high)
    )


def box(low, high):
    return gym.spaces.Box(np.array(low, np.float32), np.array(high, np.float32))


def np32(*shape, rng):
    return rng.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------- adapters: what differs between torch and JAX


class TorchActor:
    """A torch script's actor for bounds low, high and 3-dimensional observations; numpy in, numpy out."""

    def __init__(self, script, low, high):
        torch.manual_seed(0)
        self.actor = script.Actor(fake_envs(low, high))
        self.sac = hasattr(self.actor, "get_action")
        self.last = self.actor.fc_mean if self.sac else self.actor.fc_mu

    @torch.no_grad()
    def fix_pre_tanh(self, pre_tanh):
        """Zero the last layer's weights and set its bias: the output before the tanh (SAC: the Gaussian's mean) is
        `pre_tanh` whatever the observation."""
        self.last.weight.zero_()
        self.last.bias.copy_(torch.tensor(pre_tanh, dtype=torch.float32))

    @torch.no_grad()
    def deterministic(self, obs):
        """The action evaluation plays: the actor's output (DDPG, TD3), tanh of the Gaussian's mean (SAC), rescaled."""
        obs = torch.as_tensor(obs)
        return (self.actor.get_action(obs)[2] if self.sac else self.actor(obs)).numpy()

    @torch.no_grad()
    def sample(self, obs, seed):
        """SAC's sampled actions and their log-probabilities, drawn from torch's generator seeded with `seed`."""
        torch.manual_seed(seed)
        actions, log_prob, _ = self.actor.get_action(torch.as_tensor(obs))
        return actions.numpy(), log_prob.numpy()


class JaxActor:
    """A JAX script's actor (flax module and parameters) for bounds low, high and 3-dimensional observations."""

    def __init__(self, script, low, high):
        self.script, self.sac = script, hasattr(script.Actor, "get_action")
        self.actor = script.rescaled_actor(script.Actor, box(low, high))
        self.params = self.actor.init(jax.random.PRNGKey(1), jnp.zeros((1, 3)))
        self.last = "fc_mean" if self.sac else "fc_mu"

    def fix_pre_tanh(self, pre_tanh):
        layer = self.params["params"][self.last]
        layer["kernel"] = jnp.zeros_like(layer["kernel"])
        layer["bias"] = jnp.broadcast_to(jnp.asarray(pre_tanh, jnp.float32), layer["bias"].shape)

    def deterministic(self, obs):
        if self.sac:
            key = jax.random.PRNGKey(2)
            return np.asarray(self.actor.apply(self.params, obs, key, method=self.script.Actor.get_action)[2])
        return np.asarray(self.actor.apply(self.params, obs))

    def sample(self, obs, seed):
        """SAC's sampled actions and their log-probabilities, drawn with the key of `seed`."""
        key = jax.random.PRNGKey(seed)
        actions, log_prob, _ = self.actor.apply(self.params, obs, key, method=self.script.Actor.get_action)
        return np.asarray(actions), np.asarray(log_prob)


class Torch:
    """The torch scripts' side of what the two families do differently."""

    Actor = TorchActor
    fixed_alpha_state = ["log_alpha", "a_optimizer"]  # SAC's entropy coefficient in a checkpoint: None unless tuned
    dqn_scripts = ["dqn.py"]  # where the Discrete-action error sends the user
    rng_state_shape = tuple(torch.get_rng_state().shape)

    @staticmethod
    def array(x, dtype=np.float32):
        return torch.as_tensor(np.asarray(x, dtype))

    @staticmethod
    def rng_args(seed):
        """The arguments a pure piece takes for its randomness: none, it draws from torch's generator, seeded here."""
        torch.manual_seed(seed)
        return []

    @staticmethod
    def rng_state(checkpoint):
        return checkpoint["rng"]["torch"]  # run_state saves torch's generator with every checkpoint


class Jax:
    """The JAX scripts' side of what the two families do differently."""

    Actor = JaxActor
    fixed_alpha_state = ["alpha_state"]
    dqn_scripts = ["dqn_jax.py", "dqn.py"]
    rng_state_shape = (2,)  # the JAX key travels with the checkpoint

    @staticmethod
    def array(x, dtype=np.float32):
        return jnp.asarray(np.asarray(x, dtype))

    @staticmethod
    def rng_args(seed):
        return [jax.random.PRNGKey(seed)]

    @staticmethod
    def rng_state(checkpoint):
        return checkpoint["state"]["key"]


def family(script):
    """Torch or Jax, for a script's file or module name."""
    return Jax if script.removesuffix(".py").endswith("_jax") else Torch


def checkpoint_of(run_dir):
    """The run's checkpoint, loaded (cleanrl_utils.run_state's layout: the script's own entries under "state")."""
    return load_checkpoint(run_dir / "checkpoint.pt")


# ---------------------------------------------------------------- pure pieces


@pytest.mark.parametrize("name", of("ddpg"))
def test_ddpg_target_bootstraps_through_truncation_not_termination(name):
    ddpg, xp = load_script(name), family(name)
    next_obs = xp.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])

    def target_actor(obs):
        return obs[:, :1] * 0.5

    def qf1_target(obs, a):
        return obs.sum(1) + 10 * a.sum(1)

    rewards = xp.array([1.0, 2.0, 3.0])
    terminations = xp.array([1.0, 0.0, 0.0])  # the second transition was truncated: it still bootstraps
    target = ddpg.ddpg_target(rewards, terminations, next_obs, target_actor, qf1_target, gamma=0.9)
    # Q'(s', mu'(s')) = 3 + 10 * 0.5 = 8, 7 + 15 = 22, 11 + 25 = 36
    np.testing.assert_allclose(np.asarray(target), [1.0, 2.0 + 0.9 * 22, 3.0 + 0.9 * 36], rtol=1e-6)


@pytest.mark.parametrize("name", of("td3"))
def test_td3_target_smoothing_noise_is_clipped_then_the_action(name):
    td3, xp = load_script(name), family(name)
    low, high = np.array([-1.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32)
    scale = (high - low) / 2  # [2, 0.25]
    n = 4000
    seen = {}

    def qf1_target(obs, a):
        seen["actions"] = a
        return a.sum(1)

    def qf2_target(obs, a):
        return a.sum(1) - 1.0  # the smaller of the two: clipped double Q must pick it

    def target(mu, policy_noise, noise_clip, seed=0):
        terminations = np.zeros(n, np.float32)
        terminations[0] = 1.0
        value = td3.td3_target(
            xp.array(np.ones(n)),
            xp.array(terminations),
            xp.array(np.zeros((n, 3))),
            lambda obs: obs[:, :2] * 0.0 + xp.array(mu),  # mu at every next observation
            qf1_target,
            qf2_target,
            *xp.rng_args(seed),
            0.5,
            policy_noise,
            noise_clip,
            xp.array(scale),
            xp.array(low),
            xp.array(high),
        )
        value, actions = np.asarray(value), np.asarray(seen["actions"])
        assert value[0] == 1.0  # terminated: the reward alone
        np.testing.assert_allclose(value[1:], 1.0 + 0.5 * (actions[1:].sum(1) - 1.0), rtol=1e-6)
        return actions - mu

    middle = (high + low) / 2
    # noise of std 1e6 * scale: every draw is clipped to +-noise_clip * scale, with both signs
    noise = target(middle, policy_noise=1e6, noise_clip=0.5)
    np.testing.assert_allclose(np.abs(noise), np.broadcast_to(0.5 * scale, (n, 2)), rtol=1e-6)
    assert (noise > 0).any(axis=0).all() and (noise < 0).any(axis=0).all()
    # the usual 0.2, clipped at 0.5: std 0.2 * scale, never beyond 0.5 * scale
    noise = target(middle, policy_noise=0.2, noise_clip=0.5)
    assert (np.abs(noise) <= 0.5 * scale + 1e-6).all()
    np.testing.assert_allclose(noise.std(axis=0, ddof=1), 0.2 * scale, rtol=0.05)
    # the seed (JAX: the key) is the only source of randomness: the same one draws the same noise, another other noise
    np.testing.assert_array_equal(target(middle, 0.2, 0.5), noise)
    assert not np.array_equal(target(middle, 0.2, 0.5, seed=1), noise)
    # at the upper bound, the smoothed action is clipped back into the bounds
    noise = target(high, policy_noise=1e6, noise_clip=0.5)
    assert (noise <= 0).all()
    assert set(noise[:, 0].tolist()) == {0.0, -1.0} and set(noise[:, 1].tolist()) == {0.0, -0.125}
    # no noise, no smoothing
    np.testing.assert_array_equal(target(middle, policy_noise=0.0, noise_clip=0.5), np.zeros((n, 2)))


@pytest.mark.parametrize("name", of("sac"))
def test_sac_soft_td_target_by_hand(name):
    sac, xp = load_script(name), family(name)
    target = sac.soft_td_target(
        rewards=xp.array([1.0, 1.0]),
        terminations=xp.array([1.0, 0.0]),  # terminated, then truncated (stored as not terminated)
        next_q1=xp.array([5.0, 3.0]),
        next_q2=xp.array([4.0, 6.0]),
        next_log_pi=xp.array([-1.0, 2.0]),
        alpha=xp.array(0.5),
        gamma=0.9,
    )
    np.testing.assert_allclose(np.asarray(target), [1.0, 1.0 + 0.9 * (3.0 - 0.5 * 2.0)], rtol=1e-6)


@pytest.mark.parametrize(
    "name, critic, layer_count",
    [
        ("sac_continuous_action_jax", "SoftQNetwork", 7),  # the actor's fc1, fc2, fc_mean, fc_logstd; fc1-3 of the critic
        ("td3_continuous_action_jax", "QNetwork", 6),  # the actor's fc1, fc2, fc_mu; the critic's fc1, fc2, fc3
        ("ddpg_continuous_action_jax", "QNetwork", 6),
    ],
)
def test_jax_layers_start_as_the_torch_twins(name, critic, layer_count):
    """The JAX scripts initialize every layer as torch's nn.Linear: weights and biases uniform in +-1/sqrt(fan_in)
    (with flax's default, LeCun-normal weights and zero biases, the JAX SAC learned HalfCheetah far slower)."""
    script = load_script(name)
    obs, actions = np.zeros((1, 17), np.float32), np.zeros((1, 6), np.float32)
    actor = script.Actor(action_dim=6, action_scale=jnp.ones(6), action_bias=jnp.zeros(6))
    critic = getattr(script, critic)()
    networks = [actor.init(jax.random.PRNGKey(0), obs), critic.init(jax.random.PRNGKey(1), obs, actions)]
    layers = [layer for params in networks for layer in params["params"].values()]
    assert len(layers) == layer_count
    for layer in layers:
        bound = 1 / math.sqrt(layer["kernel"].shape[0])
        for values in [np.asarray(layer["kernel"]).ravel(), np.asarray(layer["bias"])]:
            assert np.abs(values).max() <= bound
            if values.size >= 256:  # a uniform's spread, not a normal's of std bound (up to ~4 bounds) nor zeros
                assert abs(values.std() - bound / math.sqrt(3)) < 0.15 * bound / math.sqrt(3)
                assert np.abs(values).max() > 0.9 * bound


# torch computes in float64 here; JAX in float32 (its 64-bit mode is off), so within a looser tolerance
@pytest.mark.parametrize(
    "name, dtype, tolerance",
    [("sac_continuous_action", np.float64, 1e-6), ("sac_continuous_action_jax", np.float32, 1e-4)],
    ids=of("sac"),
)
def test_sac_log_prob_matches_the_change_of_variables_computed_numerically(name, dtype, tolerance):
    """log p(a) for a = tanh(u) * scale + bias, u ~ N(mean, std): the Gaussian's density of u (scipy's) over
    |det da/du|, with the Jacobian taken by central finite differences in float64 numpy, not by the formula the
    script uses."""
    sac, xp = load_script(name), family(name)
    rng = np.random.default_rng(0)
    low, high = np.array([-1.0, 0.0, 2.0]), np.array([3.0, 0.5, 10.0])
    scale, bias = (high - low) / 2, (high + low) / 2
    mean = rng.standard_normal((6, 3))
    log_std = rng.uniform(-2, 0.5, (6, 3))
    u = mean + np.exp(log_std) * rng.standard_normal((6, 3))

    def squash(u):
        return np.tanh(u) * scale + bias

    h = 1e-6
    expected = []
    for i in range(len(u)):
        jacobian = np.stack([(squash(u[i] + h * e) - squash(u[i] - h * e)) / (2 * h) for e in np.eye(3)])
        log_density_u = norm.logpdf(u[i], mean[i], np.exp(log_std[i])).sum()
        expected.append(log_density_u - np.log(abs(np.linalg.det(jacobian))))
    args = [xp.array(x, dtype) for x in (u, mean, log_std, scale)]
    np.testing.assert_allclose(
        np.asarray(sac.squashed_gaussian_log_prob(*args, eps=0.0)), expected, rtol=tolerance, atol=tolerance
    )
    # the default eps only matters where tanh saturates
    np.testing.assert_allclose(np.asarray(sac.squashed_gaussian_log_prob(*args)), expected, rtol=1e-3, atol=1e-3)

    # and it is a density over the action: in one dimension it integrates to 1 over (low, high)
    a = np.linspace(-1.0, 3.0, 200_001)[1:-1]  # scale 2, bias 1
    u = np.arctanh((a - 1.0) / 2.0)
    mean, log_std, scale = (xp.array([x], dtype) for x in (0.3, math.log(0.8), 2.0))
    log_density = sac.squashed_gaussian_log_prob(xp.array(u[:, None], dtype), mean, log_std, scale, eps=0.0)
    assert np.trapezoid(np.exp(np.asarray(log_density, dtype=np.float64)), a) == pytest.approx(1.0, abs=1e-3)


def test_pure_pieces_equal_the_torch_twins():
    """The same inputs give the same numbers as ddpg/td3/sac_continuous_action.py's functions (td3's target without
    smoothing noise, since the two draw it from different generators)."""
    rng = np.random.default_rng(1)
    n = 64
    obs, rewards = np32(n, 3, rng=rng), np32(n, rng=rng)
    terminations = (rng.random(n) < 0.3).astype(np.float32)
    w_actor, w_q = np32(3, 2, rng=rng), np32(5, rng=rng)

    def twin(module):
        """The same deterministic target actor and critics, for torch tensors and for jax arrays."""
        xp = torch if module == "torch" else jnp
        cat = (lambda xs: torch.cat(xs, 1)) if xp is torch else (lambda xs: jnp.concatenate(xs, 1))
        as_array = (lambda x: torch.as_tensor(x)) if xp is torch else jnp.asarray

        def actor(o):
            return xp.tanh(o @ as_array(w_actor)) * 2.0

        def qf1(o, a):
            return cat([o, a]) @ as_array(w_q)

        def qf2(o, a):
            return (cat([o, a]) ** 2) @ as_array(w_q)

        return as_array, actor, qf1, qf2

    def both(name, function, make_args):
        torch_fn = getattr(load_script(name), function)
        jax_fn = getattr(load_script(f"{name}_jax"), function)
        expected = torch_fn(*make_args("torch")).numpy()
        np.testing.assert_allclose(np.asarray(jax_fn(*make_args("jax"))), expected, rtol=1e-5, atol=1e-5)

    def ddpg_args(module):
        as_array, actor, qf1, _ = twin(module)
        return as_array(rewards), as_array(terminations), as_array(obs), actor, qf1, 0.99

    def td3_args(module):
        as_array, actor, qf1, qf2 = twin(module)
        low, high = as_array(np.array([-2.0, -1.0], np.float32)), as_array(np.array([2.0, 0.5], np.float32))
        key = [jax.random.PRNGKey(0)] if module == "jax" else []
        common = [as_array(rewards), as_array(terminations), as_array(obs), actor, qf1, qf2, *key, 0.99]
        return [*common, 0.0, 0.5, (high - low) / 2, low, high]

    def soft_target_args(module):
        as_array = torch.as_tensor if module == "torch" else jnp.asarray
        q1, q2, log_pi = np32(n, rng=np.random.default_rng(2)), np32(n, rng=np.random.default_rng(3)), obs[:, 0]
        alpha = as_array(np.float32(0.3))
        return as_array(rewards), as_array(terminations), as_array(q1), as_array(q2), as_array(log_pi), alpha, 0.99

    def log_prob_args(module):
        as_array = torch.as_tensor if module == "torch" else jnp.asarray
        # |u| < 4 or so: where tanh saturates, 1 - tanh(u)^2 is float32 rounding noise, different in torch and XLA
        u, mean = np32(n, 3, rng=np.random.default_rng(4)), np32(n, 3, rng=np.random.default_rng(5))
        log_std = np.random.default_rng(6).uniform(-5, 2, (n, 3)).astype(np.float32)
        return as_array(u), as_array(mean), as_array(log_std), as_array(np.array([2.0, 0.25, 4.0], np.float32))

    both("ddpg_continuous_action", "ddpg_target", ddpg_args)
    both("td3_continuous_action", "td3_target", td3_args)
    both("sac_continuous_action", "soft_td_target", soft_target_args)
    both("sac_continuous_action", "squashed_gaussian_log_prob", log_prob_args)


@pytest.mark.parametrize("name", NAMES)
def test_actions_are_rescaled_onto_asymmetric_bounds(name):
    script = load_script(name)
    low, high = [-1.0, 0.0, 2.0], [3.0, 0.5, 10.0]
    actor = family(name).Actor(script, low, high)
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((64, 3), dtype=np.float32)
    for pre_tanh, expected in [(50.0, high), (-50.0, low), (0.0, [1.0, 0.25, 6.0])]:
        actor.fix_pre_tanh(pre_tanh)
        np.testing.assert_allclose(actor.deterministic(obs), np.broadcast_to(expected, (64, 3)), rtol=1e-6)
    if name.startswith("sac"):  # the sampled actions stay inside the bounds too, and carry their log-probability
        actor.fix_pre_tanh([3.0, -3.0, 0.0])
        many_obs = rng.standard_normal((10_000, 3), dtype=np.float32)
        actions, log_prob = actor.sample(many_obs, seed=4)
        assert (actions >= np.array(low)).all() and (actions <= np.array(high)).all()
        assert log_prob.shape == (10_000,) and np.isfinite(log_prob).all()
        # a new seed (JAX: key), new samples; the same one, the same samples
        again, other = actor.sample(many_obs, seed=4)[0], actor.sample(many_obs, seed=5)[0]
        assert np.array_equal(again, actions) and not np.array_equal(other, actions)


@pytest.mark.parametrize("name", [name for name in NAMES if family(name) is Jax])
def test_evaluation_plays_the_deterministic_action_and_rejects_another_envs_model(tmp_path, monkeypatch, name):
    """The evaluator rebuilds the actor from the model file (flax bytes of its parameters) and the env's bounds, and
    plays its deterministic action: the actor's output (DDPG, TD3) or tanh of the Gaussian's mean (SAC), rescaled.
    An actor saturated at +50 before its tanh must play the upper bound, 2.0 on Pendulum, at every step."""
    import flax

    monkeypatch.chdir(tmp_path)
    script = load_script(name)
    evals = "sac_jax_eval" if name.startswith("sac") else "ddpg_jax_eval"
    evaluate = importlib.import_module(f"cleanrl_utils.evals.{evals}").evaluate
    actor = JaxActor(script, [-2.0], [2.0])
    actor.fix_pre_tanh(50.0)
    model_path = tmp_path / "model.cleanrl_model"
    model_path.write_bytes(flax.serialization.to_bytes(actor.params))

    returns = evaluate(str(model_path), script.make_env, "Pendulum-v1", 1, "eval", script.Actor, capture_video=False, seed=7)
    env = gym.make("Pendulum-v1")
    env.reset(seed=7)
    expected = sum(env.step(np.array([2.0], np.float32))[1] for _ in range(200))
    assert returns == [pytest.approx(expected, rel=1e-5)]

    with pytest.raises(ValueError, match="holds parameters"):  # a Pendulum actor on a 4-dimensional observation
        evaluate(str(model_path), script.make_env, "InvertedPendulum-v5", 1, "eval", script.Actor, capture_video=False)


# ---------------------------------------------------------------- the replay buffer and the vector env


def script_buffer(script, envs, buffer_size):
    """The replay buffer as the scripts make it: Stable-Baselines3's, with float32 observations and no time-limit
    handling of its own (the done flag stored is the termination the script passes)."""
    obs_space = gym.spaces.Box(-np.inf, np.inf, envs.single_observation_space.shape, np.float32)
    return script.ReplayBuffer(
        buffer_size, obs_space, envs.single_action_space, "cpu", envs.num_envs, handle_timeout_termination=False
    )


def step_into_buffer(script, envs, rb, steps, actions):
    obs, _ = envs.reset(seed=0)
    for _ in range(steps):
        act = actions() if callable(actions) else actions
        next_obs, rewards, terminations, truncations, infos = envs.step(act)
        rb.add(obs, script.real_next_observations(next_obs, infos), act, rewards, terminations, infos)
        obs = next_obs
    return next_obs, terminations, truncations, infos


@pytest.mark.parametrize("name", NAMES)
def test_replay_buffer_holds_real_transitions_across_resets(name):
    """Two short-episode envs stepped through several resets, with the script's own make_env, vector env,
    real_next_observations and buffer: every stored transition is one real step (never a jump to the next episode's
    start), the last step of an episode keeps its real last observation, and only a termination is stored as done."""
    script = load_script(name)
    import off_policy_continuous_env  # noqa: F401  (registers ContinuousCorridor-v0)

    envs = gym.vector.SyncVectorEnv(
        [script.make_env(CORRIDOR, i, False, "test") for i in range(2)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    rb = script_buffer(script, envs, 1000)
    # env 0 strides 3 to the exit (terminated on its 4th step), env 1 walks into the wall (truncated after 8 steps)
    step_into_buffer(script, envs, rb, 30, np.array([[3.0, 0.25], [-1.0, 0.5]], dtype=np.float32))
    envs.close()

    assert (rb.pos, rb.full) == (30, False)  # a row per vector step, a column per env
    obs, actions, next_obs = rb.observations[:30], rb.actions[:30], rb.next_observations[:30]
    rewards, terminations = rb.rewards[:30], rb.dones[:30]
    np.testing.assert_array_equal(next_obs[..., 1] - obs[..., 1], 1.0)  # one step each: no reset inside a transition
    strider, waller = 0, 1  # the envs' columns
    np.testing.assert_array_equal(next_obs[:, strider, 0] - obs[:, strider, 0], 3.0)
    np.testing.assert_array_equal(actions[:, strider], [[3.0, 0.25]] * 30)
    np.testing.assert_array_equal(rewards[:, strider], 3.0)
    np.testing.assert_array_equal(terminations[:, strider], next_obs[:, strider, 0] >= 10.0)
    assert terminations[:, strider].sum() == 7 and next_obs[:, strider, 1].max() == 4  # exits at position 12, step 4
    np.testing.assert_array_equal(next_obs[:, waller, 0], 0.0)
    np.testing.assert_array_equal(rewards[:, waller], -1.0)
    assert (next_obs[:, waller, 1] == 8).sum() == 3  # the real last observations of the three truncated episodes
    assert terminations[:, waller].sum() == 0  # the time limit cut its episodes: stored as not done, so they bootstrap

    np.random.seed(0)
    data = rb.sample(256)
    batch = [data.observations, data.actions, data.next_observations, data.rewards, data.dones]
    assert [tuple(field.shape) for field in batch] == [(256, 2), (256, 2), (256, 2), (256, 1), (256, 1)]
    assert all(field.dtype == torch.float32 for field in batch)
    np.testing.assert_array_equal(data.rewards.flatten(), data.actions[:, 0])  # the fields stay whole transitions
    np.testing.assert_array_equal(data.next_observations[:, 1] - data.observations[:, 1], np.ones(256))


@pytest.mark.parametrize("env_id", ["HalfCheetah-v4", "HalfCheetah-v5", "dm_control/cheetah-run-v0"])
@pytest.mark.parametrize("name", NAMES)
def test_time_limit_truncation_is_stored_as_not_done(name, env_id, tmp_path, monkeypatch):
    """MuJoCo tasks end by a 1,000-step time limit; dm_control's own limit arrives through shimmy as a truncation
    too (discount 1). Either way the buffer keeps the real last observation and no done flag, so it bootstraps."""
    monkeypatch.chdir(tmp_path)  # MuJoCo writes its warnings to MUJOCO_LOG.TXT in the working directory
    script = load_script(name)
    envs = gym.vector.SyncVectorEnv(
        [script.make_env(env_id, 0, False, "test")], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    assert envs.single_observation_space.shape == (17,)  # dm_control's dict of arrays, flattened
    rb = script_buffer(script, envs, 1000)
    envs.action_space.seed(0)
    next_obs, terminations, truncations, infos = step_into_buffer(script, envs, rb, 1000, envs.action_space.sample)
    envs.close()
    assert truncations[0] and not terminations[0]
    assert rb.full and rb.pos == 0  # 1,000 steps filled its 1,000 rows, in order
    obs, stored_next_obs, stored_terminations = rb.observations[:, 0], rb.next_observations[:, 0], rb.dones[:, 0]
    assert stored_terminations.sum() == 0
    np.testing.assert_array_equal(stored_next_obs[-1], infos["final_obs"][0].astype(np.float32))
    assert not np.array_equal(stored_next_obs[-1], next_obs[0].astype(np.float32))  # not the next episode's start
    np.testing.assert_array_equal(stored_next_obs[:-1], obs[1:])  # consecutive transitions chain up
    assert float(infos["final_info"]["episode"]["l"][0]) == 1000


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "dm_control/cheetah-run-v0"])
def test_checkpointed_envs_continue_the_same_episode(env_id, tmp_path, monkeypatch):
    """The envs of this family's make_env (the same in torch and JAX) come back from cleanrl_utils.run_state's
    snapshot mid-episode: MuJoCo's physics state (EzPickle would restart the simulation) and dm_control's whole
    physics, with the time limit's count and the episode statistics."""
    from cleanrl_utils.run_state import restore_envs, snapshot_envs

    monkeypatch.chdir(tmp_path)
    make_env = load_script("sac_continuous_action").make_env
    envs = gym.vector.SyncVectorEnv([make_env(env_id, 0, False, "test")])
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        envs.step(rng.uniform(-1, 1, (1, 6)))
    copy = gym.vector.SyncVectorEnv([make_env(env_id, 0, False, "test")])  # a resumed run's envs, made and reset
    copy.reset(seed=1)
    restore_envs(copy, snapshot_envs(envs))
    for _ in range(5):
        actions = rng.uniform(-1, 1, (1, 6))
        original, restored = envs.step(actions), copy.step(actions)
        np.testing.assert_array_equal(original[0], restored[0])
        np.testing.assert_array_equal(original[1], restored[1])
    assert copy.envs[0].episode_lengths == envs.envs[0].episode_lengths == 25
    envs.close()
    copy.close()


@pytest.mark.e2e
@pytest.mark.parametrize("script", ["sac_continuous_action.py", "td3_continuous_action_jax.py"])
def test_dm_control_video_renders_without_a_display(tmp_path, script):
    """--capture-video on dm_control without a display, beside torch and JAX: check_args has cleanrl_utils.rendering
    choose EGL before the first env is made (MuJoCo and dm_control read MUJOCO_GL once, on import), and XLA compiles
    after EGL has loaded Mesa. A 1,000-step dm_control episode takes about a minute to render on a CPU, so the smoke
    tests record MuJoCo's short InvertedPendulum episodes and this run records a few frames (the episode in progress
    is written out when the envs close), with one script of each family."""
    flags = ["--env-id", "dm_control/cheetah-run-v0", "--total-timesteps", "8", "--learning-starts", "4"]
    flags += ["--batch-size", "4", "--buffer-size", "8", "--capture-video"]
    result = run_script(script, *flags, cwd=tmp_path, DISPLAY="")
    assert result.returncode == 0, result.stderr[-3000:]
    videos = list((tmp_path / "videos").rglob("*.mp4"))
    assert [video.parent.name for video in videos] == [only_run_dir(tmp_path).name], videos
    assert videos[0].stat().st_size > 0


# ---------------------------------------------------------------- the scripts, as a user runs them

# One smoke run a script, the torch and JAX twins of an algorithm on different families: MuJoCo's InvertedPendulum,
# whose episodes end within a few dozen steps until it learns (cheap to render and to evaluate), or dm_control's
# cheetah-run, whose 1,000-step episodes take a minute each to render on a CPU: no --capture-video there (see
# test_dm_control_video_renders_without_a_display)
SMOKE_ENV = {
    "ddpg_continuous_action.py": "dm_control/cheetah-run-v0",
    "ddpg_continuous_action_jax.py": "InvertedPendulum-v5",
    "td3_continuous_action.py": "InvertedPendulum-v4",
    "td3_continuous_action_jax.py": "dm_control/cheetah-run-v0",
    "sac_continuous_action.py": "dm_control/cheetah-run-v0",
    "sac_continuous_action_jax.py": "InvertedPendulum-v5",
}


@pytest.mark.e2e
@pytest.mark.parametrize("script", SCRIPTS)
def test_smoke_with_every_flag(tmp_path, script):
    """On dm_control: one whole episode, then learning, and the replay buffer in the checkpoint; SAC runs there with a
    fixed alpha (--no-autotune), which its other runs do not. On MuJoCo: videos of training and evaluation."""
    dm_control = SMOKE_ENV[script].startswith("dm_control/")
    fixed_alpha = dm_control and algorithm(script) == "sac"
    total, eval_interval = (1100, 500) if dm_control else (600, 250)
    flags = ["--env-id", SMOKE_ENV[script], "--total-timesteps", str(total), "--batch-size", "32", "--buffer-size", "2000"]
    flags += ["--save-model", "--track", "--eval-interval", str(eval_interval), "--eval-episodes", "2"]
    if dm_control:
        flags += ["--learning-starts", "1000", "--checkpoint-interval", "1100", "--checkpoint-buffer"]
    else:
        flags += ["--learning-starts", "200", "--checkpoint-interval", "300", "--capture-video"]
    if fixed_alpha:
        flags += ["--no-autotune", "--alpha", "0.1"]
    result = run_script(script, *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    assert (run_dir / script.replace(".py", ".cleanrl_model")).stat().st_size > 0
    assert (run_dir / "args.json").exists()
    assert list((tmp_path / "wandb").glob("offline-run-*")), "--track with WANDB_MODE=offline wrote no W&B run"
    checkpoint = checkpoint_of(run_dir)
    state = checkpoint["state"]
    assert checkpoint["global_step"] == total and checkpoint["finished"]
    # torch's generator, or the JAX key, travels with the checkpoint
    assert tuple(family(script).rng_state(checkpoint).shape) == family(script).rng_state_shape
    tags = scalar_tags(run_dir)
    loss_tags = [tag for tag in LOSS_TAGS[algorithm(script)] if not (fixed_alpha and tag == "losses/alpha_loss")]
    for tag in ["charts/episodic_return", "charts/episodic_length", "charts/SPS", *loss_tags]:
        assert tag in tags, tag
    check_evaluations(run_dir, eval_interval, 2, total)
    final_returns = [value for _, value in scalars(run_dir, "eval/final_episodic_return")]
    if dm_control:
        assert run_dir.parent.name == "dm_control"  # the id's "/" makes a folder, as in videos/
        assert [value for _, value in scalars(run_dir, "charts/episodic_length")] == [1000]  # dm_control's time limit
        assert [step for step, _ in scalars(run_dir, "losses/qf1_loss")] == [1100]
        assert state["envs"] is not None  # dm_control's physics pickles: a resumed run continues the episode
        rb = state["rb"]  # Stable-Baselines3's buffer by its filled rows: one per vector step, float32 observations
        assert rb["observations"].shape == rb["next_observations"].shape == (1100, 1, 17)
        assert rb["actions"].shape == (1100, 1, 6) and rb["observations"].dtype == np.float32
        assert all(0 <= r <= 1000 for r in final_returns)
    else:
        videos = {path.parent.name for path in (tmp_path / "videos").rglob("*.mp4")}
        assert run_dir.name in videos and f"{run_dir.name}-eval" in videos, videos  # training and evaluation episodes
        assert state["rb"] is None  # no --checkpoint-buffer
        assert [step for step, _ in scalars(run_dir, "losses/qf1_values")] == [300, 400, 500, 600]
        assert all(r >= 1 for r in final_returns)
    if fixed_alpha:
        assert scalars(run_dir, "losses/alpha") == [(1100, pytest.approx(0.1))]
        assert all(state[key] is None for key in family(script).fixed_alpha_state)
        assert "losses/alpha_loss" not in tags


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("script", SCRIPTS)
def test_learns_pendulum(tmp_path, script):
    flags, threshold = LEARNING[algorithm(script)]
    result = run_script(script, "--env-id", "Pendulum-v1", *flags, "--seed", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    returns = [value for _, value in scalars(only_run_dir(tmp_path), "charts/episodic_return")]
    assert len(returns) == int(flags[1]) // 200
    assert np.mean(returns[-5:]) > threshold, returns[-10:]


# the family's resume end to end (DESIGN.md: the contract is run_state's, tested in test_run_state.py): a torch and a
# JAX script here, a third after SIGTERM below
@pytest.mark.e2e
@pytest.mark.parametrize("script", ["sac_continuous_action.py", "td3_continuous_action_jax.py"])
def test_killed_run_resumes_to_the_same_weights_on_the_users_own_env(tmp_path, script):
    """With --checkpoint-buffer the resumed run has everything the uninterrupted one had (parameters, targets,
    optimizer states, torch's generator or the JAX key, numpy's and the action space's RNGs, the envs mid-episode):
    identical weights at the end. On ContinuousCorridor with two envs, which raises on any action outside
    [-1, 3] x [0, 0.5]: random warm-up actions, the policy's and its exploration noise must all land inside."""
    flags = ["--env-id", CORRIDOR, "--num-envs", "2", "--total-timesteps", "3000", "--learning-starts", "500"]
    flags += ["--batch-size", "32", "--buffer-size", "5000", "--seed", "3", "--checkpoint-interval", "1000"]
    run_dir = check_killed_run_resumes_to_the_same_weights(
        script, [*flags, "--checkpoint-buffer", "--save-model"], tmp_path, "losses/qf1_values"
    )
    checkpoint = checkpoint_of(run_dir)
    # the buffer's filled rows, each a vector step of the two envs
    assert checkpoint["global_step"] == 3000 and checkpoint["state"]["rb"]["observations"].shape == (1500, 2, 2)
    lengths = [value for _, value in scalars(run_dir, "charts/episodic_length")]
    assert lengths and max(lengths) <= 8
    assert [step for step, _ in scalars(run_dir, "losses/qf1_values")] == list(range(600, 3001, 200))  # 100 vector steps


@pytest.mark.e2e
@pytest.mark.parametrize("script", ["ddpg_continuous_action.py"])
def test_sigterm_checkpoints_then_the_resumed_run_refills_the_buffer(tmp_path, script):
    """SIGTERM mid-run: a checkpoint (without the buffer), exit code 143 and a line saying how to resume. The resumed
    run starts from an empty buffer: it acts with its policy and makes no update for --learning-starts steps, then
    learns on; Pendulum's episodes go on where they were."""
    flags = ["--env-id", "Pendulum-v1", "--total-timesteps", "1000000", "--learning-starts", "500"]
    flags += ["--batch-size", "32", "--buffer-size", "5000"]
    run_dir, checkpoint = sigterm_mid_run(script, flags, tmp_path, delay=1.5)
    stopped = checkpoint["global_step"]
    assert 0 < stopped < 1_000_000 and checkpoint["state"]["rb"] is None and checkpoint["state"]["envs"] is not None

    end = stopped + 1000
    result = run_script(script, "--resume", str(run_dir), "--total-timesteps", str(end), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"refilling it for 500 steps, learning again after step {stopped + 500}" in result.stderr
    after = [step for step, _ in scalars(run_dir, "losses/qf1_values") if step > stopped]
    assert after == [step for step in range(100, end + 1, 100) if step > stopped + 500], (stopped, after)
    assert checkpoint_of(run_dir)["state"]["updates_start"] == stopped + 500  # the final checkpoint's
    returns = scalars(run_dir, "charts/episodic_return")
    assert [step for step, _ in returns] == list(range(200, end + 1, 200))  # Pendulum pickles: episodes go on


# every script validates the same way, torch or JAX
COMMON_BAD_INPUTS = [
    (["--env-id", "NoSuchEnv-v0"], ["--env-id NoSuchEnv-v0"]),
    (["--env-id", "off_policy_continuous_env:UnboundedActions-v0"], ["unbounded actions", "finite"]),
    (["--buffer-size", "0"], ["--buffer-size must be positive"]),
    (["--policy-frequency", "0"], ["--policy-frequency must be positive"]),
    (["--learning-starts", "-1"], ["--learning-starts must be >= 0"]),
    (["--eval-episodes", "0"], ["--eval-episodes must be positive"]),
    (["--eval-interval", "-1"], ["--eval-interval must be >= 0"]),
    (["--tau", "0"], ["--tau must be in (0, 1]"]),
    (["--gamma", "1.5"], ["--gamma must be in [0, 1]"]),
    (["--batch-size", "512", "--buffer-size", "100"], ["--batch-size 512 is larger than --buffer-size 100"]),
    (["--upload-model"], ["--upload-model uploads the model that --save-model saves"]),
    (["--seed", "-1"], ["--seed must be in [0, 2**32)"]),
    (["--seed", str(2**32)], ["--seed must be in [0, 2**32)"]),
    (["--learning-starts", "1000", "--total-timesteps", "1000"], ["--learning-starts 1000", "--total-timesteps 1000"]),
    (["--num-iterations", "10"], ["--num-iterations"]),  # computed at run time, not a flag: tyro refuses it
    (["--resume", "runs/never-ran"], ["--resume runs/never-ran: no such folder"]),
]
BAD_INPUTS = {
    "ddpg": [
        (["--exploration-noise", "-0.1"], ["--exploration-noise must be >= 0"]),
        (["--noise-clip", "0.5"], ["--noise-clip"]),  # DDPG has no target smoothing: no flag for it
    ],
    "td3": [
        (["--noise-clip", "-0.5"], ["--noise-clip must be >= 0"]),
        (["--policy-noise", "-0.2"], ["--policy-noise must be >= 0"]),
        (["--learning-rate", "0"], ["--learning-rate must be positive"]),
    ],
    "sac": [
        (["--alpha", "-0.2", "--no-autotune"], ["--alpha must be >= 0"]),
        (["--target-network-frequency", "0"], ["--target-network-frequency must be positive"]),
        (["--q-lr", "0"], ["--q-lr must be positive"]),
    ],
}


@pytest.mark.parametrize(
    "script, flags, fragments",
    [(script, *bad) for script in SCRIPTS for bad in COMMON_BAD_INPUTS + BAD_INPUTS[algorithm(script)]],
)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, script, flags, fragments):
    check_bad_input_in_process(script, flags, fragments, tmp_path, monkeypatch, capsys)


@pytest.mark.e2e
@pytest.mark.parametrize("script", SCRIPTS)
def test_discrete_env_is_one_clear_line(tmp_path, script):
    result = run_script(script, "--env-id", "CartPole-v1", cwd=tmp_path)
    assert_clean_failure(result, "Discrete action space", *family(script).dqn_scripts)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    assert not (tmp_path / "runs").exists(), "a bad input started a run"
