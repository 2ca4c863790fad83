# SAC for discrete actions (Christodoulou 2019) on Atari games, frame-deduplicating replay; docs: README.md#sac_ataripy
import glob
import importlib
import json
import math
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
import torch.nn.functional as F
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
    """whether checkpoints also hold the replay buffer (the default 1M frames take 7.1 GB on disk too).
    Without it, a resumed run refills an empty buffer: it acts with its policy, without learning, for `--learning-starts` steps"""
    resume: str | None = None
    """a run folder (`runs/{run_name}`) to continue from its checkpoint up to `--total-timesteps`"""

    # Algorithm specific arguments
    env_id: str = "BreakoutNoFrameskip-v4"
    """the id of the Atari game (any ALE id: `BreakoutNoFrameskip-v4` has no sticky actions, `ALE/Breakout-v5` repeats the last action with probability 0.25)"""
    total_timesteps: int = 5000000
    """total timesteps of the experiments (agent steps: 4 emulator frames each)"""
    num_envs: int = 1
    """the number of parallel game environments"""
    buffer_size: int = 1000000
    """the replay memory size in frames, about as many transitions (each 84x84 frame is stored once: 1M take 7.1 GB;
    with it full, the five networks and their optimizers, the process peaked at 8.1 GB RSS: it fits a 24 GB machine)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 1.0
    """the target networks' update rate (1.0 copies the critics)"""
    batch_size: int = 64
    """the batch size of sample from the replay memory"""
    learning_starts: int = 20000
    """timestep to start learning (uniformly random actions until then)"""
    policy_lr: float = 3e-4
    """the learning rate of the policy network optimizer"""
    q_lr: float = 3e-4
    """the learning rate of the Q network optimizer (and of the entropy coefficient's)"""
    update_frequency: int = 4
    """the number of vector steps between gradient steps (each updates the critics, the actor and alpha)"""
    target_network_frequency: int = 8000
    """the number of vector steps between target network updates"""
    alpha: float = 0.2
    """entropy regularization coefficient (when not autotuned)"""
    autotune: bool = True
    """automatic tuning of the entropy coefficient"""
    target_entropy_scale: float = 0.89
    """the target entropy is this fraction of the uniform policy's, log(number of actions); in (0, 1]"""


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


class SoftQNetwork(nn.Module):
    """A critic with its own Nature-CNN trunk: Q(s, a) of every action at once, so the soft value is an exact sum over
    actions. It takes the uint8 frames and scales them itself, so the buffer and the batches stay uint8."""

    def __init__(self, envs):
        super().__init__()
        stack, n_actions = envs.single_observation_space.shape[0], envs.single_action_space.n
        convs = [nn.Conv2d(stack, 32, 8, stride=4), nn.Conv2d(32, 64, 4, stride=2), nn.Conv2d(64, 64, 3, stride=1)]
        fc, self.head = nn.Linear(3136, 512), nn.Linear(512, n_actions)
        self.trunk = nn.Sequential(*[m for conv in convs for m in (conv, nn.ReLU())], nn.Flatten(), fc, nn.ReLU())
        for layer in [*convs, fc, self.head]:  # Kaiming-normal weights and zero biases, as the original initializes
            nn.init.kaiming_normal_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, x):
        return self.head(self.trunk(x / 255.0))


class Actor(SoftQNetwork):
    """The categorical policy: a critic's architecture with weights (and trunk) of its own, as in the original; its
    outputs are the logits of the actions."""

    def get_action(self, x):
        """A sampled action, and the log-probabilities and probabilities of every action (the losses sum over them)."""
        log_probs = F.log_softmax(self(x), dim=1)
        return torch.multinomial(log_probs.exp(), 1).squeeze(1), log_probs, log_probs.exp()


