# PPO for continuous actions (Schulman et al. 2017): a diagonal Gaussian policy; docs: README.md#ppo_continuous_actionpy
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
import tyro
from torch import nn, optim
from torch.utils.tensorboard import SummaryWriter

# MuJoCo reads MUJOCO_GL once, on import: without a display, EGL renders off-screen (package libegl1); your own one wins
HEADLESS = sys.platform.startswith("linux") and not os.environ.get("DISPLAY")
if HEADLESS and "MUJOCO_GL" not in os.environ and ctypes.util.find_library("EGL"):
    os.environ["MUJOCO_GL"] = "egl"

# normalized observations and rewards are clipped to +-10, as CleanRL's original; the epsilon keeps divisions finite
OBS_CLIP, REWARD_CLIP, NORM_EPSILON = 10.0, 10.0, 1e-8


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
    resume: str | None = None
    """a run folder (`runs/{run_name}`) to continue from its checkpoint up to `--total-timesteps`"""

    # Algorithm specific arguments
    env_id: str = "HalfCheetah-v4"
    """the id of the environment (Gymnasium's MuJoCo v4/v5, `dm_control/cheetah-run-v0`, or `module:EnvName-v0`)"""
    total_timesteps: int = 1000000
    """total timesteps of the experiments"""
    learning_rate: float = 3e-4
    """the learning rate of the optimizer"""
    num_envs: int = 1
    """the number of parallel game environments"""
    num_steps: int = 2048
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 32
    """the number of mini-batches"""
    update_epochs: int = 10
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.0
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: float | None = None
    """the target KL divergence threshold (stops the update epochs early when exceeded)"""

    # to be filled in runtime
    batch_size: int = 0
    """the batch size (computed in runtime)"""
    minibatch_size: int = 0
    """the mini-batch size (computed in runtime)"""
    num_iterations: int = 0
    """the number of iterations (computed in runtime)"""


def fail(message: str):
    """Bad input ends with one line on stderr and exit code 2, before any heavy work."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def register_env_family(env_id):
    """DeepMind Control tasks (`dm_control/cheetah-run-v0`) are registered by Shimmy, imported only when asked for."""
    if env_id.startswith("dm_control/"):
        # Triton's LLVM (loaded by torch's compiler) must precede Mesa's (dm_control's display) or the process crashes
        importlib.import_module("torch._dynamo")
        import shimmy

        gym.register_envs(shimmy)


def make_env(env_id, idx, capture_video, run_name):
    def thunk():
        register_env_family(env_id)
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)
        if isinstance(env.observation_space, gym.spaces.Dict) or len(env.observation_space.shape or ()) > 1:
            env = gym.wrappers.FlattenObservation(env)  # e.g. dm_control's dict of named arrays, for the MLP
        env = gym.wrappers.RecordEpisodeStatistics(env)  # the env's own rewards: normalization comes in the training loop
        return env

    return thunk


def layer_init(layer, std=2**0.5, bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, envs):
        super().__init__()
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        action_space = envs.single_action_space
        action_dim = int(np.prod(action_space.shape))

        def mlp(out_dim, out_std):  # CleanRL's 64-64 tanh network, orthogonally initialized
            hidden = [layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)), nn.Tanh()]
            return nn.Sequential(*hidden, layer_init(nn.Linear(64, out_dim), std=out_std))

        self.critic = mlp(1, out_std=1.0)
        self.actor_mean = mlp(action_dim, out_std=0.01)
        self.actor_logstd = nn.Parameter(torch.zeros(1, action_dim))  # state-independent
        # env_action maps the Gaussian's [-1, 1] affinely onto each finite [low, high], then clips (as SB3 and the original)
        low, high = action_space.low, action_space.high
        finite = np.isfinite(low) & np.isfinite(high)
        self.action_low, self.action_high = low, high
        self.action_scale = np.where(finite, (high - low) / 2, 1.0).astype(action_space.dtype)
        self.action_bias = np.where(finite, (high + low) / 2, 0.0).astype(action_space.dtype)

    def evaluate_actions(self, x, action):
        """Log-probabilities, entropies and state values; the formulas written out cost less than torch.distributions."""
        action_mean = self.actor_mean(x)
        logstd = self.actor_logstd.expand_as(action_mean)
        z = (action - action_mean) * torch.exp(-logstd)
        logprob = (-0.5 * z.square() - logstd - 0.5 * math.log(2 * math.pi)).sum(1)
        entropy = (logstd + 0.5 + 0.5 * math.log(2 * math.pi)).sum(1)
        return logprob, entropy, self.critic(x).flatten()

    def env_action(self, action):
        """The policy's raw sample (numpy; what the rollout stores) rescaled to the env's Box bounds and clipped."""
        return np.clip(self.action_bias + self.action_scale * action, self.action_low, self.action_high)


class RunningMeanStd:
    """gymnasium's RunningMeanStd, here rather than in its per-env wrappers: shared by all envs, checkpointed and saved."""

    def __init__(self, shape=()):
        self.mean, self.var, self.count = np.zeros(shape), np.ones(shape), 1e-4

    def update(self, x):
        # sums rather than x.mean() / x.var(): the same values at a third of the cost, paid at every step
        batch_count = x.shape[0]
        batch_mean = x.sum(axis=0) / batch_count
        batch_var = np.square(x - batch_mean).sum(axis=0) / batch_count
        delta = batch_mean - self.mean
        total = self.count + batch_count
        self.mean = self.mean + delta * (batch_count / total)
        m2 = self.var * self.count + batch_var * batch_count + np.square(delta) * (self.count * batch_count / total)
        self.var, self.count = m2 / total, total

    def state_dict(self):
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": self.count}

    def load_state_dict(self, state):
        self.mean, self.var, self.count = state["mean"].copy(), state["var"].copy(), state["count"]


