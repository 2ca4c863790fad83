"""Peak memory of qdagger_dqn_atari_impalacnn.py at its default configuration: the teacher's replay buffer (1M frames)
is built as the script builds it and filled with synthetic frames until every page is touched, the networks (the
Nature-CNN teacher, the IMPALA student and its target) do a few QDagger updates on it; then, as the script does before
the online phase, the teacher's buffer is dropped and the student's (1M frames) is built, filled and learned from.

    uv run python benchmark/memory_qdagger_dqn_atari_impalacnn.py
    uv run python benchmark/memory_qdagger_dqn_atari_impalacnn.py --buffer-size 100000
"""

import argparse
import importlib.util
import pathlib
import resource
import time
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--buffer-size", type=int, default=1_000_000)
parser.add_argument("--episode-length", type=int, default=1000, help="agent steps per synthetic episode")
parser.add_argument("--updates", type=int, default=5, help="QDagger updates after each fill")
args = parser.parse_args()

script = pathlib.Path(__file__).resolve().parents[1] / "cleanrl" / "qdagger_dqn_atari_impalacnn.py"
spec = importlib.util.spec_from_file_location("qdagger", script)
qdagger = importlib.util.module_from_spec(spec)
spec.loader.exec_module(qdagger)


def peak_rss_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # Linux reports KiB


def current_rss_gb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 1e9


space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
envs = SimpleNamespace(single_observation_space=space, single_action_space=gym.spaces.Discrete(4))
torch.manual_seed(0)
q_network, target_network, teacher = qdagger.QNetwork(envs), qdagger.QNetwork(envs), qdagger.TeacherNetwork(envs)
optimizer = torch.optim.Adam(q_network.parameters(), lr=1e-4)
stacks = np.random.default_rng(0).integers(0, 256, size=(64, 4, 84, 84), dtype=np.uint8)
action, reward, not_truncated = np.zeros(1, np.int64), np.zeros(1, np.float32), np.array([False])


def fill_and_learn(rb):
    for step in range(args.buffer_size + 100):  # past the capacity: the ring has wrapped, every slot written
        ended = np.array([step % args.episode_length == args.episode_length - 1])
        rb.add(stacks[step % 64][None], stacks[(step + 1) % 64][None], action, reward, ended, not_truncated)
    for _ in range(args.updates):  # as the script's qdagger_update
        b_obs, b_actions, b_next_obs, b_rewards, b_terminations = rb.sample(32, "cpu")
        with torch.no_grad():
            target = b_rewards + 0.99 * target_network(b_next_obs).max(dim=1).values * (1.0 - b_terminations)
            teacher_q = teacher(b_obs)
        student_q = q_network(b_obs)
        old_val = student_q.gather(1, b_actions.unsqueeze(1)).squeeze(1)
        loss = torch.nn.functional.mse_loss(target, old_val) + qdagger.distillation_loss(teacher_q, student_q, 1.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


start, before = time.time(), peak_rss_gb()
rb = qdagger.FrameReplayBuffer(args.buffer_size, 1, space)  # the teacher's
fill_and_learn(rb)
teacher_phase_peak, teacher_phase_rss = peak_rss_gb(), current_rss_gb()
rb = None  # as the script, before the online phase
after_free = current_rss_gb()
rb = qdagger.FrameReplayBuffer(args.buffer_size, 1, space)  # the student's
fill_and_learn(rb)
print(
    f"qdagger_dqn_atari_impalacnn.py, two FrameReplayBuffers of {args.buffer_size:,} frames one after the other: "
    f"peak RSS {peak_rss_gb():.2f} GB ({before:.2f} GB before the buffers; {teacher_phase_peak:.2f} GB peak with the "
    f"teacher's full, {teacher_phase_rss:.2f} GB resident then, {after_free:.2f} GB once it was dropped); "
    f"{time.time() - start:.0f} s"
)
