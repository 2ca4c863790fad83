# DDPG (Lillicrap et al. 2016) in JAX, CleanRL's TD3-style variant; docs: docs/algorithms/ddpg_continuous_action_jax.md
import glob
import json
import math
import os
import random
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass
from functools import partial

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
    exploration_noise: float = 0.1
    """the scale of the exploration noise (times the action scale)"""
    learning_starts: int = int(25e3)
    """timestep to start learning (random actions until then)"""
    policy_frequency: int = 2
    """the frequency of training policy (delayed), and of the target networks' updates"""

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
    env_id: str = "HalfCheetah-v4"
    """the id of the environment (Gymnasium, `dm_control/{domain}-{task}-v0`, or `module:EnvName-v0` for your own)"""
    total_timesteps: int = 1000000
    """total timesteps of the experiments"""
    checkpoint_interval: int = 0
    """environment steps between checkpoints in `runs/{run_name}/checkpoint.pt` (0 = off; needs cleanrl_utils)"""
    checkpoint_buffer: bool = False
    """whether checkpoints hold the replay buffer (1M HalfCheetah transitions: 170 MB); if not, a resumed run refills it"""
    resume: str | None = None
    """a run folder (`runs/{run_name}`) to continue from its checkpoint up to `--total-timesteps`"""
    eval_interval: int = 0
    """environment steps between evaluations, logged as `eval/episodic_return` (0 = off; needs cleanrl_utils)"""
    eval_episodes: int = 10
    """the episodes of each evaluation (`--eval-interval`'s and `--save-model`'s)"""
    config: str | None = None
    """a YAML file (flat, or one section per env id) or a run's args.json setting the defaults; flags given win"""


def fail(message: str):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def make_env(env_id, idx, capture_video, run_name):
    def thunk():
        if env_id.startswith("dm_control/"):  # shimmy registers dm_control's tasks with Gymnasium
            import shimmy

            gym.register_envs(shimmy)
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)  # a `module:EnvName-v0` id imports its module, which registers the env
        if isinstance(env.observation_space, gym.spaces.Dict):  # dm_control observes a dict of arrays
            env = gym.wrappers.FlattenObservation(env)
        return gym.wrappers.RecordEpisodeStatistics(env)

    return thunk


def linear(features, fan_in, name):
    """nn.Dense initialized as torch's nn.Linear (uniform in +-1/sqrt(fan_in)): with flax's default, SAC learned far slower."""
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
    action_scale: jnp.ndarray  # tanh's (-1, 1) stretched onto the env's bounds, whatever they are (Pendulum's are [-2, 2])
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


def ddpg_target(rewards, terminations, next_obs, target_actor, qf1_target, gamma):
    """r + gamma * Q'(s', mu'(s')) with the target actor and critic, and no bootstrap where the episode terminated.
    A time-limit truncation is stored as not terminated, so it still bootstraps from its real last observation."""
    return rewards + gamma * (1.0 - terminations) * qf1_target(next_obs, target_actor(next_obs))


def real_next_observations(next_obs, infos):
    """Where an episode ended, next_obs is already the next episode's first one: the real one is infos["final_obs"]."""
    real_next_obs = next_obs.copy()
    if "final_obs" in infos:
        real_next_obs[infos["_final_obs"]] = np.stack(infos["final_obs"][infos["_final_obs"]])
    return real_next_obs


