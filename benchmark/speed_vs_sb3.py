"""Side by side on this machine: a cleanrl script against Stable-Baselines3's implementation of the same algorithm,
identical hyperparameters and budget (the peers are benchmark/sb3_<algo>.py).

Each run is timed from process start to exit (imports included) and runs alone, one after the other.
Prints, per seed and on average: wall time, steps per second, peak memory (RSS) and the final return
(mean of the last 100 episodes), then the speed ratio.
Usage: benchmark/speed_{algo}.sh [--seeds 1 2 3] [--env-id ID] [--total-timesteps N] [--batch-size N] [--output FILE],
one wrapper per algorithm in ALGOS. --batch-size (the off-policy pairs) sets both sides' replay batch: at 8 the matrix
products cost next to nothing, so a run's time is what each implementation spends around them.
"""

import argparse
import csv
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

REPO = pathlib.Path(__file__).resolve().parents[1]


@dataclass
class Pair:
    script: str
    peer: str
    """benchmark/sb3_*.py: the same algorithm and hyperparameters in Stable-Baselines3; prints its final return"""
    peer_name: str
    env_id: str
    total_timesteps: int
    script_flags: list[str] = field(default_factory=list)
    """what the script needs to match a choice SB3 does not let us change (each peer's docstring says why)"""


ALGOS = {
    "ppo": Pair("cleanrl/ppo.py", "benchmark/sb3_ppo.py", "PPO", "CartPole-v1", 500000),
    "dqn": Pair("cleanrl/dqn.py", "benchmark/sb3_dqn.py", "DQN", "CartPole-v1", 500000),
    "ppo_continuous_action": Pair(
        "cleanrl/ppo_continuous_action.py", "benchmark/sb3_ppo_continuous_action.py", "PPO", "HalfCheetah-v4", 200000
    ),
    "sac": Pair(
        "cleanrl/sac_continuous_action.py",
        "benchmark/sb3_sac.py",
        "SAC",
        "HalfCheetah-v4",
        50000,
        ["--q-lr", "3e-4", "--policy-frequency", "1"],
    ),
    "td3": Pair("cleanrl/td3_continuous_action.py", "benchmark/sb3_td3.py", "TD3", "HalfCheetah-v4", 50000),
    # the JAX twins against the same peers
    "sac_jax": Pair(
        "cleanrl/sac_continuous_action_jax.py",
        "benchmark/sb3_sac.py",
        "SAC",
        "HalfCheetah-v4",
        50000,
        ["--q-lr", "3e-4", "--policy-frequency", "1"],
    ),
    "td3_jax": Pair("cleanrl/td3_continuous_action_jax.py", "benchmark/sb3_td3.py", "TD3", "HalfCheetah-v4", 50000),
}

OFF_POLICY = ["sac", "td3", "sac_jax", "td3_jax"]  # their peers take --batch-size


