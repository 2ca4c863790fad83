# C51, categorical DQN (Bellemare et al. 2017), in JAX (flax + optax, jit-compiled update) for discrete actions on
# vector observations; docs: README.md#c51_jaxpy
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
from torch.utils.tensorboard import SummaryWriter


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
    """environment steps between checkpoints written to `runs/{run_name}/checkpoint.pkl` (0 = off); a checkpoint
    also holds the replay buffer (small for vector observations: 10,000 CartPole transitions are 0.4 MB), so a
    resumed run goes on learning from the same data"""
    resume: str | None = None
    """a run folder (`runs/{run_name}`) to continue from its checkpoint up to `--total-timesteps`"""

    # Algorithm specific arguments
    env_id: str = "CartPole-v1"
    """the id of the environment (any Gymnasium id, or `module:EnvName-v0` for your own)"""
    total_timesteps: int = 500000
    """total timesteps of the experiments"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 1
    """the number of parallel game environments"""
    buffer_size: int = 10000
    """the replay memory buffer size"""
    gamma: float = 0.99
    """the discount factor gamma"""
    n_atoms: int = 101
    """the number of atoms of the return distribution's support"""
    v_min: float = -100
    """the return corresponding to the lowest atom"""
    v_max: float = 100
    """the return corresponding to the highest atom"""
    target_network_frequency: int = 500
    """the number of vector steps between copies of the Q-network into the target network"""
    batch_size: int = 128
    """the batch size of sample from the replay memory"""
    start_e: float = 1.0
    """the starting epsilon for exploration"""
    end_e: float = 0.05
    """the ending epsilon for exploration"""
    exploration_fraction: float = 0.5
    """the fraction of `total-timesteps` it takes from start-e to go end-e"""
    learning_starts: int = 10000
    """timestep to start learning"""
    train_frequency: int = 10
    """the number of vector steps between gradient steps"""


