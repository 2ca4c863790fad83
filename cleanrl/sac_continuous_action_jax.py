# SAC (Haarnoja et al. 2018) in JAX; docs: docs/algorithms/sac_continuous_action_jax.md
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


class SoftQNetwork(nn.Module):
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
        mean = linear(self.action_dim, 256, "fc_mean")(x)
        log_std = -5 + 3.5 * (jnp.tanh(linear(self.action_dim, 256, "fc_logstd")(x)) + 1)  # in [-5, 2], as SpinUp does
        return mean, log_std

    def get_action(self, x, key):
        """A reparameterized (differentiable) sample drawn with `key`, its log-probability, and tanh(mean) for evaluation."""
        mean, log_std = self(x)
        u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
        action = jnp.tanh(u) * self.action_scale + self.action_bias
        log_prob = squashed_gaussian_log_prob(u, mean, log_std, self.action_scale)
        return action, log_prob, jnp.tanh(mean) * self.action_scale + self.action_bias


def rescaled_actor(Model, action_space):
    high, low = action_space.high.flatten(), action_space.low.flatten()
    scale, bias = jnp.asarray((high - low) / 2.0, dtype=jnp.float32), jnp.asarray((high + low) / 2.0, dtype=jnp.float32)
    return Model(action_dim=int(np.prod(action_space.shape)), action_scale=scale, action_bias=bias)


def squashed_gaussian_log_prob(u, mean, log_std, action_scale, eps=1e-6):
    """log-density of a = tanh(u) * action_scale + action_bias, u ~ N(mean, exp(log_std)^2), by the change of variables:
    log N(u) - sum log(action_scale * (1 - tanh(u)^2)); eps keeps the log finite where tanh saturates. Shape (batch,)."""
    log_normal = -0.5 * ((u - mean) / jnp.exp(log_std)) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    log_det_jacobian = jnp.log(action_scale * (1 - jnp.tanh(u) ** 2) + eps)
    return (log_normal - log_det_jacobian).sum(1)


def soft_td_target(rewards, terminations, next_q1, next_q2, next_log_pi, alpha, gamma):
    """r + gamma * (min(Q1', Q2') - alpha * log pi(a'|s')), a' ~ pi(s'); no bootstrap where the episode terminated."""
    return rewards + gamma * (1.0 - terminations) * (jnp.minimum(next_q1, next_q2) - alpha * next_log_pi)


class TrainState(train_state.TrainState):
    target_params: flax.core.FrozenDict  # the target network's parameters travel with the online ones (the critics')


def real_next_observations(next_obs, infos):
    """Where an episode ended, next_obs is already the next episode's first one: the real one is infos["final_obs"]."""
    real_next_obs = next_obs.copy()
    if "final_obs" in infos:
        real_next_obs[infos["_final_obs"]] = np.stack(infos["final_obs"][infos["_final_obs"]])
    return real_next_obs


