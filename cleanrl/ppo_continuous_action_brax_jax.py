# PPO for continuous actions (Schulman et al. 2017) on Brax, all in one jit; docs: docs/algorithms/ppo_continuous_action_brax_jax.md
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
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from flax.linen.initializers import orthogonal
from flax.training.train_state import TrainState
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

# Brax's environment registry (brax.envs), less its `fast` test env; and its physics pipelines
ENV_IDS = ["ant", "halfcheetah", "hopper", "humanoid", "humanoidstandup", "inverted_pendulum", "inverted_double_pendulum"]
ENV_IDS += ["pusher", "reacher", "swimmer", "walker2d"]
BACKENDS = ["mjx", "generalized", "positional", "spring"]
# normalized observations are clipped to +-10, as ppo_continuous_action.py's; the epsilon keeps divisions finite
OBS_CLIP, NORM_EPSILON = 10.0, 1e-8


@dataclass
class Args:
    # Algorithm specific arguments (upstream CleanRL's ppo_continuous_action_isaacgym.py's)
    learning_rate: float = 0.0026
    """the learning rate of the optimizer"""
    num_envs: int = 4096
    """the number of parallel game environments"""
    num_steps: int = 16
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = False
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 2
    """the number of mini-batches"""
    update_epochs: int = 4
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = False
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.0
    """coefficient of the entropy"""
    vf_coef: float = 2.0
    """coefficient of the value function"""
    max_grad_norm: float = 1.0
    """the maximum norm for the gradient clipping"""
    target_kl: float | None = None
    """the target KL divergence threshold (stops the update epochs early when exceeded)"""
    backend: str = "mjx"
    """Brax's physics pipeline: `mjx` (MuJoCo MJX), `generalized`, `positional` or `spring`"""
    episode_length: int = 1000
    """the steps after which an episode is truncated (bootstrapped, not a death)"""

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
    """whether to record the final evaluation's first episode (with --save-model) in `videos`; training runs in a jit"""
    save_model: bool = False
    """whether to save the model into `runs/{run_name}` and evaluate it for `--eval-episodes` episodes"""
    upload_model: bool = False
    """whether to upload the saved model, its evaluation and videos to the Hugging Face Hub (with --save-model)"""
    hf_entity: str | None = None
    """the user or organization of the Hugging Face Hub model repository (default: the token's user)"""
    env_id: str = "ant"
    """the name of a Brax environment (`ant`, `halfcheetah`, `hopper`, `humanoid`, `inverted_pendulum`, ...)"""
    total_timesteps: int = 30000000
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


def make_env(env_id, backend="mjx"):
    """Brax's `env_id` on the physics `backend`: one functional object (`reset(key) -> state`, `step(state, action) ->
    state`, actions in [-1, 1]) that jax.vmap steps for every env at once. Brax is imported here, not at the top:
    MuJoCo, which Brax imports, reads MUJOCO_GL once, after --capture-video has chosen an off-screen renderer."""
    from brax import envs

    return envs.get_environment(env_id, backend=backend)


class Agent(nn.Module):
    """Upstream's IsaacGym network: a critic and an actor mean, each a 256-256 tanh MLP initialized orthogonally (gain
    sqrt(2); the heads 1 and 0.01, biases 0), and one state-independent log standard deviation per action, from 0."""

    action_dim: int

    @nn.compact
    def __call__(self, x):
        def mlp(out_dim, out_std):
            h = x
            for _ in range(2):
                h = nn.tanh(nn.Dense(256, kernel_init=orthogonal(np.sqrt(2)))(h))
            return nn.Dense(out_dim, kernel_init=orthogonal(out_std))(h)

        value = mlp(1, 1.0).squeeze(-1)
        mean = mlp(self.action_dim, 0.01)
        return mean, self.param("actor_logstd", nn.initializers.zeros, (self.action_dim,)), value


def log_prob_and_entropy(mean, logstd, action):
    """The diagonal Gaussian's log-probability of `action` and its entropy, summed over the action dimensions."""
    logprob = -0.5 * ((action - mean) / jnp.exp(logstd)) ** 2 - logstd - 0.5 * jnp.log(2 * jnp.pi)
    entropy = jnp.broadcast_to(0.5 + 0.5 * jnp.log(2 * jnp.pi) + logstd, mean.shape)
    return logprob.sum(-1), entropy.sum(-1)


