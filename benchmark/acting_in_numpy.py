"""Is acting in numpy worth keeping (dqn.py's `greedy_actions`)? The script as it is, side by side with a copy of it
whose one acting line runs the network in torch instead, in alternating rounds, whole-process wall time (imports
included). The project keeps a speed trick only where such a pair shows >= 10% of a run's wall time; a script that
acts in numpy gets an entry in ACTING.

    uv run python benchmark/acting_in_numpy.py --script dqn                 # 3 rounds x 100,000 steps
    uv run python benchmark/acting_in_numpy.py --script dqn --rounds 5 --total-timesteps 500000 --output out.md
"""

import argparse
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
# each script's acting line, and the same action computed by its torch module
ACTING = {
    "dqn": (
        "            actions = np.where(explore, actions, greedy_actions(q_layers, obs))\n",
        "            with torch.no_grad():\n"
        "                greedy = q_network(torch.as_tensor(obs, device=device)).argmax(dim=1).cpu().numpy()\n"
        "            actions = np.where(explore, actions, greedy)\n",
    ),
}


def torch_twin(script: str, folder: pathlib.Path) -> pathlib.Path:
    """The script with its numpy acting line replaced by the torch forward of the same network."""
    numpy_line, torch_lines = ACTING[script]
    source = (REPO / "cleanrl" / f"{script}.py").read_text()
    assert source.count(numpy_line) == 1, f"{script}.py's acting line changed: update this benchmark"
    path = folder / f"{script}_torch_acting.py"
    path.write_text(source.replace(numpy_line, torch_lines))
    return path


def wall_time(script: pathlib.Path, total_timesteps: int, seed: int) -> float:
    with tempfile.TemporaryDirectory() as cwd:
        start = time.perf_counter()
        command = [sys.executable, str(script), "--total-timesteps", str(total_timesteps), "--seed", str(seed)]
        subprocess.run(command, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", choices=list(ACTING), required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--total-timesteps", type=int, default=100_000)
    parser.add_argument("--output", type=pathlib.Path, help="also write the table to this markdown file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        variants = {
            f"numpy acting ({args.script}.py)": REPO / "cleanrl" / f"{args.script}.py",
            "torch acting": torch_twin(args.script, pathlib.Path(folder)),
        }
        times = {name: [] for name in variants}
        for round_index in range(args.rounds):  # alternating, so a slower minute of the machine hits both
            for name, script in variants.items():
                times[name].append(wall_time(script, args.total_timesteps, seed=round_index + 1))
                print(f"round {round_index + 1}: {name} {times[name][-1]:.1f} s", flush=True)
    numpy_times, torch_times = times.values()
    lines = [
        f"{args.script}.py on CartPole-v1, {args.total_timesteps} steps, {args.rounds} alternating rounds (seeds 1-{args.rounds}), "
        "whole-process wall time:",
        "",
        "| variant | wall time (s), per round | median (s) |",
        "|-|-|-|",
        *(f"| {name} | {', '.join(f'{t:.1f}' for t in ts)} | {statistics.median(ts):.1f} |" for name, ts in times.items()),
        "",
        f"numpy acting saves {1 - statistics.median(numpy_times) / statistics.median(torch_times):.1%} of the run's wall "
        "time (medians)",
    ]
    print("\n".join(lines))
    if args.output:
        args.output.write_text(
            f"# Acting in numpy ({args.script}.py)\n\n`uv run python benchmark/acting_in_numpy.py --script {args.script} "
            + f"--rounds {args.rounds} --total-timesteps {args.total_timesteps} --output {args.output}`\n\n"
            + "\n".join(lines)
            + "\n"
        )


if __name__ == "__main__":
    main()
