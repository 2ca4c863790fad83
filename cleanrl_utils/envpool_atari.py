"""What the EnvPool Atari scripts share around their training loop: the videos of `--capture-video` and the games of an
evaluation. A script imports it only inside the branch that uses it, so a copied script still trains without it.

EnvPool's autoreset (measured on envpool 1.2.5, `env_type="gymnasium"`; tests/test_envpool_atari.py checks it):

- Every episode end (`terminated` or `truncated`) returns the episode's real last observation, and the NEXT step of
  that env is a reset step: it ignores its action and returns reward 0, `terminated=False`, `truncated=False` and the
  first observation of what follows. That step is not a transition: it must reach no loss and no statistic.
- With `episodic_life=True` a lost life returns `terminated=True` (`info["terminated"] == 0`): the reset step after
  it continues the same game (same lives, `info["elapsed_step"]` not advanced).
- A game over (`info["terminated"] == 1`, the last life lost) or a truncation (`truncated`, at `max_episode_steps`
  agent steps) ends the whole game: the reset step after it starts a new one (`info["elapsed_step"] == 0`).
- `info["reward"]` is the game's own reward, before `reward_clip`; `info["lives"]` the lives left.
"""

import os

import numpy as np
from gymnasium.utils.save_video import capped_cubic_video_schedule, save_video

FPS = 15  # one frame per agent step: the ALE's 60 frames a second, 4 frames a step


def game_over(info: dict, truncated: np.ndarray) -> np.ndarray:
    """Which envs ended a whole game at this step (the last life lost, or truncated): the game's statistics end here."""
    return info["terminated"].astype(bool) | truncated


class GameRecorder:
    """`--capture-video` for an EnvPool env made with `render_mode="rgb_array"`: the screen of env 0 (210 x 160 RGB, the
    emulator's own frame at each agent step), whole games, written to `folder/rl-video-episode-{n}.mp4` on Gymnasium's
    RecordVideo schedule (games 0, 1, 8, 27, ..., 1000, then every 1000th)."""

    def __init__(self, envs, folder: str):
        self.envs, self.folder, self.game, self.frames = envs, folder, 0, []
        os.makedirs(folder, exist_ok=True)
        self.frames.append(self._frame())

    def _frame(self) -> np.ndarray:
        return np.asarray(self.envs.render(env_ids=[0]))[0]

    def after_step(self, ended: np.ndarray):
        """Call after every step of the envs with `game_over(...)`: env 0's game that ended is written out."""
        if capped_cubic_video_schedule(self.game):
            self.frames.append(self._frame())
        if ended[0]:
            if capped_cubic_video_schedule(self.game):
                save_video(self.frames, self.folder, episode_trigger=lambda _: True, episode_index=self.game, fps=FPS)
            self.game += 1
            self.frames = []  # the reset step that follows shows the new game's first frame
