# DQN (Mnih et al. 2015) on Atari games with a frame-deduplicating replay buffer; docs: README.md#dqn_ataripy
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
    Without it, a resumed run refills an empty buffer: it acts epsilon-greedily, without learning, for `--learning-starts` steps"""
    resume: str | None = None
    """a run folder (`runs/{run_name}`) to continue from its checkpoint up to `--total-timesteps`"""

    # Algorithm specific arguments
    env_id: str = "BreakoutNoFrameskip-v4"
    """the id of the Atari game (any ALE id: `BreakoutNoFrameskip-v4` has no sticky actions, `ALE/Breakout-v5` repeats the last action with probability 0.25)"""
    total_timesteps: int = 10000000
    """total timesteps of the experiments (agent steps: 4 emulator frames each)"""
    learning_rate: float = 1e-4
    """the learning rate of the optimizer"""
    num_envs: int = 1
    """the number of parallel game environments"""
    buffer_size: int = 1000000
    """the replay memory size in frames, about as many transitions (each 84x84 frame is stored once: 1M take 7.1 GB,
    the process peaks at about 7.7 GB RSS with it full)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 1.0
    """the target network update rate (1.0 copies the Q-network)"""
    target_network_frequency: int = 1000
    """the number of vector steps between target network updates"""
    batch_size: int = 32
    """the batch size of sample from the replay memory"""
    start_e: float = 1.0
    """the starting epsilon for exploration"""
    end_e: float = 0.01
    """the ending epsilon for exploration"""
    exploration_fraction: float = 0.10
    """the fraction of `total-timesteps` it takes from start-e to go end-e"""
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