def soft_td_target(rewards, terminations, next_probs, next_log_probs, next_q1, next_q2, alpha, gamma):
    """r + gamma * sum_a' pi(a'|s') (min(Q1', Q2')(s', a') - alpha log pi(a'|s')), the expectation over a' exact, not
    sampled; no bootstrap where the episode terminated (a lost life too; the ALE's time limit is not one: it bootstraps)."""
    next_value = (next_probs * (torch.min(next_q1, next_q2) - alpha * next_log_probs)).sum(dim=1)
    return rewards + gamma * (1.0 - terminations) * next_value


def actor_loss_fn(probs, log_probs, q1, q2, alpha):
    """E_s sum_a pi(a|s) (alpha log pi(a|s) - min(Q1, Q2)(s, a)), minimal at pi ~ exp(min Q / alpha) (the original's
    .mean() over the actions too divides it by their number)."""
    return (probs * (alpha * log_probs - torch.min(q1, q2))).sum(dim=1).mean()


def alpha_loss_fn(probs, log_probs, log_alpha, target_entropy):
    """E_s sum_a pi(a|s) (-alpha (log pi(a|s) + target_entropy)) = E_s alpha (H(pi(.|s)) - target_entropy), the policy
    held constant: descending it lowers alpha while the entropy is above the target, raises it below."""
    return (probs.detach() * (-log_alpha.exp() * (log_probs.detach() + target_entropy))).sum(dim=1).mean()


def real_next_observations(next_obs, infos):
    """Where an episode ended, next_obs is already the next episode's first observation: the transition's real
    next observation is in infos["final_obs"]."""
    real_next_obs = next_obs.copy()
    if "final_obs" in infos:
        ended = infos["_final_obs"]
        real_next_obs[ended] = np.stack(infos["final_obs"][ended])
    return real_next_obs