def check_args(args):
    """Every check of the flags, before heavy work: a bad input ends with one line naming the flag, exit code 2."""
    counts = ["total_timesteps", "num_envs", "buffer_size", "batch_size", "policy_frequency", "target_network_frequency"]
    for flag in counts + ["policy_lr", "q_lr", "eval_episodes"]:
        if not getattr(args, flag) > 0:  # `not >`: a NaN fails too
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "learning_starts", "alpha", "eval_interval"]:
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
        fail(f"--env-id {args.env_id} has a {type(env.action_space).__name__} action space; sac needs a Box one{use}")
    if not (np.isfinite(env.action_space.low).all() and np.isfinite(env.action_space.high).all()):
        fail(f"--env-id {args.env_id} has unbounded actions; the actor's tanh is rescaled onto them, so they must be finite")
    if not isinstance(env.observation_space, gym.spaces.Box):
        fail(f"--env-id {args.env_id} has a {type(env.observation_space).__name__} observation space; sac needs a Box one")
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
        from cleanrl_utils.evals.sac_jax_eval import evaluate

        return evaluate(model_path, make_env, args.env_id, args.eval_episodes, f"{run_name}-eval", Actor, video, seed)

    run_state = None
    if args.checkpoint_interval or args.eval_interval or args.save_model or checkpoint:  # needs cleanrl_utils
        from cleanrl_utils.run_state import RunState

        # made before JAX's seconds of setup: a SIGTERM from here on checkpoints after the first step (and exits 143)
        run_state = RunState(run_dir, args, writer, checkpoint, save_and_evaluate)

    # TRY NOT TO MODIFY: seeding (numpy: replay batches; the action space: warm-up actions; JAX's key: the policy's samples)
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

    # ALGO LOGIC: initialize agent here: the twin critics are one network with two sets of parameters and one optimizer state
    actor, qf = rescaled_actor(Actor, envs.single_action_space), SoftQNetwork()
    obs_dim, action_dim = (int(np.prod(space.shape)) for space in (envs.single_observation_space, envs.single_action_space))
    dummy_obs, dummy_actions = np.zeros((1, obs_dim), np.float32), np.zeros((1, action_dim), np.float32)
    key, actor_key, qf1_key, qf2_key = jax.random.split(key, 4)
    actor_params = actor.init(actor_key, dummy_obs)
    qf_params = {"qf1": qf.init(qf1_key, dummy_obs, dummy_actions), "qf2": qf.init(qf2_key, dummy_obs, dummy_actions)}
    actor_state = train_state.TrainState.create(apply_fn=actor.apply, params=actor_params, tx=optax.adam(args.policy_lr))
    q_adam = optax.adam(args.q_lr)  # stateless: the critics' and alpha's TrainStates keep their own moments
    qf_state = TrainState.create(apply_fn=qf.apply, params=qf_params, target_params=qf_params, tx=q_adam)
    log_alpha = {"log_alpha": jnp.zeros(())}  # automatic entropy tuning (else None): alpha = exp(log_alpha) starts at 1
    alpha_state = train_state.TrainState.create(apply_fn=None, params=log_alpha, tx=q_adam) if args.autotune else None
    target_entropy = -float(action_dim)
    obs_space = gym.spaces.Box(-np.inf, np.inf, envs.single_observation_space.shape, np.float32)  # as the networks take them
    # the done flag stored is termination only: a truncated episode still bootstraps from its real last observation
    rb = ReplayBuffer(
        args.buffer_size, obs_space, envs.single_action_space, "cpu", args.num_envs, handle_timeout_termination=False
    )

    def current_alpha(alpha_state):
        return jnp.exp(alpha_state.params["log_alpha"]) if args.autotune else args.alpha

    @jax.jit
    def act(actor_params, obs, key):  # a sampled action, and the next key
        key, sample_key = jax.random.split(key)
        return actor.apply(actor_params, obs, sample_key, method=Actor.get_action)[0], key

    # One compiled call per training step, the torch twin's loop body: which steps run depends on the (traced) iteration
    @jax.jit
    def update(actor_state, qf_state, alpha_state, data, key, iteration):
        b_obs, b_actions, b_next_obs = data.observations, data.actions, data.next_observations
        b_rewards, b_terminations = data.rewards.flatten(), data.dones.flatten()  # (batch, 1) to the critics' (batch,)
        key, next_key = jax.random.split(key)
        next_actions, next_log_pi, _ = actor.apply(actor_state.params, b_next_obs, next_key, method=Actor.get_action)
        next_q1, next_q2 = (qf.apply(qf_state.target_params[name], b_next_obs, next_actions) for name in ["qf1", "qf2"])
        alpha = current_alpha(alpha_state)
        next_q_value = soft_td_target(b_rewards, b_terminations, next_q1, next_q2, next_log_pi, alpha, args.gamma)

        def qf_loss_fn(params):
            qf1_a_values = qf.apply(params["qf1"], b_obs, b_actions)
            qf2_a_values = qf.apply(params["qf2"], b_obs, b_actions)
            qf1_loss = ((qf1_a_values - next_q_value) ** 2).mean()
            qf2_loss = ((qf2_a_values - next_q_value) ** 2).mean()
            values = dict(qf1_values=qf1_a_values.mean(), qf2_values=qf2_a_values.mean())
            return qf1_loss + qf2_loss, dict(values, qf1_loss=qf1_loss, qf2_loss=qf2_loss)

        (qf_loss, metrics), grads = jax.value_and_grad(qf_loss_fn, has_aux=True)(qf_state.params)
        qf_state = qf_state.apply_gradients(grads=grads)

        def policy_step(_, carry):
            actor_state, alpha_state, key, _, alpha_loss = carry  # alpha_loss stays NaN when alpha is not tuned
            key, sample_key = jax.random.split(key)

            def actor_loss_fn(params):  # differentiated in the actor's parameters only: XLA drops the critics' gradients
                pi, log_pi, _ = actor.apply(params, b_obs, sample_key, method=Actor.get_action)
                qf1_pi, qf2_pi = (qf.apply(qf_state.params[name], b_obs, pi) for name in ["qf1", "qf2"])
                return (current_alpha(alpha_state) * log_pi - jnp.minimum(qf1_pi, qf2_pi)).mean(), log_pi

            (actor_loss, log_pi), grads = jax.value_and_grad(actor_loss_fn, has_aux=True)(actor_state.params)
            actor_state = actor_state.apply_gradients(grads=grads)
            if args.autotune:
                # log_pi of the same sample, a constant here: no second forward pass of the actor
                def alpha_loss_fn(params):
                    return (-jnp.exp(params["log_alpha"]) * (log_pi + target_entropy)).mean()

                alpha_loss, grads = jax.value_and_grad(alpha_loss_fn)(alpha_state.params)
                alpha_state = alpha_state.apply_gradients(grads=grads)
            return actor_state, alpha_state, key, actor_loss, alpha_loss

        # TD3-style delayed update, with as many policy steps as were delayed (one per critic step); else none, NaN losses
        policy_steps = jnp.where(iteration % args.policy_frequency == 0, args.policy_frequency, 0)
        carry = (actor_state, alpha_state, key, jnp.float32(jnp.nan), jnp.float32(jnp.nan))
        actor_state, alpha_state, key, actor_loss, alpha_loss = jax.lax.fori_loop(0, policy_steps, policy_step, carry)
        targets = optax.incremental_update(qf_state.params, qf_state.target_params, args.tau)
        targets = optax.periodic_update(targets, qf_state.target_params, iteration, args.target_network_frequency)
        qf_state = qf_state.replace(target_params=targets)
        metrics |= dict(qf_loss=qf_loss / 2.0, actor_loss=actor_loss, alpha_loss=alpha_loss, alpha=current_alpha(alpha_state))
        return actor_state, qf_state, alpha_state, key, metrics

    global_step, updates_start = 0, args.learning_starts  # a resume without the buffer learns again later
    obs, _ = envs.reset(seed=args.seed)

    def checkpoint_state():  # what a checkpoint holds; alpha_state is None where alpha is fixed
        learner = dict(actor_state=actor_state, qf_state=qf_state, alpha_state=alpha_state, key=key)
        loop = dict(envs=envs, obs=obs, global_step=global_step, updates_start=updates_start)
        return dict(learner, action_space_rng=envs.action_space.np_random, rb=rb if args.checkpoint_buffer else None, **loop)

    if checkpoint:
        saved = run_state.restore(checkpoint_state())
        actor_state, qf_state, alpha_state, key = (saved[name] for name in ["actor_state", "qf_state", "alpha_state", "key"])
        obs, global_step, updates_start = saved["obs"], saved["global_step"], saved["updates_start"]
        if not saved["envs"]:  # they could not be pickled (e.g. while recording video): new episodes
            obs, _ = envs.reset(seed=args.seed + global_step)
    if checkpoint and not args.checkpoint_buffer:  # an empty buffer: act with the policy, without learning, to refill it
        updates_start = run_state.refill(global_step, args.learning_starts)

    print(f"{run_name}: training to {total_steps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    # a bar on a terminal; disable=None turns it off where stdout is not one (a log file), and the loop prints lines
    progress = tqdm(total=total_steps, initial=global_step, unit="step", file=sys.stdout, disable=None)
    recent_returns, start_time, start_step = deque(maxlen=20), time.time(), global_step
    report_every, actor_loss, alpha_loss = max(1, num_iterations // 20), None, None

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
            data = jax.tree.map(lambda x: x.numpy(), rb.sample(args.batch_size))  # SB3's torch tensors, as numpy
            actor_state, qf_state, alpha_state, key, metrics = update(actor_state, qf_state, alpha_state, data, key, iteration)
            if iteration % args.policy_frequency == 0:  # the actor's losses once it has taken a step (alpha's when autotuned)
                actor_loss, alpha_loss = metrics["actor_loss"], (metrics["alpha_loss"] if args.autotune else None)

            if iteration % 100 == 0:  # float() waits for the computation: only when logging
                losses = metrics | {"actor_loss": actor_loss, "alpha_loss": alpha_loss}
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
    if actor_loss is not None and not np.isfinite([float(metrics["qf_loss"]), float(actor_loss)]).all():
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