class QNetwork(nn.Module):
    """The Nature DQN CNN; it takes the uint8 frames and scales them itself, so the buffer and the batches stay uint8."""

    def __init__(self, envs):
        super().__init__()
        self.network = nn.Sequential(
            nn.Conv2d(envs.single_observation_space.shape[0], 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(3136, 512),
            nn.ReLU(),
            nn.Linear(512, envs.single_action_space.n),
        )

    def forward(self, x):
        return self.network(x / 255.0)


def linear_schedule(start_e: float, end_e: float, duration: int, t: int) -> float:
    """Epsilon falls linearly from start_e at step 0 to end_e at step `duration`, then stays there."""
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


def td_target(rewards, next_q_target, terminations, gamma):
    """r + gamma * max_a' Q_target(s', a'), without the bootstrap where the episode terminated (a lost life too, as
    in the paper). The ALE's time limit is a truncation, stored as not terminated: it bootstraps."""
    return rewards + gamma * next_q_target.max(dim=1).values * (1.0 - terminations)


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
    """The emulator's state with its RNG (sticky actions) and the env's RNG (NoopResetEnv's): ALE envs pickle as
    their constructor's arguments (EzPickle), so unpickling alone would restart the game."""
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


def atomic_save(obj, path):
    """A reader (or a resumed run) sees the old file or the new one, never a half-written one."""
    tmp_path = f"{path}.tmp"
    torch.save(obj, tmp_path)
    os.replace(tmp_path, path)


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

    for flag in ["total_timesteps", "num_envs", "buffer_size", "batch_size", "target_network_frequency", "train_frequency"]:
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "learning_starts"]:
        if getattr(args, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}")
    if not 0.0 < args.exploration_fraction <= 1.0:
        fail(f"--exploration-fraction must be in (0, 1], got {args.exploration_fraction}")
    if not 0.0 < args.tau <= 1.0:
        fail(f"--tau must be in (0, 1], got {args.tau}")
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
            "dqn_atari.py trains on Atari games; use dqn.py for vector observations"
        )
    if not probe_is_ale:
        fail(f"--env-id {args.env_id} is not an ALE Atari game: dqn_atari.py's wrappers read the emulator's lives")
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

    if checkpoint is None:
        run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
        run_dir = f"runs/{run_name}"
    else:
        run_name, run_dir = checkpoint["run_name"], args.resume.rstrip("/")

    # seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    # (unlike dqn.py, torch keeps all CPU threads: a batch of 32 CNN passes is large enough to split)

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

    q_network = QNetwork(envs).to(device)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate)
    target_network = QNetwork(envs).to(device)
    target_network.load_state_dict(q_network.state_dict())
    rb = FrameReplayBuffer(args.buffer_size, args.num_envs, envs.single_observation_space)

    num_iterations = args.total_timesteps // args.num_envs  # vector steps
    global_step, start_iteration = 0, 1
    updates_start = args.learning_starts  # learning starts after this step (later after a resume without the buffer)
    if checkpoint is None:
        obs, _ = envs.reset(seed=args.seed)
        wandb_run_id = None
    else:
        q_network.load_state_dict(checkpoint["q_network"])
        target_network.load_state_dict(checkpoint["target_network"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        global_step, start_iteration = checkpoint["global_step"], checkpoint["iteration"] + 1
        if checkpoint["replay_buffer"] is not None:
            rb.load_state_dict(checkpoint["replay_buffer"])
            updates_start = checkpoint["updates_start"]
        else:
            updates_start = global_step + args.learning_starts
            print(
                f"the checkpoint holds no replay buffer (--checkpoint-buffer was off): refilling it for "
                f"{args.learning_starts} steps, learning again after step {updates_start}",
                file=sys.stderr,
            )
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

        wandb_run = wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=vars(args),
            name=run_name,
            id=wandb_run_id,  # None starts a new W&B run; a resumed run appends to its own
            resume="allow",
            save_code=True,
        )
        wandb_run_id = wandb_run.id
    # on resume, purge_step hides whatever the killed run logged after its last checkpoint: no step repeats
    writer = SummaryWriter(run_dir, purge_step=global_step + 1 if checkpoint is not None else None)
    if checkpoint is None:
        writer.add_text(
            "hyperparameters",
            "|param|value|\n|-|-|\n" + "\n".join(f"|{key}|{value}|" for key, value in vars(args).items()),
        )

    def save_checkpoint(iteration):
        state = {
            "args": asdict(args),
            "run_name": run_name,
            "iteration": iteration,
            "global_step": global_step,
            "updates_start": updates_start,
            "q_network": q_network.state_dict(),
            "target_network": target_network.state_dict(),
            "optimizer": optimizer.state_dict(),
            "replay_buffer": rb.state_dict() if args.checkpoint_buffer else None,  # plain arrays: loads without this script
            "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
            "envs": pickle_envs(envs),
            "obs": obs,
            "wandb_run_id": wandb_run_id,
        }
        atomic_save(state, os.path.join(run_dir, "checkpoint.pt"))

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
        # epsilon-greedy, per environment; the Q-network runs only when some environment exploits
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
        explore = np.random.random(args.num_envs) < epsilon
        actions = np.random.randint(envs.single_action_space.n, size=args.num_envs)
        if not explore.all():
            with torch.inference_mode():
                q_values = q_network(torch.as_tensor(obs, device=device))
            actions = np.where(explore, actions, q_values.argmax(dim=1).cpu().numpy())

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

        # training
        if global_step > updates_start:
            if iteration % args.train_frequency == 0:
                b_obs, b_actions, b_next_obs, b_rewards, b_terminations = rb.sample(args.batch_size, device)
                with torch.no_grad():
                    target = td_target(b_rewards, target_network(b_next_obs), b_terminations, args.gamma)
                old_val = q_network(b_obs).gather(1, b_actions.unsqueeze(1)).squeeze(1)
                loss = F.mse_loss(target, old_val)

                if iteration % (100 * args.train_frequency) == 0:
                    writer.add_scalar("losses/td_loss", loss.item(), global_step)
                    writer.add_scalar("losses/q_values", old_val.mean().item(), global_step)
                    writer.add_scalar("charts/epsilon", epsilon, global_step)
                    writer.add_scalar("charts/SPS", int((global_step - start_step) / (time.time() - start_time)), global_step)

                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

            # update target network
            if iteration % args.target_network_frequency == 0:
                for target_param, q_param in zip(target_network.parameters(), q_network.parameters()):
                    target_param.data.copy_(args.tau * q_param.data + (1.0 - args.tau) * target_param.data)

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
        torch.save(q_network.state_dict(), model_path)
        print(f"model saved to {model_path}")
        from cleanrl_utils.evals.dqn_eval import evaluate

        episodic_returns = evaluate(
            model_path,
            make_env,
            args.env_id,
            eval_episodes=10,
            run_name=f"{run_name}-eval",
            Model=QNetwork,
            device=device,
            epsilon=0.05,
            capture_video=args.capture_video,
            seed=args.seed + 100_000,
        )
        for idx, episodic_return in enumerate(episodic_returns):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)
        print(
            f"evaluation over {len(episodic_returns)} games: {np.mean(episodic_returns):.1f} +- {np.std(episodic_returns):.1f}"
        )

    envs.close()
    writer.close()
    if args.upload_model:  # after the envs close, so the last videos are complete
        from cleanrl_utils.huggingface import push

        push(run_dir, episodic_returns, hf_repo_id, command=shlex.join(["python", *sys.argv]))
    if args.track and args.capture_video:
        for video_path in sorted(glob.glob(f"videos/{run_name}*/*.mp4")):
            wandb.log({f"videos/{os.path.basename(os.path.dirname(video_path))}": wandb.Video(video_path)})
