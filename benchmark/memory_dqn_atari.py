"""Peak memory of dqn_atari.py's replay buffer at its default size: the buffer is built as the script builds it and
filled with synthetic frames until every page is touched (a real run touches them all after 1M steps).

    uv run python benchmark/memory_dqn_atari.py                      # the default, 1,000,000 frames
    uv run python benchmark/memory_dqn_atari.py --buffer-size 100000
"""

import argparse
import importlib.util
import pathlib
import resource
import time

import gymnasium as gym
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--buffer-size", type=int, default=1_000_000)
parser.add_argument("--episode-length", type=int, default=1000, help="agent steps per synthetic episode")
args = parser.parse_args()

script = pathlib.Path(__file__).resolve().parents[1] / "cleanrl" / "dqn_atari.py"
spec = importlib.util.spec_from_file_location("dqn_atari", script)
dqn_atari = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dqn_atari)


def peak_rss_gib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux reports KiB


before = peak_rss_gib()
rb = dqn_atari.FrameReplayBuffer(args.buffer_size, 1, gym.spaces.Box(0, 255, (4, 84, 84), np.uint8))
stacks = np.random.default_rng(0).integers(0, 256, size=(64, 4, 84, 84), dtype=np.uint8)
action, reward, not_truncated = np.zeros(1, np.int64), np.zeros(1, np.float32), np.array([False])
start = time.time()
for step in range(args.buffer_size + 100):  # past the capacity: the ring has wrapped, every slot written
    ended = np.array([step % args.episode_length == args.episode_length - 1])
    rb.add(stacks[step % 64][None], stacks[(step + 1) % 64][None], action, reward, ended, not_truncated)
rb.sample(32, "cpu")
peak = peak_rss_gib()
arrays = sum(value.nbytes for value in vars(rb).values() if isinstance(value, np.ndarray)) / 1e9
print(
    f"FrameReplayBuffer({args.buffer_size:,} frames): arrays {arrays:.2f} GB; peak RSS of the process "
    f"{peak * 2**30 / 1e9:.2f} GB ({peak:.2f} GiB), {before * 2**30 / 1e9:.2f} GB of it before the buffer; "
    f"filled in {time.time() - start:.0f} s"
)
