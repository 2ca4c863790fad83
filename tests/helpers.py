"""What the script tests share: run a cleanrl script as a user would, and read back what it logged."""

import os
import pathlib
import subprocess
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

REPO = pathlib.Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"


def script_env(**extra) -> dict:
    """The user's environment, offline W&B, and the tests folder importable for `module:EnvName-v0` ids."""
    env = dict(os.environ, WANDB_MODE="offline", PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def run_script(script: str, *flags: str, cwd: pathlib.Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python cleanrl/<script> <flags>` from `cwd` (so runs/ and videos/ land there); fails the test on a timeout."""
    return subprocess.run(
        [sys.executable, str(REPO / "cleanrl" / script), *flags],
        cwd=cwd,
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_script(script: str, *flags: str, cwd: pathlib.Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(REPO / "cleanrl" / script), *flags],
        cwd=cwd,
        env=script_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_dirs(cwd: pathlib.Path) -> list[pathlib.Path]:
    """The run folders a script wrote under cwd/runs (env ids may hold a `/`, so search for event files)."""
    return sorted({p.parent for p in (cwd / "runs").rglob("events.out.tfevents.*")})


def only_run_dir(cwd: pathlib.Path) -> pathlib.Path:
    dirs = run_dirs(cwd)
    assert len(dirs) == 1, f"expected one run folder, found {dirs}"
    return dirs[0]


def scalars(run_dir: pathlib.Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) pairs of a TensorBoard tag, read with TensorBoard's own reader (which honours purge_step)."""
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    if tag not in accumulator.Tags()["scalars"]:
        return []
    return [(event.step, event.value) for event in accumulator.Scalars(tag)]


def scalar_tags(run_dir: pathlib.Path) -> set[str]:
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return set(accumulator.Tags()["scalars"])


def assert_clean_failure(result: subprocess.CompletedProcess, *expected_fragments: str):
    """Bad input: exit code 2, one clear line on stderr naming the problem, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr
    for fragment in expected_fragments:
        assert fragment in result.stderr, (fragment, result.stderr)
