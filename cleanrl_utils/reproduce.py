"""Re-run a finished run from its folder alone: same script, same flags, same seed.

    uv run python -m cleanrl_utils.reproduce runs/CartPole-v1__ppo__1__1764480000
    uv run python -m cleanrl_utils.reproduce runs/<run> --dry-run              # print the command only
    uv run python -m cleanrl_utils.reproduce runs/<run> -- --total-timesteps 1000   # flags after `--` override

Every script writes `args.json` into its run folder ({"script", "run_name", "args"}); this turns those Args back into
command-line flags, every one of them spelled out, so the re-run does not depend on the script's current defaults.
The new run gets its own folder under `runs/` (relative to the working directory, as any run).
"""

import json
import pathlib
import shlex
import subprocess
import sys
from dataclasses import dataclass, field

import tyro

# the scripts sit beside this package in the repository
CLEANRL_SCRIPTS = pathlib.Path(__file__).resolve().parents[1] / "cleanrl"
# `resume` points at the original run's checkpoint: a reproduction starts from scratch; and it does not overwrite the
# model the original run published (add `-- --upload-model` to publish it)
NOT_REPRODUCED = {"resume", "upload_model"}


def args_to_flags(args: dict) -> list[str]:
    """Args -> the tyro flags that set each of them (booleans as --flag / --no-flag, None as `None`)."""
    flags = []
    for name, value in args.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + name.replace("_", "-"))
        elif isinstance(value, (list, tuple)):
            flags += [flag, *map(str, value)]
        else:
            flags += [flag, str(value)]
    return flags


def reproducing_flags(args: dict) -> list[str]:
    """The flags that re-run a run from its saved Args."""
    return args_to_flags({name: value for name, value in args.items() if name not in NOT_REPRODUCED})


def read_run(run_dir: pathlib.Path) -> dict:
    """The run's args.json, or a ValueError saying why this folder cannot be reproduced."""
    args_path = run_dir / "args.json"
    if not args_path.is_file():
        raise ValueError(f"{run_dir}: no args.json there (is it a run folder written by a cleanrl script?)")
    saved = json.loads(args_path.read_text())
    if not {"script", "args"} <= saved.keys():
        raise ValueError(f"{args_path}: expected the keys 'script' and 'args', found {sorted(saved)}")
    return saved


def reproduce_command(run_dir: pathlib.Path, overrides: list[str] = ()) -> list[str]:
    saved = read_run(run_dir)
    script = CLEANRL_SCRIPTS / saved["script"]
    if not script.is_file():
        raise ValueError(f"{run_dir} was made by {saved['script']}, which is not in {CLEANRL_SCRIPTS}")
    # tyro keeps the last value of a repeated flag, so overrides win
    return [sys.executable, str(script), *reproducing_flags(saved["args"]), *overrides]


@dataclass
class Cli:
    run_dir: tyro.conf.Positional[pathlib.Path]
    """the run folder to reproduce (holds args.json)"""
    dry_run: bool = False
    """print the command without running it"""
    overrides: tyro.conf.Positional[list[str]] = field(default_factory=list)
    """flags after `--` that replace the saved ones, e.g. `-- --total-timesteps 1000`"""


def main():
    cli = tyro.cli(Cli)
    try:
        command = reproduce_command(cli.run_dir, cli.overrides)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(shlex.join(command), flush=True)
    if not cli.dry_run:
        sys.exit(subprocess.run(command, check=False).returncode)


if __name__ == "__main__":
    main()
