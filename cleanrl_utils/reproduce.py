"""Re-run a finished run from its folder alone: same script, same flags, same seed.

    uv run python -m cleanrl_utils.reproduce runs/CartPole-v1__ppo__1__1764480000
    uv run python -m cleanrl_utils.reproduce runs/<run> --dry-run              # print the command only
    uv run python -m cleanrl_utils.reproduce runs/<run> -- --total-timesteps 1000   # flags after `--` replace saved ones

Every script writes `args.json` into its run folder ({"script", "run_name", "args"}); this turns those Args back into
command-line flags, every one of them spelled out, so the re-run does not depend on the script's current defaults
(a field saved as None is left out: None is the default of every such field). The command it prints,
`python cleanrl/<script>.py ...`, runs from the repository root on any machine; the re-run itself uses this
process's Python. A flag given after `--` replaces the saved value of that flag (`--x` and `--no-x` replace each
other); a flag the run did not save is added. The new run gets its own folder under `runs/` (relative to the working
directory, as any run).
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
NOT_REPRODUCED = {"resume", "upload_model", "config"}


def args_to_flags(args: dict) -> list[str]:
    """Args -> the tyro flags that set each of them (booleans as --flag / --no-flag, None as `None`)."""
    flags = []
    for name, value in args.items():
        flags += flag_tokens(name, value)
    return flags


def flag_tokens(name: str, value) -> list[str]:
    """One field's flag as tyro reads it: `--flag value`, `--flag v1 v2` for a list, `--flag` / `--no-flag`."""
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return [flag if value else "--no-" + name.replace("_", "-")]
    if isinstance(value, (list, tuple)):
        return [flag, *map(str, value)]
    return [flag, str(value)]


def reproducing_flags(args: dict, overrides: list[str] = ()) -> list[str]:
    """The flags that re-run a run from its saved Args: every field but those not reproduced and those saved as None
    (every field that can be None defaults to None, so leaving it out sets it). `overrides`, flags as typed, replace
    the saved value of the flags they name, in place; the rest are added at the end."""
    flags = {
        name: flag_tokens(name, value) for name, value in args.items() if name not in NOT_REPRODUCED and value is not None
    }
    saved_bools = {name for name, value in args.items() if isinstance(value, bool)}
    for position, (name, tokens) in enumerate(split_flags(overrides, saved_bools)):
        flags[name if name is not None else position] = tokens  # a saved flag keeps its place; a new one goes last
    return [token for tokens in flags.values() for token in tokens]


def split_flags(tokens: list[str], bools: set[str]) -> list[tuple[str | None, list[str]]]:
    """Flags as typed -> (the field each sets, its tokens): `--total-timesteps 1000` sets total_timesteps,
    `--no-capture-video` sets capture_video (when capture_video is a boolean), `--x=1` sets x. Tokens before the first
    flag are kept under None."""
    groups: list[tuple[str | None, list[str]]] = []
    for token in tokens:
        if token.startswith("--") and len(token) > 2:
            name = token[2:].split("=", 1)[0].replace("-", "_")
            if name.startswith("no_") and name[3:] in bools:
                name = name[3:]
            groups.append((name, [token]))
        elif groups:
            groups[-1][1].append(token)
        else:
            groups.append((None, [token]))
    return groups


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
    """The portable command, `python cleanrl/<script>.py <flags>`, to run from the repository root."""
    saved = read_run(run_dir)
    if not (CLEANRL_SCRIPTS / saved["script"]).is_file():
        raise ValueError(f"{run_dir} was made by {saved['script']}, which is not in {CLEANRL_SCRIPTS}")
    return ["python", f"cleanrl/{saved['script']}", *reproducing_flags(saved["args"], overrides)]


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
    if not cli.dry_run:  # the same command, with this Python and the script found wherever the working directory is
        _, script, *flags = command
        sys.exit(subprocess.run([sys.executable, str(CLEANRL_SCRIPTS.parent / script), *flags], check=False).returncode)


if __name__ == "__main__":
    main()