def update_obs_rms(rms, obs):
    """Gymnasium's RunningMeanStd update (Chan et al.'s parallel mean and variance) with a batch of observations."""
    batch_mean, batch_var, batch_count = obs.mean(0), obs.var(0), obs.shape[0]
    delta, total = batch_mean - rms["mean"], rms["count"] + batch_count
    m2 = rms["var"] * rms["count"] + batch_var * batch_count + delta**2 * rms["count"] * batch_count / total
    return dict(mean=rms["mean"] + delta * batch_count / total, var=m2 / total, count=total)


def normalize_obs(obs, rms):
    return jnp.clip((obs - rms["mean"]) / jnp.sqrt(rms["var"] + NORM_EPSILON), -OBS_CLIP, OBS_CLIP)


def step_envs(env, state, action, episode, reset_key, episode_length):
    """Every env's step with SAME_STEP autoreset (DESIGN.md section 5), not Brax's AutoResetWrapper, which returns the
    reset observation on the last step (a truncation's bootstrap is lost) and restarts from one cached first state. An
    episode reaching `episode_length` steps unterminated is truncated; an ended one restarts from a fresh key's reset.
    The new state, the episode statistics, and the step (rewards, flags, real last observations, returns, lengths)."""
    next_state = jax.vmap(env.step)(state, action)
    returns, lengths = episode["returns"] + next_state.reward, episode["lengths"] + 1
    terminated = next_state.done > 0
    truncated = (lengths >= episode_length) & ~terminated
    ended = terminated | truncated
    fresh = jax.vmap(env.reset)(jax.random.split(reset_key, ended.shape[0]))
    state = jax.tree.map(lambda f, s: jnp.where(ended.reshape((-1,) + (1,) * (s.ndim - 1)), f, s), fresh, next_state)
    step = dict(rewards=next_state.reward, terminated=terminated, truncated=truncated, final_obs=next_state.obs)
    episode = dict(returns=jnp.where(ended, 0.0, returns), lengths=jnp.where(ended, 0, lengths))
    return state, episode, step | dict(returns=returns, lengths=lengths)


def compute_gae(rewards, values, last_value, final_values, terminations, episode_ends, gamma, gae_lambda):
    """GAE over (num_steps, num_envs) arrays as a reverse `lax.scan`. Where an episode ended at step t, obs[t + 1] is a
    reset observation: the bootstrap is final_values[t] = V(real last observation), zeroed by a termination, and the
    advantage does not flow back across the end."""
    next_values = jnp.concatenate([values[1:], last_value[None]])
    next_values = jnp.where(episode_ends, final_values, next_values)

    def backward(lastgaelam, row):
        reward, value, next_value, terminated, ended = row
        delta = reward + gamma * next_value * (1.0 - terminated) - value
        lastgaelam = delta + gamma * gae_lambda * (1.0 - ended) * lastgaelam
        return lastgaelam, lastgaelam

    rows = (rewards, values, next_values, terminations, episode_ends)
    _, advantages = jax.lax.scan(backward, jnp.zeros_like(last_value), rows, reverse=True)
    return advantages, advantages + values


