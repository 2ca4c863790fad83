# QDagger (Agarwal et al. 2022, "Reincarnating RL"): an IMPALA-CNN DQN student distilled from a DQN teacher on Atari; docs: README.md#qdagger_dqn_atari_impalacnnpy
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
    """steps between checkpoints written to `runs/{run_name}/checkpoint.pt` (0 = off), in each phase's steps"""
    checkpoint_buffer: bool = False
    """whether checkpoints also hold the phase's replay buffer (7.1 GB at the default size); without it a resumed run
    refills it: offline, the teacher acts `--teacher-steps` again; online, the student acts `--learning-starts` steps
    without learning"""
    resume: str | None = None
    """a run folder (`runs/{run_name}`) to continue from its checkpoint up to `--total-timesteps`"""

    # Algorithm specific arguments
    env_id: str = "BreakoutNoFrameskip-v4"
    """the id of the Atari game (any ALE id: `BreakoutNoFrameskip-v4` has no sticky actions, `ALE/Breakout-v5` repeats the last action with probability 0.25)"""
    total_timesteps: int = 10000000
    """total timesteps of the student's online phase (agent steps: 4 emulator frames each)"""
    learning_rate: float = 1e-4
    """the learning rate of the optimizer"""
    num_envs: int = 1
    """the number of parallel game environments"""
    buffer_size: int = 1000000
    """the replay memory size in frames (about as many transitions) of the teacher's buffer, then the student's: each
    84x84 frame is stored once, 1M take 7.1 GB; one buffer at a time, 8.0 GB peak RSS at the defaults (see README)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 1.0
    """the target network update rate (1.0 copies the Q-network)"""
    target_network_frequency: int = 1000
    """the number of vector steps (offline: updates) between target network updates"""
    batch_size: int = 32
    """the batch size of sample from the replay memory"""
    start_e: float = 1.0
    """the starting epsilon for exploration"""
    end_e: float = 0.01
    """the ending epsilon for exploration"""
    exploration_fraction: float = 0.10
    """the fraction of `total-timesteps` it takes from start-e to go end-e"""
    learning_starts: int = 80000
    """timestep of the online phase to start learning"""
    train_frequency: int = 4
    """the number of vector steps between gradient steps"""

    # QDagger specific arguments
    teacher_model_path: str | None = None
    """the teacher: a `.cleanrl_model` saved by `dqn_atari.py --save-model` on the same game"""
    teacher_model_repo: str | None = None
    """or a Hugging Face Hub repository made by `dqn_atari.py --upload-model` (downloads its `dqn_atari.cleanrl_model`)"""
    teacher_eval_episodes: int = 10
    """the number of whole games the teacher plays (epsilon 0.05) to measure the return the student must reach"""
    teacher_steps: int = 500000
    """the number of steps the teacher acts to fill the teacher's replay buffer"""
    teacher_start_e: float = 0.1
    """the teacher's epsilon at its first step, falling linearly to end-e at its last (the original starts at 1.0)"""
    offline_steps: int = 500000
    """the number of student updates on the teacher's buffer before the student acts"""
    temperature: float = 1.0
    """the temperature of the softmax over Q-values in the distillation loss"""


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


class TeacherNetwork(nn.Module):
    """dqn_atari.py's QNetwork, the Nature DQN CNN, layer for layer: its saved weights load as they are."""

    def __init__(self, envs):
        super().__init__()
        channels, n_actions = envs.single_observation_space.shape[0], envs.single_action_space.n
        convs = [nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU()]
        head = [nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(), nn.Linear(3136, 512), nn.ReLU()]
        self.network = nn.Sequential(*convs, *head, nn.Linear(512, n_actions))

    def forward(self, x):
        return self.network(x / 255.0)


