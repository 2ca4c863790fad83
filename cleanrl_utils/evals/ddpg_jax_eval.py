"""Evaluate a model saved by `cleanrl/ddpg_continuous_action_jax.py` or `cleanrl/td3_continuous_action_jax.py
--save-model`: play episodes with the deterministic actor (no exploration noise), return their scores."""

from collections.abc import Callable

import flax
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from cleanrl_utils.evals.common import make_eval_envs, play_episodes


def load_actor(model_path: str, Model: type, envs: gym.vector.VectorEnv):
    """The script's actor class with its tanh rescaled onto the env's action bounds (the model file holds only the
    flax-serialized parameters), and those parameters."""
    action_space = envs.single_action_space
    high, low = action_space.high.flatten(), action_space.low.flatten()
    actor = Model(
        action_dim=int(np.prod(action_space.shape)),
        action_scale=jnp.asarray((high - low) / 2.0, dtype=jnp.float32),
        action_bias=jnp.asarray((high + low) / 2.0, dtype=jnp.float32),
    )
    # the nested dict of arrays as saved, checked against the shapes actor.init would make (jax.eval_shape traces it
    # without compiling: a real init costs seconds of compilation on a CPU)
    with open(model_path, "rb") as f:
        params = flax.serialization.msgpack_restore(f.read())
    obs = jax.ShapeDtypeStruct((1, int(np.prod(envs.single_observation_space.shape))), jnp.float32)
    template = jax.eval_shape(actor.init, jax.ShapeDtypeStruct((2,), jnp.uint32), obs)
    expected, saved = jax.tree.map(lambda x: x.shape, template), jax.tree.map(np.shape, params)
    if saved != expected:
        raise ValueError(f"{model_path} holds parameters {saved}, but {Model.__name__} on this env has {expected}")
    return actor, params


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
    """Returns the undiscounted return of each of `eval_episodes` full episodes, acting with the saved actor's action
    (already rescaled to the env's bounds)."""
    envs = make_eval_envs(make_env, env_id, capture_video, run_name)
    actor, params = load_actor(model_path, Model, envs)
    actor_fn = jax.jit(actor.apply)

    def act(obs):
        return np.asarray(actor_fn(params, obs.astype(np.float32))).reshape(envs.action_space.shape)

    return play_episodes(envs, act, eval_episodes, seed)
