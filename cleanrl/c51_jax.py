# C51, categorical DQN (Bellemare et al. 2017), in JAX on vector observations; docs: docs/algorithms/c51_jax.md
import glob
import json
import os
import random
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass

import flax
import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from flax.training import train_state
from stable_baselines3.common.buffers import ReplayBuffer
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm


@dataclass
class Args:
    # Algorithm specific arguments
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
    """whether to save the model into `runs/{run_name}` and evaluate it for `--eval-episodes` episodes"""
    upload_model: bool = False
    """whether to upload the saved model, its evaluation and videos to the Hugging Face Hub (with --save-model)"""
    hf_entity: str | None = None
    """the user or organization of the Hugging Face Hub model repository (default: the token's user)"""
    env_id: str = "CartPole-v1"
    """the id of the environment (any Gymnasium id, or `module:EnvName-v0` for your own)"""
    total_timesteps: int = 500000
    """total timesteps of the experiments"""
    checkpoint_interval: int = 0
    """environment steps between checkpoints in `runs/{run_name}/checkpoint.pt` (0 = off; needs cleanrl_utils)"""
    resume: str | None = None
    """a run folder (`runs/{run_name}`) to continue from its checkpoint up to `--total-timesteps`"""
    eval_interval: int = 0
    """environment steps between evaluations, logged as `eval/episodic_return` (0 = off; needs cleanrl_utils)"""
    eval_episodes: int = 10
    """the episodes of each evaluation (`--eval-interval`'s and `--save-model`'s)"""
    config: str | None = None
    """a YAML file (flat, or one section per env id) or a run's args.json setting the defaults; flags given win"""


def fail(message: str):
    """Bad input ends with one line on stderr and exit code 2, before any heavy work."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def make_env(env_id, idx, capture_video, run_name):
    def thunk():
        if capture_video and idx == 0:
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame draws rgb_array frames without a display
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
    """C51's target (Algorithm 1): each atom z_j of the next state's distribution moves to r + gamma * z_j (just r where the
    episode terminated), is clipped to [v_min, v_max], and its mass is split between the two nearest atoms."""
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
    """Where an episode ended, next_obs is already the next episode's first one: the real one is infos["final_obs"]."""
    real_next_obs = next_obs.copy()
    if "final_obs" in infos:
        real_next_obs[infos["_final_obs"]] = np.stack(infos["final_obs"][infos["_final_obs"]])
    return real_next_obs


def check_args(args):
    """Every check of the flags, before heavy work: a bad input ends with one line naming the flag, exit code 2."""
    positive = ["total_timesteps", "num_envs", "buffer_size", "batch_size", "target_network_frequency", "train_frequency"]
    for flag in positive + ["eval_episodes"]:
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "learning_starts", "eval_interval"]:
        if getattr(args, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}")
    if not 0 <= args.seed < 2**32:
        fail(f"--seed must be in [0, 2**32) (numpy's seed range), got {args.seed}")
    if args.learning_starts >= args.total_timesteps:
        fail(f"--learning-starts {args.learning_starts} must be below --total-timesteps {args.total_timesteps}")
    if not 0.0 < args.exploration_fraction <= 1.0:
        fail(f"--exploration-fraction must be in (0, 1], got {args.exploration_fraction}")
    if args.n_atoms < 2:
        fail(f"--n-atoms must be at least 2, got {args.n_atoms}")
    if args.v_min >= args.v_max:
        fail(f"--v-min {args.v_min} must be below --v-max {args.v_max}")
    if args.batch_size > args.buffer_size:
        fail(f"--batch-size {args.batch_size} is larger than --buffer-size {args.buffer_size}")
    try:
        env = gym.make(args.env_id)  # a `module:EnvName-v0` id imports its module, which registers the env
    except (gym.error.Error, ModuleNotFoundError) as e:
        fail(f"--env-id {args.env_id}: {e}")
    if not isinstance(env.observation_space, gym.spaces.Box) or not isinstance(env.action_space, gym.spaces.Discrete):
        fail(
            f"--env-id {args.env_id} has a {type(env.observation_space).__name__} observation space and a "
            f"{type(env.action_space).__name__} action space; c51_jax.py needs a Box observation space (wrap others with "
            "gymnasium.wrappers.FlattenObservation) and a Discrete action space (sac_continuous_action.py takes Box ones)"
        )
    env.close()


