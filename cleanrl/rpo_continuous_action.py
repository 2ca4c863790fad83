# RPO (Rahman & Xue 2022): PPO with a perturbed Gaussian mean; docs: docs/algorithms/rpo_continuous_action.md
import glob
import importlib
import json
import os
import random
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass

import gymnasium as gym
import numpy as np
import torch
import tyro
from gymnasium.wrappers.utils import RunningMeanStd
from torch import nn, optim
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

# normalized observations and rewards are clipped to +-10, as CleanRL's original; the epsilon keeps divisions finite
OBS_CLIP, REWARD_CLIP, NORM_EPSILON = 10.0, 10.0, 1e-8


@dataclass
class Args:
    # Algorithm specific arguments
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
    rpo_alpha: float = 0.5
    """the half-width of the uniform noise U(-rpo_alpha, rpo_alpha) added to the policy's mean in the update"""

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
    """whether to save the model into `runs/{run_name}` and evaluate it for `--eval-episodes` episodes"""
    upload_model: bool = False
    """whether to upload the saved model, its evaluation and videos to the Hugging Face Hub (with --save-model)"""
    hf_entity: str | None = None
    """the user or organization of the Hugging Face Hub model repository (default: the token's user)"""
    env_id: str = "HalfCheetah-v4"
    """the id of the environment (Gymnasium's MuJoCo v4/v5, `dm_control/cheetah-run-v0`, or `module:EnvName-v0`)"""
    total_timesteps: int = 1000000
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
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def make_env(env_id, idx, capture_video, run_name):
    def thunk():
        if env_id.startswith("dm_control/"):  # DeepMind Control tasks are registered by Shimmy, imported only when asked for
            # Triton's LLVM (loaded by torch's compiler) must precede Mesa's (dm_control's display) or the process crashes
            importlib.import_module("torch._dynamo")
            import shimmy

            gym.register_envs(shimmy)
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


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
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
        self.action_low, self.action_high = action_space.low, action_space.high
        finite = np.isfinite(self.action_low) & np.isfinite(self.action_high)
        self.action_scale = np.where(finite, (self.action_high - self.action_low) / 2, 1.0).astype(action_space.dtype)
        self.action_bias = np.where(finite, (self.action_high + self.action_low) / 2, 0.0).astype(action_space.dtype)

    def get_action(self, x):
        return torch.normal(self.actor_mean(x), self.actor_logstd.exp())  # a sample of the Gaussian policy

    def evaluate_actions(self, x, action, rpo_alpha=0.0):
        """Log-probabilities, entropies and state values; RPO's update shifts the mean by fresh U(-rpo_alpha, rpo_alpha)
        noise. validate_args=False: a NaN mean does not raise here but reaches the loss check, which stops the run."""
        action_mean = self.actor_mean(x)
        action_mean = action_mean + torch.empty_like(action_mean).uniform_(-rpo_alpha, rpo_alpha)  # none at rpo_alpha 0
        probs = torch.distributions.Normal(action_mean, self.actor_logstd.exp(), validate_args=False)
        return probs.log_prob(action).sum(1), probs.entropy().sum(1), self.critic(x).flatten()

    def env_action(self, action):
        """[-1, 1] maps affinely onto each finite [low, high] of the action Box, then clips (as SB3 and the original)."""
        return np.clip(self.action_bias + self.action_scale * action, self.action_low, self.action_high)


def normalize_obs(obs, obs_rms):
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


