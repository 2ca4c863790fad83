"""`--capture-video` on a machine without a display (a cluster node, a container, CI): the scripts and `enjoy` call
`render_offscreen(env_id)` before they make the first environment, because MuJoCo reads MUJOCO_GL only once, when it
is first imported."""

import ctypes.util
import os
import sys
import warnings

import gymnasium as gym


def render_offscreen(env_id: str, mujoco: bool = False):
    """Without a display, MuJoCo and dm_control tasks render through EGL, and pygame (classic control, Box2D) through
    SDL's dummy video driver, which needs no display and prints no error about a missing one. What the user set in
    MUJOCO_GL or SDL_VIDEODRIVER wins. A MuJoCo task that nothing can render off-screen is refused: one line, exit 2.
    `mujoco=True` says so for an id Gymnasium does not know (Brax's environments, drawn by MuJoCo's renderer)."""
    if not sys.platform.startswith("linux") or os.environ.get("DISPLAY"):
        return
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    if "MUJOCO_GL" in os.environ or not (mujoco or renders_with_mujoco(env_id)):
        return
    if ctypes.util.find_library("EGL") is None:
        print(
            "error: --capture-video: MuJoCo renders without a display through EGL (Debian/Ubuntu: apt-get install "
            "libegl1) or OSMesa (apt-get install libosmesa6, then set MUJOCO_GL=osmesa); neither was found",
            file=sys.stderr,
        )
        sys.exit(2)
    os.environ["MUJOCO_GL"] = "egl"


def renders_with_mujoco(env_id: str) -> bool:
    if env_id.startswith("dm_control/"):
        return True
    try:
        return "mujoco" in str(gym.spec(env_id).entry_point)
    except (gym.error.Error, ModuleNotFoundError):  # an id gymnasium does not know: the script's own check names it
        return False


class EpisodeVideos:
    """`--capture-video` for an env that Gymnasium's RecordVideo cannot wrap (Procgen's gym3 vector env): one env's
    frames, whole episodes written to `folder/rl-video-episode-{n}.mp4` on RecordVideo's schedule (episodes 0, 1, 8,
    27, ..., 1000, then every 1000th). Call `add(frame, new_episode)` after each step, `new_episode` where the frame is
    already the next episode's first; `close()` writes the episode in progress as far as it went, as RecordVideo does."""

    def __init__(self, folder: str, first_frame, fps: int = 15):
        with warnings.catch_warnings():  # Procgen's imageio-ffmpeg 0.3 warns that it imports pkg_resources
            warnings.filterwarnings("ignore", "pkg_resources is deprecated", UserWarning)
            from gymnasium.utils.save_video import capped_cubic_video_schedule  # imports moviepy: only when recording

        os.makedirs(folder, exist_ok=True)
        self.folder, self.fps, self.episode, self.scheduled = folder, fps, 0, capped_cubic_video_schedule
        self.frames = [first_frame]

    def add(self, frame, new_episode: bool):
        if new_episode:
            self._write()
            self.episode += 1
        if self.scheduled(self.episode):
            self.frames.append(frame)

    def _write(self):
        from gymnasium.utils.save_video import save_video

        if len(self.frames) > 1:  # not the lone first frame of an episode the env closes on
            save_video(self.frames, self.folder, episode_trigger=lambda _: True, episode_index=self.episode, fps=self.fps)
        self.frames = []

    def close(self):
        self._write()
