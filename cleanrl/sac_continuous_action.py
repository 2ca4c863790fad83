# SAC (Haarnoja et al. 2018): twin Q-networks, automatic entropy tuning; docs: README.md#sac_continuous_actionpy
import ctypes.util
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

import cloudpickle
import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
import tyro
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from torch import nn, optim
from torch.utils.tensorboard import SummaryWriter

# MuJoCo renders videos through OpenGL, and reads MUJOCO_GL once, when it is first imported. Without a display,
# EGL renders off-screen (Debian/Ubuntu packages libegl1 and libegl-mesa0); a MUJOCO_GL of your own always wins
HEADLESS = sys.platform.startswith("linux") and not os.environ.get("DISPLAY")
if HEADLESS and "MUJOCO_GL" not in os.environ and ctypes.util.find_library("EGL"):
    os.environ["MUJOCO_GL"] = "egl"


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
    """whether to save the model into `runs/{run_name}` and evaluate it for 10 episodes"""
    upload_model: bool = False
    """whether to upload the saved model, its evaluation and videos to the Hugging Face Hub (with --save-model)"""
    hf_entity: str | None = None
    """the user or organization of the Hugging Face Hub model repository (default: the token's user)"""
    checkpoint_interval: int = 0
    """environment steps between checkpoints written to `runs/{run_name}/checkpoint.pt` (0 = off)"""
    checkpoint_buffer: bool = False
    """whether checkpoints also hold the replay buffer (1M HalfCheetah transitions take 170 MB).
    Without it, a resumed run refills an empty buffer: it acts with its policy, without learning, for `--learning-starts` steps"""
    resume: str | None = None
    """a run folder (`runs/{run_name}`) to continue from its checkpoint up to `--total-timesteps`"""

    # Algorithm specific arguments
    env_id: str = "HalfCheetah-v4"
    """the id of the environment (Gymnasium, `dm_control/{domain}-{task}-v0`, or `module:EnvName-v0` for your own)"""
    total_timesteps: int = 1000000
    """total timesteps of the experiments"""
    num_envs: int = 1
    """the number of parallel game environments (one gradient step per vector step)"""
    buffer_size: int = int(1e6)
    """the replay memory buffer size"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 0.005
    """target smoothing coefficient"""
    batch_size: int = 256
    """the batch size of sample from the replay memory"""
    learning_starts: int = int(5e3)
    """timestep to start learning (random actions until then)"""
    policy_lr: float = 3e-4
    """the learning rate of the policy network optimizer"""
    q_lr: float = 1e-3
    """the learning rate of the Q network optimizer (and of the entropy coefficient's)"""
    policy_frequency: int = 2
    """the frequency of training policy (delayed); the policy then takes this many steps, to keep pace"""
    target_network_frequency: int = 1
    """the frequency of updates for the target networks"""
    alpha: float = 0.2
    """entropy regularization coefficient (when not autotuned)"""
    autotune: bool = True
    """automatic tuning of the entropy coefficient"""


def fail(message: str):
    """Bad input ends with one line on stderr and exit code 2, before any heavy work."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def register_env(env_id):
    """Make `env_id` known to gym.make: a user's `module:EnvName-v0` registers itself when its module is imported,
    shimmy registers the DeepMind Control tasks (imported only when asked for)."""
    module, _, registered_id = env_id.rpartition(":")
    if module:
        importlib.import_module(module)
    if registered_id.startswith("dm_control/"):
        # dm_control's display loads Mesa's LLVM on import; the process crashes if Triton (loaded by torch's compiler
        # with the first optimizer) brings its own LLVM after it, so torch's compiler is loaded first
        importlib.import_module("torch._dynamo")
        import shimmy

        gym.register_envs(shimmy)
    return registered_id


def make_env(env_id, idx, capture_video, run_name):
    def thunk():
        register_env(env_id)
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)
        if isinstance(env.observation_space, gym.spaces.Dict):  # dm_control observes a dict of arrays
            env = gym.wrappers.FlattenObservation(env)
        return gym.wrappers.RecordEpisodeStatistics(env)

    return thunk


class SoftQNetwork(nn.Module):
    """The twin soft Q-networks in one module: each layer holds both networks' weights, shape (2, in, out), and one
    batched matmul (baddbmm) runs both; on CPU that is ~20% faster than two nn.Linear stacks (fewer, larger kernels,
    and no transposed weight). The networks stay independent: their own initialization, weights and gradients."""

    def __init__(self, envs, num_networks=2, hidden=256):
        super().__init__()
        obs_dim, action_dim = np.prod(envs.single_observation_space.shape), np.prod(envs.single_action_space.shape)
        sizes = [int(obs_dim + action_dim), hidden, hidden, 1]
        self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            bound = 1 / math.sqrt(fan_in)  # nn.Linear's default initialization, U(-1/sqrt(fan_in), 1/sqrt(fan_in))
            self.weights.append(nn.Parameter(torch.empty(num_networks, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(num_networks, 1, fan_out).uniform_(-bound, bound)))

    def forward(self, x, a):
        x = torch.cat([x.flatten(1), a], 1).expand(len(self.weights[0]), -1, -1)  # the same batch for each network
        for layer, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            x = torch.baddbmm(bias, x, weight)
            if layer < len(self.weights) - 1:
                x = F.relu(x)
        return x.squeeze(2)  # (2, batch): each network's Q-values, shaped as rewards are after indexing [i]


LOG_STD_MIN, LOG_STD_MAX = -5, 2


class Actor(nn.Module):
    def __init__(self, envs):
        super().__init__()
        action_space = envs.single_action_space
        self.fc1 = nn.Linear(np.prod(envs.single_observation_space.shape), 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc_mean = nn.Linear(256, np.prod(action_space.shape))
        self.fc_logstd = nn.Linear(256, np.prod(action_space.shape))
        # tanh's (-1, 1) stretched onto the env's bounds, whatever they are (Pendulum's are [-2, 2])
        high, low = action_space.high.flatten(), action_space.low.flatten()
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, x):
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.relu(self.fc2(x))
        mean = self.fc_mean(x)
        log_std = torch.tanh(self.fc_logstd(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)  # from SpinUp / Denis Yarats
        return mean, log_std

    def get_action(self, x):
        """A reparameterized (differentiable) sample, its log-probability, and the deterministic action evaluation plays."""
        mean, log_std = self(x)
        u = mean + log_std.exp() * torch.randn_like(mean)
        action = torch.tanh(u) * self.action_scale + self.action_bias
        log_prob = squashed_gaussian_log_prob(u, mean, log_std, self.action_scale)
        return action, log_prob, torch.tanh(mean) * self.action_scale + self.action_bias


def squashed_gaussian_log_prob(u, mean, log_std, action_scale, eps=1e-6):
    """log-density of a = tanh(u) * action_scale + action_bias, u ~ N(mean, exp(log_std)^2), by the change of variables:
    sum over the action dimensions of log N(u) - log(action_scale * (1 - tanh(u)^2)); eps: finite where tanh saturates."""
    log_normal = -0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    log_det_jacobian = torch.log(action_scale * (1 - torch.tanh(u) ** 2) + eps)
    return (log_normal - log_det_jacobian).sum(1)


def soft_td_target(rewards, terminations, next_q1, next_q2, next_log_pi, alpha, gamma):
    """r + gamma * (min(Q1', Q2') - alpha * log pi(a'|s')), a' ~ pi(s'); no bootstrap where the episode terminated (a
    time-limit truncation is stored as not terminated: it bootstraps from its real last observation)."""
    return rewards + gamma * (1.0 - terminations) * (torch.min(next_q1, next_q2) - alpha * next_log_pi)


def real_next_observations(next_obs, infos):
    """Where an episode ended, next_obs is already the next episode's first observation: the transition's real
    next observation is in infos["final_obs"]."""
    real_next_obs = next_obs.copy()
    if "final_obs" in infos:
        ended = infos["_final_obs"]
        real_next_obs[ended] = np.stack(infos["final_obs"][ended])
    return real_next_obs


class ReplayBuffer:
    """A ring buffer of transitions, each one row [obs, action, real next obs, reward, terminated] of a preallocated
    float32 array: cheap to add to every step, and a batch is one fancy index and one torch.from_numpy."""

    def __init__(self, buffer_size, obs_dim, action_dim):
        self.data = np.zeros((buffer_size, 2 * obs_dim + action_dim + 2), dtype=np.float32)
        self.obs_dim, self.action_dim = obs_dim, action_dim
        self.buffer_size, self.pos, self.full = buffer_size, 0, False

    def add(self, obs, next_obs, actions, rewards, terminations):
        n = len(obs)  # one transition per environment
        rows = [obs.reshape(n, -1), actions.reshape(n, -1), next_obs.reshape(n, -1), rewards[:, None], terminations[:, None]]
        self.data[(self.pos + np.arange(n)) % self.buffer_size] = np.concatenate(rows, axis=1)
        self.full = self.full or self.pos + n >= self.buffer_size
        self.pos = (self.pos + n) % self.buffer_size

    def __len__(self):
        return self.buffer_size if self.full else self.pos

    def fields(self, rows):
        """obs, actions, next_obs, rewards, terminations: views of the columns of `rows`."""
        o, a = self.obs_dim, self.action_dim
        return rows[:, :o], rows[:, o : o + a], rows[:, o + a : 2 * o + a], rows[:, -2], rows[:, -1]

    def sample(self, batch_size, device):
        rows = torch.from_numpy(self.data[np.random.randint(0, len(self), size=batch_size)]).to(device)
        return self.fields(rows)

    def state_dict(self):
        return {"data": self.data[: len(self)], "pos": self.pos, "full": self.full}

    def load_state_dict(self, state):
        self.data[: len(state["data"])] = state["data"]
        self.pos, self.full = state["pos"], state["full"]


def mujoco_state(env):
    """The physics state and RNG of a Gymnasium MuJoCo env (None for other envs): those envs pickle as their
    constructor's arguments (EzPickle), so unpickling alone would restart the simulation."""
    sim, mujoco = env.unwrapped, sys.modules.get("mujoco")
    if mujoco is None or not isinstance(getattr(sim, "data", None), mujoco.MjData):
        return None
    state = np.empty(mujoco.mj_stateSize(sim.model, mujoco.mjtState.mjSTATE_INTEGRATION))
    mujoco.mj_getState(sim.model, sim.data, state, mujoco.mjtState.mjSTATE_INTEGRATION)
    return state, sim.np_random


