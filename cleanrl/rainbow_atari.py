# Rainbow (Hessel et al. 2018) on Atari games, with a prioritized n-step frame-once replay; docs: README.md#rainbow_ataripy
import glob
import importlib
import json
import os
import pickle
import random
import shlex
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass

import ale_py
import cloudpickle
import gymnasium as gym
import numpy as np
import torch
import tyro
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from stable_baselines3.common.atari_wrappers import ClipRewardEnv, EpisodicLifeEnv, FireResetEnv, MaxAndSkipEnv, NoopResetEnv
from torch import nn, optim
from torch.utils.tensorboard import SummaryWriter


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, cuda will be used when available"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    wandb_project_name: str = "cleanRL"
    """the wandb's project name"""
    wandb_entity: str | None = None
    """the entity (team) of wandb's project"""
    capture_video: bool = False
    """whether to capture videos of the agent performances (check out `videos` folder)"""
    save_model: bool = False
    """whether to save the model into `runs/{run_name}` and evaluate it for 10 games"""
    upload_model: bool = False
    """whether to upload the saved model, its evaluation and videos to the Hugging Face Hub (with --save-model)"""
    hf_entity: str | None = None
    """the user or organization of the Hugging Face Hub model repository (default: the token's user)"""
    checkpoint_interval: int = 0
    """environment steps between checkpoints written to `runs/{run_name}/checkpoint.pt` (0 = off)"""
    checkpoint_buffer: bool = False
    """whether checkpoints also hold the replay buffer (the default 1M frames take 7.1 GB on disk too). Without it,
    a resumed run refills an empty buffer: it acts with its noisy network, without learning, for `--learning-starts` steps"""
    resume: str | None = None
    """a run folder (`runs/{run_name}`) to continue from its checkpoint up to `--total-timesteps`"""

    # Algorithm specific arguments
    env_id: str = "BreakoutNoFrameskip-v4"
    """the id of the Atari game (any ALE id: `BreakoutNoFrameskip-v4` has no sticky actions, `ALE/Breakout-v5` repeats the last action with probability 0.25)"""
    total_timesteps: int = 10000000
    """total timesteps of the experiments (agent steps: 4 emulator frames each)"""
    learning_rate: float = 6.25e-5
    """the learning rate of the optimizer (Adam, epsilon 1.5e-4: the paper's)"""
    num_envs: int = 1
    """the number of parallel game environments"""
    buffer_size: int = 1000000
    """the replay memory size in frames, about as many transitions (each 84x84 frame is stored once: 1M take 7.1 GB,
    the process peaked at 8.1 GB RSS with it full, its sum tree and the two networks training)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    n_step: int = 3
    """the number of steps of the multi-step return (bootstrapped at gamma**n_step)"""
    prioritized_replay_alpha: float = 0.5
    """how much the priorities shape sampling: P(i) proportional to priority**alpha (0 = uniform)"""
    prioritized_replay_beta: float = 0.4
    """the importance-sampling exponent at the start; it grows linearly to 1 at `total-timesteps`"""
    n_atoms: int = 51
    """the number of atoms of the return distribution's support"""
    v_min: float = -10
    """the return corresponding to the lowest atom (rewards are clipped to their sign)"""
    v_max: float = 10
    """the return corresponding to the highest atom"""
    target_network_frequency: int = 8000
    """the number of vector steps between copies of the Q-network into the target network"""
    batch_size: int = 32
    """the batch size of sample from the replay memory"""
    learning_starts: int = 80000
    """timestep to start learning"""
    train_frequency: int = 4
    """the number of vector steps between gradient steps"""


