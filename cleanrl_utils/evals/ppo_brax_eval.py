"""Evaluate a model saved by `cleanrl/ppo_continuous_action_brax_jax.py --save-model` (flax's msgpack of the parameters,
the observation statistics and the env's backend and episode length): play episodes of the Brax env with the policy's
mean action, return their scores. Brax envs are no Gymnasium envs, so the episodes are played here, all at once (one
env copy each, vmapped) in one compiled scan, rather than by evals/common.py's loop."""

import functools
import os
from collections.abc import Callable

import flax
import jax
import jax.numpy as jnp
import numpy as np


@functools.lru_cache
def compiled_player(make_env: Callable, env_id: str, backend: str, episode_length: int, Model: type):
    """The env and the jitted `play(params, obs_stats, keys) -> (returns, env 0's physics states, env 0 running)`,
    compiled once per process: the evaluations of --eval-interval reuse it."""
    env = make_env(env_id, backend)
    agent = Model(action_dim=env.action_size)

    def play(params, stats, keys):
        def step(carry, _):
            state, returns, running = carry
            obs = jnp.clip(
                (state.obs - stats["mean"]) / jnp.sqrt(stats["var"] + stats["epsilon"]), -stats["clip"], stats["clip"]
            )
            state = jax.vmap(env.step)(state, jnp.clip(agent.apply(params, obs)[0], -1, 1))
            returns = returns + jnp.where(running, state.reward, 0.0)  # an ended episode's copy steps on, unscored
            running = running & (state.done == 0)
            return (state, returns, running), (jax.tree.map(lambda x: x[0], state.pipeline_state), running[0])

        state = jax.vmap(env.reset)(keys)
        start = (state, jnp.zeros(len(keys)), jnp.ones(len(keys), bool))
        # an episode is truncated at the training's episode length, as in training
        (_, returns, _), (trajectory, running) = jax.lax.scan(step, start, length=episode_length)
        return returns, trajectory, running

    return env, jax.jit(play)


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
    """Returns the undiscounted return of each of `eval_episodes` episodes, acting with the Gaussian's mean (no
    sampling) on observations normalized with the statistics saved with the model, frozen. Episode i starts from the
    key `fold_in(PRNGKey(seed), i)`: the same seed replays the same episodes, whatever their count. With
    `capture_video`, the first episode is rendered by MuJoCo into `videos/{run_name}/rl-video-episode-0.mp4`."""
    with open(model_path, "rb") as f:
        saved = flax.serialization.msgpack_restore(f.read())
    env, play = compiled_player(make_env, env_id, saved["backend"], int(saved["episode_length"]), Model)
    stats = dict(mean=saved["obs_rms"]["mean"], var=saved["obs_rms"]["var"], epsilon=saved["epsilon"], clip=saved["obs_clip"])
    keys = jnp.stack([jax.random.fold_in(jax.random.PRNGKey(seed), i) for i in range(eval_episodes)])
    returns, trajectory, running = jax.device_get(play(saved["params"], stats, keys))
    if capture_video:
        from gymnasium.utils.save_video import save_video

        length = int(running.sum()) + 1  # the steps of episode 0, its last included
        states = [jax.tree.map(lambda x, t=t: x[t], trajectory) for t in range(min(length, len(running)))]
        frames = env.render(states, height=240, width=320)
        folder = f"videos/{run_name}"
        os.makedirs(folder, exist_ok=True)
        save_video(frames, folder, episode_trigger=lambda _: True, fps=int(round(1 / float(env.dt))))
    return [float(r) for r in np.asarray(returns)]
