# TD3 (Fujimoto et al. 2018) in JAX (flax + optax, one jit-compiled update per step): clipped double Q, target policy
# smoothing, delayed policy updates; continuous actions; docs: README.md#td3_continuous_action_jaxpy
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
from functools import partial

import cloudpickle
import flax
import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from flax.training import train_state
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from torch.utils.tensorboard import SummaryWriter

# MuJoCo reads MUJOCO_GL once, on import: without a display, EGL renders videos off-screen (your own MUJOCO_GL wins)
HEADLESS = sys.platform.startswith("linux") and not os.environ.get("DISPLAY")
if HEADLESS and "MUJOCO_GL" not in os.environ and ctypes.util.find_library("EGL"):
    os.environ["MUJOCO_GL"] = "egl"


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
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
    """environment steps between checkpoints written to `runs/{run_name}/checkpoint.pkl` (0 = off)"""
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
    learning_rate: float = 3e-4
    """the learning rate of the optimizer"""
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
    policy_noise: float = 0.2
    """the scale of the target policy smoothing noise (times the action scale)"""
    exploration_noise: float = 0.1
    """the scale of the exploration noise (times the action scale)"""
    learning_starts: int = int(25e3)
    """timestep to start learning (random actions until then)"""
    policy_frequency: int = 2
    """the frequency of training policy (delayed), and of the target networks' updates"""
    noise_clip: float = 0.5
    """noise clip parameter of the target policy smoothing regularization (times the action scale)"""


def fail(message: str):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def register_env(env_id):
    """Make `env_id` known to gym.make: import a user's `module:EnvName-v0` module, and shimmy for dm_control tasks."""
    module, _, registered_id = env_id.rpartition(":")
    if module:
        importlib.import_module(module)
    if registered_id.startswith("dm_control/"):
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


def linear(features, fan_in, name):
    """A dense layer initialized as torch's nn.Linear is in the PyTorch twin: weights and biases uniform in
    +-1/sqrt(fan_in). flax's default (LeCun-normal weights, zero biases) made the JAX SAC learn HalfCheetah far slower."""
    uniform = partial(jax.random.uniform, minval=-1 / math.sqrt(fan_in), maxval=1 / math.sqrt(fan_in))  # (key, shape, dtype)
    return nn.Dense(features, kernel_init=uniform, bias_init=uniform, name=name)


class QNetwork(nn.Module):
    @nn.compact
    def __call__(self, x, a):
        x = jnp.concatenate([x.reshape((x.shape[0], -1)), a], -1)
        x = nn.relu(linear(256, x.shape[-1], "fc1")(x))
        x = nn.relu(linear(256, 256, "fc2")(x))
        return linear(1, 256, "fc3")(x).squeeze(-1)  # (batch,), as rewards are: never broadcast (batch, 1)


class Actor(nn.Module):
    action_dim: int
    # tanh's (-1, 1) stretched onto the env's bounds, whatever they are (Pendulum's are [-2, 2])
    action_scale: jnp.ndarray
    action_bias: jnp.ndarray

    @nn.compact
    def __call__(self, x):
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(linear(256, x.shape[-1], "fc1")(x))
        x = nn.relu(linear(256, 256, "fc2")(x))
        return jnp.tanh(linear(self.action_dim, 256, "fc_mu")(x)) * self.action_scale + self.action_bias


def rescaled_actor(Model, action_space):
    high, low = action_space.high.flatten(), action_space.low.flatten()
    scale, bias = jnp.asarray((high - low) / 2.0, dtype=jnp.float32), jnp.asarray((high + low) / 2.0, dtype=jnp.float32)
    return Model(action_dim=int(np.prod(action_space.shape)), action_scale=scale, action_bias=bias)


class TrainState(train_state.TrainState):
    target_params: flax.core.FrozenDict  # the target network's parameters travel with the online ones

    def soft_update(self, tau):  # target += tau * (online - target)
        return self.replace(target_params=optax.incremental_update(self.params, self.target_params, tau))


def td3_target(
    rewards,
    terminations,
    next_obs,
    target_actor,
    qf1_target,
    qf2_target,
    key,
    gamma,
    policy_noise,
    noise_clip,
    action_scale,
    action_low,
    action_high,
):
    """r + gamma * min(Q1'(s', a'), Q2'(s', a')), no bootstrap where the episode terminated (a time-limit truncation
    is stored as not terminated). Target policy smoothing: a' is the target actor's action plus Gaussian noise (drawn
    with `key`) of std policy_noise clipped to +-noise_clip, both times the action scale, clipped to the env's bounds."""
    next_actions = target_actor(next_obs)
    noise = jnp.clip(jax.random.normal(key, next_actions.shape) * policy_noise, -noise_clip, noise_clip) * action_scale
    next_actions = jnp.clip(next_actions + noise, action_low, action_high)
    next_q = jnp.minimum(qf1_target(next_obs, next_actions), qf2_target(next_obs, next_actions))
    return rewards + gamma * (1.0 - terminations) * next_q