def fail(message: str):
    """Bad input ends with one line on stderr and exit code 2, before any heavy work."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def make_env(env_id, idx, capture_video, run_name):
    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        return env

    return thunk


class QNetwork(nn.Module):
    """For each action, the logits of a categorical distribution of the return over `n_atoms` fixed atoms."""

    action_dim: int
    n_atoms: int

    @nn.compact
    def __call__(self, x: jnp.ndarray):
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(120)(x))
        x = nn.relu(nn.Dense(84)(x))
        return nn.Dense(self.action_dim * self.n_atoms)(x).reshape((x.shape[0], self.action_dim, self.n_atoms))


class TrainState(train_state.TrainState):
    target_params: flax.core.FrozenDict  # the target network's parameters travel with the online ones


def linear_schedule(start_e: float, end_e: float, duration: int, t: int) -> float:
    """Epsilon falls linearly from start_e at step 0 to end_e at step `duration`, then stays there."""
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


def project_distribution(next_pmfs, rewards, terminations, gamma, atoms):
    """The target distribution of C51 (Bellemare et al. 2017, Algorithm 1): each atom z_j of the next state's
    distribution moves to r + gamma * z_j (just r where the episode terminated; a truncation still bootstraps),
    is clipped to [v_min, v_max], and its probability is split between the two nearest atoms of the support."""
    v_min, v_max, n_atoms = atoms[0], atoms[-1], len(atoms)
    delta_z = (v_max - v_min) / (n_atoms - 1)
    next_atoms = jnp.clip(rewards[:, None] + gamma * atoms * (1.0 - terminations[:, None]), v_min, v_max)
    b = (next_atoms - v_min) / delta_z  # fractional index of each moved atom
    lower, upper = jnp.clip(jnp.floor(b), 0, n_atoms - 1), jnp.clip(jnp.ceil(b), 0, n_atoms - 1)
    # where b lands exactly on an atom (lower == upper), all of the mass goes to it
    lower_mass = (upper + (lower == upper) - b) * next_pmfs
    upper_mass = (b - lower) * next_pmfs
    rows = jnp.arange(len(next_pmfs))[:, None]
    target_pmfs = jnp.zeros_like(next_pmfs).at[rows, lower.astype(jnp.int32)].add(lower_mass)
    return target_pmfs.at[rows, upper.astype(jnp.int32)].add(upper_mass)


def real_next_observations(next_obs, infos):
    """Where an episode ended, next_obs is already the next episode's first observation: the transition's real
    next observation is in infos["final_obs"]."""
    real_next_obs = next_obs.copy()
    if "final_obs" in infos:
        ended = infos["_final_obs"]
        real_next_obs[ended] = np.stack(infos["final_obs"][ended])
    return real_next_obs


class ReplayBuffer:
    """A ring buffer of transitions in numpy arrays: cheap to add to every step, and picklable into checkpoints."""

    def __init__(self, buffer_size, observation_space):
        self.obs = np.zeros((buffer_size,) + observation_space.shape, dtype=observation_space.dtype)
        self.next_obs = np.zeros_like(self.obs)  # the real next observation, also where an episode ended
        self.actions = np.zeros(buffer_size, dtype=np.int64)
        self.rewards = np.zeros(buffer_size, dtype=np.float32)
        self.terminations = np.zeros(buffer_size, dtype=np.float32)
        self.buffer_size, self.pos, self.full = buffer_size, 0, False

    def add(self, obs, next_obs, actions, rewards, terminations):
        """One vector step: a transition per environment."""
        for i in range(len(obs)):
            self.obs[self.pos], self.next_obs[self.pos], self.actions[self.pos] = obs[i], next_obs[i], actions[i]
            self.rewards[self.pos], self.terminations[self.pos] = rewards[i], terminations[i]
            self.pos = (self.pos + 1) % self.buffer_size
            self.full = self.full or self.pos == 0

    def __len__(self):
        return self.buffer_size if self.full else self.pos

    def sample(self, batch_size):
        idx = np.random.randint(0, len(self), size=batch_size)
        return self.obs[idx], self.actions[idx], self.next_obs[idx], self.rewards[idx], self.terminations[idx]


def pickle_envs(envs):
    """The sub-environments of a vector env, pickled with their RNGs, time limits and episode statistics; None
    where they cannot be (e.g. a renderer's window handle while recording video)."""
    try:
        return cloudpickle.dumps(envs.envs)
    except (pickle.PicklingError, TypeError):
        return None


def atomic_save(obj, path):
    """A reader (or a resumed run) sees the old file or the new one, never a half-written one."""
    tmp_path = f"{path}.tmp"
    with open(tmp_path, "wb") as f:
        pickle.dump(obj, f)
    os.replace(tmp_path, path)


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

    for flag in ["total_timesteps", "num_envs", "buffer_size", "batch_size", "target_network_frequency", "train_frequency"]:
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "learning_starts"]:
        if getattr(args, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}")
    if not 0.0 < args.exploration_fraction <= 1.0:
        fail(f"--exploration-fraction must be in (0, 1], got {args.exploration_fraction}")
    if args.n_atoms < 2:
        fail(f"--n-atoms must be at least 2, got {args.n_atoms}")
    if args.v_min >= args.v_max:
        fail(f"--v-min {args.v_min} must be below --v-max {args.v_max}")
    if args.batch_size > args.buffer_size:
        fail(f"--batch-size {args.batch_size} is larger than --buffer-size {args.buffer_size}")
    try:
        module, _, registered_id = args.env_id.rpartition(":")
        if module:  # a user's own env: importing its module registers it, as gym.make would
            importlib.import_module(module)
        gym.spec(registered_id)
    except (gym.error.Error, ModuleNotFoundError) as e:
        fail(f"--env-id {args.env_id}: {e}")
    if args.upload_model:
        if not args.save_model:
            fail("--upload-model uploads the model that --save-model saves: add --save-model")
        from cleanrl_utils.huggingface import check_upload

        try:  # before training: a missing token must not cost a whole run
            hf_repo_id = check_upload(args.hf_entity, args.env_id, args.exp_name, args.seed)
        except ValueError as e:
            fail(f"--upload-model: {e}")

    if checkpoint is None:
        run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
        run_dir = f"runs/{run_name}"
    else:
        run_name, run_dir = checkpoint["run_name"], args.resume.rstrip("/")

    # seeding (JAX picks its device itself: a GPU when jax[cuda] is installed and sees one)
    random.seed(args.seed)
    np.random.seed(args.seed)
    key = jax.random.PRNGKey(args.seed)
    device = jax.devices()[0].platform

    # env setup: SAME_STEP autoreset returns the reset observation at once and the real last one in infos["final_obs"]
    if checkpoint is not None and checkpoint["envs"] is not None:
        env_fns = [lambda env=env: env for env in pickle.loads(checkpoint["envs"])]
    else:
        env_fns = [make_env(args.env_id, i, args.capture_video, run_name) for i in range(args.num_envs)]
    envs = gym.vector.SyncVectorEnv(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    if not isinstance(envs.single_observation_space, gym.spaces.Box):
        fail(
            f"--env-id {args.env_id} has a {type(envs.single_observation_space).__name__} observation space; c51_jax.py's "
            "MLP needs a Box one (wrap the env, e.g. with gymnasium.wrappers.FlattenObservation)"
        )
    if not isinstance(envs.single_action_space, gym.spaces.Discrete):
        fail(
            f"--env-id {args.env_id} has a {type(envs.single_action_space).__name__} action space; c51_jax.py supports "
            "Discrete ones only (use td3_continuous_action.py or sac_continuous_action.py for Box actions)"
        )

    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "args.json"), "w") as f:
        json.dump({"script": os.path.basename(__file__), "run_name": run_name, "args": asdict(args)}, f, indent=2)

    q_network = QNetwork(action_dim=envs.single_action_space.n, n_atoms=args.n_atoms)
    atoms = jnp.linspace(args.v_min, args.v_max, num=args.n_atoms)
    params = q_network.init(key, envs.single_observation_space.sample()[None].astype(np.float32))
    q_state = TrainState.create(
        apply_fn=q_network.apply,
        params=params,
        target_params=params,
        tx=optax.adam(learning_rate=args.learning_rate, eps=0.01 / args.batch_size),
    )
    rb = ReplayBuffer(args.buffer_size, envs.single_observation_space)

    @jax.jit
    def greedy_actions(params, obs):
        """The greedy action under the expected return of each action's distribution."""
        pmfs = jax.nn.softmax(q_network.apply(params, obs), axis=-1)
        return (pmfs * atoms).sum(axis=-1).argmax(axis=-1)

    @jax.jit
    def update(q_state, obs, actions, next_obs, rewards, terminations):
        next_pmfs = jax.nn.softmax(q_network.apply(q_state.target_params, next_obs), axis=-1)
        next_actions = (next_pmfs * atoms).sum(axis=-1).argmax(axis=-1)
        next_pmfs = next_pmfs[jnp.arange(len(next_obs)), next_actions]
        target_pmfs = project_distribution(next_pmfs, rewards, terminations, args.gamma, atoms)

        def cross_entropy_loss(params):
            log_pmfs = jax.nn.log_softmax(q_network.apply(params, obs), axis=-1)[jnp.arange(len(obs)), actions]
            return -(target_pmfs * log_pmfs).sum(axis=-1).mean(), (jnp.exp(log_pmfs) * atoms).sum(axis=-1)

        (loss_value, q_pred), grads = jax.value_and_grad(cross_entropy_loss, has_aux=True)(q_state.params)
        return loss_value, q_pred, q_state.apply_gradients(grads=grads)

    num_iterations = args.total_timesteps // args.num_envs  # vector steps
    global_step, start_iteration = 0, 1
    if checkpoint is None:
        obs, _ = envs.reset(seed=args.seed)
        wandb_run_id = None
    else:
        q_state = q_state.replace(**checkpoint["q_state"])
        vars(rb).update(checkpoint["replay_buffer"])
        global_step, start_iteration = checkpoint["global_step"], checkpoint["iteration"] + 1
        random.setstate(checkpoint["rng"]["python"])
        np.random.set_state(checkpoint["rng"]["numpy"])
        if checkpoint["envs"] is not None:
            obs = checkpoint["obs"]
        else:
            print(
                "warning: the checkpoint holds no env state (it could not be pickled); starting new episodes", file=sys.stderr
            )
            obs, _ = envs.reset(seed=args.seed + global_step)
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
            "q_state": jax.device_get(
                {
                    "step": q_state.step,
                    "params": q_state.params,
                    "target_params": q_state.target_params,
                    "opt_state": q_state.opt_state,
                }
            ),
            "replay_buffer": vars(rb),  # plain arrays and counters: the checkpoint loads without this script
            "rng": {"python": random.getstate(), "numpy": np.random.get_state()},
            "envs": pickle_envs(envs),
            "obs": obs,
            "wandb_run_id": wandb_run_id,
        }
        atomic_save(state, os.path.join(run_dir, "checkpoint.pkl"))

    # Slurm and spot instances send SIGTERM before killing: finish the step, checkpoint, exit non-zero
    stop_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop_requested.set())

    recent_returns = deque(maxlen=20)
    on_terminal = sys.stdout.isatty()
    print(f"{run_name}: training to {args.total_timesteps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    if on_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeRemainingColumn(),
        )
        progress_task = progress.add_task(args.exp_name, total=num_iterations * args.num_envs, completed=global_step, stats="")
        progress.start()
    report_every = max(1, num_iterations // 20)
    start_time, start_step = time.time(), global_step

    for iteration in range(start_iteration, num_iterations + 1):
        global_step += args.num_envs
        # epsilon-greedy, per environment; the Q-network runs only when some environment exploits
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
        explore = np.random.random(args.num_envs) < epsilon
        actions = np.random.randint(envs.single_action_space.n, size=args.num_envs)
        if not explore.all():
            actions = np.where(explore, actions, np.asarray(greedy_actions(q_state.params, np.asarray(obs, dtype=np.float32))))

        next_obs, rewards, terminations, truncations, infos = envs.step(actions)

        if "final_info" in infos:
            for i in np.flatnonzero(infos["final_info"]["_episode"]):
                episodic_return = float(infos["final_info"]["episode"]["r"][i])
                recent_returns.append(episodic_return)
                writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                writer.add_scalar("charts/episodic_length", int(infos["final_info"]["episode"]["l"][i]), global_step)
        # the done flag is termination only: a truncated episode still bootstraps from its last observation
        rb.add(obs, real_next_observations(next_obs, infos), actions, rewards, terminations)
        obs = next_obs

        # training
        if global_step > args.learning_starts:
            if iteration % args.train_frequency == 0:
                loss, old_val, q_state = update(q_state, *rb.sample(args.batch_size))

                if iteration % (100 * args.train_frequency) == 0:
                    writer.add_scalar("losses/loss", float(loss), global_step)
                    writer.add_scalar("losses/q_values", float(old_val.mean()), global_step)
                    writer.add_scalar("charts/epsilon", epsilon, global_step)
                    writer.add_scalar("charts/SPS", int((global_step - start_step) / (time.time() - start_time)), global_step)

            # update target network
            if iteration % args.target_network_frequency == 0:
                q_state = q_state.replace(target_params=q_state.params)

        if iteration % report_every == 0 or iteration == num_iterations:
            sps = int((global_step - start_step) / (time.time() - start_time))
            recent = f"return {np.mean(recent_returns):.1f}" if recent_returns else "return -"
            if on_terminal:
                progress.update(progress_task, completed=global_step, stats=f"{sps} SPS, {recent}")
            else:
                print(f"step {global_step}/{num_iterations * args.num_envs}, {sps} SPS, {recent}", flush=True)
        elif on_terminal and iteration % 1000 == 0:
            progress.update(progress_task, completed=global_step)

        interval = args.checkpoint_interval
        if (interval and global_step // interval > (global_step - args.num_envs) // interval) or stop_requested.is_set():
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
        # the support's size and range come with the weights: evaluation rebuilds the same network
        with open(model_path, "wb") as f:
            support = {"n_atoms": args.n_atoms, "v_min": args.v_min, "v_max": args.v_max}
            f.write(flax.serialization.to_bytes({"support": support, "params": q_state.params}))
        print(f"model saved to {model_path}")
        from cleanrl_utils.evals.c51_jax_eval import evaluate

        episodic_returns = evaluate(
            model_path,
            make_env,
            args.env_id,
            eval_episodes=10,
            run_name=f"{run_name}-eval",
            Model=QNetwork,
            epsilon=0.05,
            capture_video=args.capture_video,
            seed=args.seed + 100_000,
        )
        for idx, episodic_return in enumerate(episodic_returns):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)
        print(
            f"evaluation over {len(episodic_returns)} episodes: {np.mean(episodic_returns):.1f} +- {np.std(episodic_returns):.1f}"
        )

    envs.close()
    writer.close()
    if args.upload_model:  # after the envs close, so the last videos are complete
        from cleanrl_utils.huggingface import push

        push(run_dir, episodic_returns, hf_repo_id, command=shlex.join(["python", *sys.argv]))
    if args.track and args.capture_video:
        for video_path in sorted(glob.glob(f"videos/{run_name}*/*.mp4")):
            wandb.log({f"videos/{os.path.basename(os.path.dirname(video_path))}": wandb.Video(video_path)})
