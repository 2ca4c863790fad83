"""`--config FILE` (cleanrl_utils/config.py, through run_state.resolve_args): a file's values become the defaults, the
flags on the command line win, and a file that does not fit the script is refused with one line, exit code 2. The
sweeps' own files (benchmark/configs) fit the scripts they configure. The end-to-end use is in test_value_based.py."""

import dataclasses
import json
import pathlib
import re
import sys

import pytest
from helpers import REPO, load_script, refused

from cleanrl_utils import run_state
from cleanrl_utils.config import load_config

SCRIPT = "stand_in.py"


@dataclasses.dataclass
class Args:
    learning_rate: float = 2.5e-4
    """a float"""
    num_envs: int = 4
    """an int"""
    anneal_lr: bool = True
    """a bool"""
    target_kl: float | None = None
    """an optional float"""
    env_id: str = "CartPole-v1"
    """a str"""
    seed: int = 1
    """the seed"""
    resume: str | None = None
    """a run folder to continue"""
    config: str | None = None
    """the config file"""


def resolved(monkeypatch, *argv: str, args_class=Args, script=SCRIPT):
    """What a script's `args, checkpoint = resolve_args(Args, tyro.cli(Args), __file__)` gives for this command line."""
    import tyro

    monkeypatch.setattr(sys, "argv", [script, *argv])
    args, checkpoint = run_state.resolve_args(args_class, tyro.cli(args_class), script)
    assert checkpoint is None
    return args


def test_a_flat_file_sets_the_defaults_and_flags_win(tmp_path, monkeypatch):
    config = tmp_path / "config.yaml"
    config.write_text("learning_rate: 1\nnum-envs: 8\nanneal_lr: false\ntarget_kl: 0.02\nseed: 5\n")
    args = resolved(monkeypatch, "--config", str(config), "--num-envs", "2", "--anneal-lr")
    assert args == Args(learning_rate=1.0, num_envs=2, anneal_lr=True, target_kl=0.02, seed=5, config=str(config))
    assert isinstance(args.learning_rate, float)  # YAML's 1 is an int: the field's type is kept


def test_a_file_of_sections_gives_the_section_of_the_env(tmp_path, monkeypatch, capsys):
    config = tmp_path / "tuned.yaml"
    config.write_text("CartPole-v1: &classic\n  num_envs: 8\nAcrobot-v1:\n  <<: *classic\n  learning_rate: 0.001\n")
    assert resolved(monkeypatch, "--config", str(config)).num_envs == 8  # the script's default env
    args = resolved(monkeypatch, "--config", str(config), "--env-id", "Acrobot-v1")
    assert (args.env_id, args.num_envs, args.learning_rate) == ("Acrobot-v1", 8, 0.001)
    err = refused(capsys, lambda: resolved(monkeypatch, "--config", str(config), "--env-id", "Pendulum-v1"))
    assert "no section for --env-id Pendulum-v1; its sections: CartPole-v1, Acrobot-v1" in err


def test_a_runs_args_json_starts_a_new_run_like_it(tmp_path, monkeypatch, capsys):
    saved = {"learning_rate": 0.001, "num_envs": 2, "anneal_lr": False, "target_kl": None, "env_id": "Acrobot-v1"}
    saved |= {"seed": 3, "resume": "runs/old", "config": "old.yaml"}
    args_json = tmp_path / "args.json"
    args_json.write_text(json.dumps({"script": SCRIPT, "run_name": "Acrobot-v1__stand_in__3__1", "args": saved}))
    args = resolved(monkeypatch, "--config", str(args_json), "--seed", "4")
    # its values, but not its resume (that would continue the old run) nor its own config file
    assert args == Args(learning_rate=0.001, num_envs=2, anneal_lr=False, env_id="Acrobot-v1", seed=4, config=str(args_json))
    err = refused(capsys, lambda: resolved(monkeypatch, "--config", str(args_json), script="other.py"))
    assert f"--config {args_json}: that run was made by stand_in.py, not other.py" in err


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("learning_rat: 0.1\n", "stand_in.py has no field 'learning_rat' (did you mean 'learning_rate'?)"),
        ("num_envs: 2.5\n", "num_envs must be int, got 2.5"),
        ("num_envs: true\n", "num_envs must be int, got True"),
        ("anneal_lr: 1\n", "anneal_lr must be bool, got 1"),
        ("target_kl: high\n", "target_kl must be float or null, got 'high'"),
        ("- 1\n- 2\n", "expected a mapping of fields to values, got list"),
        ("learning_rate: [\n", "cannot be read (ParserError"),
    ],
)
def test_a_file_that_does_not_fit_is_one_clear_line(tmp_path, monkeypatch, capsys, content, fragment):
    config = tmp_path / "config.yaml"
    config.write_text(content)
    assert fragment in refused(capsys, lambda: resolved(monkeypatch, "--config", str(config)))


def test_a_missing_file_and_config_with_resume_are_refused(tmp_path, monkeypatch, capsys):
    err = refused(capsys, lambda: resolved(monkeypatch, "--config", str(tmp_path / "nowhere.yaml")))
    assert "nowhere.yaml: cannot be read (FileNotFoundError" in err
    err = refused(capsys, lambda: resolved(monkeypatch, "--config", "c.yaml", "--resume", str(tmp_path)))
    assert "--config and --resume together" in err


def sweeps() -> list[tuple[str, str, list[str]]]:
    """(sweep script, the cleanrl script it runs, its env ids) for each benchmark/*.sh that reads a config file."""
    found = []
    for sweep in sorted((REPO / "benchmark").glob("*.sh")):
        commands = [line for line in sweep.read_text().splitlines() if line.startswith("uv run")]  # not the comments
        if commands and "--config" in commands[0]:
            text = commands[0]
            script = re.search(r"python cleanrl/(\w+)\.py", text).group(1)
            env_ids = re.search(r"--env-ids ((?:[\w/-]+ )+)--", text).group(1).split()
            found.append((sweep.name, script, env_ids))
    return found


@pytest.mark.parametrize("sweep, script, env_ids", sweeps(), ids=[sweep for sweep, _, _ in sweeps()])
def test_each_sweep_config_fits_its_script_for_every_env_it_sweeps(sweep, script, env_ids):
    config = REPO / "benchmark" / "configs" / f"{script}.yaml"
    assert f"--config benchmark/configs/{script}.yaml" in (REPO / "benchmark" / sweep).read_text()
    args_class = load_script(script).Args
    algorithm_fields = [field.name for field in dataclasses.fields(args_class)]
    algorithm_fields = algorithm_fields[: algorithm_fields.index("exp_name")]
    for env_id in env_ids:
        values = load_config(args_class, str(config), env_id, f"{script}.py")
        # the file pins every hyperparameter of the algorithm, so a change of a default does not change the sweep
        assert set(algorithm_fields) <= values.keys(), (env_id, set(algorithm_fields) - values.keys())


def test_every_sweep_reads_a_config_file():
    learning_sweeps = [path for path in (REPO / "benchmark").glob("*.sh") if not path.name.startswith("speed_")]
    assert len(sweeps()) == len(learning_sweeps) > 20
    assert all(pathlib.Path(REPO / "benchmark" / "configs" / f"{script}.yaml").is_file() for _, script, _ in sweeps())
