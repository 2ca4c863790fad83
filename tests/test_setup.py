"""The project's set-up: what pyproject promises, what the lock resolves, and CI running the README's command."""

import tomllib

import numpy as np
from helpers import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_every_environment_family_has_its_extra():
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    families = {"atari", "mujoco", "dm_control", "envpool", "jax", "pettingzoo", "procgen", "optuna", "cloud", "docs"}
    assert families <= extras, families - extras


def test_procgen_is_isolated_and_the_rest_keeps_numpy_2():
    procgen = PYPROJECT["project"]["optional-dependencies"]["procgen"]
    assert "numpy<2" in procgen
    conflicting = {extra for pair in PYPROJECT["tool"]["uv"]["conflicts"] for item in pair for extra in [item["extra"]]}
    assert conflicting == {"procgen", "atari", "mujoco", "dm_control", "envpool", "jax", "pettingzoo"}
    # the locked default environment (the one these tests run in) has numpy 2
    assert int(np.__version__.split(".")[0]) >= 2, np.__version__


def test_ci_runs_exactly_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    readme_command = next(line.split("#")[0].strip() for line in readme.splitlines() if line.startswith("uv run pytest"))
    ci_lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert ci_lines[-1] == readme_command == "uv run pytest"