def timed_run(command: list[str], cwd: str) -> tuple[float, float, str]:
    """Wall seconds, peak RSS in MB and stdout of one command, measured by the kernel's accounting of that child."""
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    stdout = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(command)} failed with status {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_maxrss / 1024, stdout


def run_script(script: str, env_id: str, seed: int, total_timesteps: int, flags: list[str]) -> dict:
    """One run of `script` in a fresh folder: its wall time, peak memory and final return (last 100 episodes)."""
    with tempfile.TemporaryDirectory() as cwd:
        command = [sys.executable, str(REPO / script), "--env-id", env_id, "--seed", str(seed), *flags]
        wall, peak_mb, stdout = timed_run(command + ["--total-timesteps", str(total_timesteps)], cwd)
        if script.startswith("benchmark/sb3_"):  # prints its own final return
            final_return = json.loads(stdout.strip().splitlines()[-1])["final_return"]
        else:  # cleanrl logs every episode to TensorBoard
            (run_dir,) = {p.parent for p in pathlib.Path(cwd, "runs").rglob("events.out.tfevents.*")}
            accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
            accumulator.Reload()
            final_return = float(np.mean([event.value for event in accumulator.Scalars("charts/episodic_return")][-100:]))
    return {"wall": wall, "peak_mb": peak_mb, "final_return": final_return}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=list(ALGOS), required=True)
    parser.add_argument("--env-id", help="default: the algorithm's (see ALGOS)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--total-timesteps", type=int, help="default: the algorithm's (see ALGOS)")
    parser.add_argument("--batch-size", type=int, help="both sides' replay batch (sac, td3 and their JAX twins)")
    parser.add_argument("--output", type=pathlib.Path, help="also write the table to this markdown file")
    args = parser.parse_args()
    pair = ALGOS[args.algo]
    batch_flags = []
    if args.batch_size is not None:
        if args.algo not in OFF_POLICY:
            parser.error(f"--batch-size applies to the off-policy pairs ({', '.join(OFF_POLICY)}), not {args.algo}")
        batch_flags = ["--batch-size", str(args.batch_size)]
    args.env_id = args.env_id or pair.env_id
    args.total_timesteps = args.total_timesteps or pair.total_timesteps

    cleanrl_name, sb3_name = f"cleanrl {os.path.basename(pair.script)}", f"stable-baselines3 {pair.peer_name}"
    results = {cleanrl_name: [], sb3_name: []}
    for seed in args.seeds:
        for name, script, flags in [
            (sb3_name, pair.peer, batch_flags),
            (cleanrl_name, pair.script, pair.script_flags + batch_flags),
        ]:
            result = run_script(script, args.env_id, seed, args.total_timesteps, flags)
            results[name].append(result)
            print(
                f"{name:24s} seed {seed}: {result['wall']:6.1f} s, {args.total_timesteps / result['wall']:6.0f} steps/s, "
                f"{result['peak_mb']:5.0f} MB, final return {result['final_return']:.1f}",
                flush=True,
            )

    lines = [
        f"{args.env_id}, {args.total_timesteps} steps, seeds {' '.join(map(str, args.seeds))}, one run at a time on "
        f"this machine ({os.cpu_count()} CPUs); wall time from process start to exit.",
        f"Command: `benchmark/speed_{args.algo}.sh {' '.join(sys.argv[3:])}`"
        + (f"; {cleanrl_name} ran with `{' '.join(pair.script_flags)}` to match SB3" if pair.script_flags else ""),
        "",
        "| implementation | wall time (s) | steps/s | peak memory (MB) | final return (last 100 episodes) |",
        "|-|-|-|-|-|",
    ]
    for name, runs in results.items():
        wall = np.array([r["wall"] for r in runs])
        final = np.array([r["final_return"] for r in runs])
        lines.append(
            f"| {name} | {wall.mean():.1f} +- {wall.std():.1f} | {args.total_timesteps / wall.mean():.0f} | "
            f"{np.mean([r['peak_mb'] for r in runs]):.0f} | {final.mean():.1f} +- {final.std():.1f} |"
        )
    with open(REPO / "benchmark" / "reference_scores.csv") as f:
        references = [
            row
            for row in csv.DictReader(f)
            if row["script"] == os.path.basename(pair.script)[: -len(".py")] and row["env_id"] == args.env_id
        ]
    for reference in references[:1]:
        lines.append(
            f"| published reference ({reference['source']}, {int(reference['total_timesteps'])} steps) | | | | "
            f"{float(reference['mean']):.1f} +- {float(reference['std']):.1f} |"
        )
    speedup = np.mean([r["wall"] for r in results[sb3_name]]) / np.mean([r["wall"] for r in results[cleanrl_name]])
    lines += ["", f"speed ratio ({sb3_name} wall time / {cleanrl_name} wall time): {speedup:.2f}x"]
    print("\n" + "\n".join(lines))
    if args.output:
        args.output.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
