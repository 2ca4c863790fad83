"""cleanrl_utils/rendering.py: what --capture-video chooses on a machine without a display."""

import os
import sys

import pytest

from cleanrl_utils import rendering


@pytest.fixture
def headless(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    for name in ["DISPLAY", "MUJOCO_GL", "SDL_VIDEODRIVER"]:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "dm_control/cheetah-run-v0"])
def test_mujoco_renders_through_egl_unless_told_otherwise(headless, env_id):
    headless.setattr(rendering.ctypes.util, "find_library", lambda name: f"lib{name}.so.1")
    rendering.render_offscreen(env_id)
    assert os.environ["MUJOCO_GL"] == "egl"
    headless.setenv("MUJOCO_GL", "osmesa")  # the user's choice wins
    rendering.render_offscreen(env_id)
    assert os.environ["MUJOCO_GL"] == "osmesa"


def test_pygame_renders_without_a_display_and_mujoco_is_left_alone(headless):
    rendering.render_offscreen("CartPole-v1")
    assert os.environ["SDL_VIDEODRIVER"] == "dummy" and "MUJOCO_GL" not in os.environ


def test_a_mujoco_task_nothing_can_render_is_refused(headless, capsys):
    headless.setattr(rendering.ctypes.util, "find_library", lambda name: None)
    with pytest.raises(SystemExit) as exit_info:
        rendering.render_offscreen("Hopper-v5")
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: --capture-video") and "libegl1" in err


def test_with_a_display_nothing_changes(headless):
    headless.setenv("DISPLAY", ":0")
    rendering.render_offscreen("HalfCheetah-v5")
    assert "MUJOCO_GL" not in os.environ and "SDL_VIDEODRIVER" not in os.environ
