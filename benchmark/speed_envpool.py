"""The EnvPool family's speed, side by side with its Gymnasium peers, on the machine it runs on.

    uv run python benchmark/speed_envpool.py envs                 # env-only: EnvPool against Gymnasium's vector envs
    uv run python benchmark/speed_envpool.py scripts              # each EnvPool script beside ppo_atari.py / its peer
    uv run python benchmark/speed_envpool.py scripts --num-envs 64 --total-timesteps 65536 --scripts ppo_atari_envpool.py

`envs` steps Breakout with uniformly random actions through each back-end, with the same preprocessing (ppo_atari.py's
make_env for Gymnasium's SyncVectorEnv and AsyncVectorEnv, ppo_atari_envpool.py's for EnvPool), and reports agent
steps per second (an agent step is 4 frames). `scripts` runs each script in a new process at the same number of envs
and steps per rollout (8 x 128 by default, Breakout) and reports the whole process's wall time, start-up and JIT
compilation included, and steps per second over it. Run it with nothing else on the machine; it prints a Markdown table.
"""

import argparse
import importlib.util
import pathlib
import subprocess
import sys
import tempfile
import time

import gymnasium as gym
import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
# script -> its Breakout id
SCRIPTS = {
    "ppo_atari.py": "BreakoutNoFrameskip-v4",
    "ppo_atari_envpool.py": "Breakout-v5",
    "ppo_atari_envpool_xla_jax.py": "Breakout-v5",
    "ppo_atari_envpool_xla_jax_scan.py": "Breakout-v5",
    "ppo_rnd_envpool.py": "Breakout-v5",
    "pqn_atari_envpool.py": "Breakout-v5",
    "pqn_atari_envpool_lstm.py": "Breakout-v5",
}


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "cleanrl" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reset(envs, **seed):
    envs.reset(**seed)
    return envs


def env_steps_per_second(envs, num_envs: int, steps: int, n_actions: int) -> float:
    rng = np.random.default_rng(0)
    for _ in range(20):  # warm-up: threads and processes started, first frames rendered
        envs.step(rng.integers(n_actions, size=num_envs))
    start = time.perf_counter()
    for _ in range(steps):
        envs.step(rng.integers(n_actions, size=num_envs))
    elapsed = time.perf_counter() - start
    envs.close()
    return steps * num_envs / elapsed


def measure_envs(args):
    ppo_atari, ppo_atari_envpool = load("ppo_atari"), load("ppo_atari_envpool")
    thunks = [ppo_atari.make_env("BreakoutNoFrameskip-v4", i, False, "speed") for i in range(args.num_envs)]
    same_step = gym.vector.AutoresetMode.SAME_STEP
    backends = {
        "Gymnasium SyncVectorEnv": lambda: reset(gym.vector.SyncVectorEnv(thunks, autoreset_mode=same_step), seed=1),
        "Gymnasium AsyncVectorEnv": lambda: reset(gym.vector.AsyncVectorEnv(thunks, autoreset_mode=same_step), seed=1),
        "EnvPool": lambda: reset(ppo_atari_envpool.make_env("Breakout-v5", args.num_envs, 1)),  # seeded when made
    }
    print(f"| back-end ({args.num_envs} envs, Breakout, {args.env_steps} steps of each) | agent steps/s |\n|-|-|")
    for name, make in backends.items():
        print(f"| {name} | {env_steps_per_second(make(), args.num_envs, args.env_steps, 4):,.0f} |", flush=True)


def measure_scripts(args):
    header = f"| script ({args.num_envs} envs x {args.num_steps} steps, {args.total_timesteps} steps) | wall times |"
    print(f"{header} median | steps/s over the median |\n|-|-|-|-|")
    walls = {script: [] for script in args.scripts}
    for _ in range(args.rounds):  # the scripts take turns, so a slow spell of the machine hits each of them
        for script in args.scripts:
            command = [sys.executable, str(REPO / "cleanrl" / script), "--env-id", SCRIPTS[script]]
            command += ["--num-envs", str(args.num_envs), "--num-steps", str(args.num_steps)]
            command += ["--total-timesteps", str(args.total_timesteps), *args.extra]
            with tempfile.TemporaryDirectory() as folder:  # the runs/ folder goes away with it
                start = time.perf_counter()
                result = subprocess.run(command, cwd=folder, capture_output=True, text=True)
                walls[script].append(time.perf_counter() - start)
            if result.returncode != 0:
                sys.exit(f"{script} failed:\n{result.stderr[-3000:]}")
    for script, times in walls.items():
        median = float(np.median(times))
        runs = ", ".join(f"{t:.1f}" for t in times)
        print(f"| {script} | {runs} s | {median:.1f} s | {args.total_timesteps / median:,.0f} |", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["envs", "scripts"])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-steps", type=int, default=128, help="steps per rollout (scripts)")
    parser.add_argument("--env-steps", type=int, default=2000, help="vector steps of each back-end (envs)")
    parser.add_argument("--total-timesteps", type=int, default=10240, help="each script's budget (scripts)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each script, taking turns (scripts)")
    parser.add_argument("--scripts", nargs="+", default=list(SCRIPTS), choices=list(SCRIPTS))
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="flags added to every script's command")
    args = parser.parse_args()
    measure_envs(args) if args.what == "envs" else measure_scripts(args)
