"""What --eval-interval costs: a script's whole-process wall time with and without evaluations during training, the
two run alternately on the same seed, several rounds.

    uv run python benchmark/evaluation_cost.py --script dqn.py --rounds 2 -- --total-timesteps 100000
    uv run python benchmark/evaluation_cost.py --script ppo.py --eval-interval 10000 -- --total-timesteps 200000

Flags after `--` go to both runs. The runs write into a temporary folder, removed at the end.
"""

import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

SCRIPTS = Path(__file__).resolve().parents[1] / "cleanrl"


@dataclass
class Cli:
    script: str = "dqn.py"
    """the script in cleanrl/ to time"""
    eval_interval: int = 10000
    """the --eval-interval of the evaluated runs"""
    eval_episodes: int = 10
    """the --eval-episodes of the evaluated runs"""
    rounds: int = 2
    """pairs of runs (one without evaluations, one with), alternating"""


def timed_run(command: list[str], cwd: str) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"error: {' '.join(command)} failed:\n{result.stderr[-2000:]}")
    return time.perf_counter() - start


def main():
    argv = sys.argv[1:]
    passed = argv[argv.index("--") + 1 :] if "--" in argv else []
    cli = tyro.cli(Cli, args=argv[: argv.index("--")] if "--" in argv else argv)
    base = [sys.executable, str(SCRIPTS / cli.script), *passed]
    evaluated = [*base, "--eval-interval", str(cli.eval_interval), "--eval-episodes", str(cli.eval_episodes)]
    times = {"without": [], "with": []}
    with tempfile.TemporaryDirectory() as cwd:
        for _ in range(cli.rounds):
            times["without"].append(timed_run(base, cwd))
            times["with"].append(timed_run(evaluated, cwd))
    without, with_eval = statistics.median(times["without"]), statistics.median(times["with"])
    print(
        f"{cli.script} {' '.join(passed)}; evaluations: --eval-interval {cli.eval_interval} --eval-episodes {cli.eval_episodes}"
    )
    print("| runs | wall time per run (s) | median (s) |")
    print("|-|-|-|")
    for name, values in times.items():
        print(f"| {name} evaluations | {', '.join(f'{v:.1f}' for v in values)} | {statistics.median(values):.1f} |")
    print(f"cost of the evaluations: {with_eval - without:+.1f} s ({(with_eval / without - 1) * 100:+.1f}% of the run)")


if __name__ == "__main__":
    main()
