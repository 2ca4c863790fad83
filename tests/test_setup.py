"""The project's set-up: what pyproject promises, what the lock resolves, and CI running the README's command."""

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO, load_script

if sys.version_info >= (3, 11):
    import tomllib
else:  # pyproject allows Python 3.10, whose standard library has no TOML parser yet
    import tomli as tomllib

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


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]])
def test_the_code_passes_ruff(command):
    """The lint rules and format pyproject sets, with the ruff version the dev group pins."""
    run = subprocess.run([sys.executable, "-m", "ruff", *command, "."], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


# CONTRIBUTING.md (the anatomy of a script): the fields every script's Args has, same names everywhere (tools such as reproduce and enjoy rely on them)
COMMON_ARGS = [
    "exp_name",
    "seed",
    "torch_deterministic",
    "cuda",
    "track",
    "wandb_project_name",
    "wandb_entity",
    "capture_video",
    "save_model",
    "upload_model",
    "hf_entity",
    "env_id",
    "total_timesteps",
]


@pytest.mark.parametrize("script", sorted(path.stem for path in (REPO / "cleanrl").glob("*.py")))
def test_every_script_has_the_common_args(script):
    fields = [field.name for field in dataclasses.fields(load_script(script).Args)]
    # JAX picks its device itself and has no cudnn switch: its scripts have no --cuda / --torch-deterministic
    expected = [name for name in COMMON_ARGS if not ("_jax" in script and name in {"cuda", "torch_deterministic"})]
    assert [name for name in fields if name in expected] == expected, set(expected) - set(fields)


def test_every_script_has_an_evaluator_and_its_model_class():
    """enjoy and --save-model's evaluation find each script's evaluator module and the network class it loads."""
    import ast

    from cleanrl_utils.enjoy import EVALUATORS

    scripts = {path.stem: path for path in (REPO / "cleanrl").glob("*.py")}
    assert set(EVALUATORS) == set(scripts), set(EVALUATORS) ^ set(scripts)
    for script, (module, model_class, _) in EVALUATORS.items():
        assert (REPO / f"{module.replace('.', '/')}.py").is_file(), module
        classes = {node.name for node in ast.walk(ast.parse(scripts[script].read_text())) if isinstance(node, ast.ClassDef)}
        assert model_class in classes, (script, model_class)