class FrameReplayBuffer:
    """A replay memory that stores each 84x84 frame once, not 8 times (4 stacked in obs, 4 in next obs): per env a
    ring of frame slots, each with its frame's position in that env's stream and its episode's first position. The
    transition stored with frame p has the observation stacked from frames p-4..p-1 and the next one from p-3..p,
    both rebuilt at sampling time; positions before the episode's first frame are clamped to it, which is how
    FrameStackObservation pads a new episode (every life is one). A transition is sampled only while all its frames
    are live (not overwritten), so stacks never mix episodes or overwritten frames.
    Memory: 7,056 bytes a frame plus 33 for the rest; at the default 1,000,000 frames 7.1 GB, and filling one took
    the process to 7.7 GB peak RSS (see README), where a buffer of whole observations would take 56 GB."""

    def __init__(self, buffer_size, num_envs, observation_space):
        self.stack = observation_space.shape[0]
        self.capacity = -(-buffer_size // num_envs)  # frame slots per env
        shape = (num_envs, self.capacity)
        self.frames = np.zeros(shape + observation_space.shape[1:], dtype=observation_space.dtype)
        self.positions = np.full(shape, -1, dtype=np.int64)  # the position of the slot's frame in its env's stream
        self.episode_starts = np.zeros(shape, dtype=np.int64)  # the position of its episode's first frame here
        self.ends_transition = np.zeros(shape, dtype=bool)  # False for the frames that only start an episode
        self.actions = np.zeros(shape, dtype=np.int64)
        self.rewards = np.zeros(shape, dtype=np.float32)
        self.terminations = np.zeros(shape, dtype=np.float32)
        self.counts = np.zeros(num_envs, dtype=np.int64)  # frames written per env
        self.open = np.zeros(num_envs, dtype=bool)  # whether the env's current episode already has frames here
        self.current_starts = np.zeros(num_envs, dtype=np.int64)

    def _write(self, i, frame, ends_transition, action=0, reward=0.0, termination=0.0):
        slot = self.counts[i] % self.capacity
        self.frames[i, slot], self.positions[i, slot] = frame, self.counts[i]
        self.episode_starts[i, slot], self.ends_transition[i, slot] = self.current_starts[i], ends_transition
        self.actions[i, slot], self.rewards[i, slot], self.terminations[i, slot] = action, reward, termination
        self.counts[i] += 1

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
            self._write(i, next_obs[i, -1], True, actions[i], rewards[i], terminations[i])
            if terminations[i] or truncations[i]:
                self.open[i] = False  # the next episode starts a new run of frames

    def __len__(self):
        """The frames held (transitions: one fewer per episode start)."""
        return int(np.minimum(self.counts, self.capacity).sum())

    def is_valid(self, envs, slots):
        positions = self.positions[envs, slots]
        oldest_needed = np.maximum(positions - self.stack, self.episode_starts[envs, slots])
        live = oldest_needed >= self.counts[envs] - self.capacity
        return (positions >= 0) & self.ends_transition[envs, slots] & live

    def valid_indices(self):
        """Every transition the buffer can return, as (envs, slots)."""
        envs, slots = np.indices(self.positions.shape).reshape(2, -1)
        valid = self.is_valid(envs, slots)
        return envs[valid], slots[valid]

    def _frames(self, envs, slots):
        """Frames p-4..p of each transition: its obs are the first four, its next obs the last four."""
        positions, starts = self.positions[envs, slots], self.episode_starts[envs, slots]
        stream = np.maximum(positions[:, None] + np.arange(-self.stack, 1), starts[:, None])
        return self.frames[envs[:, None], stream % self.capacity]

    def get(self, envs, slots):
        """obs, actions, rewards, next_obs, terminations of the given transitions, as numpy arrays."""
        frames = self._frames(envs, slots)
        return (
            frames[:, :-1],
            self.actions[envs, slots],
            self.rewards[envs, slots],
            frames[:, 1:],
            self.terminations[envs, slots],
        )

    def sample(self, batch_size, device):
        """Uniform over the transitions held: uniform over the filled slots, redrawing the few that are not valid."""
        filled = np.minimum(self.counts, self.capacity)
        ends = np.cumsum(filled)
        envs, slots = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        for _ in range(1000):
            draws = np.random.randint(0, ends[-1], size=batch_size)
            draw_envs = np.searchsorted(ends, draws, side="right")
            draw_slots = draws - (ends[draw_envs] - filled[draw_envs])
            valid = self.is_valid(draw_envs, draw_slots)
            envs, slots = np.concatenate([envs, draw_envs[valid]]), np.concatenate([slots, draw_slots[valid]])
            if len(envs) >= batch_size:
                break
        else:
            raise RuntimeError("the replay buffer holds no whole transition yet")
        envs, slots = envs[:batch_size], slots[:batch_size]
        frames = torch.from_numpy(self._frames(envs, slots)).to(device)  # one copy to the device for obs and next obs
        fields = (self.actions, self.rewards, self.terminations)
        actions, rewards, terminations = (torch.from_numpy(field[envs, slots]).to(device) for field in fields)
        return frames[:, :-1], actions, frames[:, 1:], rewards, terminations

    def state_dict(self):
        used = int(min(self.counts.max(), self.capacity))  # slots past this were never written
        arrays = ["frames", "positions", "episode_starts", "ends_transition", "actions", "rewards", "terminations"]
        state = {name: getattr(self, name)[:, :used] for name in arrays}
        return state | {"counts": self.counts, "open": self.open, "current_starts": self.current_starts}

    def load_state_dict(self, state):
        for name, value in state.items():
            if value.ndim == 1:  # per-env counters
                getattr(self, name)[:] = value
            else:  # per-slot arrays: the slots written so far
                getattr(self, name)[:, : value.shape[1]] = value


def emulator_state(env):
    """The emulator's state and RNG (sticky actions), and NoopResetEnv's RNG: ALE envs pickle only their arguments."""
    return env.unwrapped.ale.cloneState(include_rng=True), env.unwrapped.np_random


def pickle_envs(envs):
    """The sub-environments with their wrappers' state (frame stack, lives, episode statistics) and the emulators';
    None where they cannot be pickled (e.g. a video recorder)."""
    try:
        return cloudpickle.dumps([(env, emulator_state(env)) for env in envs.envs])
    except (pickle.PicklingError, TypeError):
        return None


def unpickle_envs(blob):
    envs = []
    for env, (state, np_random) in pickle.loads(blob):
        env.unwrapped.ale.restoreState(state)
        env.unwrapped.np_random = np_random
        envs.append(env)
    return envs


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

    counts = ["total_timesteps", "num_envs", "buffer_size", "batch_size", "update_frequency", "target_network_frequency"]
    for flag in counts + ["policy_lr", "q_lr"]:
        if not getattr(args, flag) > 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "learning_starts", "alpha"]:
        if not getattr(args, flag) >= 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}")
    if not 0.0 < args.tau <= 1.0:
        fail(f"--tau must be in (0, 1], got {args.tau}")
    if not 0.0 <= args.gamma <= 1.0:
        fail(f"--gamma must be in [0, 1], got {args.gamma}")
    if not 0.0 < args.target_entropy_scale <= 1.0:  # no policy has more entropy than the uniform one
        fail(f"--target-entropy-scale must be in (0, 1] (a fraction of log(actions)), got {args.target_entropy_scale}")
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
            "sac_atari.py trains on Atari games; use dqn.py or ppo.py for vector observations"
        )
    if not probe_is_ale:
        fail(f"--env-id {args.env_id} is not an ALE Atari game: sac_atari.py's wrappers read the emulator's lives")
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

    # seeding
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
    assert isinstance(envs.single_action_space, gym.spaces.Discrete), "ALE games have discrete actions"

    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "args.json"), "w") as f:
        json.dump({"script": os.path.basename(__file__), "run_name": run_name, "args": asdict(args)}, f, indent=2)

    actor = Actor(envs).to(device)
    qf = nn.ModuleList([SoftQNetwork(envs), SoftQNetwork(envs)]).to(device)  # the twin critics, independent
    qf_target = nn.ModuleList([SoftQNetwork(envs), SoftQNetwork(envs)]).to(device)
    qf_target.load_state_dict(qf.state_dict())
    q_params, q_target_params = list(qf.parameters()), list(qf_target.parameters())
    # Adam's epsilon 1e-4 for all three, as the original (not the default 1e-8: no huge steps where gradients are tiny)
    q_optimizer = optim.Adam(q_params, lr=args.q_lr, eps=1e-4)
    actor_optimizer = optim.Adam(actor.parameters(), lr=args.policy_lr, eps=1e-4)
    # a fraction of the uniform policy's entropy, log(n): the maximum, so a target at it would push alpha up forever
    target_entropy = args.target_entropy_scale * math.log(envs.single_action_space.n)
    log_alpha = torch.zeros(1, requires_grad=True, device=device)  # alpha starts at 1 when autotuned
    a_optimizer = optim.Adam([log_alpha], lr=args.q_lr, eps=1e-4)
    alpha = log_alpha.detach().exp() if args.autotune else torch.tensor(args.alpha, device=device)
    rb = FrameReplayBuffer(args.buffer_size, args.num_envs, envs.single_observation_space)

    learner = {"actor": actor, "qf": qf, "qf_target": qf_target, "q_optimizer": q_optimizer}  # checkpointed
    learner |= {"actor_optimizer": actor_optimizer, "a_optimizer": a_optimizer}
    num_iterations = args.total_timesteps // args.num_envs  # vector steps
    global_step, start_iteration = 0, 1
    updates_start = args.learning_starts  # learning starts after this step (later after a resume without the buffer)
    if checkpoint is None:
        obs, _ = envs.reset(seed=args.seed)
        wandb_run_id = None
    else:
        for key, part in learner.items():
            part.load_state_dict(checkpoint[key])
        log_alpha.data.copy_(checkpoint["log_alpha"])
        alpha = log_alpha.detach().exp() if args.autotune else alpha
        global_step, start_iteration = checkpoint["global_step"], checkpoint["iteration"] + 1
        if checkpoint["replay_buffer"] is not None:
            rb.load_state_dict(checkpoint["replay_buffer"])
            updates_start = checkpoint["updates_start"]
        else:
            updates_start = global_step + args.learning_starts
            refill = f"refilling with the policy for {args.learning_starts} steps, learning again after step {updates_start}"
            print(f"the checkpoint holds no replay buffer (--checkpoint-buffer was off): {refill}", file=sys.stderr)
        random.setstate(checkpoint["rng"]["python"])
        np.random.set_state(checkpoint["rng"]["numpy"])
        torch.set_rng_state(checkpoint["rng"]["torch"])
        if device.type == "cuda" and checkpoint["rng"]["cuda"] is not None:
            torch.cuda.set_rng_state_all(checkpoint["rng"]["cuda"])
        if checkpoint["envs"] is not None:
            obs = checkpoint["obs"]
        else:
            print("warning: the checkpoint holds no env state (it could not be pickled); starting new games", file=sys.stderr)
            obs, _ = envs.reset(seed=args.seed + global_step)
            rb.open[:] = False  # the buffer's open episodes were cut: the new ones start new runs of frames
        wandb_run_id = checkpoint["wandb_run_id"]

    if args.track:
        import wandb

        project = {"project": args.wandb_project_name, "entity": args.wandb_entity, "name": run_name, "save_code": True}
        # id None starts a new W&B run; a resumed run appends to its own
        wandb_run = wandb.init(**project, sync_tensorboard=True, config=vars(args), id=wandb_run_id, resume="allow")
        wandb_run_id = wandb_run.id
    # on resume, purge_step hides whatever the killed run logged after its last checkpoint: no step repeats
    writer = SummaryWriter(run_dir, purge_step=global_step + 1 if checkpoint is not None else None)
    if checkpoint is None:
        table = "\n".join(f"|{key}|{value}|" for key, value in vars(args).items())
        writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + table)

    def save_checkpoint(iteration):
        rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
        rng["cuda"] = torch.cuda.get_rng_state_all() if device.type == "cuda" else None  # the policy samples on the GPU
        state = {"args": asdict(args), "run_name": run_name, "iteration": iteration, "global_step": global_step}
        state |= {key: part.state_dict() for key, part in learner.items()} | {"log_alpha": log_alpha.detach().clone()}
        state |= {"updates_start": updates_start, "rng": rng, "envs": pickle_envs(envs), "obs": obs}
        state |= {"wandb_run_id": wandb_run_id}
        state["replay_buffer"] = rb.state_dict() if args.checkpoint_buffer else None  # plain arrays: loads without this script
        path = os.path.join(run_dir, "checkpoint.pt")
        torch.save(state, f"{path}.tmp")
        os.replace(f"{path}.tmp", path)  # atomic: a reader (or a resumed run) never sees a half-written checkpoint

    # Slurm and spot instances send SIGTERM before killing: finish the step, checkpoint, exit non-zero
    stop_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop_requested.set())

    recent_returns = deque(maxlen=20)
    on_terminal = sys.stdout.isatty()
    print(f"{run_name}: training to {args.total_timesteps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    description, stats = TextColumn("[bold]{task.description}"), TextColumn("{task.fields[stats]}")
    progress = Progress(description, BarColumn(), MofNCompleteColumn(), stats, TimeRemainingColumn(), disable=not on_terminal)
    progress_task = progress.add_task(args.exp_name, total=num_iterations * args.num_envs, completed=global_step, stats="")
    progress.start()
    start_time, start_step = time.time(), global_step

    for iteration in range(start_iteration, num_iterations + 1):
        global_step += args.num_envs
        if global_step <= args.learning_starts:  # uniformly random actions fill the buffer first
            actions = np.random.randint(envs.single_action_space.n, size=args.num_envs)
        else:  # then the policy's samples: SAC explores through its entropy, there is no epsilon
            with torch.inference_mode():
                actions, _, _ = actor.get_action(torch.as_tensor(obs, device=device))
            actions = actions.cpu().numpy()

        next_obs, rewards, terminations, truncations, infos = envs.step(actions)

        # whole games only: RecordEpisodeStatistics sits inside EpisodicLifeEnv and ClipRewardEnv
        if "final_info" in infos and "episode" in infos["final_info"]:
            for i in np.flatnonzero(infos["final_info"]["_episode"]):
                episodic_return = float(infos["final_info"]["episode"]["r"][i])
                recent_returns.append(episodic_return)
                writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                writer.add_scalar("charts/episodic_length", int(infos["final_info"]["episode"]["l"][i]), global_step)
        # the done flag is termination only (a lost life included): a truncated game bootstraps from its last frame
        rb.add(obs, real_next_observations(next_obs, infos), actions, rewards, terminations, truncations)
        obs = next_obs

        # training: one batch updates the critics, then the actor, then alpha
        if global_step > updates_start and iteration % args.update_frequency == 0:
            b_obs, b_actions, b_next_obs, b_rewards, b_terminations = rb.sample(args.batch_size, device)
            with torch.no_grad():
                _, next_log_pi, next_pi = actor.get_action(b_next_obs)
                next_q1, next_q2 = (q(b_next_obs) for q in qf_target)
                target = soft_td_target(b_rewards, b_terminations, next_pi, next_log_pi, next_q1, next_q2, alpha, args.gamma)
            qf1_a_values, qf2_a_values = (q(b_obs).gather(1, b_actions.unsqueeze(1)).squeeze(1) for q in qf)
            qf1_loss, qf2_loss = F.mse_loss(qf1_a_values, target), F.mse_loss(qf2_a_values, target)
            qf_loss = qf1_loss + qf2_loss
            q_optimizer.zero_grad()
            qf_loss.backward()
            q_optimizer.step()

            _, log_pi, pi = actor.get_action(b_obs)
            with torch.no_grad():  # the critics after their step, as constants
                q1_values, q2_values = (q(b_obs) for q in qf)
            actor_loss = actor_loss_fn(pi, log_pi, q1_values, q2_values, alpha)
            actor_optimizer.zero_grad()
            actor_loss.backward()
            actor_optimizer.step()

            if args.autotune:  # the same probabilities, detached: no second pass of the actor
                alpha_loss = alpha_loss_fn(pi, log_pi, log_alpha, target_entropy)
                a_optimizer.zero_grad()
                alpha_loss.backward()
                a_optimizer.step()
                alpha = log_alpha.detach().exp()

            if iteration % (100 * args.update_frequency) == 0:  # every 100 gradient steps; .item() waits for the GPU
                logs = {"qf1_values": qf1_a_values.mean(), "qf2_values": qf2_a_values.mean(), "qf1_loss": qf1_loss}
                logs |= {"qf2_loss": qf2_loss, "qf_loss": qf_loss / 2.0, "actor_loss": actor_loss, "alpha": alpha}
                logs |= {"alpha_loss": alpha_loss} if args.autotune else {}
                for name, value in logs.items():
                    writer.add_scalar(f"losses/{name}", value.item(), global_step)
                writer.add_scalar("charts/SPS", int((global_step - start_step) / (time.time() - start_time)), global_step)

        if global_step > updates_start and iteration % args.target_network_frequency == 0:  # tau 1 copies the critics
            with torch.no_grad():  # target += tau * (online - target), every tensor at once
                torch._foreach_lerp_(q_target_params, q_params, args.tau)

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
        # one flat state dict: "actor.trunk.0.weight", ..., "qf.0.trunk.0.weight", ...; the evaluation needs the actor only
        torch.save(nn.ModuleDict({"actor": actor, "qf": qf}).state_dict(), model_path)
        print(f"model saved to {model_path}")
        from cleanrl_utils.evals.sac_atari_eval import evaluate

        # 10 whole games, actions sampled from the policy, on seeds apart from training's
        episodic_returns = evaluate(
            model_path, make_env, args.env_id, 10, f"{run_name}-eval", Actor, device, args.capture_video, args.seed + 100_000
        )
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