def real_next_observations(next_obs, infos):
    """Where an episode ended, next_obs is already the next episode's first one: the real one is infos["final_obs"]."""
    real_next_obs = next_obs.copy()
    if "final_obs" in infos:
        real_next_obs[infos["_final_obs"]] = np.stack(infos["final_obs"][infos["_final_obs"]])
    return real_next_obs


class ReplayBuffer:
    """A ring buffer of transitions, rows [obs, action, real next obs, reward, terminated] of one float32 array: cheap
    to add to, and a batch is one fancy index and one transfer to the device, split by `fields` inside the update."""

    def __init__(self, buffer_size, obs_dim, action_dim):
        self.data = np.zeros((buffer_size, 2 * obs_dim + action_dim + 2), dtype=np.float32)
        self.obs_dim, self.action_dim = obs_dim, action_dim
        self.buffer_size, self.pos, self.full = buffer_size, 0, False

    def add(self, obs, next_obs, actions, rewards, terminations):
        n = len(obs)
        rows = [obs.reshape(n, -1), actions.reshape(n, -1), next_obs.reshape(n, -1), rewards[:, None], terminations[:, None]]
        self.data[(self.pos + np.arange(n)) % self.buffer_size] = np.concatenate(rows, axis=1)
        self.full = self.full or self.pos + n >= self.buffer_size
        self.pos = (self.pos + n) % self.buffer_size

    def __len__(self):
        return self.buffer_size if self.full else self.pos

    def fields(self, rows):
        """obs, actions, next_obs, rewards, terminations: views of the columns of `rows` (numpy or jax arrays)."""
        o, a = self.obs_dim, self.action_dim
        return rows[:, :o], rows[:, o : o + a], rows[:, o + a : 2 * o + a], rows[:, -2], rows[:, -1]

    def sample(self, batch_size):
        return self.data[np.random.randint(0, len(self), size=batch_size)]

    def state_dict(self):
        return {"data": self.data[: len(self)], "pos": self.pos, "full": self.full}

    def load_state_dict(self, state):
        self.data[: len(state["data"])] = state["data"]
        self.pos, self.full = state["pos"], state["full"]


def mujoco_state(env):
    """A MuJoCo env's physics state and RNG (None for other envs): it pickles as its constructor's arguments (EzPickle)."""
    sim, mujoco = env.unwrapped, sys.modules.get("mujoco")
    if mujoco is None or not isinstance(getattr(sim, "data", None), mujoco.MjData):
        return None
    state = np.empty(mujoco.mj_stateSize(sim.model, mujoco.mjtState.mjSTATE_INTEGRATION))
    mujoco.mj_getState(sim.model, sim.data, state, mujoco.mjtState.mjSTATE_INTEGRATION)
    return state, sim.np_random


def pickle_envs(envs):
    """The sub-environments mid-episode, or None where they cannot be pickled (a video recorder's renderer)."""
    try:
        return cloudpickle.dumps([(env, mujoco_state(env)) for env in envs.envs])
    except (pickle.PicklingError, TypeError):
        return None


def unpickle_envs(blob):
    envs = []
    for env, state in pickle.loads(blob):
        if state is not None:
            import mujoco

            mujoco.mj_setState(env.unwrapped.model, env.unwrapped.data, state[0], mujoco.mjtState.mjSTATE_INTEGRATION)
            env.unwrapped.np_random = state[1]
        envs.append(env)
    return envs