class ConvSequence(nn.Module):
    """IMPALA's stack: conv 3x3, max-pool 3x3 stride 2 (halving height and width, rounding up), two residual blocks."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.res_convs = nn.ModuleList(nn.Conv2d(out_channels, out_channels, kernel_size=3, padding=1) for _ in range(4))

    def forward(self, x):
        x = F.max_pool2d(self.conv(x), kernel_size=3, stride=2, padding=1)
        for conv0, conv1 in zip(self.res_convs[0::2], self.res_convs[1::2]):  # a residual block: x + conv(relu(conv(relu(x))))
            x = x + conv1(F.relu(conv0(F.relu(x))))
        return x


class QNetwork(nn.Module):
    """The student: the IMPALA CNN (Espeholt et al. 2018), a larger network than the teacher's, as in the paper's
    Atari experiments. (4, 84, 84) -> 16x42x42 -> 32x21x21 -> 32x11x11 -> 256 -> actions; uint8 in, scaled here."""

    def __init__(self, envs):
        super().__init__()
        channels, height, width = envs.single_observation_space.shape
        stacks = []
        for out_channels in [16, 32, 32]:
            stacks.append(ConvSequence(channels, out_channels))
            channels, height, width = out_channels, (height + 1) // 2, (width + 1) // 2
        head = [nn.Flatten(), nn.ReLU(), nn.Linear(channels * height * width, 256), nn.ReLU()]
        self.network = nn.Sequential(*stacks, *head, nn.Linear(256, envs.single_action_space.n))

    def forward(self, x):
        return self.network(x / 255.0)


def distillation_loss(teacher_q, student_q, temperature):
    """QDagger's distillation term: the cross-entropy H(softmax(teacher_q / T), softmax(student_q / T)), averaged
    over the batch (the original sums its KL over the batch; the KL differs by the teacher's entropy, a constant)."""
    teacher_probs = F.softmax(teacher_q / temperature, dim=1)
    return -(teacher_probs * F.log_softmax(student_q / temperature, dim=1)).sum(dim=1).mean()


def distill_coefficient(student_returns, teacher_mean_return, min_games=10):
    """How much the student still imitates online: 1 - min(1, its mean recent score / the teacher's mean score), so 0
    once it matches the teacher; 1 until `min_games` whole games. A teacher <= 0: 1 while the student is below, else 0."""
    if len(student_returns) < min_games:
        return 1.0
    student_mean = float(np.mean(student_returns))
    if teacher_mean_return <= 0:
        return float(student_mean < teacher_mean_return)
    return 1.0 - min(1.0, max(0.0, student_mean / teacher_mean_return))


def evaluate_teacher(teacher, env_id, episodes, seed, device, epsilon=0.05):
    """The teacher's scores over whole games, epsilon-greedy: the games cleanrl_utils/evals/dqn_eval.py plays."""
    env = gym.vector.SyncVectorEnv([make_env(env_id, 0, False, "")], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    rng, returns, (obs, _) = np.random.default_rng(seed), [], env.reset(seed=seed)
    while len(returns) < episodes:
        if rng.random() < epsilon:
            actions = rng.integers(env.single_action_space.n, size=len(obs))
        else:
            with torch.no_grad():
                actions = teacher(torch.as_tensor(obs, dtype=torch.float32, device=device)).argmax(dim=1).cpu().numpy()
        obs, _, _, _, infos = env.step(actions)
        ended = np.flatnonzero(infos.get("final_info", {}).get("_episode", []))
        returns += [float(infos["final_info"]["episode"]["r"][i]) for i in ended]
    env.close()
    return returns[:episodes]


def load_teacher(path, n_actions):
    """The teacher's weights, or one line saying why this file cannot be the teacher."""
    try:
        weights = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        fail(f"--teacher-model-path {path}: no such file")
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as e:  # a file torch cannot read
        fail(f"{path}: not a model saved by dqn_atari.py --save-model ({type(e).__name__}: {str(e).splitlines()[0]})")
    if not isinstance(weights, dict) or "network.9.weight" not in weights:
        fail(f"{path}: not a model saved by dqn_atari.py --save-model (its Nature-CNN Q-network)")
    if (teacher_actions := weights["network.9.weight"].shape[0]) != n_actions:
        fail(f"{path}: the teacher has {teacher_actions} actions, the game {n_actions}: use a teacher of the same game")
    return weights


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

    positive = ["total_timesteps", "num_envs", "buffer_size", "batch_size", "target_network_frequency", "train_frequency"]
    for flag in positive + ["teacher_steps", "teacher_eval_episodes", "temperature"]:
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "learning_starts", "offline_steps"]:
        if getattr(args, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}")
    for flag in ["exploration_fraction", "tau"]:
        if not 0.0 < getattr(args, flag) <= 1.0:
            fail(f"--{flag.replace('_', '-')} must be in (0, 1], got {getattr(args, flag)}")
    if args.batch_size > args.buffer_size:
        fail(f"--batch-size {args.batch_size} is larger than --buffer-size {args.buffer_size}")
    if args.buffer_size < 16 * args.num_envs:  # a stack needs 5 live frames per env; keep a margin
        fail(f"--buffer-size {args.buffer_size} is too small: at least 16 frames per env ({16 * args.num_envs})")
    if checkpoint is None and (args.teacher_model_path is None) == (args.teacher_model_repo is None):
        fail("give exactly one teacher: --teacher-model-path (a dqn_atari.py model file) or --teacher-model-repo (a Hub repo)")
    gym.register_envs(ale_py)
    try:
        module, _, registered_id = args.env_id.rpartition(":")
        if module:  # a user's own env: importing its module registers it, as gym.make would
            importlib.import_module(module)
        probe = gym.make(registered_id)  # the bare env, to check that it is an Atari game before building the stack
    except (gym.error.Error, ModuleNotFoundError) as e:
        fail(f"--env-id {args.env_id}: {e}")
    probe_space, probe_is_ale, probe_actions = probe.observation_space, hasattr(probe.unwrapped, "ale"), probe.action_space
    probe.close()
    if not (isinstance(probe_space, gym.spaces.Box) and len(probe_space.shape) in (2, 3)):
        shape = getattr(probe_space, "shape", None)
        fail(f"--env-id {args.env_id} has observations of shape {shape}, not images: this script trains on Atari; use dqn.py")
    if not probe_is_ale:
        fail(f"--env-id {args.env_id} is not an ALE Atari game: this script's wrappers read the emulator's lives")
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
    teacher_path = args.teacher_model_path
    if checkpoint is None and args.teacher_model_repo is not None:  # the user asked for the network
        from huggingface_hub import hf_hub_download

        try:
            teacher_path = hf_hub_download(args.teacher_model_repo, "dqn_atari.cleanrl_model")
        except (OSError, ValueError) as e:  # offline, no such repository or file
            fail(f"--teacher-model-repo {args.teacher_model_repo}: {type(e).__name__}: {str(e).splitlines()[0]}")
    # a resumed run needs neither the teacher's file nor the network
    teacher_weights = checkpoint["teacher"] if checkpoint else load_teacher(teacher_path, probe_actions.n)

    run_name = checkpoint["run_name"] if checkpoint else f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    run_dir = args.resume.rstrip("/") if checkpoint else f"runs/{run_name}"
    wandb_run_id = checkpoint["wandb_run_id"] if checkpoint else None  # a resumed run appends to its own W&B run

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

    q_network = QNetwork(envs).to(device)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate)
    target_network = QNetwork(envs).to(device)
    target_network.load_state_dict(q_network.state_dict())
    teacher = TeacherNetwork(envs).to(device)
    teacher.load_state_dict(teacher_weights)
    rb = FrameReplayBuffer(args.buffer_size, args.num_envs, envs.single_observation_space)  # the teacher's, then the student's

    # where the run is: its phase, the teacher's env steps, the offline updates, the student's env steps (online)
    phase, teacher_step, offline_step, global_step = "teacher", 0, 0, 0
    updates_start = args.learning_starts  # online learning starts after this step (later after a resume without the buffer)
    recent_returns = deque(maxlen=10)  # the student's last whole games (as the original): the distillation coefficient's
    if checkpoint is None:
        obs, _ = envs.reset(seed=args.seed)
        # on the games (seed) of the student's final evaluation, so that the two scores compare
        teacher_returns = evaluate_teacher(teacher, args.env_id, args.teacher_eval_episodes, args.seed + 100_000, device)
    else:
        for name, network in [("q_network", q_network), ("target_network", target_network), ("optimizer", optimizer)]:
            network.load_state_dict(checkpoint[name])
        phase, teacher_step, offline_step = checkpoint["phase"], checkpoint["teacher_step"], checkpoint["offline_step"]
        global_step, teacher_returns = checkpoint["global_step"], checkpoint["teacher_returns"]
        recent_returns.extend(checkpoint["recent_returns"])
        refill = None
        if checkpoint["replay_buffer"] is not None:
            rb.load_state_dict(checkpoint.pop("replay_buffer"))
            updates_start = checkpoint["updates_start"]
        elif phase == "online":
            updates_start = global_step + args.learning_starts
            refill = f"refilling it for {args.learning_starts} steps, learning again after step {updates_start}"
        else:  # the offline updates need the teacher's data: the teacher plays again, its epsilon schedule from the start
            teacher_step = 0
            refill = f"the teacher refills it for {args.teacher_steps} steps, then offline updates go on after {offline_step}"
        if refill is not None:
            print(f"the checkpoint holds no replay buffer (--checkpoint-buffer was off): {refill}", file=sys.stderr)
        random.setstate(checkpoint["rng"]["python"])
        np.random.set_state(checkpoint["rng"]["numpy"])
        torch.set_rng_state(checkpoint["rng"]["torch"])
        if checkpoint["envs"] is not None:
            obs = checkpoint["obs"]
        else:
            print("warning: the checkpoint holds no env state (it could not be pickled); starting new games", file=sys.stderr)
            obs, _ = envs.reset(seed=args.seed + teacher_step + offline_step + global_step)
            rb.open[:] = False  # the buffer's open episodes were cut: the new ones start new runs of frames
    teacher_mean = float(np.mean(teacher_returns))

    if args.track:
        import wandb

        wandb_run = wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True,
                               config=vars(args), name=run_name, id=wandb_run_id, resume="allow", save_code=True)  # fmt: skip
        wandb_run_id = wandb_run.id
    # TensorBoard's step axis is one for the whole run, so that a resume's purge_step hides exactly what the killed run
    # logged after its checkpoint: offline update k at step k, online env step s at offline_steps + s (as the original)
    writer = SummaryWriter(run_dir, purge_step=offline_step + global_step + 1 if checkpoint is not None else None)
    if checkpoint is None:
        table = "\n".join([f"|{key}|{value}|" for key, value in vars(args).items()])
        writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")
        writer.add_scalar("charts/teacher/avg_episodic_return", teacher_mean, 0)
    print(f"the teacher scores {teacher_mean:.1f} on average over {len(teacher_returns)} games: {teacher_returns}")

    def save_checkpoint():
        state = {"args": asdict(args), "run_name": run_name, "wandb_run_id": wandb_run_id, "updates_start": updates_start}
        state |= {"phase": phase, "teacher_step": teacher_step, "offline_step": offline_step, "global_step": global_step}
        state |= {"teacher": teacher.state_dict(), "teacher_returns": teacher_returns, "recent_returns": list(recent_returns)}
        state |= {"q_network": q_network.state_dict(), "target_network": target_network.state_dict()}
        state |= {"optimizer": optimizer.state_dict(), "envs": pickle_envs(envs), "obs": obs}
        state["rng"] = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
        state["replay_buffer"] = rb.state_dict() if args.checkpoint_buffer else None  # plain arrays: loads without this script
        atomic_save(state, os.path.join(run_dir, "checkpoint.pt"))

    # Slurm and spot instances send SIGTERM before killing: finish the step, checkpoint, exit non-zero
    stop_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop_requested.set())

    def crossed(step, advance, every):  # whether the last `advance` steps passed a multiple of `every`
        return every > 0 and step // every > (step - advance) // every

    def end_of_step(step, advance, total, stats):
        """About 20 reports a phase (the bar on a terminal, a line otherwise); the checkpoints; SIGTERM."""
        if crossed(step, advance, max(1, total // 20)) or step >= total:
            rate = f"{(step - start_step) / (time.time() - start_time):.0f}/s"
            progress.update(progress_task, description=phase, total=total, completed=step, stats=f"{rate}, {stats}")
            if not on_terminal:
                print(f"{phase}: {step}/{total}, {rate}, {stats}", flush=True)
        if crossed(step, advance, args.checkpoint_interval) or stop_requested.is_set():
            save_checkpoint()
        if stop_requested.is_set():
            progress.stop()
            print(f"SIGTERM in the {phase} phase: checkpoint written; continue with --resume {run_dir}", file=sys.stderr)
            envs.close()
            writer.close()
            sys.exit(128 + signal.SIGTERM)

    def play(network, epsilon):
        """One vector step, epsilon-greedy on `network`, stored in rb; returns the (score, length) of the whole games
        that ended (RecordEpisodeStatistics sits inside EpisodicLifeEnv and ClipRewardEnv)."""
        global obs
        explore = np.random.random(args.num_envs) < epsilon
        actions = np.random.randint(envs.single_action_space.n, size=args.num_envs)
        if not explore.all():  # the network runs only when some environment exploits
            with torch.inference_mode():
                q_values = network(torch.as_tensor(obs, device=device))
            actions = np.where(explore, actions, q_values.argmax(dim=1).cpu().numpy())
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        # the done flag is termination only (a lost life included): a truncated game bootstraps from its last frame
        rb.add(obs, real_next_observations(next_obs, infos), actions, rewards, terminations, truncations)
        obs, games = next_obs, np.flatnonzero(infos.get("final_info", {}).get("_episode", []))
        return [(float(infos["final_info"]["episode"]["r"][i]), int(infos["final_info"]["episode"]["l"][i])) for i in games]

    def qdagger_update(distill_coeff):
        """One gradient step on a batch of rb: the TD loss plus distill_coeff times the distillation loss."""
        b_obs, b_actions, b_next_obs, b_rewards, b_terminations = rb.sample(args.batch_size, device)
        with torch.no_grad():
            target = td_target(b_rewards, target_network(b_next_obs), b_terminations, args.gamma)
            teacher_q = teacher(b_obs)
        student_q = q_network(b_obs)
        old_val = student_q.gather(1, b_actions.unsqueeze(1)).squeeze(1)
        td_loss, distill_loss = F.mse_loss(target, old_val), distillation_loss(teacher_q, student_q, args.temperature)
        loss = td_loss + distill_coeff * distill_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return {"loss": loss, "td_loss": td_loss, "distill_loss": distill_loss, "q_values": old_val.mean()}

    def update_target_network():
        for target_param, q_param in zip(target_network.parameters(), q_network.parameters()):
            target_param.data.copy_(args.tau * q_param.data + (1.0 - args.tau) * target_param.data)

    num_iterations = args.total_timesteps // args.num_envs  # online vector steps
    on_terminal = sys.stdout.isatty()
    print(f"{run_name}: teacher data, offline updates, then {args.total_timesteps} steps on {device}; logs in {run_dir}")
    description, stats = TextColumn("[bold]{task.description}"), TextColumn("{task.fields[stats]}")
    progress = Progress(description, BarColumn(), MofNCompleteColumn(), stats, TimeRemainingColumn(), disable=not on_terminal)
    progress_task = progress.add_task(phase, total=None, stats="")
    progress.start()

    if phase != "online":
        # 1. the teacher fills a replay buffer (the paper does not assume the teacher's own buffer is at hand; Fig. A.19)
        phase, teacher_games, start_time, start_step = "teacher", deque(maxlen=10), time.time(), teacher_step
        while teacher_step < args.teacher_steps:
            teacher_step += args.num_envs
            epsilon = linear_schedule(args.teacher_start_e, args.end_e, args.teacher_steps, teacher_step)
            teacher_games.extend(score for score, _ in play(teacher, epsilon))
            recent = f"teacher's return {np.mean(teacher_games):.1f}" if teacher_games else "teacher's return -"
            end_of_step(teacher_step, args.num_envs, args.teacher_steps, recent)

        # 2. offline: the student learns from the teacher's data alone, the distillation at full weight
        phase, start_time, start_step = "offline", time.time(), offline_step
        while offline_step < args.offline_steps:
            offline_step += 1
            losses = qdagger_update(distill_coeff=1.0)
            if offline_step % args.target_network_frequency == 0:
                update_target_network()
            if offline_step % 100 == 0 or offline_step == args.offline_steps:
                for name, value in losses.items():
                    writer.add_scalar(f"offline/{name}", value.item(), offline_step)
            end_of_step(offline_step, 1, args.offline_steps, f"distillation loss {losses['distill_loss'].item():.3f}")

        rb = None  # the teacher's buffer goes before the student's fills: one full buffer in memory at a time
        rb = FrameReplayBuffer(args.buffer_size, args.num_envs, envs.single_observation_space)
        obs, _ = envs.reset(seed=args.seed + 1)  # the student starts its own games

    # 3. online: the student acts and learns; the distillation fades as its score nears the teacher's
    phase, start_time, start_step = "online", time.time(), global_step
    for iteration in range(global_step // args.num_envs + 1, num_iterations + 1):
        global_step += args.num_envs
        log_step = args.offline_steps + global_step
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
        for episodic_return, episodic_length in play(q_network, epsilon):
            recent_returns.append(episodic_return)
            writer.add_scalar("charts/episodic_return", episodic_return, log_step)
            writer.add_scalar("charts/episodic_length", episodic_length, log_step)

        if global_step > updates_start:
            if iteration % args.train_frequency == 0:
                distill_coeff = distill_coefficient(recent_returns, teacher_mean)
                losses = qdagger_update(distill_coeff)
                if iteration % (100 * args.train_frequency) == 0:
                    for name, value in losses.items():
                        writer.add_scalar(f"losses/{name}", value.item(), log_step)
                    writer.add_scalar("charts/distill_coeff", distill_coeff, log_step)
                    writer.add_scalar("charts/epsilon", epsilon, log_step)
                    writer.add_scalar("charts/SPS", int((global_step - start_step) / (time.time() - start_time)), log_step)
            if iteration % args.target_network_frequency == 0:
                update_target_network()

        recent = f"return {np.mean(recent_returns):.1f}" if recent_returns else "return -"
        end_of_step(global_step, args.num_envs, num_iterations * args.num_envs, recent)

    progress.stop()

    if args.save_model:
        model_path = f"{run_dir}/{args.exp_name}.cleanrl_model"
        torch.save(q_network.state_dict(), model_path)
        print(f"model saved to {model_path}")
        from cleanrl_utils.evals.dqn_eval import evaluate

        # 10 games, epsilon 0.05, the seed of the teacher's evaluation: the same games
        episodic_returns = evaluate(model_path, make_env, args.env_id, 10, f"{run_name}-eval", QNetwork, device, epsilon=0.05,
                                    capture_video=args.capture_video, seed=args.seed + 100_000)  # fmt: skip
        for idx, episodic_return in enumerate(episodic_returns):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)
        mean, std = np.mean(episodic_returns), np.std(episodic_returns)
        print(f"evaluation over {len(episodic_returns)} games: {mean:.1f} +- {std:.1f} (the teacher: {teacher_mean:.1f})")

    envs.close()
    writer.close()
    if args.upload_model:  # after the envs close, so the last videos are complete
        from cleanrl_utils.huggingface import push

        push(run_dir, episodic_returns, hf_repo_id, command=shlex.join(["python", *sys.argv]))
    if args.track and args.capture_video:
        for video_path in sorted(glob.glob(f"videos/{run_name}*/*.mp4")):
            wandb.log({f"videos/{os.path.basename(os.path.dirname(video_path))}": wandb.Video(video_path)})
