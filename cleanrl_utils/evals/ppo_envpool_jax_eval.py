"""Evaluate a model saved by `cleanrl/ppo_atari_envpool_xla_jax.py` or `ppo_atari_envpool_xla_jax_scan.py --save-model`
(flax-serialized parameters): play whole games with the trained policy on the script's own EnvPool env, return their
scores."""

from collections.abc import Callable

import flax
import jax
import numpy as np

from cleanrl_utils.evals.envpool_common import play_games


def evaluate(
    model_path: str,
    make_env: Callable,
    env_id: str,
    eval_episodes: int,
    run_name: str,
    Model: type,
    capture_video: bool = True,
    seed: int = 0,
) -> list[float]:
    """Returns the score of each of `eval_episodes` whole games, acting with the saved (sampling) policy; its actions
    are drawn with a JAX key made from `seed`, so the same seed replays the same games."""
    envs = make_env(env_id, 1, seed % 2**31, capture_video)
    agent = Model(action_dim=envs.action_space.n)
    # the parameters' structure only (nothing computed): the file fills it
    template = jax.eval_shape(agent.init, jax.random.PRNGKey(0), np.zeros((1,) + envs.observation_space.shape, np.uint8))
    with open(model_path, "rb") as f:
        params = flax.serialization.from_bytes(template, f.read())

    @jax.jit
    def sample(params, obs, key):  # the parameters as an argument: closed over, they would be compiled in as constants
        key, action_key = jax.random.split(key)
        return jax.random.categorical(action_key, agent.apply(params, obs)[0]), key

    key = jax.random.PRNGKey(seed)

    def act(obs):
        nonlocal key
        action, key = sample(params, obs, key)
        return np.asarray(action)

    return play_games(envs, act, eval_episodes, f"videos/{run_name}" if capture_video else None)
