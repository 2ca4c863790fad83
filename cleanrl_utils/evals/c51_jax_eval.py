"""Evaluate a model saved by `cleanrl/c51_jax.py` or `c51_atari_jax.py --save-model`: play episodes epsilon-greedily,
return their scores."""

from collections.abc import Callable

import flax
import jax
import jax.numpy as jnp
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
    """Returns the undiscounted return of each of `eval_episodes` full episodes, acting greedily on the expected
    return of each action's distribution with probability 1 - epsilon."""
    envs = make_eval_envs(make_env, env_id, capture_video, run_name)
    with open(model_path, "rb") as f:
        saved = flax.serialization.msgpack_restore(f.read())  # {"support": {n_atoms, v_min, v_max}, "params": ...}
    support, params = saved["support"], saved["params"]
    q_network = Model(action_dim=envs.single_action_space.n, n_atoms=int(support["n_atoms"]))
    atoms = jnp.linspace(float(support["v_min"]), float(support["v_max"]), num=int(support["n_atoms"]))

    @jax.jit
    def greedy_actions(params, obs):
        pmfs = jax.nn.softmax(q_network.apply(params, obs), axis=-1)
        return (pmfs * atoms).sum(axis=-1).argmax(axis=-1)

    def greedy(obs):
        return np.asarray(greedy_actions(params, obs.astype(np.float32)))

    return play_episodes(envs, epsilon_greedy(greedy, epsilon, envs.single_action_space.n, seed), eval_episodes, seed)
