# PPO (Schulman et al. 2017) on Atari in JAX, EnvPool stepped inside jit; docs: docs/algorithms/ppo_atari_envpool_xla_jax.md
import glob
import json
import os
import random
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass

import envpool
import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from envpool.registration import registry
from flax.linen.initializers import orthogonal
from flax.training.train_state import TrainState
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm


@dataclass
class Args:
    # Algorithm specific arguments
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 8
    """the number of parallel game environments"""
    num_steps: int = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 4
    """the number of mini-batches"""
    update_epochs: int = 4
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.1
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: float | None = None
    """the target KL divergence threshold (stops the update epochs early when exceeded)"""

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
    env_id: str = "Breakout-v5"
    """the id of the Atari game in EnvPool (`Breakout-v5`, `Pong-v5`, ...: no sticky actions, as the v4 `NoFrameskip` ids)"""
    total_timesteps: int = 10000000
    """total timesteps of the experiments (agent steps: each is 4 frames of the game)"""
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


def make_env(env_id, num_envs, seed, capture_video=False):
    """The standard Atari preprocessing (Mnih et al. 2015; Machado et al. 2018), done by EnvPool in C++: 1 to 30 no-op
    frames at the start of each game, 4 frames a step max-pooled over the last two, FIRE at the start where the game
    needs it, 84 x 84 grayscale, the last 4 frames stacked, games truncated at 108,000 frames, no sticky actions. A lost
    life ends the *training* episode only (`terminated`) and the reward the agent sees is clipped to its sign; the
    game's own score is in `info["reward"]`. With `capture_video`, env 0's screen can be rendered."""
    return envpool.make(
        env_id,
        env_type="gymnasium",
        num_envs=num_envs,
        seed=seed,
        episodic_life=True,
        reward_clip=True,
        render_mode="rgb_array" if capture_video else None,
    )


class Agent(nn.Module):
    """The Nature CNN (Mnih et al. 2015) shared by the policy and the value heads, initialized as the torch twin's
    (orthogonal, gain sqrt(2); the heads 0.01 and 1, biases 0). Frames travel and are stored as uint8, scaled to [0, 1]
    only in the network's input; flax convolutions are NHWC, so the 4 stacked frames become the channels."""

    action_dim: int

    @nn.compact
    def __call__(self, x):
        x = jnp.transpose(x, (0, 2, 3, 1)) / 255.0
        for features, size, stride in [(32, 8, 4), (64, 4, 2), (64, 3, 1)]:
            conv = nn.Conv(features, (size, size), (stride, stride), padding="VALID", kernel_init=orthogonal(np.sqrt(2)))
            x = nn.relu(conv(x))
        x = nn.relu(nn.Dense(512, kernel_init=orthogonal(np.sqrt(2)))(x.reshape((x.shape[0], -1))))
        logits = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01))(x)
        return logits, nn.Dense(1, kernel_init=orthogonal(1.0))(x).squeeze(-1)


def log_prob_and_entropy(logits, actions):
    """Log-probability of the given actions under softmax(logits), and the policy's entropy."""
    log_probs = jax.nn.log_softmax(logits)
    logprob = jnp.take_along_axis(log_probs, actions[:, None], axis=-1)[:, 0]
    return logprob, -(jnp.exp(log_probs) * log_probs).sum(-1)


def compute_gae(rewards, values, last_value, terminations, episode_ends, gamma, gae_lambda):
    """Generalized Advantage Estimation over a rollout shaped (num_steps, num_envs), as a reverse `lax.scan`. EnvPool
    resets a game one step late, so where an episode ended at step t, obs[t + 1] is still its real last observation: a
    truncation bootstraps from values[t + 1], a termination (a lost life included) zeroes it, and the advantage does
    not flow back across the end. Row t + 1 after a game over is EnvPool's reset step, which the loss leaves out."""
    next_values = jnp.concatenate([values[1:], last_value[None]])

    def backward(lastgaelam, row):
        reward, value, next_value, terminated, ended = row
        delta = reward + gamma * next_value * (1.0 - terminated) - value
        lastgaelam = delta + gamma * gae_lambda * (1.0 - ended) * lastgaelam
        return lastgaelam, lastgaelam

    rows = (rewards, values, next_values, terminations, episode_ends)
    _, advantages = jax.lax.scan(backward, jnp.zeros_like(last_value), rows, reverse=True)
    return advantages, advantages + values


