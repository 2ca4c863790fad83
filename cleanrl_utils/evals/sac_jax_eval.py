"""Evaluate a model saved by `cleanrl/sac_continuous_action_jax.py --save-model`: play episodes with the policy's
deterministic action, tanh of the Gaussian's mean rescaled to the env's bounds; return their scores."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from cleanrl_utils.evals.common import make_eval_envs, play_episodes
from cleanrl_utils.evals.ddpg_jax_eval import load_actor


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
    """Returns the undiscounted return of each of `eval_episodes` full episodes, acting with the saved actor's mean
    action (no sampling: the evaluation is deterministic, as in the SAC paper's evaluation)."""
    envs = make_eval_envs(make_env, env_id, capture_video, run_name)
    actor, params = load_actor(model_path, Model, envs)

    @jax.jit
    def deterministic_action(params, obs):
        mean, _ = actor.apply(params, obs)
        return jnp.tanh(mean) * actor.action_scale + actor.action_bias

    def act(obs):
        return np.asarray(deterministic_action(params, obs.astype(np.float32))).reshape(envs.action_space.shape)

    return play_episodes(envs, act, eval_episodes, seed)