def sample_actions(obs, actor_weights, action_std, rng):
    """A Gaussian sample per observation, actor_mean run in numpy: on one observation, torch's overhead costs more."""
    w1, b1, w2, b2, w3, b3 = actor_weights
    hidden = np.tanh(obs @ w1.T + b1)
    hidden = np.tanh(hidden @ w2.T + b2)
    action_mean = hidden @ w3.T + b3
    return action_mean + action_std * rng.standard_normal(action_mean.shape, dtype=np.float32)


def normalize_obs(obs, obs_rms):
    """Standardized with the running statistics, clipped to +-OBS_CLIP as CleanRL's original; float32 for the networks."""
    return np.clip((obs - obs_rms.mean) / np.sqrt(obs_rms.var + NORM_EPSILON), -OBS_CLIP, OBS_CLIP).astype(np.float32)


def scale_rewards(rewards, discounted_returns, episode_ends, return_rms, gamma):
    """Rewards divided by the running std of the discounted return, clipped, as SB3's VecNormalize; discounted_returns
    is updated in place and restarts at every episode end."""
    discounted_returns *= gamma
    discounted_returns += rewards
    return_rms.update(discounted_returns)
    discounted_returns[episode_ends] = 0.0
    return np.clip(rewards / np.sqrt(return_rms.var + NORM_EPSILON), -REWARD_CLIP, REWARD_CLIP)


def compute_gae(rewards, values, last_value, final_values, terminations, episode_ends, gamma, gae_lambda):
    """GAE over (num_steps, num_envs) arrays. Where an episode ended at step t, obs[t + 1] is a reset observation: the
    bootstrap is final_values[t] = V(real last observation), zeroed by a termination, and nothing leaks across episodes."""
    next_values = np.concatenate([values[1:], last_value.reshape(1, -1)])
    next_values = np.where(episode_ends, final_values, next_values)
    advantages = np.zeros_like(rewards)
    lastgaelam = 0.0
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + gamma * next_values[t] * (1.0 - terminations[t]) - values[t]
        lastgaelam = delta + gamma * gae_lambda * (1.0 - episode_ends[t]) * lastgaelam
        advantages[t] = lastgaelam
    return advantages, advantages + values


