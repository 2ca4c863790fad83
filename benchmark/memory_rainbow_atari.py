"""Peak memory of rainbow_atari.py at its default configuration: the prioritized frame-once replay buffer at its
default size, built as the script builds it and filled through its own add() with synthetic frames until every slot
is written (a real run writes them all after 1M steps), plus the two dueling noisy C51 networks, Adam, and gradient
steps on prioritized n-step batches sampled from the full buffer, with priority updates, as the script does them.

    uv run python benchmark/memory_rainbow_atari.py                 # 1,000,000 frames
    uv run python benchmark/memory_rainbow_atari.py --buffer-size 100000
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
parser.add_argument("--gradient-steps", type=int, default=20)
args = parser.parse_args()

script = pathlib.Path(__file__).resolve().parents[1] / "cleanrl" / "rainbow_atari.py"
spec = importlib.util.spec_from_file_location("rainbow_atari", script)
rainbow = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rainbow)
defaults = rainbow.Args()


def peak_rss_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # Linux reports KiB


torch.set_num_threads(1)
before = peak_rss_gb()
space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
rb = rainbow.PrioritizedFrameReplayBuffer(
    args.buffer_size, 1, space, defaults.n_step, defaults.gamma, defaults.prioritized_replay_alpha
)
stacks = np.random.default_rng(0).integers(0, 256, size=(64, 4, 84, 84), dtype=np.uint8)
action, reward, not_truncated = np.zeros(1, np.int64), np.ones(1, np.float32), np.array([False])
start = time.time()
for step in range(args.buffer_size + 100):  # past the capacity: the ring has wrapped, every slot written
    ended = np.array([step % args.episode_length == args.episode_length - 1])
    rb.add(stacks[step % 64][None], stacks[(step + 1) % 64][None], action, reward, ended, not_truncated)
fill_s = time.time() - start
after_buffer = peak_rss_gb()

envs = SimpleNamespace(single_action_space=gym.spaces.Discrete(4), single_observation_space=space)  # Breakout: 4
support = {"n_atoms": defaults.n_atoms, "v_min": defaults.v_min, "v_max": defaults.v_max}
q_network, target_network = rainbow.QNetwork(envs, **support), rainbow.QNetwork(envs, **support)
optimizer = torch.optim.Adam(q_network.parameters(), lr=defaults.learning_rate, eps=1.5e-4)
np.random.seed(0)
for _ in range(args.gradient_steps):  # the script's update, line for line
    b_obs, b_actions, b_next_obs, b_returns, b_discounts, b_weights, indices = rb.sample(defaults.batch_size, 0.4, "cpu")
    with torch.no_grad():
        _, next_pmfs = target_network.get_action(b_next_obs, q_network.get_action(b_next_obs)[0])
        target_pmfs = rainbow.project_distribution(
            next_pmfs, b_returns, torch.zeros_like(b_returns), b_discounts.unsqueeze(1), q_network.atoms
        )
    _, old_pmfs = q_network.get_action(b_obs, b_actions)
    cross_entropy = -(target_pmfs * old_pmfs.clamp(min=1e-5, max=1 - 1e-5).log()).sum(dim=1)
    loss = (b_weights * cross_entropy).mean()
    rb.update_priorities(indices, cross_entropy.detach().numpy())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
peak = peak_rss_gb()
arrays = sum(v.nbytes for v in vars(rb).values() if isinstance(v, np.ndarray)) + rb.tree.nodes.nbytes
print(
    f"PrioritizedFrameReplayBuffer({args.buffer_size:,} frames): arrays {arrays / 1e9:.2f} GB (sum tree "
    f"{rb.tree.nodes.nbytes / 1e6:.1f} MB); peak RSS {after_buffer:.2f} GB with the buffer full, {peak:.2f} GB after "
    f"{args.gradient_steps} gradient steps of the two networks ({before:.2f} GB before the buffer); filled in {fill_s:.0f} s"
)