def pickle_envs(envs):
    """The sub-environments with their RNGs, time limits, episode statistics and MuJoCo physics; None where they
    cannot be pickled (e.g. a renderer's window handle while recording video)."""
    try:
        return cloudpickle.dumps([(env, mujoco_state(env)) for env in envs.envs])
    except (pickle.PicklingError, TypeError):
        return None


def unpickle_envs(blob):
    envs = []
    for env, state in pickle.loads(blob):
        if state is not None:  # a MuJoCo env: restore its physics and RNG
            import mujoco

            mujoco.mj_setState(env.unwrapped.model, env.unwrapped.data, state[0], mujoco.mjtState.mjSTATE_INTEGRATION)
            env.unwrapped.np_random = state[1]
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

    counts = ["total_timesteps", "num_envs", "buffer_size", "batch_size", "policy_frequency", "target_network_frequency"]
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
    if args.batch_size > args.buffer_size:
        fail(f"--batch-size {args.batch_size} is larger than --buffer-size {args.buffer_size}")
    try:
        registered_id = register_env(args.env_id)
        env_spec = gym.spec(registered_id)
    except (gym.error.Error, ImportError) as e:
        fail(f"--env-id {args.env_id}: {e}")
    renders_mujoco = registered_id.startswith("dm_control/") or "mujoco" in str(env_spec.entry_point)
    if args.capture_video and renders_mujoco and HEADLESS and "MUJOCO_GL" not in os.environ:
        fail(
            "--capture-video: MuJoCo renders without a display through EGL (Debian/Ubuntu: apt-get install libegl1 "
            "libegl-mesa0) or OSMesa (apt-get install libosmesa6, then set MUJOCO_GL=osmesa); neither was found"
        )
    if args.upload_model:
        if not args.save_model:
            fail("--upload-model uploads the model that --save-model saves: add --save-model")
        from cleanrl_utils.huggingface import check_upload

        try:  # before training: a missing token must not cost a whole run
            hf_repo_id = check_upload(args.hf_entity, args.env_id, args.exp_name, args.seed)
        except ValueError as e:
            fail(f"--upload-model: {e}")

    run_name = checkpoint["run_name"] if checkpoint else f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    run_dir = args.resume.rstrip("/") if checkpoint else f"runs/{run_name}"

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    # torch uses every core: 256x256 layers at batch 256 split well (a SAC update took 6.8 ms on 2 threads, 10.8 ms on
    # 1 here); runs sharing the cores must divide them (OMP_NUM_THREADS, as cleanrl_utils/benchmark.py sets it)

    # env setup: SAME_STEP autoreset returns the reset observation at once and the real last one in infos["final_obs"]
    if checkpoint is not None and checkpoint["envs"] is not None:
        env_fns = [lambda env=env: env for env in unpickle_envs(checkpoint["envs"])]
    else:
        env_fns = [make_env(args.env_id, i, args.capture_video, run_name) for i in range(args.num_envs)]
    envs = gym.vector.SyncVectorEnv(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    action_space = envs.single_action_space
    if isinstance(action_space, gym.spaces.Discrete):
        fail(f"--env-id {args.env_id} has a Discrete action space; sac_continuous_action.py needs a Box one (use dqn.py)")
    if not isinstance(action_space, gym.spaces.Box):
        fail(f"--env-id {args.env_id} has a {action_space} action space; sac_continuous_action.py needs a Box one")
    if not (np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()):
        fail(
            f"--env-id {args.env_id} has unbounded actions ({action_space}); the actor's tanh is rescaled onto the "
            "action bounds, so they must be finite"
        )
    if not isinstance(envs.single_observation_space, gym.spaces.Box):
        fail(
            f"--env-id {args.env_id} has a {type(envs.single_observation_space).__name__} observation space; "
            "sac_continuous_action.py's MLP needs a Box one (wrap the env, e.g. with gymnasium.wrappers.FlattenObservation)"
        )

    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "args.json"), "w") as f:
        json.dump({"script": os.path.basename(__file__), "run_name": run_name, "args": asdict(args)}, f, indent=2)

    actor = Actor(envs).to(device)
    qf, qf_target = SoftQNetwork(envs).to(device), SoftQNetwork(envs).to(device)  # both hold the twin networks
    qf_target.load_state_dict(qf.state_dict())
    q_params, q_target_params = list(qf.parameters()), list(qf_target.parameters())
    # fused: one kernel per step instead of a dozen small ops per parameter tensor
    q_optimizer = optim.Adam(q_params, lr=args.q_lr, fused=True)
    actor_optimizer = optim.Adam(list(actor.parameters()), lr=args.policy_lr, fused=True)

    if args.autotune:
        target_entropy = -float(np.prod(action_space.shape))
        log_alpha = torch.zeros(1, requires_grad=True, device=device)
        alpha = log_alpha.detach().exp()
        a_optimizer = optim.Adam([log_alpha], lr=args.q_lr, fused=True)
    else:
        alpha = torch.tensor(args.alpha, device=device)

    rb = ReplayBuffer(args.buffer_size, int(np.prod(envs.single_observation_space.shape)), int(np.prod(action_space.shape)))
    envs.action_space.seed(args.seed)  # the random actions of the warm-up

    learner = {"actor": actor, "qf": qf, "qf_target": qf_target}  # checkpointed
    learner |= {"q_optimizer": q_optimizer, "actor_optimizer": actor_optimizer}
    num_iterations = args.total_timesteps // args.num_envs  # vector steps
    global_step, start_iteration = 0, 1
    updates_start = args.learning_starts  # learning starts after this step (later after a resume without the buffer)
    if checkpoint is None:
        obs, _ = envs.reset(seed=args.seed)
    else:
        for key, part in learner.items():
            part.load_state_dict(checkpoint[key])
        if args.autotune and checkpoint["log_alpha"] is not None:
            with torch.no_grad():
                log_alpha.copy_(checkpoint["log_alpha"])
            a_optimizer.load_state_dict(checkpoint["a_optimizer"])
            alpha = log_alpha.detach().exp()
        global_step, start_iteration = checkpoint["global_step"], checkpoint["iteration"] + 1
        if checkpoint["replay_buffer"] is not None:
            if (saved_size := checkpoint["args"]["buffer_size"]) != args.buffer_size:
                fail(f"--buffer-size {args.buffer_size}: the checkpoint's replay buffer has size {saved_size}; keep it")
            rb.load_state_dict(checkpoint["replay_buffer"])
            updates_start = checkpoint["updates_start"]
        else:
            updates_start = global_step + args.learning_starts
            print(
                f"the checkpoint holds no replay buffer (--checkpoint-buffer was off): refilling it with the policy "
                f"for {args.learning_starts} steps, learning again after step {updates_start}",
                file=sys.stderr,
            )
        random.setstate(checkpoint["rng"]["python"])
        np.random.set_state(checkpoint["rng"]["numpy"])
        torch.set_rng_state(checkpoint["rng"]["torch"])
        if device.type == "cuda" and checkpoint["rng"]["cuda"] is not None:
            torch.cuda.set_rng_state_all(checkpoint["rng"]["cuda"])
        envs.action_space.np_random.bit_generator.state = checkpoint["rng"]["action_space"]
        if checkpoint["envs"] is not None:
            obs = checkpoint["obs"]
        else:
            print(
                "warning: the checkpoint holds no env state (it could not be pickled); starting new episodes", file=sys.stderr
            )
            obs, _ = envs.reset(seed=args.seed + global_step)

    wandb_run_id = checkpoint["wandb_run_id"] if checkpoint else None
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
        table = "\n".join(f"|{key}|{value}|" for key, value in vars(args).items())
        writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + table)

    def save_checkpoint(iteration):
        rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
        rng["cuda"] = torch.cuda.get_rng_state_all() if device.type == "cuda" else None
        rng["action_space"] = envs.action_space.np_random.bit_generator.state
        state = {
            "args": asdict(args),
            "run_name": run_name,
            "iteration": iteration,
            "global_step": global_step,
            "updates_start": updates_start,
            **{key: part.state_dict() for key, part in learner.items()},
            "log_alpha": log_alpha.detach().clone() if args.autotune else None,
            "a_optimizer": a_optimizer.state_dict() if args.autotune else None,
            "replay_buffer": rb.state_dict() if args.checkpoint_buffer else None,  # plain arrays: loads without this script
            "rng": rng,
            "envs": pickle_envs(envs),
            "obs": obs,
            "wandb_run_id": wandb_run_id,
        }
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
    actor_loss = alpha_loss = None

    for iteration in range(start_iteration, num_iterations + 1):
        global_step += args.num_envs
        if global_step <= args.learning_starts:
            actions = envs.action_space.sample()
        else:
            with torch.inference_mode():
                actions, _, _ = actor.get_action(torch.as_tensor(obs, dtype=torch.float32, device=device))
            actions = actions.cpu().numpy().reshape(envs.action_space.shape)

        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        if "final_info" in infos:
            for i in np.flatnonzero(infos["final_info"]["_episode"]):
                episodic_return = float(infos["final_info"]["episode"]["r"][i])
                recent_returns.append(episodic_return)
                writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                writer.add_scalar("charts/episodic_length", int(infos["final_info"]["episode"]["l"][i]), global_step)
        # done = terminated: a truncation (MuJoCo's or dm_control's time limit) bootstraps from its real last observation
        rb.add(obs, real_next_observations(next_obs, infos), actions, rewards, terminations)
        obs = next_obs

        if global_step > updates_start:
            b_obs, b_actions, b_next_obs, b_rewards, b_terminations = rb.sample(args.batch_size, device)
            with torch.no_grad():
                next_actions, next_log_pi, _ = actor.get_action(b_next_obs)
                next_q1, next_q2 = qf_target(b_next_obs, next_actions)
                next_q_value = soft_td_target(b_rewards, b_terminations, next_q1, next_q2, next_log_pi, alpha, args.gamma)
            qf_a_values = qf(b_obs, b_actions)
            qf1_loss, qf2_loss = ((qf_a_values - next_q_value) ** 2).mean(1)  # each network's mean squared TD error
            qf_loss = qf1_loss + qf2_loss
            q_optimizer.zero_grad()
            qf_loss.backward()
            q_optimizer.step()

            if iteration % args.policy_frequency == 0:  # TD3-style delayed update
                for _ in range(args.policy_frequency):  # as many policy steps as were delayed: one per critic step
                    pi, log_pi, _ = actor.get_action(b_obs)
                    # the critics are constants here: skipping their weight gradients saves a third of their backward
                    qf.requires_grad_(False)
                    actor_loss = (alpha * log_pi - qf(b_obs, pi).min(0).values).mean()
                    actor_optimizer.zero_grad()
                    actor_loss.backward()
                    actor_optimizer.step()
                    qf.requires_grad_(True)
                    if args.autotune:
                        # log_pi of the same sample, detached: no second forward pass of the actor
                        alpha_loss = (-log_alpha.exp() * (log_pi.detach() + target_entropy)).mean()
                        a_optimizer.zero_grad()
                        alpha_loss.backward()
                        a_optimizer.step()
                        alpha = log_alpha.detach().exp()

            if iteration % args.target_network_frequency == 0:  # target += tau * (online - target), every tensor at once
                with torch.no_grad():
                    torch._foreach_lerp_(q_target_params, q_params, args.tau)

            if iteration % 100 == 0:  # .item() waits for the GPU: only when logging
                writer.add_scalar("losses/qf1_values", qf_a_values[0].mean().item(), global_step)
                writer.add_scalar("losses/qf2_values", qf_a_values[1].mean().item(), global_step)
                writer.add_scalar("losses/qf1_loss", qf1_loss.item(), global_step)
                writer.add_scalar("losses/qf2_loss", qf2_loss.item(), global_step)
                writer.add_scalar("losses/qf_loss", qf_loss.item() / 2.0, global_step)
                if actor_loss is not None:
                    writer.add_scalar("losses/actor_loss", actor_loss.item(), global_step)
                writer.add_scalar("losses/alpha", alpha.item(), global_step)
                if alpha_loss is not None:
                    writer.add_scalar("losses/alpha_loss", alpha_loss.item(), global_step)
                writer.add_scalar("charts/SPS", int((global_step - start_step) / (time.time() - start_time)), global_step)

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
        # one flat state dict: "actor.fc1.weight", ..., "qf.weights.0", ...; the evaluation needs the actor only
        torch.save(nn.ModuleDict({"actor": actor, "qf": qf}).state_dict(), model_path)
        print(f"model saved to {model_path}")
        from cleanrl_utils.evals.sac_eval import evaluate

        # 10 episodes of the deterministic policy, on seeds apart from training's
        episodic_returns = evaluate(
            model_path, make_env, args.env_id, 10, f"{run_name}-eval", Actor, device, args.capture_video, args.seed + 100_000
        )
        for idx, episodic_return in enumerate(episodic_returns):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)
        mean, std = np.mean(episodic_returns), np.std(episodic_returns)
        print(f"evaluation over {len(episodic_returns)} episodes: {mean:.1f} +- {std:.1f}")

    envs.close()
    writer.close()
    if args.upload_model:  # after the envs close, so the last videos are complete
        from cleanrl_utils.huggingface import push

        push(run_dir, episodic_returns, hf_repo_id, command=shlex.join(["python", *sys.argv]))
    if args.track and args.capture_video:
        for video_path in sorted(glob.glob(f"videos/{run_name}*/*.mp4")):
            wandb.log({f"videos/{os.path.basename(os.path.dirname(video_path))}": wandb.Video(video_path)})
