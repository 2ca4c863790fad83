"""Peak memory of sac_atari.py at its default configuration: the replay buffer built as the script builds it (1M
frames, one env) and filled with synthetic frames until every page is touched (a real run touches them all after 1M
steps), plus the actor, the twin critics and their targets, the three Adam optimizers, and a few gradient steps at
the default batch of 64 (the script's own loss functions), all on the CPU.

    uv run python benchmark/memory_sac_atari.py
    uv run python benchmark/memory_sac_atari.py --buffer-size 100000
"""

import argparse
import importlib.util
import math
import pathlib
import resource
import time

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--buffer-size", type=int, default=1_000_000)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--episode-length", type=int, default=1000, help="agent steps per synthetic episode")
parser.add_argument("--updates", type=int, default=5)
args = parser.parse_args()

spec = importlib.util.spec_from_file_location(
    "sac_atari", pathlib.Path(__file__).resolve().parents[1] / "cleanrl" / "sac_atari.py"
)
sac_atari = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sac_atari)


def peak_rss_gib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux reports KiB


class Envs:  # what the networks read of the vector env: Breakout's spaces after the script's wrappers
    single_observation_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    single_action_space = gym.spaces.Discrete(4)


before = peak_rss_gib()
actor = sac_atari.Actor(Envs)
qf = torch.nn.ModuleList([sac_atari.SoftQNetwork(Envs), sac_atari.SoftQNetwork(Envs)])
qf_target = torch.nn.ModuleList([sac_atari.SoftQNetwork(Envs), sac_atari.SoftQNetwork(Envs)])
qf_target.load_state_dict(qf.state_dict())
q_optimizer = torch.optim.Adam(qf.parameters(), lr=3e-4, eps=1e-4)
actor_optimizer = torch.optim.Adam(actor.parameters(), lr=3e-4, eps=1e-4)
log_alpha = torch.zeros(1, requires_grad=True)
a_optimizer = torch.optim.Adam([log_alpha], lr=3e-4, eps=1e-4)
target_entropy = 0.89 * math.log(4)

rb = sac_atari.FrameReplayBuffer(args.buffer_size, 1, Envs.single_observation_space)
stacks = np.random.default_rng(0).integers(0, 256, size=(64, 4, 84, 84), dtype=np.uint8)
action, reward, not_truncated = np.zeros(1, np.int64), np.zeros(1, np.float32), np.array([False])
start = time.time()
for step in range(args.buffer_size + 100):  # past the capacity: the ring has wrapped, every slot written
    ended = np.array([step % args.episode_length == args.episode_length - 1])
    rb.add(stacks[step % 64][None], stacks[(step + 1) % 64][None], action, reward, ended, not_truncated)
filled = time.time() - start

start = time.time()
for _ in range(args.updates):  # the script's gradient step
    b_obs, b_actions, b_next_obs, b_rewards, b_terminations = rb.sample(args.batch_size, "cpu")
    alpha = log_alpha.detach().exp()
    with torch.no_grad():
        _, next_log_pi, next_pi = actor.get_action(b_next_obs)
        next_q1, next_q2 = (q(b_next_obs) for q in qf_target)
        target = sac_atari.soft_td_target(b_rewards, b_terminations, next_pi, next_log_pi, next_q1, next_q2, alpha, 0.99)
    qf1_a, qf2_a = (q(b_obs).gather(1, b_actions.unsqueeze(1)).squeeze(1) for q in qf)
    qf_loss = F.mse_loss(qf1_a, target) + F.mse_loss(qf2_a, target)
    q_optimizer.zero_grad()
    qf_loss.backward()
    q_optimizer.step()
    _, log_pi, pi = actor.get_action(b_obs)
    with torch.no_grad():
        q1, q2 = (q(b_obs) for q in qf)
    actor_loss = sac_atari.actor_loss_fn(pi, log_pi, q1, q2, alpha)
    actor_optimizer.zero_grad()
    actor_loss.backward()
    actor_optimizer.step()
    alpha_loss = sac_atari.alpha_loss_fn(pi, log_pi, log_alpha, target_entropy)
    a_optimizer.zero_grad()
    alpha_loss.backward()
    a_optimizer.step()
update_s = (time.time() - start) / args.updates

peak = peak_rss_gib()
arrays = sum(value.nbytes for value in vars(rb).values() if isinstance(value, np.ndarray)) / 1e9
params = sum(p.numel() for m in (actor, qf, qf_target) for p in m.parameters())
print(
    f"sac_atari.py: FrameReplayBuffer({args.buffer_size:,} frames) arrays {arrays:.2f} GB; "
    f"{params:,} network parameters (actor, 2 critics, 2 targets); peak RSS of the process "
    f"{peak * 2**30 / 1e9:.2f} GB ({peak:.2f} GiB), {before * 2**30 / 1e9:.2f} GB of it before the networks and buffer; "
    f"filled in {filled:.0f} s; {update_s:.2f} s a gradient step at batch {args.batch_size} on "
    f"{torch.get_num_threads()} CPU thread(s)"
)