def check_args(args):
    """Every check of the flags, before heavy work: a bad input ends with one line naming the flag, exit code 2."""
    positive = ["total_timesteps", "num_envs", "buffer_size", "batch_size", "policy_frequency", "learning_rate"]
    for flag in positive + ["eval_episodes"]:
        if not getattr(args, flag) > 0:  # `not >`: a NaN fails too
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "learning_starts", "exploration_noise", "eval_interval"]:
        if not getattr(args, flag) >= 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}")
    if not 0 <= args.seed < 2**32:
        fail(f"--seed must be in [0, 2**32) (numpy's seed range), got {args.seed}")
    if args.learning_starts >= args.total_timesteps:
        fail(f"--learning-starts {args.learning_starts} must be below --total-timesteps {args.total_timesteps}")
    if not 0.0 < args.tau <= 1.0:
        fail(f"--tau must be in (0, 1], got {args.tau}")
    if not 0.0 <= args.gamma <= 1.0:
        fail(f"--gamma must be in [0, 1], got {args.gamma}")
    if args.batch_size > args.buffer_size:
        fail(f"--batch-size {args.batch_size} is larger than --buffer-size {args.buffer_size}")
    if args.capture_video:  # before the first env is made: MuJoCo chooses how to render when it is first imported
        from cleanrl_utils.rendering import render_offscreen

        render_offscreen(args.env_id)  # no display: EGL for MuJoCo, SDL's dummy driver for pygame; exit 2 if neither
    try:
        env = make_env(args.env_id, 0, False, "")()
    except (gym.error.Error, ImportError) as e:
        fail(f"--env-id {args.env_id}: {e}")
    if not isinstance(env.action_space, gym.spaces.Box):
        use = " (use dqn_jax.py or dqn.py)" if isinstance(env.action_space, gym.spaces.Discrete) else ""
        fail(f"--env-id {args.env_id} has a {type(env.action_space).__name__} action space; ddpg needs a Box one{use}")
    if not (np.isfinite(env.action_space.low).all() and np.isfinite(env.action_space.high).all()):
        fail(f"--env-id {args.env_id} has unbounded actions; the actor's tanh is rescaled onto them, so they must be finite")
    if not isinstance(env.observation_space, gym.spaces.Box):
        fail(f"--env-id {args.env_id} has a {type(env.observation_space).__name__} observation space; ddpg needs a Box one")
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
    num_iterations = args.total_timesteps // args.num_envs  # vector steps, one update each
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

    def save_and_evaluate(model_path, seed, video=False):  # the evaluations of --eval-interval and --save-model
        with open(model_path, "wb") as f:  # the actor's parameters; the evaluation rebuilds the action rescaling from the env
            f.write(flax.serialization.to_bytes(actor_state.params))
        from cleanrl_utils.evals.ddpg_jax_eval import evaluate

        return evaluate(model_path, make_env, args.env_id, args.eval_episodes, f"{run_name}-eval", Actor, video, seed)

    run_state = None
    if args.checkpoint_interval or args.eval_interval or args.save_model or checkpoint:  # needs cleanrl_utils
        from cleanrl_utils.run_state import RunState

        # made before JAX's seconds of setup: a SIGTERM from here on checkpoints after the first step (and exits 143)
        run_state = RunState(run_dir, args, writer, checkpoint, save_and_evaluate)

    # TRY NOT TO MODIFY: seeding (numpy: replay batches; the action space: warm-up actions; JAX's key: exploration noise)
    random.seed(args.seed)
    np.random.seed(args.seed)
    key = jax.random.PRNGKey(args.seed)
    device = jax.devices()[0].platform  # JAX picks its device itself: a GPU when jax[cuda] is installed and sees one

    # env setup: SAME_STEP autoreset returns the reset observation at once and the real last one in infos["final_obs"]
    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, i, args.capture_video, run_name) for i in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    envs.action_space.seed(args.seed)  # the random actions of the warm-up

    # ALGO LOGIC: initialize agent here
    actor, qf = rescaled_actor(Actor, envs.single_action_space), QNetwork()
    obs_dim, action_dim = (int(np.prod(space.shape)) for space in (envs.single_observation_space, envs.single_action_space))
    dummy_obs, dummy_actions = np.zeros((1, obs_dim), np.float32), np.zeros((1, action_dim), np.float32)
    key, actor_key, qf1_key = jax.random.split(key, 3)
    actor_params = actor.init(actor_key, dummy_obs)
    qf_params = {"qf1": qf.init(qf1_key, dummy_obs, dummy_actions)}
    adam = optax.adam(args.learning_rate)  # stateless: each TrainState keeps its own moments
    actor_state = TrainState.create(apply_fn=actor.apply, params=actor_params, target_params=actor_params, tx=adam)
    qf_state = TrainState.create(apply_fn=qf.apply, params=qf_params, target_params=qf_params, tx=adam)
    action_low = jnp.asarray(envs.single_action_space.low.flatten(), dtype=jnp.float32)
    action_high = jnp.asarray(envs.single_action_space.high.flatten(), dtype=jnp.float32)
    obs_space = gym.spaces.Box(-np.inf, np.inf, envs.single_observation_space.shape, np.float32)  # as the networks take them
    # the done flag stored is termination only: a truncated episode still bootstraps from its real last observation
    rb = ReplayBuffer(
        args.buffer_size, obs_space, envs.single_action_space, "cpu", args.num_envs, handle_timeout_termination=False
    )

    @jax.jit
    def act(actor_params, obs, key):
        """The actor's action plus Gaussian exploration noise, clipped to the env's bounds; and the next key."""
        key, noise_key = jax.random.split(key)
        actions = actor.apply(actor_params, obs)
        actions += jax.random.normal(noise_key, actions.shape) * (actor.action_scale * args.exploration_noise)
        return jnp.clip(actions, action_low, action_high), key

    # One compiled call per training step: the critic's step, then every policy_frequency steps (update_actor) the
    # actor's and the targets'. lax.cond runs one branch or the other; XLA compiles both, once
    @jax.jit
    def update(actor_state, qf_state, data, update_actor):
        b_obs, b_actions, b_next_obs = data.observations, data.actions, data.next_observations
        b_rewards, b_terminations = data.rewards.flatten(), data.dones.flatten()  # (batch, 1) to the critics' (batch,)
        target_actor = partial(actor.apply, actor_state.target_params)
        qf1_target = partial(qf.apply, qf_state.target_params["qf1"])
        next_q_value = ddpg_target(b_rewards, b_terminations, b_next_obs, target_actor, qf1_target, args.gamma)

        def qf_loss_fn(params):
            qf1_a_values = qf.apply(params["qf1"], b_obs, b_actions)
            return ((qf1_a_values - next_q_value) ** 2).mean(), qf1_a_values.mean()

        (qf1_loss, qf1_values), grads = jax.value_and_grad(qf_loss_fn, has_aux=True)(qf_state.params)
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
        return actor_state, qf_state, {"qf1_values": qf1_values, "qf1_loss": qf1_loss, "actor_loss": actor_loss}

    global_step, updates_start = 0, args.learning_starts  # a resume without the buffer learns again later
    obs, _ = envs.reset(seed=args.seed)

    def checkpoint_state():  # what a checkpoint holds; action_space_rng: the warm-up's random actions
        rng = dict(key=key, action_space_rng=envs.action_space.np_random)
        learner = dict(actor_state=actor_state, qf_state=qf_state, rb=rb if args.checkpoint_buffer else None, **rng)
        return learner | dict(envs=envs, obs=obs, updates_start=updates_start, global_step=global_step)

    if checkpoint:
        saved = run_state.restore(checkpoint_state())
        actor_state, qf_state, key = saved["actor_state"], saved["qf_state"], saved["key"]
        obs, global_step, updates_start = saved["obs"], saved["global_step"], saved["updates_start"]
        if not saved["envs"]:  # they could not be pickled (e.g. while recording video): new episodes
            obs, _ = envs.reset(seed=args.seed + global_step)
    if checkpoint and not args.checkpoint_buffer:  # an empty buffer: act with the policy, without learning, to refill it
        updates_start = run_state.refill(global_step, args.learning_starts)

    print(f"{run_name}: training to {total_steps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    # a bar on a terminal; disable=None turns it off where stdout is not one (a log file), and the loop prints lines
    progress = tqdm(total=total_steps, initial=global_step, unit="step", file=sys.stdout, disable=None)
    recent_returns, start_time, start_step = deque(maxlen=20), time.time(), global_step
    report_every, actor_loss = max(1, num_iterations // 20), None

    for iteration in range(global_step // args.num_envs + 1, num_iterations + 1):
        global_step += args.num_envs
        # ALGO LOGIC: put action logic here
        if global_step <= args.learning_starts:
            actions = envs.action_space.sample()
        else:
            actions, key = act(actor_state.params, np.asarray(obs, dtype=np.float32), key)
            actions = np.asarray(actions).reshape(envs.action_space.shape)

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
        if global_step > updates_start:
            update_actor = iteration % args.policy_frequency == 0
            data = jax.tree.map(lambda x: x.numpy(), rb.sample(args.batch_size))  # SB3's torch tensors, as numpy
            actor_state, qf_state, metrics = update(actor_state, qf_state, data, update_actor)
            if update_actor:
                actor_loss = metrics["actor_loss"]

            if iteration % 100 == 0:  # float() waits for the computation: only when logging
                losses = metrics | {"actor_loss": actor_loss}  # the actor's loss once it has taken a step
                losses = {name: float(value) for name, value in losses.items() if value is not None}
                if not np.isfinite(list(losses.values())).all():
                    sys.exit(f"error: the loss turned non-finite at step {global_step}; stopping (no model saved)")
                for name, value in losses.items():
                    writer.add_scalar(f"losses/{name}", value, global_step)

        # a bar update costs more than a vector step: every 100 of them, and the plain lines every 5%
        if iteration % 100 == 0 or iteration % report_every == 0 or iteration == num_iterations:
            sps = int((global_step - start_step) / (time.time() - start_time))
            stats = f"{sps} SPS, return {np.mean(recent_returns):.1f}" if recent_returns else f"{sps} SPS"
            writer.add_scalar("charts/SPS", sps, global_step)
            progress.set_postfix_str(stats, refresh=False)
            progress.update(global_step - progress.n)
            if progress.disable and (iteration % report_every == 0 or iteration == num_iterations):
                left = (total_steps - global_step) / max(sps, 1)  # seconds, at the speed so far
                timing = f"{tqdm.format_interval(time.time() - start_time)} elapsed, {tqdm.format_interval(left)} left"
                print(f"step {global_step}/{total_steps}, {stats}, {timing}", flush=True)
        if run_state:
            run_state.step(global_step, checkpoint_state)

    progress.close()
    if actor_loss is not None and not np.isfinite([float(metrics["qf1_loss"]), float(actor_loss)]).all():
        sys.exit(f"error: the loss turned non-finite at step {global_step}; stopping (no model saved)")
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
