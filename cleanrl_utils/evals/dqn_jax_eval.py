"""Evaluate a model saved by `cleanrl/dqn_jax.py`, `dqn_atari_jax.py` or `qdagger_dqn_atari_jax_impalacnn.py`
`--save-model`: play episodes epsilon-greedily, return their scores."""

from collections.abc import Callable

import flax
import jax
import numpy as np

from cleanrl_utils.evals.common import epsilon_greedy, make_eval_envs, play_episodes


def evaluate(
    model_path: str,
    make_env: Callable,
    env_id: str,
    eval_episodes: int,
    run_name: str,
    Model: type,
    epsilon: float = 0.05,
    capture_video: bool = True,
    seed: int = 0,
) -> list[float]:
    """Returns the undiscounted return of each of `eval_episodes` full episodes, acting greedily on the saved
    Q-network with probability 1 - epsilon."""
    envs = make_eval_envs(make_env, env_id, capture_video, run_name)
    q_network = Model(action_dim=envs.single_action_space.n)
    template = q_network.init(jax.random.PRNGKey(seed), envs.single_observation_space.sample()[None].astype(np.float32))
    with open(model_path, "rb") as f:
        params = flax.serialization.from_bytes(template, f.read())
    q_values_fn = jax.jit(q_network.apply)

    def greedy(obs):
        return np.asarray(q_values_fn(params, obs.astype(np.float32)).argmax(axis=1))

    return play_episodes(envs, epsilon_greedy(greedy, epsilon, envs.single_action_space.n, seed), eval_episodes, seed)
