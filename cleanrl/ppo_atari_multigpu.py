# PPO on Atari, data-parallel with torch.distributed (Schulman et al. 2017); docs: docs/algorithms/ppo_atari_multigpu.md
import glob
import json
import os
import random
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass

import ale_py
import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist
import tyro
from stable_baselines3.common.atari_wrappers import ClipRewardEnv, EpisodicLifeEnv, FireResetEnv, MaxAndSkipEnv, NoopResetEnv
from torch import nn, optim
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

gym.register_envs(ale_py)  # the ALE's ids: ALE/Breakout-v5, BreakoutNoFrameskip-v4, ...


@dataclass
class Args:
    # Algorithm specific arguments
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 8
    """the number of parallel game environments of each rank (process)"""
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
    env_id: str = "BreakoutNoFrameskip-v4"
    """the id of the Atari game (any ALE id: `BreakoutNoFrameskip-v4`, `ALE/Breakout-v5`, or `module:EnvName-v0`)"""
    total_timesteps: int = 10000000
    """total timesteps of the experiments over all ranks (agent steps: each is 4 frames of the game)"""
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
    """ppo_atari.py's Atari preprocessing (Mnih et al. 2015; Machado et al. 2018), sticky actions as the id defines."""

    def thunk():
        # the ALE's own frame skip off (the v5 ids skip 4 by default): MaxAndSkipEnv skips, max-pooling the last two frames
        env = gym.make(env_id, frameskip=1, render_mode="rgb_array" if capture_video and idx == 0 else None)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # innermost: the real game score over all lives, unclipped
        if capture_video and idx == 0:
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")  # the real frames, whole games
        env = NoopResetEnv(env, noop_max=30)  # random starts: 1 to 30 no-op frames at the start of each game
        env = MaxAndSkipEnv(env, skip=4)
        env = EpisodicLifeEnv(env)  # a life lost ends the *training* episode only
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = FireResetEnv(env)  # games such as Breakout stand still until FIRE
        env = ClipRewardEnv(env)  # sign of the reward, for the loss: one scale of advantages across games
        env = gym.wrappers.ResizeObservation(env, (84, 84))
        env = gym.wrappers.GrayscaleObservation(env)
        env = gym.wrappers.FrameStackObservation(env, 4)  # (4, 84, 84) uint8: motion is visible to the network
        return env

    return thunk


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """ppo_atari.py's Nature CNN shared by the policy and the value heads; uint8 frames, scaled to [0, 1] inside."""

    def __init__(self, envs):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, envs.single_action_space.n), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1)

    def get_value(self, x):
        return self.critic(self.network(x / 255.0))

    def get_action(self, x):
        logits = self.actor(self.network(x / 255.0))
        # Gumbel-max: argmax(logits + Gumbel noise) samples softmax(logits) at a fraction of torch.distributions' cost
        return (logits - torch.empty_like(logits).exponential_().log()).argmax(dim=-1)

    def evaluate_actions(self, x, action):
        """Log-probability and entropy of the given actions under the current policy, and the state values."""
        hidden = self.network(x / 255.0)
        log_probs = self.actor(hidden).log_softmax(dim=-1)
        logprob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(dim=-1)
        return logprob, entropy, self.critic(hidden).flatten()


def compute_gae(rewards, values, last_value, final_values, terminations, episode_ends, gamma, gae_lambda):
    """ppo_atari.py's GAE over (num_steps, num_envs) arrays; where an episode ended, final_values[t] bootstraps it."""
    next_values = np.concatenate([values[1:], last_value.reshape(1, -1)])
    next_values = np.where(episode_ends, final_values, next_values)
    advantages = np.zeros_like(rewards)
    lastgaelam = 0.0
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + gamma * next_values[t] * (1.0 - terminations[t]) - values[t]
        lastgaelam = delta + gamma * gae_lambda * (1.0 - episode_ends[t]) * lastgaelam
        advantages[t] = lastgaelam
    return advantages, advantages + values


def check_agreement(fingerprint, iteration, world_size):
    """Every rank's parameters (`fingerprint`: float64 sums of its tensors, cheap to gather) must be rank 0's, or exit 1."""
    fingerprints = [torch.empty_like(fingerprint) for _ in range(world_size)]
    dist.all_gather(fingerprints, fingerprint)
    differ = [rank for rank in range(1, len(fingerprints)) if not torch.equal(fingerprints[rank], fingerprints[0])]
    if differ:
        sys.exit(f"error: the parameters of rank(s) {differ} differ from rank 0's after iteration {iteration}; stopping")


