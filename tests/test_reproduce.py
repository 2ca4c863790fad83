"""cleanrl_utils.reproduce: a run folder alone regenerates the same run."""

import ast
import json
import shlex

import pytest
from helpers import REPO, assert_clean_failure, run_dirs, run_script, run_utility, scalars

from cleanrl_utils.reproduce import reproducing_flags


def test_args_become_the_flags_tyro_reads():
    # resume and upload_model are left out: a reproduction starts afresh and publishes nothing unless asked; a field
    # saved as None is left out too (None is its default: see the next test)
    flags = reproducing_flags(
        {
            "exp_name": "ppo",
            "anneal_lr": True,
            "norm_adv": False,
            "target_kl": None,
            "lr": 2.5e-4,
            "sizes": [64, 64],
            "resume": "runs/x",
            "upload_model": True,
        }
    )
    assert flags == [
        "--exp-name",
        "ppo",
        "--anneal-lr",
        "--no-norm-adv",
        "--lr",
        "0.00025",
        "--sizes",
        "64",
        "64",
    ]


def test_every_field_that_can_be_none_defaults_to_none():
    """What lets reproduce leave a None-valued field out: in every script's Args, a field whose type admits None has
    None as its default, so the re-run gets None without the flag."""
    for script in sorted((REPO / "cleanrl").glob("*.py")):
        [args_class] = [
            node for node in ast.parse(script.read_text()).body if isinstance(node, ast.ClassDef) and node.name == "Args"
        ]
        for field in args_class.body:
            if isinstance(field, ast.AnnAssign) and "None" in ast.unparse(field.annotation):
                assert field.value is not None and ast.unparse(field.value) == "None", (script.name, ast.unparse(field))


SAVED = {"exp_name": "ppo", "seed": 1, "save_model": True, "capture_video": False, "sizes": [64, 64], "wandb_entity": None}


@pytest.mark.parametrize(
    "overrides, expected",
    [
        # a saved value is replaced where it stands, not repeated
        (["--seed", "7"], ["--exp-name", "ppo", "--seed", "7", "--save-model", "--no-capture-video", "--sizes", "64", "64"]),
        (["--seed=7"], ["--exp-name", "ppo", "--seed=7", "--save-model", "--no-capture-video", "--sizes", "64", "64"]),
        # booleans: --x and --no-x replace each other
        (
            ["--no-save-model", "--capture-video"],
            ["--exp-name", "ppo", "--seed", "1", "--no-save-model", "--capture-video", "--sizes", "64", "64"],
        ),
        # a list takes every value up to the next flag
        (
            ["--sizes", "32", "--seed", "3"],
            ["--exp-name", "ppo", "--seed", "3", "--save-model", "--no-capture-video", "--sizes", "32"],
        ),
        # a flag not saved (or saved as None, or not reproduced) is added; given twice, the last counts
        (
            ["--wandb-entity", "me", "--upload-model", "--seed", "2", "--seed", "3"],
            [
                "--exp-name",
                "ppo",
                "--seed",
                "3",
                "--save-model",
                "--no-capture-video",
                "--sizes",
                "64",
                "64",
                "--wandb-entity",
                "me",
                "--upload-model",
            ],
        ),
    ],
)
def test_overrides_replace_the_saved_flag(overrides, expected):
    assert reproducing_flags(SAVED, overrides) == expected


@pytest.mark.slow
@pytest.mark.e2e
def test_a_finished_run_reruns_to_the_same_learning_curve(tmp_path):
    # a non-default flag of each kind (bool off, float, int) so the re-run cannot get them from the defaults
    original = run_script(
        "ppo.py",
        "--seed",
        "5",
        "--total-timesteps",
        "4096",
        "--no-anneal-lr",
        "--learning-rate",
        "0.001",
        "--update-epochs",
        "2",
        cwd=tmp_path,
    )
    assert original.returncode == 0, original.stderr[-3000:]
    [original_dir] = run_dirs(tmp_path)

    result = run_utility("reproduce", str(original_dir.relative_to(tmp_path)), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    [reproduced_dir] = [d for d in run_dirs(tmp_path) if d != original_dir]

    saved = json.loads((original_dir / "args.json").read_text())
    assert json.loads((reproduced_dir / "args.json").read_text())["args"] == saved["args"]
    returns = scalars(original_dir, "charts/episodic_return")
    assert len(returns) > 10
    assert scalars(reproduced_dir, "charts/episodic_return") == returns
    assert scalars(reproduced_dir, "losses/value_loss") == scalars(original_dir, "losses/value_loss")


@pytest.mark.e2e
def test_dry_run_prints_a_portable_command_where_overrides_replace_saved_flags(tmp_path):
    run_dir = tmp_path / "runs" / "CartPole-v1__ppo__2__1"
    run_dir.mkdir(parents=True)
    args = {
        "exp_name": "ppo",
        "seed": 2,
        "capture_video": False,
        "save_model": True,
        "env_id": "CartPole-v1",
        "total_timesteps": 500000,
        "wandb_entity": None,
        "hf_entity": None,
        "resume": None,
        "upload_model": True,
    }
    (run_dir / "args.json").write_text(json.dumps({"script": "ppo.py", "run_name": run_dir.name, "args": args}))

    result = run_utility(
        "reproduce", str(run_dir), "--dry-run", "--", "--total-timesteps", "1000", "--no-save-model", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    # what runs from the repository root on any machine: no path of this one, no `None`, each flag once
    assert shlex.split(result.stdout.strip()) == [
        "python",
        "cleanrl/ppo.py",
        "--exp-name",
        "ppo",
        "--seed",
        "2",
        "--no-capture-video",
        "--no-save-model",
        "--env-id",
        "CartPole-v1",
        "--total-timesteps",
        "1000",
    ]
    assert run_dirs(tmp_path) == [], "a dry run must not train"


@pytest.mark.e2e
def test_an_override_changes_the_rerun(tmp_path):
    run_dir = tmp_path / "runs" / "CartPole-v1__ppo__2__1"
    run_dir.mkdir(parents=True)
    args = {"exp_name": "ppo", "seed": 2, "env_id": "CartPole-v1", "total_timesteps": 500000}
    (run_dir / "args.json").write_text(json.dumps({"script": "ppo.py", "run_name": run_dir.name, "args": args}))
    result = run_utility("reproduce", str(run_dir), "--", "--total-timesteps", "1024", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    # it prints the portable command, and runs it (from any folder: this one is not the repository root)
    assert result.stdout.splitlines()[0] == (
        "python cleanrl/ppo.py --exp-name ppo --seed 2 --env-id CartPole-v1 --total-timesteps 1024"
    )
    [rerun_dir] = run_dirs(tmp_path)
    assert json.loads((rerun_dir / "args.json").read_text())["args"]["total_timesteps"] == 1024


@pytest.mark.e2e
def test_bad_run_folders_end_with_one_clear_line(tmp_path):
    assert_clean_failure(run_utility("reproduce", "nowhere", cwd=tmp_path), "nowhere", "no args.json")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "args.json").write_text(json.dumps({"script": "not_a_script.py", "run_name": "x", "args": {}}))
    assert_clean_failure(run_utility("reproduce", str(foreign), cwd=tmp_path), "not_a_script.py")