def mujoco_state(env):
    """Physics and RNG of a MuJoCo env (else None): it pickles as its constructor's arguments, restarting the simulation."""
    sim, mujoco = env.unwrapped, sys.modules.get("mujoco")
    if mujoco is None or not isinstance(getattr(sim, "data", None), mujoco.MjData):
        return None
    state = np.empty(mujoco.mj_stateSize(sim.model, mujoco.mjtState.mjSTATE_INTEGRATION))
    mujoco.mj_getState(sim.model, sim.data, state, mujoco.mjtState.mjSTATE_INTEGRATION)
    return state, sim.np_random


def pickle_envs(envs):
    """The sub-environments with their RNGs, time limits and MuJoCo physics; None if unpicklable (e.g. a window handle)."""
    try:
        return cloudpickle.dumps([(env, mujoco_state(env)) for env in envs.envs])
    except (pickle.PicklingError, TypeError, ValueError):  # ValueError: ctypes pointers
        return None


def unpickle_envs(blob):
    pairs = pickle.loads(blob)
    for env, state in pairs:
        if state is not None:
            import mujoco

            mujoco.mj_setState(env.unwrapped.model, env.unwrapped.data, state[0], mujoco.mjtState.mjSTATE_INTEGRATION)
            env.unwrapped.np_random = state[1]
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

    for flag in ["total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs"]:
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    if args.checkpoint_interval < 0:
        fail(f"--checkpoint-interval must be >= 0 (0 = off), got {args.checkpoint_interval}")
    args.batch_size = int(args.num_envs * args.num_steps)
    if args.batch_size % args.num_minibatches != 0:
        fail(
            f"--num-minibatches {args.num_minibatches} must divide the batch size --num-envs * --num-steps = "
            f"{args.batch_size}; pick a divisor of it"
        )
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size
    if args.num_iterations == 0:
        fail(
            f"--total-timesteps {args.total_timesteps} is less than one rollout (--num-envs * --num-steps = {args.batch_size})"
        )
    try:
        module, _, registered_id = args.env_id.rpartition(":")
        if module:  # a user's own env: importing its module registers it, as gym.make would
            importlib.import_module(module)
        register_env_family(registered_id)
        env_spec = gym.spec(registered_id)
    except (gym.error.Error, ModuleNotFoundError) as e:
        fail(f"--env-id {args.env_id}: {e}")
    renders_mujoco = registered_id.startswith("dm_control/") or "mujoco" in str(env_spec.entry_point)
    if args.capture_video and renders_mujoco and HEADLESS and "MUJOCO_GL" not in os.environ:
        fail(
            "--capture-video: MuJoCo renders without a display through EGL (Debian/Ubuntu: apt-get install libegl1) "
            "or OSMesa (apt-get install libosmesa6, then set MUJOCO_GL=osmesa); neither was found"
        )
    if args.upload_model:
        if not args.save_model:
            fail("--upload-model uploads the model that --save-model saves: add --save-model")
        from cleanrl_utils.huggingface import check_upload

        try:  # before training: a missing token must not cost a whole run
            hf_repo_id = check_upload(args.hf_entity, args.env_id, args.exp_name, args.seed)
        except ValueError as e:
            fail(f"--upload-model: {e}")

    run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    run_dir = f"runs/{run_name}"
    if checkpoint is not None:
        run_name, run_dir = checkpoint["run_name"], args.resume.rstrip("/")

    random.seed(args.seed)
    np.random.seed(args.seed)
    action_rng = np.random.default_rng(args.seed)  # the policy's exploration noise while acting
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)  # a 64-unit MLP is too small to split across threads

    # env setup: SAME_STEP autoreset returns the reset observation at once and the real last one in infos["final_obs"]
    env_fns = [make_env(args.env_id, i, args.capture_video, run_name) for i in range(args.num_envs)]
    restored_envs = checkpoint is not None and checkpoint["envs"] is not None
    if restored_envs:  # the checkpoint's own envs, mid-episode
        env_fns = [lambda env=env: env for env in unpickle_envs(checkpoint["envs"])]
    # copy=False: each observation is normalized into a new array at once, so the env's own buffer needs no copy
    envs = gym.vector.SyncVectorEnv(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, copy=False)
    if not isinstance(envs.single_action_space, gym.spaces.Box) or len(envs.single_action_space.shape) != 1:
        fail(
            f"--env-id {args.env_id} has a {envs.single_action_space} action space; {os.path.basename(__file__)} "
            "supports one-dimensional Box ones only (use ppo.py for Discrete actions)"
        )
    if not isinstance(envs.single_observation_space, gym.spaces.Box):
        fail(
            f"--env-id {args.env_id} has a {type(envs.single_observation_space).__name__} observation space; "
            f"{os.path.basename(__file__)}'s MLP needs a Box or Dict one"
        )

    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "args.json"), "w") as f:
        json.dump({"script": os.path.basename(__file__), "run_name": run_name, "args": asdict(args)}, f, indent=2)

    agent = Agent(envs).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)  # fused: one kernel per step
    obs_rms, return_rms = RunningMeanStd(envs.single_observation_space.shape), RunningMeanStd()
    discounted_returns = np.zeros(args.num_envs)

    # storage for one rollout, in numpy: a write per step is far cheaper than into a tensor
    obs = np.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape, dtype=np.float32)
    actions = np.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape, dtype=np.float32)
    rewards, terminations, episode_ends = (np.zeros((args.num_steps, args.num_envs), dtype=np.float32) for _ in range(3))
    final_obs = np.zeros_like(obs)  # the real last observation where an episode ended (obs[t + 1] is a reset one)

    global_step, start_iteration, wandb_run_id = 0, 1, None
    if checkpoint is not None:
        for key, stateful in [("agent", agent), ("optimizer", optimizer), ("obs_rms", obs_rms), ("return_rms", return_rms)]:
            stateful.load_state_dict(checkpoint[key])
        global_step, start_iteration = checkpoint["global_step"], checkpoint["iteration"] + 1
        wandb_run_id = checkpoint["wandb_run_id"]
        random.setstate(checkpoint["rng"]["python"])
        np.random.set_state(checkpoint["rng"]["numpy"])
        action_rng.bit_generator.state = checkpoint["rng"]["actions"]
        torch.set_rng_state(checkpoint["rng"]["torch"])
        if device.type == "cuda" and checkpoint["rng"]["cuda"] is not None:
            torch.cuda.set_rng_state_all(checkpoint["rng"]["cuda"])
    if checkpoint is not None and not restored_envs:
        print("warning: the checkpoint holds no env state (it could not be pickled); starting new episodes", file=sys.stderr)
    if restored_envs:
        next_obs, discounted_returns = checkpoint["next_obs"], checkpoint["discounted_returns"]
    else:
        raw_obs, _ = envs.reset(seed=args.seed + global_step)
        obs_rms.update(raw_obs)
        next_obs = normalize_obs(raw_obs, obs_rms)

    if args.track:
        import wandb

        wandb_run_id = wandb.init(
            project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True, config=vars(args), name=run_name,
            id=wandb_run_id, resume="allow", save_code=True,  # an id of None starts a new W&B run; a resumed one appends
        ).id  # fmt: skip
    # on resume, purge_step hides whatever the killed run logged after its last checkpoint: no step repeats
    writer = SummaryWriter(run_dir, purge_step=global_step + 1 if checkpoint is not None else None)
    if checkpoint is None:
        table = "\n".join(f"|{key}|{value}|" for key, value in vars(args).items())
        writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")

    def save_checkpoint(iteration):
        state = {
            "args": asdict(args), "run_name": run_name, "iteration": iteration, "global_step": global_step,
            "agent": agent.state_dict(), "optimizer": optimizer.state_dict(), "obs_rms": obs_rms.state_dict(),
            "return_rms": return_rms.state_dict(), "discounted_returns": discounted_returns.copy(),
            "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "actions": action_rng.bit_generator.state,
                    "torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all() if device.type == "cuda" else None},
            "envs": pickle_envs(envs), "next_obs": next_obs, "wandb_run_id": wandb_run_id,
        }  # fmt: skip
        path = os.path.join(run_dir, "checkpoint.pt")
        torch.save(state, f"{path}.tmp")
        os.replace(f"{path}.tmp", path)  # atomic: a resumed run never reads a half-written checkpoint

    # Slurm and spot instances send SIGTERM before killing: finish the iteration, checkpoint, exit non-zero
    stop_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop_requested.set())

    recent_returns = deque(maxlen=20)
    on_terminal = sys.stdout.isatty()
    total_steps = args.num_iterations * args.batch_size
    print(f"{run_name}: training to {args.total_timesteps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    if on_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        description, stats = TextColumn("[bold]{task.description}"), TextColumn("{task.fields[stats]}")
        progress = Progress(description, BarColumn(), MofNCompleteColumn(), stats, TimeRemainingColumn())
        progress_task = progress.add_task(args.exp_name, total=total_steps, completed=global_step, stats="")
        progress.start()
    start_time, start_step = time.time(), global_step

    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        # the policy the rollout acts with, read once per iteration (on the CPU these arrays are views, no copy)
        actor_weights = [p.detach().cpu().numpy() for p in agent.actor_mean.parameters()]
        action_std = agent.actor_logstd.detach().exp().cpu().numpy()
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            action = sample_actions(next_obs, actor_weights, action_std, action_rng)
            actions[step] = action

            # only what the env receives is rescaled and clipped: the rollout keeps the Gaussian's own sample
            raw_obs, reward, terminated, truncated, infos = envs.step(agent.env_action(action))
            ended = terminated | truncated
            obs_rms.update(raw_obs)
            next_obs = normalize_obs(raw_obs, obs_rms)
            rewards[step] = scale_rewards(reward, discounted_returns, ended, return_rms, args.gamma)
            terminations[step], episode_ends[step] = terminated, ended

            if "final_obs" in infos:
                done = infos["_final_obs"]
                final_obs[step, done] = normalize_obs(np.stack(infos["final_obs"][done]), obs_rms)
                for i in np.flatnonzero(infos["final_info"]["_episode"]):
                    episodic_return = float(infos["final_info"]["episode"]["r"][i])
                    recent_returns.append(episodic_return)
                    writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                    writer.add_scalar("charts/episodic_length", int(infos["final_info"]["episode"]["l"][i]), global_step)

        b_obs = torch.as_tensor(obs.reshape((-1,) + envs.single_observation_space.shape), device=device)
        b_actions = torch.as_tensor(actions.reshape((-1,) + envs.single_action_space.shape), device=device)
        # acting did not need them: log-probabilities and values in one pass, with the update's code (first ratio: exactly 1)
        with torch.no_grad():
            b_logprobs, _, b_values = agent.evaluate_actions(b_obs, b_actions)
            last_value = agent.critic(torch.as_tensor(next_obs, device=device)).cpu().numpy()
            # a truncated episode is not over for the agent: it bootstraps from the value of its real last observation
            final_values = agent.critic(torch.as_tensor(final_obs, device=device).flatten(0, 1)).cpu().numpy()
        values = b_values.cpu().numpy().reshape(args.num_steps, args.num_envs)
        final_values = final_values.reshape(args.num_steps, args.num_envs)
        advantages, returns = compute_gae(
            rewards, values, last_value, final_values, terminations, episode_ends, args.gamma, args.gae_lambda
        )
        b_advantages = torch.as_tensor(advantages.reshape(-1), device=device)
        b_returns = torch.as_tensor(returns.reshape(-1), device=device)

        clipfracs = torch.zeros((), device=device)  # summed on the device: no synchronising .item() per minibatch
        num_updates = 0
        for epoch in range(args.update_epochs):
            b_inds = torch.randperm(args.batch_size, device=device)
            for start in range(0, args.batch_size, args.minibatch_size):
                mb_inds = b_inds[start : start + args.minibatch_size]
                newlogprob, entropy, newvalue = agent.evaluate_actions(b_obs[mb_inds], b_actions[mb_inds])
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()

                with torch.no_grad():
                    # calculate approx_kl http://joschu.net/blog/kl-approx.html
                    old_approx_kl = (-logratio).mean()
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs += ((ratio - 1.0).abs() > args.clip_coef).float().mean()
                    num_updates += 1

                mb_advantages = b_advantages[mb_inds]
                if args.norm_adv:
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                if args.clip_vloss:
                    v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                    v_clipped = b_values[mb_inds] + torch.clamp(newvalue - b_values[mb_inds], -args.clip_coef, args.clip_coef)
                    v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                    v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                else:
                    v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()

                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)
                optimizer.step()

            if args.target_kl is not None and approx_kl > args.target_kl:
                break

        y_pred, y_true = values.reshape(-1), returns.reshape(-1)
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

        sps = int((global_step - start_step) / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
        writer.add_scalar("losses/policy_loss", pg_loss.item(), global_step)
        writer.add_scalar("losses/entropy", entropy_loss.item(), global_step)
        writer.add_scalar("losses/old_approx_kl", old_approx_kl.item(), global_step)
        writer.add_scalar("losses/approx_kl", approx_kl.item(), global_step)
        writer.add_scalar("losses/clipfrac", clipfracs.item() / num_updates, global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)

        recent = f"return {np.mean(recent_returns):.1f}" if recent_returns else "return -"
        if on_terminal:
            progress.update(progress_task, completed=global_step, stats=f"{sps} SPS, {recent}")
        elif iteration % max(1, args.num_iterations // 20) == 0 or iteration == args.num_iterations:
            print(f"step {global_step}/{total_steps}, {sps} SPS, {recent}", flush=True)

        interval = args.checkpoint_interval
        if (interval and global_step // interval > (global_step - args.batch_size) // interval) or stop_requested.is_set():
            save_checkpoint(iteration)
        if stop_requested.is_set():
            if on_terminal:
                progress.stop()
            print(f"SIGTERM at step {global_step}: checkpoint written; continue with --resume {run_dir}", file=sys.stderr)
            envs.close()
            writer.close()
            sys.exit(128 + signal.SIGTERM)

    if on_terminal:
        progress.stop()

    if args.save_model:
        model_path = f"{run_dir}/{args.exp_name}.cleanrl_model"
        # the observation statistics belong to the policy: evaluation normalizes with them, frozen
        obs_stats = {"mean": torch.as_tensor(obs_rms.mean), "var": torch.as_tensor(obs_rms.var), "count": float(obs_rms.count)}
        obs_stats.update(epsilon=NORM_EPSILON, clip=OBS_CLIP)
        torch.save({"model_weights": agent.state_dict(), "obs_normalization": obs_stats, "args": vars(args)}, model_path)
        print(f"model saved to {model_path}")
        from cleanrl_utils.evals.ppo_continuous_action_eval import evaluate

        # 10 episodes, with seeds apart from training's
        eval_returns = evaluate(
            model_path, make_env, args.env_id, 10, f"{run_name}-eval", Agent, device, args.capture_video, args.seed + 100_000
        )
        for idx, episodic_return in enumerate(eval_returns):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)
        print(f"evaluation over {len(eval_returns)} episodes: {np.mean(eval_returns):.1f} +- {np.std(eval_returns):.1f}")

    envs.close()
    writer.close()
    if args.upload_model:  # after the envs close, so the last videos are complete
        from cleanrl_utils.huggingface import push

        push(run_dir, eval_returns, hf_repo_id, command=shlex.join(["python", *sys.argv]))
    if args.track and args.capture_video:
        for video_path in sorted(glob.glob(f"videos/{run_name}*/*.mp4")):
            wandb.log({f"videos/{os.path.basename(os.path.dirname(video_path))}": wandb.Video(video_path)})