if __name__ == "__main__":
    args = tyro.cli(Args)
    checkpoint = None
    if args.config or args.resume:  # the file's or the saved run's args under the flags given now (exit 2 on a misfit)
        from cleanrl_utils.run_state import resolve_args

        args, checkpoint = resolve_args(Args, args, __file__)
    check_args(args)
    if args.upload_model:  # before training: a missing token must not cost a whole run
        from cleanrl_utils.huggingface import upload_repo_id

        hf_repo_id = upload_repo_id(args)  # refuses (exit 2) without --save-model or a usable Hub token
    num_iterations = args.total_timesteps // args.num_envs  # vector steps
    total_steps = num_iterations * args.num_envs  # the budget in whole vector steps: what the run does
    run_name = checkpoint["run_name"] if checkpoint else f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    run_dir = args.resume.rstrip("/") if checkpoint else f"runs/{run_name}"
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "args.json"), "w") as f:
        json.dump({"script": os.path.basename(__file__), "run_name": run_name, "args": asdict(args)}, f, indent=2)
    if args.track:
        import wandb

        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=vars(args),
            name=run_name,
            save_code=True,
        )
    # on resume, purge_step hides whatever a killed run logged after its last checkpoint: no step repeats
    writer = SummaryWriter(run_dir, purge_step=checkpoint["global_step"] + 1 if checkpoint else None)
    if not checkpoint:  # a resumed run keeps its first table
        table = "\n".join(f"|{key}|{value}|" for key, value in vars(args).items())
        writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")

    # TRY NOT TO MODIFY: seeding (JAX picks its device itself: a GPU when jax[cuda] is installed and sees one)
    random.seed(args.seed)
    np.random.seed(args.seed)
    device = jax.devices()[0].platform

    # env setup: SAME_STEP autoreset returns the reset observation at once and the real last one in infos["final_obs"]
    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, i, args.capture_video, run_name) for i in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    q_network = QNetwork(action_dim=envs.single_action_space.n, n_atoms=args.n_atoms)
    atoms = jnp.linspace(args.v_min, args.v_max, num=args.n_atoms)
    params = q_network.init(jax.random.PRNGKey(args.seed), envs.single_observation_space.sample()[None].astype(np.float32))
    optimizer = optax.adam(learning_rate=args.learning_rate, eps=0.01 / args.batch_size)
    q_state = TrainState.create(apply_fn=q_network.apply, params=params, target_params=params, tx=optimizer)
    # the done flag stored is termination only: a truncated episode still bootstraps from its real last observation
    rb = ReplayBuffer(
        args.buffer_size,
        envs.single_observation_space,
        envs.single_action_space,
        "cpu",
        args.num_envs,
        handle_timeout_termination=False,
    )

    @jax.jit
    def greedy_actions(params, obs):  # under the expected return of each action's distribution
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

    global_step = 0
    obs, _ = envs.reset(seed=args.seed)

    def checkpoint_state():  # what a checkpoint holds (the replay buffer too: a resumed run learns from the same data)
        return dict(q_state=q_state, rb=rb, envs=envs, obs=obs, global_step=global_step)

    def save_and_evaluate(model_path, seed, video=False):  # the evaluations of --eval-interval and --save-model
        # the support's size and range come with the weights: evaluation rebuilds the same network
        with open(model_path, "wb") as f:
            support = {"n_atoms": args.n_atoms, "v_min": args.v_min, "v_max": args.v_max}
            f.write(flax.serialization.to_bytes({"support": support, "params": q_state.params}))
        from cleanrl_utils.evals.c51_jax_eval import evaluate

        return evaluate(model_path, make_env, args.env_id, args.eval_episodes, f"{run_name}-eval", QNetwork, 0.05, video, seed)

    run_state = None
    if args.checkpoint_interval or args.eval_interval or args.save_model or checkpoint:  # needs cleanrl_utils
        from cleanrl_utils.run_state import RunState

        run_state = RunState(run_dir, args, writer, checkpoint, save_and_evaluate)
        if checkpoint:
            saved = run_state.restore(checkpoint_state())
            q_state, global_step, obs = saved["q_state"], saved["global_step"], saved["obs"]
            if not saved["envs"]:  # they could not be pickled (e.g. while recording video): new episodes
                obs, _ = envs.reset(seed=args.seed + global_step)

    print(f"{run_name}: training to {total_steps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    # a bar on a terminal; disable=None turns it off where stdout is not one (a log file), and the loop prints lines
    progress = tqdm(total=total_steps, initial=global_step, unit="step", file=sys.stdout, disable=None)
    recent_returns, start_time, start_step = deque(maxlen=20), time.time(), global_step
    report_every = max(1, num_iterations // 20)

    for iteration in range(global_step // args.num_envs + 1, num_iterations + 1):
        global_step += args.num_envs
        # ALGO LOGIC: epsilon-greedy, per environment; the Q-network runs only when some environment exploits
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
        explore = np.random.random(args.num_envs) < epsilon
        actions = np.random.randint(envs.single_action_space.n, size=args.num_envs)
        if not explore.all():
            greedy = greedy_actions(q_state.params, np.asarray(obs, dtype=np.float32))
            actions = np.where(explore, actions, np.asarray(greedy))

        # TRY NOT TO MODIFY: execute the game and log data.
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        if not np.isfinite(rewards).all():
            sys.exit(f"error: the environment returned a non-finite reward at step {global_step}; stopping")
        if "final_info" in infos:
            for i in np.flatnonzero(infos["final_info"]["_episode"]):
                episodic_return = float(infos["final_info"]["episode"]["r"][i])
                recent_returns.append(episodic_return)
                writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                writer.add_scalar("charts/episodic_length", int(infos["final_info"]["episode"]["l"][i]), global_step)
        rb.add(obs, real_next_observations(next_obs, infos), actions, rewards, terminations, infos)
        obs = next_obs

        # ALGO LOGIC: training.
        if global_step > args.learning_starts:
            if iteration % args.train_frequency == 0:
                data = rb.sample(args.batch_size)
                loss, old_val, q_state = update(
                    q_state,
                    data.observations.numpy(),
                    data.actions.flatten().numpy(),
                    data.next_observations.numpy(),
                    data.rewards.flatten().numpy(),
                    data.dones.flatten().numpy(),
                )

                if iteration % (100 * args.train_frequency) == 0:
                    loss_value = float(loss)
                    if not np.isfinite(loss_value):
                        sys.exit(f"error: the loss turned non-finite at step {global_step}; stopping (no model saved)")
                    writer.add_scalar("losses/loss", loss_value, global_step)
                    writer.add_scalar("losses/q_values", float(old_val.mean()), global_step)
                    writer.add_scalar("charts/epsilon", epsilon, global_step)
                    writer.add_scalar("charts/SPS", int((global_step - start_step) / (time.time() - start_time)), global_step)

            # update target network
            if iteration % args.target_network_frequency == 0:
                q_state = q_state.replace(target_params=q_state.params)

        # a bar update costs more than a vector step: every 1,000 of them, and the plain lines every 5%
        if iteration % 1000 == 0 or iteration % report_every == 0 or iteration == num_iterations:
            sps = int((global_step - start_step) / (time.time() - start_time))
            stats = f"{sps} SPS, return {np.mean(recent_returns):.1f}" if recent_returns else f"{sps} SPS"
            progress.set_postfix_str(stats, refresh=False)
            progress.update(global_step - progress.n)
            if progress.disable and (iteration % report_every == 0 or iteration == num_iterations):
                left = (total_steps - global_step) / max(sps, 1)  # seconds, at the speed so far
                timing = f"{tqdm.format_interval(time.time() - start_time)} elapsed, {tqdm.format_interval(left)} left"
                print(f"step {global_step}/{total_steps}, {stats}, {timing}", flush=True)
        if run_state:
            run_state.step(global_step, checkpoint_state)

    progress.close()
    if not all(np.isfinite(p).all() for p in jax.tree.leaves(q_state.params)):  # the loss is checked only where it is logged
        sys.exit(f"error: the loss turned non-finite before step {global_step}; stopping (no model saved)")
    if run_state:  # the final checkpoint (to extend the run), then with --save-model the model and its evaluation
        episodic_returns = run_state.finish(global_step, checkpoint_state)

    envs.close()
    writer.close()
    if args.upload_model:  # after the envs close, so the last videos are complete
        from cleanrl_utils.huggingface import push

        push(run_dir, episodic_returns, hf_repo_id)
    if args.track and args.capture_video:
        for video_path in sorted(glob.glob(f"videos/{run_name}*/*.mp4")):
            wandb.log({f"videos/{os.path.basename(os.path.dirname(video_path))}": wandb.Video(video_path)})
