"""One learning update of sac_continuous_action.py and td3_continuous_action.py (HalfCheetah's 17 observations and 6
actions, the scripts' own networks and target functions) timed against the variants that were candidates for making
the torch scripts faster. The variants run in alternating rounds in one process, each round starting with another
one, so a drift of the machine's speed touches all of them alike; printed: each one's median milliseconds per update
and its median difference from the script's update, round by round (negative: faster).

    uv run python benchmark/torch_update_variants.py                  # batch 256, as the scripts
    uv run python benchmark/torch_update_variants.py --batch-size 8   # where the matrix products are small

The updates are written here as the scripts write them (SAC with `--policy-frequency 1`, as in the SB3 pairing: a
critic, actor, alpha and target step on every call; TD3 with its delayed actor and targets, every second call).
"""

import argparse
import importlib.util
import math
import pathlib
import time

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=256)
parser.add_argument("--rounds", type=int, default=10, help="alternating rounds per variant")
parser.add_argument("--updates", type=int, default=200, help="updates per round")
args = parser.parse_args()


def load(name):
    spec = importlib.util.spec_from_file_location(name, pathlib.Path(__file__).resolve().parents[1] / "cleanrl" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sac, td3 = load("sac_continuous_action"), load("td3_continuous_action")


class Envs:  # what the networks read of the vector env: HalfCheetah's spaces
    single_observation_space = gym.spaces.Box(-np.inf, np.inf, (17,), np.float32)
    single_action_space = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)


envs, batch_size, gamma, tau = Envs(), args.batch_size, 0.99, 0.005
# the scripts' own replay buffer, filled with synthetic transitions (1% of them terminal)
replay_buffer = sac.ReplayBuffer(100_000, 17, 6)
rng = np.random.default_rng(0)
replay_buffer.add(
    rng.standard_normal((100_000, 17), dtype=np.float32),
    rng.standard_normal((100_000, 17), dtype=np.float32),
    rng.uniform(-1, 1, (100_000, 6)).astype(np.float32),
    rng.standard_normal(100_000, dtype=np.float32),
    (rng.random(100_000) < 0.01).astype(np.float32),
)


def sample():
    return replay_buffer.sample(batch_size, "cpu")


def adam(params, lr):
    return torch.optim.Adam(list(params), lr=lr, fused=True)


def sac_update(draw_sample, one_backward_for_actor_and_alpha=False, compiled=False):
    """A SAC update; `draw_sample(actor, obs)` returns a reparameterized action and its log-probability."""
    torch.manual_seed(0)
    actor, qf, qf_target = sac.Actor(envs), sac.SoftQNetwork(envs), sac.SoftQNetwork(envs)
    qf_target.load_state_dict(qf.state_dict())
    q_params, q_target_params = list(qf.parameters()), list(qf_target.parameters())
    q_optimizer, actor_optimizer = adam(q_params, 3e-4), adam(actor.parameters(), 3e-4)
    log_alpha = torch.zeros(1, requires_grad=True)
    a_optimizer, target_entropy = adam([log_alpha], 3e-4), -6.0
    state = {"alpha": log_alpha.detach().exp()}

    def critic_loss(obs, actions, next_obs, rewards, terminations, alpha):
        with torch.no_grad():
            next_actions, next_log_pi = draw_sample(actor, next_obs)
            next_q1, next_q2 = qf_target(next_obs, next_actions)
            next_q_value = sac.soft_td_target(rewards, terminations, next_q1, next_q2, next_log_pi, alpha, gamma)
        qf1_loss, qf2_loss = ((qf(obs, actions) - next_q_value) ** 2).mean(1)
        return qf1_loss + qf2_loss

    def actor_and_alpha_losses(obs, alpha):
        pi, log_pi = draw_sample(actor, obs)
        actor_loss = (alpha * log_pi - qf(obs, pi).min(0).values).mean()
        return actor_loss, (-log_alpha.exp() * (log_pi.detach() + target_entropy)).mean()

    if compiled:
        critic_loss, actor_and_alpha_losses = torch.compile(critic_loss), torch.compile(actor_and_alpha_losses)

    def update():
        obs, actions, next_obs, rewards, terminations = sample()
        qf_loss = critic_loss(obs, actions, next_obs, rewards, terminations, state["alpha"])
        q_optimizer.zero_grad()
        qf_loss.backward()
        q_optimizer.step()
        qf.requires_grad_(False)
        actor_loss, alpha_loss = actor_and_alpha_losses(obs, state["alpha"])
        actor_optimizer.zero_grad()
        a_optimizer.zero_grad()
        if one_backward_for_actor_and_alpha:  # the two graphs share no weights: one backward pass serves both
            (actor_loss + alpha_loss).backward()
        else:
            actor_loss.backward()
            alpha_loss.backward()
        actor_optimizer.step()
        a_optimizer.step()
        qf.requires_grad_(True)
        state["alpha"] = log_alpha.detach().exp()
        with torch.no_grad():
            torch._foreach_lerp_(q_target_params, q_params, tau)

    return update


def script_sample(actor, obs):
    actions, log_prob, _ = actor.get_action(obs)
    return actions, log_prob