def fail(message: str):
    """Bad input ends with one line on stderr and exit code 2, before any heavy work."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def make_env(env_id, idx, capture_video, run_name):
    def thunk():
        module, _, registered_id = env_id.rpartition(":")
        if module:  # a user's own env: importing its module registers it, as gym.make would
            importlib.import_module(module)
        gym.register_envs(ale_py)
        # the ALE's own frame skip off (the v5 ids skip 4 by default): MaxAndSkipEnv skips, max-pooling the last two frames
        env = gym.make(registered_id, frameskip=1, render_mode="rgb_array" if capture_video and idx == 0 else None)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # innermost: the real game score over all lives, unclipped
        if capture_video and idx == 0:
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")  # the real frames, whole games
        env = NoopResetEnv(env, noop_max=30)
        env = MaxAndSkipEnv(env, skip=4)
        env = EpisodicLifeEnv(env)  # a life lost ends the *training* episode only
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = FireResetEnv(env)
        env = ClipRewardEnv(env)  # sign of the reward, for the loss
        env = gym.wrappers.ResizeObservation(env, (84, 84))
        env = gym.wrappers.GrayscaleObservation(env)
        env = gym.wrappers.FrameStackObservation(env, 4)  # (4, 84, 84) uint8
        return env

    return thunk


class NoisyLinear(nn.Module):
    """A linear layer with factorised Gaussian noise (Fortunato et al. 2018): weights mu_w + sigma_w * eps_w with
    eps_w = outer(f(eps_out), f(eps_in)), f(x) = sign(x) sqrt(|x|), the bias mu_b + sigma_b * f(eps_out). The noise
    is drawn afresh at each forward pass in training mode: it is the agent's exploration (no epsilon)."""

    def __init__(self, in_features, out_features, sigma0=0.5):
        super().__init__()
        bound = in_features**-0.5
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma0 * bound))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma0 * bound))

    def forward(self, x):
        if not self.training:  # eval() plays the mean weights
            return nn.functional.linear(x, self.weight_mu, self.bias_mu)
        # new tensors at each pass, never drawn in place (autograd keeps them); the last ones stay for inspection
        self.eps_in, self.eps_out = torch.randn_like(self.weight_mu[0]), torch.randn_like(self.bias_mu)
        f_in, f_out = (eps.sign() * eps.abs().sqrt() for eps in (self.eps_in, self.eps_out))
        # (sigma_w * outer(f_out, f_in)) x = f_out * (sigma_w (f_in * x)): the noise matrix is never built
        noise = nn.functional.linear(x * f_in, self.weight_sigma) * f_out
        return nn.functional.linear(x, self.weight_mu, self.bias_mu + self.bias_sigma * f_out) + noise


class QNetwork(nn.Module):
    """The Nature DQN CNN, then a dueling distributional head of noisy layers: value and advantage streams, 3136 ->
    512 -> atoms (per action for the advantage), combined as value + advantage - mean advantage over actions, then a
    softmax over the atoms per action. It scales the uint8 frames itself, so the buffer and the batches stay uint8."""

    def __init__(self, envs, n_atoms=51, v_min=-10, v_max=10, noisy_sigma=0.5):  # sigma_0 0.5: the paper's
        super().__init__()
        self.n_actions, self.n_atoms = envs.single_action_space.n, n_atoms
        self.register_buffer("atoms", torch.linspace(v_min, v_max, steps=n_atoms))
        # the Nature CNN: three convolutions, each followed by a ReLU, to 64 x 7 x 7 = 3136 features
        channels = envs.single_observation_space.shape[0]
        convs = [nn.Conv2d(channels, 32, 8, stride=4), nn.Conv2d(32, 64, 4, stride=2), nn.Conv2d(64, 64, 3, stride=1)]
        self.network = nn.Sequential(*(layer for conv in convs for layer in (conv, nn.ReLU())), nn.Flatten())
        self.value = nn.Sequential(NoisyLinear(3136, 512, noisy_sigma), nn.ReLU(), NoisyLinear(512, n_atoms, noisy_sigma))
        self.advantage = nn.Sequential(
            NoisyLinear(3136, 512, noisy_sigma), nn.ReLU(), NoisyLinear(512, self.n_actions * n_atoms, noisy_sigma)
        )

    def forward(self, x):
        """The probability mass functions, shaped (batch, actions, atoms); each call draws new noise."""
        hidden = self.network(x / 255.0)
        value = self.value(hidden).view(len(x), 1, self.n_atoms)
        advantage = self.advantage(hidden).view(len(x), self.n_actions, self.n_atoms)
        return torch.softmax(value + advantage - advantage.mean(dim=1, keepdim=True), dim=2)

    def get_action(self, x, action=None):
        """The greedy action under the expected returns (unless one is given), and its return distribution."""
        pmfs = self(x)
        if action is None:
            action = (pmfs * self.atoms).sum(dim=2).argmax(dim=1)
        return action, pmfs[torch.arange(len(x), device=x.device), action]