def check_args(args, world_size):
    """Every check of the flags, before heavy work: a bad input ends with one line naming the flag, exit code 2."""
    for flag in ["total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs", "eval_episodes"]:
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "eval_interval"]:
        if getattr(args, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0 (0 = off), got {getattr(args, flag)}")
    if not 0 <= args.seed < 2**32:
        fail(f"--seed must be in [0, 2**32) (numpy's seed range), got {args.seed}")
    rollout = args.num_envs * args.num_steps  # one rank's
    if rollout % args.num_minibatches:
        fail(f"--num-minibatches {args.num_minibatches} must divide --num-envs * --num-steps = {rollout}; pick a divisor")
    if args.total_timesteps < rollout * world_size:
        fail(f"--total-timesteps {args.total_timesteps} is less than one rollout of all ranks ({rollout} x {world_size})")
    try:
        env = gym.make(args.env_id)  # a `module:EnvName-v0` id imports its module, which registers the env
    except (gym.error.Error, ModuleNotFoundError) as e:
        fail(f"--env-id {args.env_id}: {e}")
    if not hasattr(env.unwrapped, "ale"):  # the preprocessing reads the ALE's lives and action meanings
        fail(f"--env-id {args.env_id} is not an Atari game; {os.path.basename(__file__)} needs one (use ppo.py for it)")
    env.close()


if __name__ == "__main__":
    rank, local_rank, world_size = (int(os.environ.get(k, d)) for k, d in [("RANK", 0), ("LOCAL_RANK", 0), ("WORLD_SIZE", 1)])
    args = tyro.cli(Args)
    checkpoint = None
    if args.config or args.resume:  # the file's or the saved run's args under the flags given now (exit 2 on a misfit)
        from cleanrl_utils.run_state import resolve_args

        args, checkpoint = resolve_args(Args, args, __file__, rank, world_size)  # a changed world size: exit 2
    check_args(args, world_size)
    if args.upload_model and rank == 0:  # before training: a missing token must not cost a whole run
        from cleanrl_utils.huggingface import upload_repo_id

        hf_repo_id = upload_repo_id(args)  # refuses (exit 2) without --save-model or a usable Hub token
    local_batch_size = args.num_envs * args.num_steps  # each rank's rollout, split into its own minibatches
    batch_size = local_batch_size * world_size  # the rollout of all ranks: what one update learns from
    minibatch_size, num_iterations = local_batch_size // args.num_minibatches, args.total_timesteps // batch_size
    total_steps = num_iterations * batch_size  # the budget in whole rollouts: what the run does
    run_name = checkpoint["run_name"] if checkpoint else f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    run_dir = args.resume.rstrip("/") if checkpoint else f"runs/{run_name}"
    writer = None  # rank 0 alone writes: the run folder, TensorBoard, W&B, the progress, the model
    if rank == 0:
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

    # TRY NOT TO MODIFY: seeding. torch's seed is every rank's: they build the same networks (below, their own draws)
    random.seed(args.seed + rank)
    np.random.seed(args.seed + rank)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() and args.cuda else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL's communicator for this rank's GPU
    # torchrun's variables name the rendezvous (a plain run: a group of one); GPU tensors by NCCL, pickled objects by gloo
    one_rank = {} if "WORLD_SIZE" in os.environ else {"store": dist.HashStore(), "rank": 0, "world_size": 1}
    dist.init_process_group("cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo", **one_rank)

    # env setup: SAME_STEP autoreset returns the reset observation at once and the real last one in infos["final_obs"]
    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, i, args.capture_video and rank == 0, run_name) for i in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    agent = Agent(envs).to(device)
    if rank:  # its own actions and minibatches from here; rank 0 draws exactly as ppo_atari.py does
        torch.manual_seed(args.seed + rank)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)  # fused: one kernel a step

    # ALGO Logic: Storage setup, in numpy: a write per step is far cheaper than into a tensor. Frames stay uint8 (4x smaller)
    obs = np.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape, dtype=np.uint8)
    actions = np.zeros((args.num_steps, args.num_envs), dtype=np.int64)
    rewards, terminations, episode_ends = (np.zeros((args.num_steps, args.num_envs), dtype=np.float32) for _ in range(3))
    final_obs = np.zeros_like(obs)  # the real last observation where an episode ended (obs[t + 1] is a reset one)
    global_step = 0
    next_obs, _ = envs.reset(seed=args.seed + rank * args.num_envs)  # env i of rank r: seed + r * num_envs + i

    def checkpoint_state():  # what a checkpoint holds
        return dict(agent=agent, optimizer=optimizer, envs=envs, next_obs=next_obs, global_step=global_step)

    def save_and_evaluate(model_path, seed, video=False):  # the evaluations of --eval-interval and --save-model
        torch.save(agent.state_dict(), model_path)
        from cleanrl_utils.evals.ppo_eval import evaluate

        return evaluate(model_path, make_env, args.env_id, args.eval_episodes, f"{run_name}-eval", Agent, device, video, seed)

    run_state = None
    if args.checkpoint_interval or args.eval_interval or args.save_model or checkpoint:  # needs cleanrl_utils
        from cleanrl_utils.run_state import RunState

        run_state = RunState(run_dir, args, writer, checkpoint, save_and_evaluate, per_rank=("envs", "next_obs"))
        if checkpoint:
            saved = run_state.restore(checkpoint_state())
            global_step, next_obs = saved["global_step"], saved["next_obs"]
            if not saved["envs"]:  # they could not be pickled (e.g. while recording video): new episodes
                next_obs, _ = envs.reset(seed=args.seed + rank * args.num_envs + global_step)

    if rank == 0:
        print(f"{run_name}: training to {total_steps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    # a bar on a terminal; disable=None turns it off where stdout is not one (a log file), and the loop prints lines
    progress = tqdm(total=total_steps, initial=global_step, unit="step", file=sys.stdout, disable=None if rank == 0 else True)
    recent_returns, start_time, start_step = deque(maxlen=20), time.time(), global_step

    for iteration in range(global_step // batch_size + 1, num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        for step in range(args.num_steps):
            global_step += args.num_envs * world_size
            obs[step] = next_obs
            with torch.no_grad():
                action = agent.get_action(torch.as_tensor(next_obs, device=device)).cpu().numpy()
            actions[step] = action

            next_obs, reward, terminated, truncated, infos = envs.step(action)
            if not np.isfinite(reward).all():
                sys.exit(f"error: the environment returned a non-finite reward at step {global_step}; stopping")
            rewards[step], terminations[step], episode_ends[step] = reward, terminated, terminated | truncated

            if "final_obs" in infos:
                ended = infos["_final_obs"]
                final_obs[step, ended] = np.stack(infos["final_obs"][ended])
                # a lost life ends the training episode only: statistics come with the end of a whole game (rank 0's)
                for i in np.flatnonzero(infos["final_info"].get("_episode", [])) if rank == 0 else []:
                    episodic_return = float(infos["final_info"]["episode"]["r"][i])
                    recent_returns.append(episodic_return)
                    writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                    writer.add_scalar("charts/episodic_length", int(infos["final_info"]["episode"]["l"][i]), global_step)

        b_obs = torch.as_tensor(obs.reshape((-1,) + envs.single_observation_space.shape), device=device)
        b_actions = torch.as_tensor(actions.reshape(-1), device=device)
        # the rollout policy's log-probabilities and values in one batched pass (the update's code: first ratio exactly 1)
        with torch.no_grad():
            b_logprobs, _, b_values = agent.evaluate_actions(b_obs, b_actions)
            last_value = agent.get_value(torch.as_tensor(next_obs, device=device)).cpu().numpy()
            # only a truncated game (at 108,000 frames) bootstraps, from V(its real last obs); a termination or lost life: 0
            final_values = np.zeros_like(rewards)
            truncated_steps = (episode_ends == 1) & (terminations == 0)
            if truncated_steps.any():
                truncated_obs = torch.as_tensor(final_obs[truncated_steps], device=device)
                final_values[truncated_steps] = agent.get_value(truncated_obs).flatten().cpu().numpy()
        values = b_values.cpu().numpy().reshape(args.num_steps, args.num_envs)
        advantages, returns = compute_gae(
            rewards, values, last_value, final_values, terminations, episode_ends, args.gamma, args.gae_lambda
        )
        b_advantages = torch.as_tensor(advantages.reshape(-1), device=device)
        b_returns = torch.as_tensor(returns.reshape(-1), device=device)

        clipfracs = []
        for epoch in range(args.update_epochs):
            b_inds = torch.randperm(local_batch_size)
            for start in range(0, local_batch_size, minibatch_size):
                mb_inds = b_inds[start : start + minibatch_size]

                newlogprob, entropy, newvalue = agent.evaluate_actions(b_obs[mb_inds], b_actions[mb_inds])
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
                for parameter in agent.parameters():  # every rank steps with the ranks' mean gradient: the same parameters
                    dist.all_reduce(parameter.grad.div_(world_size))
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)
                optimizer.step()

            if args.target_kl is not None and approx_kl > args.target_kl:
                break

        if not np.isfinite(loss.item()):
            sys.exit(f"error: the loss turned non-finite at step {global_step}; stopping (no model saved)")
        check_agreement(torch.stack([p.detach().double().sum() for p in agent.parameters()]), iteration, world_size)
        var_y = np.var(returns)  # over the whole rollout
        explained_var = np.nan if var_y == 0 else 1 - np.var(returns - values) / var_y

        # TRY NOT TO MODIFY: record rewards for plotting purposes (rank 0's losses; SPS of all ranks)
        sps = int((global_step - start_step) / (time.time() - start_time))
        if rank == 0:
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
    dist.destroy_process_group()
    if rank == 0:
        print(
            f"the {world_size} rank(s) agreed after each of the {(global_step - start_step) // batch_size} updates", flush=True
        )
        writer.close()
        if args.upload_model:  # after the envs close, so the last videos are complete
            from cleanrl_utils.huggingface import push

            push(run_dir, episodic_returns, hf_repo_id)
        if args.track and args.capture_video:
            for video_path in sorted(glob.glob(f"videos/{run_name}*/*.mp4")):
                wandb.log({f"videos/{os.path.basename(os.path.dirname(video_path))}": wandb.Video(video_path)})
