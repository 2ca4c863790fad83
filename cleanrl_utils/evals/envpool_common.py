"""What the evaluations of the EnvPool scripts share: whole games played on an EnvPool env (the script's own
make_env, one env), scored by the game's own rewards as the training curve is."""

from collections.abc import Callable

import numpy as np

from cleanrl_utils.envpool_atari import GameRecorder, game_over


def play_games(
    envs, act: Callable, eval_episodes: int, video_folder: str | None = None, episode_ended: Callable | None = None
) -> list[float]:
    """Step `envs` with `act(obs) -> actions` until `eval_episodes` games are over; their scores (all lives, the
    unclipped rewards of `info["reward"]`). With `video_folder`, env 0's games are recorded there. `episode_ended(mask)`,
    if given, hears after each step which envs' episodes ended, a lost life included (a recurrent policy resets its
    state at the observation after EnvPool's reset step that follows, as in training)."""
    obs, _ = envs.reset()
    recorder = GameRecorder(envs, video_folder) if video_folder else None
    scores, running = [], np.zeros(envs.config["num_envs"])
    while len(scores) < eval_episodes:
        obs, _, terminated, truncated, info = envs.step(np.asarray(act(obs)))
        running += info["reward"]  # 0 on EnvPool's reset step
        ended = game_over(info, truncated)
        if recorder:
            recorder.after_step(ended)
        if episode_ended is not None:
            episode_ended(terminated | truncated)
        for i in np.flatnonzero(ended):
            scores.append(float(running[i]))
            running[i] = 0.0
    envs.close()
    return scores[:eval_episodes]