def project_distribution(next_pmfs, rewards, terminations, gamma, atoms):
    """The target distribution of C51 (Bellemare et al. 2017, Algorithm 1): each atom z_j of the next state's
    distribution moves to r + gamma * z_j (just r where the episode terminated; a truncation still bootstraps),
    is clipped to [v_min, v_max], and its probability is split between the two nearest atoms of the support."""
    v_min, v_max, n_atoms = atoms[0], atoms[-1], len(atoms)
    delta_z = (v_max - v_min) / (n_atoms - 1)
    next_atoms = (rewards.unsqueeze(1) + gamma * atoms * (1.0 - terminations.unsqueeze(1))).clamp(v_min, v_max)
    b = (next_atoms - v_min) / delta_z  # fractional index of each moved atom
    lower, upper = b.floor().clamp(0, n_atoms - 1), b.ceil().clamp(0, n_atoms - 1)
    # where b lands exactly on an atom (lower == upper), all of the mass goes to it
    lower_mass = (upper + (lower == upper).float() - b) * next_pmfs
    upper_mass = (b - lower) * next_pmfs
    target_pmfs = torch.zeros_like(next_pmfs)
    target_pmfs.scatter_add_(1, lower.long(), lower_mass)
    target_pmfs.scatter_add_(1, upper.long(), upper_mass)
    return target_pmfs


class SumTree:
    """Proportional prioritized sampling in O(log N) (Schaul et al. 2016): a binary tree whose leaves hold the
    priorities**alpha and whose every inner node holds the sum of its two children: the root, node 1, the total."""

    def __init__(self, size):
        self.leaves = 1 << max(0, size - 1).bit_length()  # a power of two: leaf i is node leaves + i
        self.nodes = np.zeros(2 * self.leaves, dtype=np.float64)

    def set(self, indices, values):
        nodes = self.leaves + np.asarray(indices, dtype=np.int64)
        self.nodes[nodes] = values
        while nodes[0] > 1:  # up to the root, each parent recomputed from its children (duplicates agree)
            nodes = nodes // 2
            self.nodes[nodes] = self.nodes[2 * nodes] + self.nodes[2 * nodes + 1]

    def find(self, masses):
        """The leaf where each cumulative mass in [0, total) falls: descend left or right by the left child's sum."""
        nodes, masses = np.ones(len(masses), dtype=np.int64), np.array(masses, dtype=np.float64)
        while nodes[0] < self.leaves:
            right = masses >= self.nodes[2 * nodes]  # descend right, past the left subtree's mass
            masses -= self.nodes[2 * nodes] * right
            nodes = 2 * nodes + right
        return nodes - self.leaves