def lean_sample(actor, obs):
    """The same distribution: the log-probability from the drawn noise ((u - mean) / std is the noise), tanh(u) once,
    and no deterministic action."""
    mean, log_std = actor(obs)
    noise = torch.randn_like(mean)
    squashed = torch.tanh(mean + log_std.exp() * noise)
    log_normal = -0.5 * noise**2 - log_std - 0.5 * math.log(2 * math.pi)
    log_prob = (log_normal - torch.log(actor.action_scale * (1 - squashed**2) + 1e-6)).sum(1)
    return squashed * actor.action_scale + actor.action_bias, log_prob


class TwinQNetwork(sac.SoftQNetwork):
    """SAC's batched twin critics, able to run the first network alone (TD3's actor loss reads Q1 only)."""

    def forward(self, x, a, num_networks=2):
        x = torch.cat([x.flatten(1), a], 1).expand(num_networks, -1, -1)
        for layer, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            x = torch.baddbmm(bias[:num_networks], x, weight[:num_networks])
            if layer < len(self.weights) - 1:
                x = F.relu(x)
        return x.squeeze(2)


def td3_update(batched_critics=False):
    torch.manual_seed(0)
    actor, target_actor = td3.Actor(envs), td3.Actor(envs)
    target_actor.load_state_dict(actor.state_dict())
    networks = 1 if batched_critics else 2  # modules holding the critics
    Critic = TwinQNetwork if batched_critics else td3.QNetwork
    critics, critic_targets = [Critic(envs) for _ in range(networks)], [Critic(envs) for _ in range(networks)]
    for critic, critic_target in zip(critics, critic_targets):
        critic_target.load_state_dict(critic.state_dict())
    q_params = [p for critic in critics for p in critic.parameters()]
    online = list(actor.parameters()) + q_params
    targets = list(target_actor.parameters()) + [p for critic in critic_targets for p in critic.parameters()]
    q_optimizer, actor_optimizer = adam(q_params, 3e-4), adam(actor.parameters(), 3e-4)
    low, high = torch.full((6,), -1.0), torch.full((6,), 1.0)
    smoothing = (0.2, 0.5, actor.action_scale, low, high)
    calls = [0]

    def update():
        calls[0] += 1
        obs, actions, next_obs, rewards, terminations = sample()
        with torch.no_grad():
            if batched_critics:  # td3_target's smoothing, then one batched forward of both target critics
                next_actions = target_actor(next_obs)
                noise = (torch.randn_like(next_actions) * 0.2).clamp(-0.5, 0.5) * actor.action_scale
                next_actions = torch.clamp(next_actions + noise, low, high)
                next_q = critic_targets[0](next_obs, next_actions).min(0).values
                next_q_value = rewards + gamma * (1.0 - terminations) * next_q
            else:
                next_q_value = td3.td3_target(
                    rewards, terminations, next_obs, target_actor, critic_targets[0], critic_targets[1], gamma, *smoothing
                )
        if batched_critics:
            qf1_loss, qf2_loss = ((critics[0](obs, actions) - next_q_value) ** 2).mean(1)
        else:
            qf1_loss = F.mse_loss(critics[0](obs, actions), next_q_value)
            qf2_loss = F.mse_loss(critics[1](obs, actions), next_q_value)
        q_optimizer.zero_grad()
        (qf1_loss + qf2_loss).backward()
        q_optimizer.step()
        if calls[0] % 2 == 0:
            critics[0].requires_grad_(False)
            q1 = critics[0](obs, actor(obs), num_networks=1)[0] if batched_critics else critics[0](obs, actor(obs))
            actor_loss = -q1.mean()
            actor_optimizer.zero_grad()
            actor_loss.backward()
            actor_optimizer.step()
            critics[0].requires_grad_(True)
            with torch.no_grad():
                torch._foreach_lerp_(targets, online, tau)

    return update


def compare(title, variants):
    for update in variants.values():  # warm-up (and compiling, for a compiled variant)
        for _ in range(50):
            update()
    times, names = {name: [] for name in variants}, list(variants)
    for round_ in range(args.rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:  # each variant starts some rounds
            update = variants[name]
            start = time.perf_counter()
            for _ in range(args.updates):
                update()
            times[name].append((time.perf_counter() - start) / args.updates * 1e3)
    baseline = np.array(next(iter(times.values())))
    print(f"{title}, batch {batch_size}, {torch.get_num_threads()} threads, {args.rounds} rounds of {args.updates} updates")
    for name, ms in times.items():
        difference = np.median(np.array(ms) - baseline)
        print(f"  {name:<48} {np.median(ms):6.2f} ms per update, {difference:+.2f} ms against the script's")


compare(
    "sac_continuous_action.py",
    {
        "the script's update": sac_update(script_sample),
        "one backward pass for the actor and alpha losses": sac_update(script_sample, one_backward_for_actor_and_alpha=True),
        "log-probability from the noise, tanh once": sac_update(lean_sample),
        "both of those": sac_update(lean_sample, one_backward_for_actor_and_alpha=True),
        # compiled, the two losses come from one graph: one backward pass
        "one backward pass, the losses by torch.compile": sac_update(
            script_sample, one_backward_for_actor_and_alpha=True, compiled=True
        ),
    },
)
compare("td3_continuous_action.py", {"the script's update": td3_update(), "batched twin critics": td3_update(True)})