def check_args(args):
    """Every check of the flags, before heavy work: a bad input ends with one line naming the flag, exit code 2."""
    for flag in ["total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs", "eval_episodes"]:
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "eval_interval", "rpo_alpha"]:  # 0: off (for --rpo-alpha: plain PPO, no perturbation)
        if getattr(args, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}")
    if not 0 <= args.seed < 2**32:
        fail(f"--seed must be in [0, 2**32) (numpy's seed range), got {args.seed}")
    batch_size = args.num_envs * args.num_steps
    if batch_size % args.num_minibatches:
        fail(f"--num-minibatches {args.num_minibatches} must divide --num-envs * --num-steps = {batch_size}; pick a divisor")
    if args.total_timesteps < batch_size:
        fail(f"--total-timesteps {args.total_timesteps} is less than one rollout (--num-envs * --num-steps = {batch_size})")
    if args.capture_video:  # before the first env is made: MuJoCo chooses how to render when it is first imported
        from cleanrl_utils.rendering import render_offscreen

        render_offscreen(args.env_id)  # no display: EGL for MuJoCo, SDL's dummy driver for pygame; exit 2 if neither
    try:
        env = make_env(args.env_id, 0, False, "")()  # a `module:EnvName-v0` id imports its module, which registers the env
    except (gym.error.Error, ModuleNotFoundError) as e:
        fail(f"--env-id {args.env_id}: {e}")
    box = all(isinstance(space, gym.spaces.Box) for space in [env.observation_space, env.action_space])
    if not box or len(env.action_space.shape) != 1:
        fail(
            f"--env-id {args.env_id} has {env.observation_space} observations and {env.action_space} actions; "
            f"{os.path.basename(__file__)} needs Box observations and one-dimensional Box actions (ppo.py takes Discrete ones)"
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
    batch_size = args.num_envs * args.num_steps
    minibatch_size, num_iterations = batch_size // args.num_minibatches, args.total_timesteps // batch_size
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

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    torch.set_num_threads(1 if device.type == "cpu" else torch.get_num_threads())  # a 64-unit MLP gains nothing from more

    # env setup: SAME_STEP autoreset returns the reset observation at once and the real last one in infos["final_obs"]
    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, i, args.capture_video, run_name) for i in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    agent = Agent(envs).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)  # fused: one kernel a step
    # gymnasium's running statistics, here rather than in its per-env wrappers: shared by all envs, checkpointed and saved
    obs_rms, return_rms = RunningMeanStd(shape=envs.single_observation_space.shape), RunningMeanStd()

    # ALGO Logic: Storage setup, in numpy: a write per step is far cheaper than into a tensor
    obs = np.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape, dtype=np.float32)
    actions = np.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape, dtype=np.float32)
    rewards, terminations, episode_ends = (np.zeros((args.num_steps, args.num_envs), dtype=np.float32) for _ in range(3))
    final_obs = np.zeros_like(obs)  # the real last observation where an episode ended (obs[t + 1] is a reset one)
    global_step, next_obs, discounted_returns = 0, None, np.zeros(args.num_envs)

    def checkpoint_state():  # what a checkpoint holds
        running = (obs_rms, return_rms, discounted_returns)  # the normalization's running statistics
        return dict(agent=agent, optimizer=optimizer, envs=envs, running=running, next_obs=next_obs, global_step=global_step)

    def save_and_evaluate(model_path, seed, video=False):  # the evaluations of --eval-interval and --save-model
        # the observation statistics belong to the policy: evaluation normalizes with them, frozen
        obs_stats = {"mean": torch.as_tensor(obs_rms.mean), "var": torch.as_tensor(obs_rms.var), "count": float(obs_rms.count)}
        obs_stats.update(epsilon=NORM_EPSILON, clip=OBS_CLIP)
        torch.save({"model_weights": agent.state_dict(), "obs_normalization": obs_stats, "args": vars(args)}, model_path)
        from cleanrl_utils.evals.ppo_continuous_action_eval import evaluate

        return evaluate(model_path, make_env, args.env_id, args.eval_episodes, f"{run_name}-eval", Agent, device, video, seed)

    run_state = None
    if args.checkpoint_interval or args.eval_interval or args.save_model or checkpoint:  # needs cleanrl_utils
        from cleanrl_utils.run_state import RunState

        run_state = RunState(run_dir, args, writer, checkpoint, save_and_evaluate)
        if checkpoint:
            saved = run_state.restore(checkpoint_state())
            obs_rms, return_rms, discounted_returns = saved["running"]
            global_step, next_obs = saved["global_step"], (saved["next_obs"] if saved["envs"] else None)
    if next_obs is None:  # new episodes: a new run, or a resume whose envs could not be pickled (e.g. recording video)
        raw_obs, _ = envs.reset(seed=args.seed + global_step)
        obs_rms.update(raw_obs)
        next_obs, discounted_returns = normalize_obs(raw_obs, obs_rms), np.zeros(args.num_envs)

    print(f"{run_name}: training to {total_steps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    # a bar on a terminal; disable=None turns it off where stdout is not one (a log file), and the loop prints lines
    progress = tqdm(total=total_steps, initial=global_step, unit="step", file=sys.stdout, disable=None)
    recent_returns, start_time, start_step = deque(maxlen=20), time.time(), global_step

    for iteration in range(global_step // batch_size + 1, num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            with torch.no_grad():
                action = agent.get_action(torch.as_tensor(next_obs, device=device)).cpu().numpy()
            actions[step] = action

            # only what the env receives is rescaled and clipped: the rollout keeps the Gaussian's own sample
            raw_obs, reward, terminated, truncated, infos = envs.step(agent.env_action(action))
            if not np.isfinite(reward).all():
                sys.exit(f"error: the environment returned a non-finite reward at step {global_step}; stopping")
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
        # acting did not need them: log-probabilities and values in one pass, with the unperturbed mean the rollout acted with
        with torch.no_grad():
            b_logprobs, _, b_values = agent.evaluate_actions(b_obs, b_actions)
            last_value = agent.critic(torch.as_tensor(next_obs, device=device)).cpu().numpy()
            # a truncated episode is not over for the agent: it bootstraps from the value of its real last observation
            final_values = agent.critic(torch.as_tensor(final_obs, device=device)).squeeze(-1).cpu().numpy()
        values = b_values.cpu().numpy().reshape(args.num_steps, args.num_envs)
        advantages, returns = compute_gae(
            rewards, values, last_value, final_values, terminations, episode_ends, args.gamma, args.gae_lambda
        )
        b_advantages = torch.as_tensor(advantages.reshape(-1), device=device)
        b_returns = torch.as_tensor(returns.reshape(-1), device=device)

        # Optimizing the policy and value network
        clipfracs = []
        for epoch in range(args.update_epochs):
            b_inds = torch.randperm(batch_size)
            for start in range(0, batch_size, minibatch_size):
                mb_inds = b_inds[start : start + minibatch_size]

                newlogprob, entropy, newvalue = agent.evaluate_actions(b_obs[mb_inds], b_actions[mb_inds], args.rpo_alpha)
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()

                with torch.no_grad():
                    # calculate approx_kl http://joschu.net/blog/kl-approx.html
                    old_approx_kl = (-logratio).mean()
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean().item()]

                mb_advantages = b_advantages[mb_inds]
                if args.norm_adv:
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

                # Policy loss
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                # Value loss
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

        if not np.isfinite(loss.item()):
            sys.exit(f"error: the loss turned non-finite at step {global_step}; stopping (no model saved)")
        var_y = np.var(returns)  # over the whole rollout
        explained_var = np.nan if var_y == 0 else 1 - np.var(returns - values) / var_y

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        sps = int((global_step - start_step) / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
        writer.add_scalar("losses/policy_loss", pg_loss.item(), global_step)
        writer.add_scalar("losses/entropy", entropy_loss.item(), global_step)
        writer.add_scalar("losses/old_approx_kl", old_approx_kl.item(), global_step)
        writer.add_scalar("losses/approx_kl", approx_kl.item(), global_step)
        writer.add_scalar("losses/clipfrac", np.mean(clipfracs), global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
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