class PrioritizedFrameReplayBuffer:
    """dqn_atari.py's FrameReplayBuffer, each 84x84 frame stored once (per env a ring of frame slots; the transition
    stored with frame p stacks its observation from frames p-4..p-1, clamped to its episode's first frame as
    FrameStackObservation pads, its next one from p-3..p), plus prioritized replay and n-step transitions:
    - a sum tree over the slots holds priority**alpha per transition; a new one gets the highest priority yet;
    - the n-step return is summed at sampling time from the following slots' rewards, stopping at a termination
      (discount 0) or a truncation (discount gamma**k, bootstrapping from the real last observation), never crossing
      into the next episode; a transition is sampled once its n next steps are written or its episode is over.
    Memory: 7,056 bytes a frame, 34 for the rest and ~17 for the tree: 7.1 GB at the default 1,000,000 frames."""

    def __init__(self, buffer_size, num_envs, observation_space, n_step=3, gamma=0.99, alpha=0.5):
        self.stack, self.n_step, self.gamma, self.alpha = observation_space.shape[0], n_step, gamma, alpha
        self.capacity = -(-buffer_size // num_envs)  # frame slots per env
        shape = (num_envs, self.capacity)
        self.frames = np.zeros(shape + observation_space.shape[1:], dtype=observation_space.dtype)
        self.positions = np.full(shape, -1, dtype=np.int64)  # the position of the slot's frame in its env's stream
        self.episode_starts = np.zeros(shape, dtype=np.int64)  # the position of its episode's first frame here
        self.ends_transition = np.zeros(shape, dtype=bool)  # False for the frames that only start an episode
        self.ends_episode = np.zeros(shape, dtype=bool)  # terminated or truncated: the n-step return stops here
        self.actions = np.zeros(shape, dtype=np.int64)
        self.rewards = np.zeros(shape, dtype=np.float32)
        self.terminations = np.zeros(shape, dtype=np.float32)
        self.counts = np.zeros(num_envs, dtype=np.int64)  # frames written per env
        self.open = np.zeros(num_envs, dtype=bool)  # whether the env's current episode already has frames here
        self.current_starts = np.zeros(num_envs, dtype=np.int64)
        self.tree, self.max_priority = SumTree(num_envs * self.capacity), 1.0  # leaf env * capacity + slot

    def _write(self, i, frame, ends_transition, action=0, reward=0.0, termination=0.0, ends_episode=False):
        slot = self.counts[i] % self.capacity
        self.frames[i, slot], self.positions[i, slot] = frame, self.counts[i]
        self.episode_starts[i, slot], self.ends_transition[i, slot] = self.current_starts[i], ends_transition
        self.actions[i, slot], self.rewards[i, slot], self.terminations[i, slot] = action, reward, termination
        self.ends_episode[i, slot] = ends_episode
        self.counts[i] += 1
        # a new transition gets the highest priority yet; a frame that only starts an episode gets none
        self.tree.set([i * self.capacity + slot], [self.max_priority**self.alpha if ends_transition else 0.0])

    def add(self, obs, next_obs, actions, rewards, terminations, truncations):
        """One vector step: obs, the real next obs (final_obs where an episode ended), and what the envs returned."""
        for i in range(len(obs)):
            if not self.open[i]:
                # a new run of frames: the observation's own, less the leading copies that clamping will rebuild
                first = 0
                while first + 1 < self.stack and np.array_equal(obs[i, first + 1], obs[i, 0]):
                    first += 1
                self.current_starts[i], self.open[i] = self.counts[i], True
                for frame in obs[i, first:]:
                    self._write(i, frame, False)
            ended = bool(terminations[i] or truncations[i])
            self._write(i, next_obs[i, -1], True, actions[i], rewards[i], terminations[i], ended)
            self.open[i] = not ended  # after an episode's end, the next one starts a new run of frames

    def n_step_transitions(self, envs, slots):
        """For each transition: whether it is valid, its n-step return, its discount (gamma**k after k <= n steps, 0
        if a termination came first) and the slot whose next observation ends it."""
        positions = self.positions[envs, slots]
        oldest_needed = np.maximum(positions - self.stack, self.episode_starts[envs, slots])
        valid = (positions >= 0) & self.ends_transition[envs, slots] & (oldest_needed >= self.counts[envs] - self.capacity)
        returns, discounts = np.zeros(len(envs), dtype=np.float32), np.ones(len(envs), dtype=np.float32)
        last, running = slots.copy(), valid.copy()  # running: the return goes on through the next step
        for k in range(self.n_step):
            written = positions + k < self.counts[envs]
            valid &= written | ~running  # the episode goes on past the newest frame: not yet an n-step transition
            running &= written
            step = (positions + k) % self.capacity
            returns += np.where(running, discounts * self.rewards[envs, step], 0.0)
            discounts = np.where(running, discounts * self.gamma * (1.0 - self.terminations[envs, step]), discounts)
            last = np.where(running, step, last)
            running &= ~self.ends_episode[envs, step]
        return valid, returns, discounts.astype(np.float32), last

    def _frames(self, envs, slots):
        """Frames p-4..p of each transition: its obs are the first four, its one-step next obs the last four."""
        positions, starts = self.positions[envs, slots], self.episode_starts[envs, slots]
        stream = np.maximum(positions[:, None] + np.arange(-self.stack, 1), starts[:, None])
        return self.frames[envs[:, None], stream % self.capacity]

    def get(self, envs, slots):
        """obs, actions, next obs (after n steps or at the episode's end), n-step returns, discounts, as numpy arrays."""
        _, returns, discounts, last = self.n_step_transitions(envs, slots)
        obs, next_obs = self._frames(envs, slots)[:, :-1], self._frames(envs, last)[:, 1:]
        return obs, self.actions[envs, slots], next_obs, returns, discounts

    def sample(self, batch_size, beta, device):
        """A batch drawn in proportion to priority**alpha, importance weights (N * P(i))**-beta divided by the batch's
        largest, and the batch's (envs, slots) for update_priorities."""
        envs = slots = np.empty(0, dtype=np.int64)
        for _ in range(1000):  # redraw the few draws that are not valid transitions yet (or any more)
            leaves = self.tree.find(np.random.random(batch_size) * self.tree.nodes[1])
            leaves = leaves[self.tree.nodes[self.tree.leaves + leaves] > 0]  # floating-point edges may hit empty leaves
            draw_envs, draw_slots = np.divmod(leaves, self.capacity)
            valid = self.n_step_transitions(draw_envs, draw_slots)[0]
            envs, slots = np.concatenate([envs, draw_envs[valid]]), np.concatenate([slots, draw_slots[valid]])
            if len(envs) >= batch_size:
                break
        else:
            raise RuntimeError("the replay buffer holds no whole transition yet")
        envs, slots = envs[:batch_size], slots[:batch_size]
        probabilities = self.tree.nodes[self.tree.leaves + envs * self.capacity + slots] / self.tree.nodes[1]
        weights = (np.count_nonzero(self.tree.nodes[self.tree.leaves :]) * probabilities) ** -beta
        batch = (*self.get(envs, slots), (weights / weights.max()).astype(np.float32))
        return *(torch.from_numpy(np.ascontiguousarray(x)).to(device) for x in batch), (envs, slots)

    def update_priorities(self, indices, priorities):
        """The new priorities (the transitions' losses) of the transitions sampled at (envs, slots)."""
        envs, slots = indices
        self.max_priority = max(self.max_priority, float(priorities.max()))
        self.tree.set(envs * self.capacity + slots, priorities**self.alpha)

    def state_dict(self):
        used = int(min(self.counts.max(), self.capacity))  # slots past this were never written
        arrays = ["frames", "positions", "episode_starts", "ends_transition", "ends_episode", "actions", "rewards"]
        state = {name: getattr(self, name)[:, :used] for name in [*arrays, "terminations"]}
        state |= {"counts": self.counts, "open": self.open, "current_starts": self.current_starts}
        return state | {"tree": self.tree.nodes, "max_priority": self.max_priority}

    def load_state_dict(self, state):
        self.tree.nodes[:], self.max_priority = state["tree"], state["max_priority"]
        for name, value in state.items():
            if name not in ("tree", "max_priority"):  # per-env counters, or the per-slot arrays' slots written so far
                getattr(self, name)[tuple(slice(size) for size in value.shape)] = value


def pickle_envs(envs):
    """The sub-environments with their wrappers' state, the emulators' and the envs' RNGs: ALE envs pickle as their
    constructor's arguments (EzPickle), unpickling alone restarts the game. None if they cannot (a video recorder)."""
    try:
        states = [(env.unwrapped.ale.cloneState(include_rng=True), env.unwrapped.np_random) for env in envs.envs]
        return cloudpickle.dumps(list(zip(envs.envs, states)))
    except (pickle.PicklingError, TypeError):
        return None


def unpickle_envs(blob):
    pairs = pickle.loads(blob)
    for env, (state, np_random) in pairs:
        env.unwrapped.ale.restoreState(state)
        env.unwrapped.np_random = np_random
    return [env for env, _ in pairs]


if __name__ == "__main__":
    args = tyro.cli(Args)
    checkpoint = None
    if args.resume is not None:
        checkpoint_path = os.path.join(args.resume, "checkpoint.pt")
        if not os.path.isfile(checkpoint_path):
            fail(f"--resume {args.resume}: no checkpoint.pt there (was the run started with --checkpoint-interval?)")
        checkpoint = torch.load(checkpoint_path, weights_only=False)
        # the saved run's Args are the defaults; flags given now (e.g. a larger --total-timesteps) override them
        args = tyro.cli(Args, default=Args(**checkpoint["args"]))
    positive = ["total_timesteps", "num_envs", "buffer_size", "batch_size", "target_network_frequency", "train_frequency"]
    for flag in [*positive, "n_step"]:
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "learning_starts"]:
        if getattr(args, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}")
    for flag in ["prioritized_replay_alpha", "prioritized_replay_beta"]:
        if not 0.0 <= getattr(args, flag) <= 1.0:
            fail(f"--{flag.replace('_', '-')} must be in [0, 1], got {getattr(args, flag)}")
    if args.n_atoms < 2:
        fail(f"--n-atoms must be at least 2, got {args.n_atoms}")
    if args.v_min >= args.v_max:
        fail(f"--v-min {args.v_min} must be below --v-max {args.v_max}")
    if args.batch_size > args.buffer_size:
        fail(f"--batch-size {args.batch_size} is larger than --buffer-size {args.buffer_size}")
    if args.buffer_size < 16 * args.num_envs:  # a stack needs 5 live frames per env; keep a margin
        fail(f"--buffer-size {args.buffer_size} is too small: at least 16 frames per env ({16 * args.num_envs})")
    gym.register_envs(ale_py)
    try:
        module, _, registered_id = args.env_id.rpartition(":")
        if module:  # a user's own env: importing its module registers it, as gym.make would
            importlib.import_module(module)
        probe = gym.make(registered_id)  # the bare env, to check that it is an Atari game before building the stack
    except (gym.error.Error, ModuleNotFoundError) as e:
        fail(f"--env-id {args.env_id}: {e}")
    probe_space, probe_is_ale = probe.observation_space, hasattr(probe.unwrapped, "ale")
    probe.close()
    if not (isinstance(probe_space, gym.spaces.Box) and len(probe_space.shape) in (2, 3)):
        fail(
            f"--env-id {args.env_id} has observations of shape {getattr(probe_space, 'shape', None)}, not images: "
            "rainbow_atari.py trains on Atari games; use c51.py (distributional DQN) for vector observations"
        )
    if not probe_is_ale:
        fail(f"--env-id {args.env_id} is not an ALE Atari game: rainbow_atari.py's wrappers read the emulator's lives")
    if args.upload_model:
        if not args.save_model:
            fail("--upload-model uploads the model that --save-model saves: add --save-model")
        from cleanrl_utils.huggingface import check_upload

        try:  # before training: a missing token must not cost a whole run
            hf_repo_id = check_upload(args.hf_entity, args.env_id, args.exp_name, args.seed)
        except ValueError as e:
            fail(f"--upload-model: {e}")
    if checkpoint is not None and checkpoint["replay_buffer"] is not None:
        for flag in ["buffer_size", "num_envs"]:
            if (saved := checkpoint["args"][flag]) != getattr(args, flag):
                fail(f"--{flag.replace('_', '-')} {getattr(args, flag)}: the checkpoint's replay buffer has {saved}; keep it")

    run_name = checkpoint["run_name"] if checkpoint else f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    run_dir = args.resume.rstrip("/") if checkpoint else f"runs/{run_name}"
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    # env setup: SAME_STEP autoreset returns the reset observation at once and the real last one in infos["final_obs"]
    if checkpoint is not None and checkpoint["envs"] is not None:
        env_fns = [lambda env=env: env for env in unpickle_envs(checkpoint["envs"])]
    else:
        env_fns = [make_env(args.env_id, i, args.capture_video, run_name) for i in range(args.num_envs)]
    envs = gym.vector.SyncVectorEnv(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "args.json"), "w") as f:
        json.dump({"script": os.path.basename(__file__), "run_name": run_name, "args": asdict(args)}, f, indent=2)
    support = dict(n_atoms=args.n_atoms, v_min=args.v_min, v_max=args.v_max)
    q_network = QNetwork(envs, **support).to(device)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=1.5e-4)  # the paper's Adam epsilon
    target_network = QNetwork(envs, **support).to(device)
    target_network.load_state_dict(q_network.state_dict())
    n_step_args = dict(n_step=args.n_step, gamma=args.gamma, alpha=args.prioritized_replay_alpha)
    rb = PrioritizedFrameReplayBuffer(args.buffer_size, args.num_envs, envs.single_observation_space, **n_step_args)
    num_iterations = args.total_timesteps // args.num_envs  # vector steps
    global_step, start_iteration = 0, 1
    updates_start = args.learning_starts  # learning starts after this step (later after a resume without the buffer)
    if checkpoint is None:
        obs, _ = envs.reset(seed=args.seed)
        wandb_run_id = None
    else:
        for name, module in [("q_network", q_network), ("target_network", target_network), ("optimizer", optimizer)]:
            module.load_state_dict(checkpoint[name])
        global_step, start_iteration = checkpoint["global_step"], checkpoint["iteration"] + 1
        if checkpoint["replay_buffer"] is not None:
            rb.load_state_dict(checkpoint["replay_buffer"])
            updates_start = checkpoint["updates_start"]
        else:
            updates_start = global_step + args.learning_starts
            refill = f"refilling it for {args.learning_starts} steps, learning again after step {updates_start}"
            print(f"the checkpoint holds no replay buffer (--checkpoint-buffer was off): {refill}", file=sys.stderr)
        random.setstate(checkpoint["rng"]["python"])
        np.random.set_state(checkpoint["rng"]["numpy"])
        torch.set_rng_state(checkpoint["rng"]["torch"])
        if checkpoint["envs"] is not None:
            obs = checkpoint["obs"]
        else:
            print("warning: the checkpoint holds no env state (it could not be pickled); starting new games", file=sys.stderr)
            obs, _ = envs.reset(seed=args.seed + global_step)
            rb.open[:] = False  # the buffer's open episodes were cut: the new ones start new runs of frames
        wandb_run_id = checkpoint["wandb_run_id"]
    if args.track:
        import wandb

        # id None starts a new W&B run; a resumed run appends to its own
        wandb_config = dict(project=args.wandb_project_name, entity=args.wandb_entity, config=vars(args), name=run_name)
        wandb_run = wandb.init(**wandb_config, id=wandb_run_id, resume="allow", sync_tensorboard=True, save_code=True)
        wandb_run_id = wandb_run.id
    # on resume, purge_step hides whatever the killed run logged after its last checkpoint: no step repeats
    writer = SummaryWriter(run_dir, purge_step=global_step + 1 if checkpoint is not None else None)
    if checkpoint is None:
        table = "\n".join(f"|{key}|{value}|" for key, value in vars(args).items())
        writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")

    def save_checkpoint(iteration):
        state = dict(args=asdict(args), run_name=run_name, iteration=iteration, global_step=global_step, obs=obs)
        state.update(updates_start=updates_start, envs=pickle_envs(envs), wandb_run_id=wandb_run_id)
        state.update(q_network=q_network.state_dict(), target_network=target_network.state_dict())
        state["optimizer"] = optimizer.state_dict()
        state["replay_buffer"] = rb.state_dict() if args.checkpoint_buffer else None  # plain arrays: loads without this script
        state["rng"] = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
        torch.save(state, f"{run_dir}/checkpoint.pt.tmp")
        os.replace(f"{run_dir}/checkpoint.pt.tmp", f"{run_dir}/checkpoint.pt")  # atomic: the old file or the new one

    # Slurm and spot instances send SIGTERM before killing: finish the step, checkpoint, exit non-zero
    stop_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop_requested.set())
    recent_returns, on_terminal = deque(maxlen=20), sys.stdout.isatty()
    print(f"{run_name}: training to {args.total_timesteps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    description, stats = TextColumn("[bold]{task.description}"), TextColumn("{task.fields[stats]}")
    progress = Progress(description, BarColumn(), MofNCompleteColumn(), stats, TimeRemainingColumn(), disable=not on_terminal)
    progress_task = progress.add_task(args.exp_name, total=num_iterations * args.num_envs, completed=global_step, stats="")
    progress.start()
    start_time, start_step, beta0 = time.time(), global_step, args.prioritized_replay_beta

    for iteration in range(start_iteration, num_iterations + 1):
        global_step += args.num_envs
        # greedy under a fresh draw of the noisy layers' noise: that noise is the exploration, no epsilon
        with torch.no_grad():
            actions = q_network.get_action(torch.as_tensor(obs, device=device))[0].cpu().numpy()
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        # whole games only: RecordEpisodeStatistics sits inside EpisodicLifeEnv and ClipRewardEnv
        if "final_info" in infos and "episode" in infos["final_info"]:
            for i in np.flatnonzero(infos["final_info"]["_episode"]):
                episodic_return = float(infos["final_info"]["episode"]["r"][i])
                recent_returns.append(episodic_return)
                writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                writer.add_scalar("charts/episodic_length", int(infos["final_info"]["episode"]["l"][i]), global_step)
        # the done flag is termination only (a lost life included): a truncated game bootstraps from its last frame
        real_next_obs = next_obs.copy()  # where an episode ended, next_obs is already the next one's first
        if "final_obs" in infos:
            real_next_obs[infos["_final_obs"]] = np.stack(infos["final_obs"][infos["_final_obs"]])
        rb.add(obs, real_next_obs, actions, rewards, terminations, truncations)
        obs = next_obs
        # training
        if global_step > updates_start and iteration % args.train_frequency == 0:
            # beta grows to 1: importance sampling corrects prioritized replay's bias fully by the end of training
            beta = min(1.0, beta0 + (1.0 - beta0) * global_step / args.total_timesteps)
            b_obs, b_actions, b_next_obs, b_returns, b_discounts, b_weights, indices = rb.sample(args.batch_size, beta, device)
            with torch.no_grad():
                # double Q-learning: the online network picks the next action, the target network evaluates it
                _, next_pmfs = target_network.get_action(b_next_obs, q_network.get_action(b_next_obs)[0])
                # c51's projection at each sample's own discount: gamma**n (gamma**k where a truncation came after k
                # steps), 0 where the episode terminated, so no separate termination flag
                no_terminations, discounts = torch.zeros_like(b_returns), b_discounts.unsqueeze(1)
                target_pmfs = project_distribution(next_pmfs, b_returns, no_terminations, discounts, q_network.atoms)
            _, old_pmfs = q_network.get_action(b_obs, b_actions)
            # each sample's cross-entropy to its projected target is its new priority; importance weights scale it
            cross_entropy = -(target_pmfs * old_pmfs.clamp(min=1e-5, max=1 - 1e-5).log()).sum(dim=1)
            loss = (b_weights * cross_entropy).mean()
            rb.update_priorities(indices, cross_entropy.detach().cpu().numpy())
            if iteration % (100 * args.train_frequency) == 0:
                writer.add_scalar("losses/loss", loss.item(), global_step)
                writer.add_scalar("losses/q_values", (old_pmfs * q_network.atoms).sum(dim=1).mean().item(), global_step)
                writer.add_scalar("charts/beta", beta, global_step)
                writer.add_scalar("charts/SPS", int((global_step - start_step) / (time.time() - start_time)), global_step)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if global_step > updates_start and iteration % args.target_network_frequency == 0:
            target_network.load_state_dict(q_network.state_dict())
        if iteration % max(1, num_iterations // 20) == 0 or iteration == num_iterations:  # about 20 reports a run
            sps = int((global_step - start_step) / (time.time() - start_time))
            recent = f"return {np.mean(recent_returns):.1f}" if recent_returns else "return -"
            progress.update(progress_task, completed=global_step, stats=f"{sps} SPS, {recent}")
            if not on_terminal:
                print(f"step {global_step}/{num_iterations * args.num_envs}, {sps} SPS, {recent}", flush=True)
        elif iteration % 100 == 0:
            progress.update(progress_task, completed=global_step)
        interval = args.checkpoint_interval
        if (interval and global_step // interval > (global_step - args.num_envs) // interval) or stop_requested.is_set():
            save_checkpoint(iteration)
        if stop_requested.is_set():
            progress.stop()
            print(f"SIGTERM at step {global_step}: checkpoint written; continue with --resume {run_dir}", file=sys.stderr)
            envs.close()
            writer.close()
            sys.exit(128 + signal.SIGTERM)

    progress.stop()

    if args.save_model:
        model_path = f"{run_dir}/{args.exp_name}.cleanrl_model"
        # the support's size and range come with the weights: evaluation rebuilds the same network
        torch.save({"model_weights": q_network.state_dict(), "args": vars(args)}, model_path)
        print(f"model saved to {model_path}")
        from cleanrl_utils.evals.rainbow_eval import evaluate

        # the agent as it acts: greedy under fresh noise at each step (rainbow_eval.py seeds torch for it)
        kwargs = dict(Model=QNetwork, device=device, capture_video=args.capture_video, seed=args.seed + 100_000)
        episodic_returns = evaluate(model_path, make_env, args.env_id, 10, f"{run_name}-eval", **kwargs)  # 10 whole games
        for idx, episodic_return in enumerate(episodic_returns):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)
        mean, std = np.mean(episodic_returns), np.std(episodic_returns)
        print(f"evaluation over {len(episodic_returns)} games: {mean:.1f} +- {std:.1f}")
    envs.close()
    writer.close()
    if args.upload_model:  # after the envs close, so the last videos are complete
        from cleanrl_utils.huggingface import push

        push(run_dir, episodic_returns, hf_repo_id, command=shlex.join(["python", *sys.argv]))
    if args.track and args.capture_video:
        for video_path in sorted(glob.glob(f"videos/{run_name}*/*.mp4")):
            wandb.log({f"videos/{os.path.basename(os.path.dirname(video_path))}": wandb.Video(video_path)})