if __name__ == "__main__":
    args = tyro.cli(Args)
    checkpoint = None
    if args.resume is not None:
        checkpoint_path = os.path.join(args.resume, "checkpoint.pkl")
        if not os.path.isfile(checkpoint_path):
            fail(f"--resume {args.resume}: no checkpoint.pkl there (was the run started with --checkpoint-interval?)")
        with open(checkpoint_path, "rb") as f:
            checkpoint = pickle.load(f)
        # the saved run's Args are the defaults; flags given now (e.g. a larger --total-timesteps) override them
        args = tyro.cli(Args, default=Args(**checkpoint["args"]))

    for flag in ["total_timesteps", "num_envs", "buffer_size", "batch_size", "policy_frequency", "learning_rate"]:
        if not getattr(args, flag) > 0:  # `not >`: a NaN fails too
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "learning_starts", "policy_noise", "exploration_noise", "noise_clip"]:
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

    # seeding: numpy draws the replay batches, the action space the warm-up's random actions, JAX's key the exploration
    # noise and the target smoothing noise
    random.seed(args.seed)
    np.random.seed(args.seed)
    key = jax.random.PRNGKey(args.seed)
    device = jax.devices()[0].platform  # JAX picks its device itself: a GPU when jax[cuda] is installed and sees one

    # env setup: SAME_STEP autoreset returns the reset observation at once and the real last one in infos["final_obs"]
    envs_restored = checkpoint is not None and checkpoint["envs"] is not None  # mid-episode, as they were saved
    if envs_restored:
        env_fns = [lambda env=env: env for env in unpickle_envs(checkpoint["envs"])]
    else:
        env_fns = [make_env(args.env_id, i, args.capture_video, run_name) for i in range(args.num_envs)]
    envs = gym.vector.SyncVectorEnv(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    action_space = envs.single_action_space
    if not isinstance(action_space, gym.spaces.Box):
        discrete = isinstance(action_space, gym.spaces.Discrete)
        space, hint = ("Discrete", " (use dqn_jax.py or dqn.py)") if discrete else (action_space, "")
        fail(f"--env-id {args.env_id} has a {space} action space; td3_continuous_action_jax.py needs a Box one{hint}")
    if not (np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()):
        why = "the actor's tanh is rescaled onto the action bounds, so they must be finite"
        fail(f"--env-id {args.env_id} has unbounded actions ({action_space}); {why}")
    if not isinstance(envs.single_observation_space, gym.spaces.Box):
        space = type(envs.single_observation_space).__name__
        fail(
            f"--env-id {args.env_id} has a {space} observation space; td3_continuous_action_jax.py's MLP needs a Box one "
            "(wrap the env, e.g. with gymnasium.wrappers.FlattenObservation)"
        )

    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "args.json"), "w") as f:
        json.dump({"script": os.path.basename(__file__), "run_name": run_name, "args": asdict(args)}, f, indent=2)

    actor = rescaled_actor(Actor, action_space)
    qf = QNetwork()  # qf1 and qf2: one network, two independent sets of parameters
    obs_dim, action_dim = int(np.prod(envs.single_observation_space.shape)), int(np.prod(action_space.shape))
    dummy_obs, dummy_actions = np.zeros((1, obs_dim), np.float32), np.zeros((1, action_dim), np.float32)

    def create_train_states(key):
        key, actor_key, qf1_key, qf2_key = jax.random.split(key, 4)
        actor_params = actor.init(actor_key, dummy_obs)
        qf_params = {"qf1": qf.init(qf1_key, dummy_obs, dummy_actions), "qf2": qf.init(qf2_key, dummy_obs, dummy_actions)}
        adam = optax.adam(args.learning_rate)  # stateless: each TrainState keeps its own moments
        actor_state = TrainState.create(apply_fn=actor.apply, params=actor_params, target_params=actor_params, tx=adam)
        # one optimizer state over both critics, as their losses are summed
        qf_state = TrainState.create(apply_fn=qf.apply, params=qf_params, target_params=qf_params, tx=adam)
        return actor_state, qf_state, key

    # one compiled call: run op by op, the initialization would compile each of its operations on its own
    actor_state, qf_state, key = jax.jit(create_train_states)(key)
    action_low = jnp.asarray(action_space.low.flatten(), dtype=jnp.float32)
    action_high = jnp.asarray(action_space.high.flatten(), dtype=jnp.float32)

    rb = ReplayBuffer(args.buffer_size, obs_dim, action_dim)
    envs.action_space.seed(args.seed)  # the random actions of the warm-up

    @jax.jit
    def act(actor_params, obs, key):
        """The actor's action plus Gaussian exploration noise, clipped to the env's bounds; and the next key."""
        key, noise_key = jax.random.split(key)
        actions = actor.apply(actor_params, obs)
        actions += jax.random.normal(noise_key, actions.shape) * (actor.action_scale * args.exploration_noise)
        return jnp.clip(actions, action_low, action_high), key

    # One compiled call per training step: the critics' step, then every policy_frequency steps (update_actor) the
    # actor's and the targets'. lax.cond runs one branch or the other; XLA compiles both, once
    @jax.jit
    def update(actor_state, qf_state, rows, key, update_actor):
        b_obs, b_actions, b_next_obs, b_rewards, b_terminations = rb.fields(rows)
        key, noise_key = jax.random.split(key)
        target_actor = partial(actor.apply, actor_state.target_params)
        qf1_target = partial(qf.apply, qf_state.target_params["qf1"])
        qf2_target = partial(qf.apply, qf_state.target_params["qf2"])
        smoothing = (args.policy_noise, args.noise_clip, actor.action_scale, action_low, action_high)
        next_q_value = td3_target(
            b_rewards, b_terminations, b_next_obs, target_actor, qf1_target, qf2_target, noise_key, args.gamma, *smoothing
        )

        def qf_loss_fn(params):
            qf1_a_values = qf.apply(params["qf1"], b_obs, b_actions)
            qf2_a_values = qf.apply(params["qf2"], b_obs, b_actions)
            qf1_loss = ((qf1_a_values - next_q_value) ** 2).mean()
            qf2_loss = ((qf2_a_values - next_q_value) ** 2).mean()
            return qf1_loss + qf2_loss, (qf1_loss, qf2_loss, qf1_a_values.mean(), qf2_a_values.mean())

        qf_grad_fn = jax.value_and_grad(qf_loss_fn, has_aux=True)
        (qf_loss, (qf1_loss, qf2_loss, qf1_values, qf2_values)), grads = qf_grad_fn(qf_state.params)
        qf_state = qf_state.apply_gradients(grads=grads)

        def actor_and_targets_step(actor_state, qf_state):
            # differentiated with respect to the actor's parameters only: XLA drops qf1's weight gradients
            def actor_loss_fn(params):
                return -qf.apply(qf_state.params["qf1"], b_obs, actor.apply(params, b_obs)).mean()

            actor_loss, grads = jax.value_and_grad(actor_loss_fn)(actor_state.params)
            actor_state = actor_state.apply_gradients(grads=grads)
            return actor_state.soft_update(args.tau), qf_state.soft_update(args.tau), actor_loss

        def no_step(actor_state, qf_state):
            return actor_state, qf_state, jnp.float32(jnp.nan)

        # delayed policy update
        actor_state, qf_state, actor_loss = jax.lax.cond(update_actor, actor_and_targets_step, no_step, actor_state, qf_state)
        metrics = {"qf1_values": qf1_values, "qf2_values": qf2_values, "qf1_loss": qf1_loss, "qf2_loss": qf2_loss}
        metrics.update(qf_loss=qf_loss / 2.0, actor_loss=actor_loss)
        return actor_state, qf_state, key, metrics

    num_iterations = args.total_timesteps // args.num_envs  # vector steps
    global_step, start_iteration, wandb_run_id = 0, 1, None
    # updates start after this many steps: learning_starts, or as many again after a resume without the buffer
    updates_start = args.learning_starts
    if checkpoint is not None:
        actor_state = flax.serialization.from_state_dict(actor_state, checkpoint["actor_state"])
        qf_state = flax.serialization.from_state_dict(qf_state, checkpoint["qf_state"])
        key = jnp.asarray(checkpoint["key"])
        global_step, start_iteration = checkpoint["global_step"], checkpoint["iteration"] + 1
        if checkpoint["replay_buffer"] is not None:
            if (saved_size := checkpoint["args"]["buffer_size"]) != args.buffer_size:
                fail(f"--buffer-size {args.buffer_size}: the checkpoint's replay buffer has size {saved_size}; keep it")
            rb.load_state_dict(checkpoint["replay_buffer"])
            updates_start = checkpoint["updates_start"]
        else:
            updates_start = global_step + args.learning_starts
            message = "the checkpoint holds no replay buffer (--checkpoint-buffer was off): refilling it with the policy"
            print(f"{message} for {args.learning_starts} steps, learning again after step {updates_start}", file=sys.stderr)
        random.setstate(checkpoint["rng"]["python"])
        np.random.set_state(checkpoint["rng"]["numpy"])
        envs.action_space.np_random.bit_generator.state = checkpoint["rng"]["action_space"]
        wandb_run_id = checkpoint["wandb_run_id"]
    if checkpoint is not None and not envs_restored:
        print("warning: the checkpoint holds no env state (it could not be pickled); starting new episodes", file=sys.stderr)
    obs = checkpoint["obs"] if envs_restored else envs.reset(seed=args.seed + global_step)[0]

    if args.track:
        import wandb

        tracking = {"project": args.wandb_project_name, "entity": args.wandb_entity, "name": run_name, "config": vars(args)}
        # id=None starts a new W&B run; a resumed run appends to its own
        wandb_run_id = wandb.init(**tracking, id=wandb_run_id, resume="allow", sync_tensorboard=True, save_code=True).id
    # on resume, purge_step hides whatever the killed run logged after its last checkpoint: no step repeats
    writer = SummaryWriter(run_dir, purge_step=global_step + 1 if checkpoint is not None else None)
    if checkpoint is None:
        table = "\n".join(f"|{name}|{value}|" for name, value in vars(args).items())
        writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + table)

    def save_checkpoint(iteration):
        action_space_rng = envs.action_space.np_random.bit_generator  # the warm-up's random actions
        state = {
            "args": asdict(args),
            "run_name": run_name,
            "iteration": iteration,
            "global_step": global_step,
            "updates_start": updates_start,
            # flax's state dicts (nested dicts of numpy arrays) and plain counters: the checkpoint loads without this script
            "actor_state": jax.device_get(flax.serialization.to_state_dict(actor_state)),
            "qf_state": jax.device_get(flax.serialization.to_state_dict(qf_state)),
            "key": jax.device_get(key),
            "replay_buffer": rb.state_dict() if args.checkpoint_buffer else None,
            "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "action_space": action_space_rng.state},
            "envs": pickle_envs(envs),
            "obs": obs,
            "wandb_run_id": wandb_run_id,
        }
        path = os.path.join(run_dir, "checkpoint.pkl")
        with open(f"{path}.tmp", "wb") as f:  # then a rename: a resumed run never reads a half-written checkpoint
            pickle.dump(state, f)
        os.replace(f"{path}.tmp", path)

    # Slurm and spot instances send SIGTERM before killing: finish the step, checkpoint, exit non-zero
    stop_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop_requested.set())

    recent_returns = deque(maxlen=20)
    on_terminal = sys.stdout.isatty()
    print(f"{run_name}: training to {args.total_timesteps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    columns = [BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[stats]}"), TimeRemainingColumn()]
    progress = Progress(TextColumn("[bold]{task.description}"), *columns, disable=not on_terminal)  # a no-op off a terminal
    progress_task = progress.add_task(args.exp_name, total=num_iterations * args.num_envs, completed=global_step, stats="")
    progress.start()
    report_every = max(1, num_iterations // 20)
    start_time, start_step = time.time(), global_step
    actor_loss = None

    for iteration in range(start_iteration, num_iterations + 1):
        global_step += args.num_envs
        if global_step <= args.learning_starts:
            actions = envs.action_space.sample()
        else:
            actions, key = act(actor_state.params, np.asarray(obs, dtype=np.float32), key)
            actions = np.asarray(actions).reshape(envs.action_space.shape)
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)

        if "final_info" in infos:
            for i in np.flatnonzero(infos["final_info"]["_episode"]):
                episodic_return = float(infos["final_info"]["episode"]["r"][i])
                recent_returns.append(episodic_return)
                writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                writer.add_scalar("charts/episodic_length", int(infos["final_info"]["episode"]["l"][i]), global_step)
        # the done flag is termination only: a truncated episode (MuJoCo's 1,000-step limit, dm_control's time
        # limit, which shimmy reports as a truncation) still bootstraps from its real last observation
        rb.add(obs, real_next_observations(next_obs, infos), actions, rewards, terminations)
        obs = next_obs

        if global_step > updates_start:
            update_actor = iteration % args.policy_frequency == 0
            actor_state, qf_state, key, metrics = update(actor_state, qf_state, rb.sample(args.batch_size), key, update_actor)
            if update_actor:
                actor_loss = metrics["actor_loss"]

            if iteration % 100 == 0:  # float() waits for the computation: only when logging
                for name in ["qf1_values", "qf2_values", "qf1_loss", "qf2_loss", "qf_loss"]:
                    writer.add_scalar(f"losses/{name}", float(metrics[name]), global_step)
                if actor_loss is not None:
                    writer.add_scalar("losses/actor_loss", float(actor_loss), global_step)
                writer.add_scalar("charts/SPS", int((global_step - start_step) / (time.time() - start_time)), global_step)

        if iteration % report_every == 0 or iteration == num_iterations:
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
        # the actor's parameters, flax-serialized; the evaluation rebuilds its action rescaling from the env
        with open(model_path, "wb") as f:
            f.write(flax.serialization.to_bytes(actor_state.params))
        print(f"model saved to {model_path}")
        from cleanrl_utils.evals.ddpg_jax_eval import evaluate

        # 10 episodes of the deterministic policy, on seeds apart from training's
        episodic_returns = evaluate(
            model_path, make_env, args.env_id, 10, f"{run_name}-eval", Actor, args.capture_video, args.seed + 100_000
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