def masked_mean(x, real):
    """The mean of x over the real transitions: EnvPool's reset steps weigh nothing, whatever their data."""
    return jnp.where(real, x, 0.0).sum() / jnp.maximum(real.sum(), 1)


def ppo_loss(params, agent, mb, args):
    """PPO's loss on a minibatch (a dict of arrays): the clipped surrogate, the value loss and the entropy bonus, each a
    mean over the real transitions only (`is_reset_step` rows get weight 0, in the advantage normalization too); and
    the statistics the update logs. The minibatches have a fixed size, so a compiled step serves them all."""
    logits, newvalue = agent.apply(params, mb["obs"])
    newlogprob, entropy = log_prob_and_entropy(logits, mb["actions"])
    real, advantages = ~mb["is_reset_step"], mb["advantages"]
    # 0 on the reset steps before exp: whatever their data, no overflow reaches the gradient (0 * inf is NaN)
    logratio = jnp.where(real, newlogprob - mb["logprobs"], 0.0)
    ratio = jnp.exp(logratio)
    if args.norm_adv:  # the real transitions' mean and (unbiased, as torch's) standard deviation
        mean = masked_mean(advantages, real)
        std = jnp.sqrt(jnp.where(real, (advantages - mean) ** 2, 0.0).sum() / jnp.maximum(real.sum() - 1, 1))
        advantages = (advantages - mean) / (std + 1e-8)

    # Policy loss
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * jnp.clip(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = masked_mean(jnp.maximum(pg_loss1, pg_loss2), real)

    # Value loss
    v_loss_unclipped = (newvalue - mb["returns"]) ** 2
    if args.clip_vloss:
        v_clipped = mb["values"] + jnp.clip(newvalue - mb["values"], -args.clip_coef, args.clip_coef)
        v_loss = 0.5 * masked_mean(jnp.maximum(v_loss_unclipped, (v_clipped - mb["returns"]) ** 2), real)
    else:
        v_loss = 0.5 * masked_mean(v_loss_unclipped, real)

    entropy_loss = masked_mean(entropy, real)
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
    stats = dict(value_loss=v_loss, policy_loss=pg_loss, entropy=entropy_loss, loss=loss)
    # approx_kl: http://joschu.net/blog/kl-approx.html
    stats |= dict(old_approx_kl=masked_mean(-logratio, real), approx_kl=masked_mean((ratio - 1) - logratio, real))
    return loss, stats | dict(clipfrac=masked_mean(jnp.abs(ratio - 1.0) > args.clip_coef, real))


def check_args(args):
    """Every check of the flags, before heavy work: a bad input ends with one line naming the flag, exit code 2."""
    for flag in ["total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs", "eval_episodes"]:
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "eval_interval"]:
        if getattr(args, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0 (0 = off), got {getattr(args, flag)}")
    if not 0 <= args.seed < 2**31:
        fail(f"--seed must be in [0, 2**31) (EnvPool's seed range), got {args.seed}")
    batch_size = args.num_envs * args.num_steps
    if batch_size % args.num_minibatches:
        fail(f"--num-minibatches {args.num_minibatches} must divide --num-envs * --num-steps = {batch_size}; pick a divisor")
    if args.total_timesteps < batch_size:
        fail(f"--total-timesteps {args.total_timesteps} is less than one rollout (--num-envs * --num-steps = {batch_size})")
    game = args.env_id.removeprefix("ALE/").removesuffix("-v5").removesuffix("NoFrameskip-v4").removesuffix("-v4")
    if args.env_id not in registry.specs and f"{game}-v5" in registry.specs:
        fail(f"--env-id {args.env_id}: EnvPool names this game {game}-v5 (without sticky actions, as the v4 NoFrameskip ids)")
    if args.env_id not in registry.specs:
        fail(f"--env-id {args.env_id} is not an EnvPool environment (its Atari games: Breakout-v5, Pong-v5, ...)")
    if registry.specs[args.env_id][0] != "envpool.atari":
        fail(f"--env-id {args.env_id} is not an Atari game; {os.path.basename(__file__)} needs one (use ppo.py for it)")


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

    # TRY NOT TO MODIFY: seeding (JAX's key: the actions sampled and the minibatches drawn)
    random.seed(args.seed)
    np.random.seed(args.seed)
    key = jax.random.PRNGKey(args.seed)
    device = jax.devices()[0].platform  # JAX picks its device itself: a GPU when jax[cuda] is installed and sees one

    envs = make_env(args.env_id, args.num_envs, args.seed, args.capture_video)
    agent = Agent(action_dim=envs.action_space.n)
    key, agent_key = jax.random.split(key)
    # the learning rate is a hyperparameter of the optimizer state, set at each iteration as the torch twin sets it
    tx = optax.chain(
        optax.clip_by_global_norm(args.max_grad_norm),
        optax.inject_hyperparams(optax.adam)(learning_rate=args.learning_rate, eps=1e-5),
    )
    # one compiled call: flax's init run op by op would compile each of its operations alone (seconds on a CPU)
    params = jax.jit(agent.init)(agent_key, np.zeros((1,) + envs.observation_space.shape, np.uint8))
    agent_state = TrainState.create(apply_fn=agent.apply, params=params, tx=tx)
    global_step = 0

    @jax.jit
    def step_once(params, handle, obs, is_reset_step, key):
        """The policy's step and EnvPool's, compiled together (EnvPool's XLA interface): the action is sampled with
        Gumbel-max, and the log-probability and value of the rollout policy come with it."""
        key, action_key = jax.random.split(key)
        logits, value = agent.apply(params, obs)
        action = jax.random.categorical(action_key, logits)
        handle, (next_obs, reward, terminated, truncated, info) = step_env(handle, action)
        logprob = log_prob_and_entropy(logits, action)[0]
        transition = dict(obs=obs, is_reset_step=is_reset_step, actions=action, logprobs=logprob, values=value)
        transition |= dict(rewards=reward, terminations=terminated.astype(jnp.float32))
        transition |= dict(episode_ends=(terminated | truncated).astype(jnp.float32))
        # a game over (the last life lost, or a truncation) ends the game's statistics
        game_over = info["terminated"].astype(bool) | truncated
        return handle, next_obs, key, transition, (game_over, info["reward"], info["elapsed_step"])

    @jax.jit
    def rollout_batch(params, transitions, next_obs):
        """The rollout's steps stacked (num_steps, num_envs), its advantages and returns, flattened into one batch."""
        rollout = jax.tree.map(lambda *steps: jnp.stack(steps), *transitions)
        last_value = agent.apply(params, next_obs)[1]
        rows = (rollout["rewards"], rollout["values"], last_value, rollout["terminations"], rollout["episode_ends"])
        rollout["advantages"], rollout["returns"] = compute_gae(*rows, args.gamma, args.gae_lambda)
        return jax.tree.map(lambda x: x.reshape((batch_size,) + x.shape[2:]), rollout)

    @jax.jit
    def update_minibatch(agent_state, batch, mb_inds):
        mb = jax.tree.map(lambda x: x[mb_inds], batch)
        (_, stats), grads = jax.value_and_grad(ppo_loss, has_aux=True)(agent_state.params, agent, mb, args)
        return agent_state.apply_gradients(grads=grads), stats

    def checkpoint_state():  # what a checkpoint holds: EnvPool's games cannot be saved, a resumed run starts new ones
        return dict(agent_state=agent_state, key=key, global_step=global_step)

    def save_and_evaluate(model_path, seed, video=False):  # the evaluations of --eval-interval and --save-model
        with open(model_path, "wb") as f:
            f.write(flax.serialization.to_bytes(agent_state.params))
        from cleanrl_utils.evals.ppo_envpool_jax_eval import evaluate

        return evaluate(model_path, make_env, args.env_id, args.eval_episodes, f"{run_name}-eval", Agent, video, seed)

    run_state = None
    if args.checkpoint_interval or args.eval_interval or args.save_model or checkpoint:  # needs cleanrl_utils
        from cleanrl_utils.run_state import RunState

        run_state = RunState(run_dir, args, writer, checkpoint, save_and_evaluate)
        if checkpoint:
            saved = run_state.restore(checkpoint_state())
            agent_state, key, global_step = saved["agent_state"], saved["key"], saved["global_step"]
            envs.close()  # new games, seeded by the step: a resumed run does not replay the games it began with
            envs = make_env(args.env_id, args.num_envs, (args.seed + global_step) % 2**31, args.capture_video)
            print(f"resumed at step {global_step}: the games start anew (EnvPool cannot save them)", file=sys.stderr)
    next_obs, _ = envs.reset()
    handle, _, _, step_env = envs.xla()  # step_once steps these envs through this handle, inside the compiled call
    next_is_reset_step = np.zeros(args.num_envs, dtype=bool)
    game_returns = np.zeros(args.num_envs)  # the game's own score so far, all lives, unclipped
    recorder = None
    if args.capture_video:  # env 0's screen, whole games: rendered between two compiled steps (needs cleanrl_utils)
        from cleanrl_utils.envpool_atari import GameRecorder

        recorder = GameRecorder(envs, f"videos/{run_name}")

    print(f"{run_name}: training to {total_steps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    # a bar on a terminal; disable=None turns it off where stdout is not one (a log file), and the loop prints lines
    progress = tqdm(total=total_steps, initial=global_step, unit="step", file=sys.stdout, disable=None)
    recent_returns, start_time, start_step = deque(maxlen=20), time.time(), global_step

    for iteration in range(global_step // batch_size + 1, num_iterations + 1):
        # Annealing the rate if instructed to do so.
        learning_rate = args.learning_rate
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / num_iterations
            learning_rate = frac * args.learning_rate
        opt_state = optax.tree_utils.tree_set(agent_state.opt_state, learning_rate=jnp.float32(learning_rate))
        agent_state = agent_state.replace(opt_state=opt_state)

        transitions = []
        for step in range(args.num_steps):
            global_step += args.num_envs
            handle, next_obs, key, transition, games = step_once(agent_state.params, handle, next_obs, next_is_reset_step, key)
            transitions.append(transition)
            reward, (games_over, game_reward, game_length) = jax.device_get((transition["rewards"], games))
            if not np.isfinite(reward).all():
                sys.exit(f"error: the environment returned a non-finite reward at step {global_step}; stopping")

            # after an episode's end (a lost life too) EnvPool's next step is its reset step, left out of the loss: the
            # mask stays on the device for the next step. A lost life ends the training episode only: statistics come
            # with the end of a whole game
            next_is_reset_step = transition["episode_ends"] > 0
            game_returns += game_reward
            if recorder:
                recorder.after_step(games_over)
            for i in np.flatnonzero(games_over):
                recent_returns.append(game_returns[i])
                writer.add_scalar("charts/episodic_return", game_returns[i], global_step)
                writer.add_scalar("charts/episodic_length", game_length[i], global_step)
                game_returns[i] = 0.0

        batch = rollout_batch(agent_state.params, transitions, next_obs)

        # Optimizing the policy and value network: minibatches of a fixed size, the reset steps weighted 0 in the loss
        clipfracs = []
        for epoch in range(args.update_epochs):
            key, permutation_key = jax.random.split(key)
            for mb_inds in jax.random.permutation(permutation_key, batch_size).reshape(args.num_minibatches, -1):
                agent_state, losses = update_minibatch(agent_state, batch, mb_inds)
                clipfracs.append(losses["clipfrac"])

            if args.target_kl is not None and losses["approx_kl"] > args.target_kl:
                break

        losses = jax.device_get(losses)  # the last minibatch's, as the torch twin logs them
        if not np.isfinite(losses["loss"]):
            sys.exit(f"error: the loss turned non-finite at step {global_step}; stopping (no model saved)")
        values, returns, real = jax.device_get((batch["values"], batch["returns"], ~batch["is_reset_step"]))
        var_y = np.var(returns[real])  # over the rollout's real transitions
        losses["explained_variance"] = np.nan if var_y == 0 else 1 - np.var(returns[real] - values[real]) / var_y
        losses["clipfrac"] = np.mean(jax.device_get(clipfracs))

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        sps = int((global_step - start_step) / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", learning_rate, global_step)
        for name in ["value_loss", "policy_loss", "entropy", "old_approx_kl", "approx_kl", "clipfrac", "explained_variance"]:
            writer.add_scalar(f"losses/{name}", losses[name], global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        stats = f"{sps} SPS, return {np.mean(recent_returns):.1f}" if recent_returns else f"{sps} SPS"
        progress.set_postfix_str(stats, refresh=False)
        progress.update(global_step - progress.n)
        if progress.disable and (iteration % max(1, num_iterations // 20) == 0 or iteration == num_iterations):
            left = (total_steps - global_step) / max(sps, 1)  # seconds, at the speed so far
            timing = f"{tqdm.format_interval(time.time() - start_time)} elapsed, {tqdm.format_interval(left)} left"
            print(f"step {global_step}/{total_steps}, {stats}, {timing}", flush=True)
        if run_state:
            run_state.step(global_step, checkpoint_state)

    progress.close()
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
