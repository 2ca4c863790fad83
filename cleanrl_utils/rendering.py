"""`--capture-video` on a machine without a display (a cluster node, a container, CI): the scripts and `enjoy` call
`render_offscreen(env_id)` before they make the first environment, because MuJoCo reads MUJOCO_GL only once, when it
is first imported."""

import ctypes.util
import os
import sys

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