def ppo_loss(params, agent, mb, args):
    """PPO's loss on a minibatch: the clipped surrogate, the value loss and the entropy bonus; and what the update logs."""
    mean, logstd, newvalue = agent.apply(params, mb["obs"])
    newlogprob, entropy = log_prob_and_entropy(mean, logstd, mb["actions"])
    logratio = newlogprob - mb["logprobs"]
    ratio = jnp.exp(logratio)
    advantages = mb["advantages"]
    if args.norm_adv:  # the unbiased standard deviation, as torch's
        advantages = (advantages - advantages.mean()) / (advantages.std(ddof=1) + 1e-8)

    # Policy loss
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * jnp.clip(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = jnp.maximum(pg_loss1, pg_loss2).mean()

    # Value loss
    v_loss_unclipped = (newvalue - mb["returns"]) ** 2
    if args.clip_vloss:
        v_clipped = mb["values"] + jnp.clip(newvalue - mb["values"], -args.clip_coef, args.clip_coef)
        v_loss = 0.5 * jnp.maximum(v_loss_unclipped, (v_clipped - mb["returns"]) ** 2).mean()
    else:
        v_loss = 0.5 * v_loss_unclipped.mean()

    entropy_loss = entropy.mean()
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
    stats = dict(value_loss=v_loss, policy_loss=pg_loss, entropy=entropy_loss, loss=loss)
    # approx_kl: http://joschu.net/blog/kl-approx.html
    stats |= dict(old_approx_kl=(-logratio).mean(), approx_kl=((ratio - 1) - logratio).mean())
    return loss, stats | dict(clipfrac=(jnp.abs(ratio - 1.0) > args.clip_coef).mean())


def check_args(args):
    """Every check of the flags, before heavy work: a bad input ends with one line naming the flag, exit code 2."""
    for flag in "total_timesteps num_envs num_steps num_minibatches update_epochs eval_episodes episode_length".split():
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "eval_interval"]:
        if getattr(args, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0 (0 = off), got {getattr(args, flag)}")
    if not 0 <= args.seed < 2**32:
        fail(f"--seed must be in [0, 2**32) (JAX's PRNGKey range), got {args.seed}")
    batch_size = args.num_envs * args.num_steps
    if batch_size % args.num_minibatches:
        fail(f"--num-minibatches {args.num_minibatches} must divide --num-envs * --num-steps = {batch_size}; pick a divisor")
    if args.total_timesteps < batch_size:
        fail(f"--total-timesteps {args.total_timesteps} is less than one rollout (--num-envs * --num-steps = {batch_size})")
    if args.env_id not in ENV_IDS:
        fail(
            f"--env-id {args.env_id} is not a Brax environment; one of {', '.join(ENV_IDS)} (Gymnasium's: ppo_continuous_action.py)"
        )
    if args.backend not in BACKENDS:
        fail(f"--backend {args.backend} is not a Brax physics pipeline; one of {', '.join(BACKENDS)}")
    if args.capture_video and not args.save_model:  # no frame can be taken inside the compiled rollout
        fail("--capture-video records the final evaluation only: add --save-model (training runs inside a jit)")
    if args.capture_video:  # before Brax imports MuJoCo, which chooses how to render when it is first imported
        from cleanrl_utils.rendering import render_offscreen

        render_offscreen(args.env_id, mujoco=True)  # no display: EGL; exit 2 if nothing can render


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
    batch_size = args.num_envs * args.num_steps
    num_iterations = args.total_timesteps // batch_size
    total_steps = num_iterations * batch_size  # the budget in whole rollouts: what the run does
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

    # TRY NOT TO MODIFY: seeding (JAX's key: the actions sampled, the resets and the minibatches drawn)
    random.seed(args.seed)
    np.random.seed(args.seed)
    key = jax.random.PRNGKey(args.seed)
    device = jax.devices()[0].platform  # JAX picks its device itself: a GPU when jax[cuda] is installed and sees one

    env = make_env(args.env_id, args.backend)
    agent = Agent(action_dim=env.action_size)
    key, agent_key, reset_key = jax.random.split(key, 3)
    adam = optax.inject_hyperparams(optax.adam)(learning_rate=args.learning_rate, eps=1e-5)  # the rate set each iteration
    tx = optax.chain(optax.clip_by_global_norm(args.max_grad_norm), adam)
    # env.observation_size would run a reset op by op (hundreds of small compilations): the compiled reset's shapes serve
    env_state = jax.jit(jax.vmap(env.reset))(jax.random.split(reset_key, args.num_envs))
    # one compiled call: flax's init run op by op would compile each of its operations alone (seconds on a CPU)
    params = jax.jit(agent.init)(agent_key, env_state.obs[:1])
    # numpy leaves, strongly typed as a restored checkpoint's: a resumed run reuses the compiled iteration (JAX's cache)
    agent_state = jax.tree.map(np.asarray, TrainState.create(apply_fn=agent.apply, params=params, tx=tx))
    obs_rms = dict(mean=jnp.zeros_like(env_state.obs[0]), var=jnp.ones_like(env_state.obs[0]), count=jnp.float32(1e-4))
    obs_rms = update_obs_rms(obs_rms, env_state.obs)
    episode = dict(returns=jnp.zeros(args.num_envs), lengths=jnp.zeros(args.num_envs, jnp.int32))
    global_step = 0

    @jax.jit
    def iteration(agent_state, env_state, obs_rms, episode, key, learning_rate):
        """A rollout (a scan of the policy's and the envs' steps), GAE, the epochs of minibatch updates: one program."""

        def step_once(carry, _):
            env_state, obs_rms, episode, key = carry
            key, action_key, reset_key = jax.random.split(key, 3)
            obs = normalize_obs(env_state.obs, obs_rms)
            mean, logstd, value = agent.apply(agent_state.params, obs)
            action = mean + jnp.exp(logstd) * jax.random.normal(action_key, mean.shape)
            # only what the env receives is clipped to Brax's [-1, 1]: the rollout keeps the Gaussian's own sample
            clipped = jnp.clip(action, -1, 1)
            env_state, episode, step = step_envs(env, env_state, clipped, episode, reset_key, args.episode_length)
            obs_rms = update_obs_rms(obs_rms, env_state.obs)  # the observations the policy sees next
            transition = dict(obs=obs, actions=action, logprobs=log_prob_and_entropy(mean, logstd, action)[0], values=value)
            transition |= dict(rewards=step["rewards"], terminations=step["terminated"].astype(jnp.float32))
            transition |= dict(episode_ends=(step["terminated"] | step["truncated"]).astype(jnp.float32))
            transition |= dict(final_obs=normalize_obs(step["final_obs"], obs_rms))
            return (env_state, obs_rms, episode, key), (transition, dict(returns=step["returns"], lengths=step["lengths"]))

        carry = (env_state, obs_rms, episode, key)
        (env_state, obs_rms, episode, key), (rollout, steps) = jax.lax.scan(step_once, carry, length=args.num_steps)
        ended = rollout["episode_ends"] > 0
        count = ended.sum()  # the episodes that ended in this rollout: their mean return and length are logged
        logs = dict(finite=jnp.isfinite(rollout["rewards"]).all(1), episodes=count)
        logs |= {name: jnp.where(ended, steps[name], 0).sum() / jnp.maximum(count, 1) for name in ["returns", "lengths"]}

        opt_state = optax.tree_utils.tree_set(agent_state.opt_state, learning_rate=learning_rate)
        agent_state = agent_state.replace(opt_state=opt_state)
        last_value = agent.apply(agent_state.params, normalize_obs(env_state.obs, obs_rms))[2]
        # a truncated episode is not over for the agent: it bootstraps from the value of its real last observation
        final_values = agent.apply(agent_state.params, rollout.pop("final_obs"))[2]
        rows = (rollout["rewards"], rollout["values"], last_value, final_values, rollout["terminations"])
        rollout["advantages"], rollout["returns"] = compute_gae(*rows, rollout["episode_ends"], args.gamma, args.gae_lambda)
        batch = jax.tree.map(lambda x: x.reshape((batch_size,) + x.shape[2:]), rollout)

        def update_minibatch(agent_state, mb_inds):
            mb = jax.tree.map(lambda x: x[mb_inds], batch)
            (_, losses), grads = jax.value_and_grad(ppo_loss, has_aux=True)(agent_state.params, agent, mb, args)
            return agent_state.apply_gradients(grads=grads), losses

        def update_epoch(carry, permutation_key):
            agent_state, stopped = carry
            mb_inds = jax.random.permutation(permutation_key, batch_size).reshape(args.num_minibatches, -1)
            new_state, losses = jax.lax.scan(update_minibatch, agent_state, mb_inds)
            # past --target-kl the epochs left change nothing (computed and dropped: a lax.cond would be a loop body too)
            agent_state = jax.tree.map(lambda old, new: jnp.where(stopped, old, new), agent_state, new_state)
            target_kl = jnp.inf if args.target_kl is None else args.target_kl
            return (agent_state, stopped | (losses["approx_kl"][-1] > target_kl)), (losses, ~stopped)

        key, *permutation_keys = jax.random.split(key, args.update_epochs + 1)
        carry = (agent_state, jnp.array(False))
        (agent_state, _), (losses, ran) = jax.lax.scan(update_epoch, carry, jnp.stack(permutation_keys))
        var_y = jnp.var(batch["returns"])  # over the whole rollout
        explained = jnp.where(var_y == 0, jnp.nan, 1 - jnp.var(batch["returns"] - batch["values"]) / var_y)
        logs |= dict(losses=losses, epochs=ran.sum(), explained_variance=explained)
        return agent_state, env_state, obs_rms, episode, key, logs

    def checkpoint_state():  # what a checkpoint holds: the envs' whole physics state is a pytree of arrays, its leaves
        running = dict(obs_rms=obs_rms, episode=episode, env_state=jax.tree.leaves(env_state))
        return dict(agent_state=agent_state, running=running, key=key, global_step=global_step)

    def save_and_evaluate(model_path, seed, video=False):  # the evaluations of --eval-interval and --save-model
        # the observation statistics belong to the policy: evaluation normalizes with them, frozen
        model = dict(params=agent_state.params, obs_rms=obs_rms, obs_clip=OBS_CLIP, epsilon=NORM_EPSILON)
        model |= dict(backend=args.backend, episode_length=args.episode_length)
        with open(model_path, "wb") as f:
            f.write(flax.serialization.msgpack_serialize(jax.device_get(model)))
        from cleanrl_utils.evals.ppo_brax_eval import evaluate

        return evaluate(model_path, make_env, args.env_id, args.eval_episodes, f"{run_name}-eval", Agent, video, seed)

    run_state = None
    if args.checkpoint_interval or args.eval_interval or args.save_model or checkpoint:  # needs cleanrl_utils
        from cleanrl_utils.run_state import RunState

        run_state = RunState(run_dir, args, writer, checkpoint, save_and_evaluate)
        if checkpoint:  # the episodes continue where they were, in the saved physics state
            saved = run_state.restore(checkpoint_state())
            agent_state, key, global_step = saved["agent_state"], saved["key"], saved["global_step"]
            obs_rms, episode = saved["running"]["obs_rms"], saved["running"]["episode"]
            env_state = jax.tree.unflatten(jax.tree.structure(env_state), saved["running"]["env_state"])

    print(f"{run_name}: training to {total_steps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    # a bar on a terminal; disable=None turns it off where stdout is not one (a log file), and the loop prints lines
    progress = tqdm(total=total_steps, initial=global_step, unit="step", file=sys.stdout, disable=None)
    recent_returns, start_time, start_step = deque(maxlen=20), time.time(), global_step

    for iteration_number in range(global_step // batch_size + 1, num_iterations + 1):
        learning_rate = args.learning_rate
        if args.anneal_lr:
            frac = 1.0 - (iteration_number - 1.0) / num_iterations
            learning_rate = frac * args.learning_rate

        carry = (agent_state, env_state, obs_rms, episode, key)
        agent_state, env_state, obs_rms, episode, key, logs = iteration(*carry, jnp.float32(learning_rate))
        logs = jax.device_get(logs)
        if not logs["finite"].all():
            step = global_step + args.num_envs * (np.argmin(logs["finite"]) + 1)
            sys.exit(f"error: the environment returned a non-finite reward at step {step}; stopping")
        global_step += batch_size
        if logs["episodes"]:  # the mean of the episodes that ended in this rollout: thousands of envs end some each step
            recent_returns.append(logs["returns"])
            writer.add_scalar("charts/episodic_return", logs["returns"], global_step)
            writer.add_scalar("charts/episodic_length", logs["lengths"], global_step)

        epochs = logs["epochs"]
        losses = {name: value[epochs - 1, -1] for name, value in logs["losses"].items()}  # the last minibatch's
        losses |= dict(clipfrac=logs["losses"]["clipfrac"][:epochs].mean(), explained_variance=logs["explained_variance"])
        if not np.isfinite(losses["loss"]):
            sys.exit(f"error: the loss turned non-finite at step {global_step}; stopping (no model saved)")

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        sps = int((global_step - start_step) / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", learning_rate, global_step)
        for name in ["value_loss", "policy_loss", "entropy", "old_approx_kl", "approx_kl", "clipfrac", "explained_variance"]:
            writer.add_scalar(f"losses/{name}", losses[name], global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        stats = f"{sps} SPS, return {np.mean(recent_returns):.1f}" if recent_returns else f"{sps} SPS"
        progress.set_postfix_str(stats, refresh=False)
        progress.update(global_step - progress.n)
        if progress.disable and (iteration_number % max(1, num_iterations // 20) == 0 or iteration_number == num_iterations):
            left = (total_steps - global_step) / max(sps, 1)  # seconds, at the speed so far
            timing = f"{tqdm.format_interval(time.time() - start_time)} elapsed, {tqdm.format_interval(left)} left"
            print(f"step {global_step}/{total_steps}, {stats}, {timing}", flush=True)
        if run_state:
            run_state.step(global_step, checkpoint_state)

    progress.close()
    if run_state:  # the final checkpoint (to extend the run), then with --save-model the model and its evaluation
        episodic_returns = run_state.finish(global_step, checkpoint_state)

    writer.close()
    if args.upload_model:
        from cleanrl_utils.huggingface import push

        push(run_dir, episodic_returns, hf_repo_id)
    if args.track and args.capture_video:
        for video_path in sorted(glob.glob(f"videos/{run_name}*/*.mp4")):
            wandb.log({f"videos/{os.path.basename(os.path.dirname(video_path))}": wandb.Video(video_path)})
