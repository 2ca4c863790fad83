# Phasic Policy Gradient on Procgen (Cobbe et al. 2021, arXiv:2009.04416); docs: docs/algorithms/ppg_procgen.md
import glob
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


@dataclass
class Args:
    # Algorithm specific arguments
    learning_rate: float = 5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 64
    """the number of parallel game environments"""
    num_steps: int = 256
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = False
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.999
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 8
    """the number of mini-batches"""
    adv_norm_fullbatch: bool = True
    """Toggles advantages normalization over the whole rollout (as the PPG paper's code does)"""
    clip_coef: float = 0.2
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
    n_iteration: int = 32
    """N_pi: the policy iterations (a rollout and its PPO update) of each policy phase"""
    e_policy: int = 1
    """E_pi: the epochs of policy updates over each rollout"""
    v_value: int = 1
    """E_V: the epochs of value updates over each rollout"""
    e_auxiliary: int = 6
    """E_aux: the epochs of the auxiliary phase over all the rollouts of its policy phase"""
    beta_clone: float = 1.0
    """the behavior cloning coefficient"""
    num_aux_rollouts: int = 4
    """the whole rollouts (of --num-steps steps of one env) in each auxiliary minibatch"""
    n_aux_grad_accum: int = 1
    """the auxiliary minibatches whose gradients add up to one optimizer step"""

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
    env_id: str = "starpilot"
    """the id of the Procgen game (one of procgen.env.ENV_NAMES: starpilot, bigfish, bossfight, ...)"""
    total_timesteps: int = 25000000
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


class ProcgenVecEnv:
    """Procgen's games (gym3's vector API) as the training loop reads them: `step(actions)` gives the next observations,
    rewards, dones and the raw (return, length) of the games that ended. Procgen restarts an ended game inside the step,
    so where `dones` is set the observation is the next game's first, and the last one is never seen; a game's time
    limit is part of the game, so every end is a termination. `state_dict()` holds Procgen's own save states of the
    games, so a resumed run continues them exactly. With `video_folder`, env 0's 512x512 render is recorded."""

    def __init__(self, env_id, num_envs, seed, video_folder=None):
        from procgen import ProcgenGym3Env  # Procgen lives in its own environment (numpy < 2; docs/get-started.md)

        self.env = ProcgenGym3Env(
            num=num_envs,
            env_name=env_id,
            distribution_mode="easy",
            num_levels=0,  # every level: the generated games never repeat
            start_level=0,
            rand_seed=seed,  # Procgen draws its levels from the OS's entropy unless given a seed
            render_mode="rgb_array" if video_folder else None,
        )
        self.num_envs = num_envs
        self.single_observation_space = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
        self.single_action_space = gym.spaces.Discrete(self.env.ac_space.eltype.n)
        self.episode_returns, self.episode_lengths = np.zeros(num_envs), np.zeros(num_envs, dtype=np.int64)
        self.videos = None
        if video_folder:  # optional plumbing: needs cleanrl_utils
            from cleanrl_utils.rendering import EpisodeVideos

            self.videos = EpisodeVideos(video_folder, self.env.get_info()[0]["rgb"])

    def reset(self):
        return self.env.observe()[1]["rgb"]

    def step(self, actions):
        self.env.act(np.asarray(actions, dtype=np.int32))
        rewards, obs, dones = self.env.observe()  # dones ("first"): this observation starts a new game
        self.episode_returns += rewards
        self.episode_lengths += 1
        ended = [(float(self.episode_returns[i]), int(self.episode_lengths[i])) for i in np.flatnonzero(dones)]
        self.episode_returns[dones], self.episode_lengths[dones] = 0, 0
        if self.videos:
            self.videos.add(self.env.get_info()[0]["rgb"], new_episode=dones[0])
        return obs["rgb"], rewards.astype(np.float32), dones, ended

    def state_dict(self):
        return dict(games=self.env.callmethod("get_state"), returns=self.episode_returns, lengths=self.episode_lengths)

    def load_state_dict(self, state):
        self.env.callmethod("set_state", state["games"])
        self.episode_returns, self.episode_lengths = state["returns"].copy(), state["lengths"].copy()

    def close(self):
        if self.videos:
            self.videos.close()


def make_env(env_id, num_envs, seed, video_folder=None):
    """Upstream's setting: the easy distribution, every level, drawn from `seed`."""
    return ProcgenVecEnv(env_id, num_envs, seed, video_folder)


def layer_init_normed(layer, norm_dim, scale=1.0):
    """The PPG code's init: each output unit's weights rescaled to norm `scale` (from PyTorch's default draw), bias 0."""
    with torch.no_grad():
        layer.weight.mul_(scale / layer.weight.norm(dim=norm_dim, p=2, keepdim=True))
        layer.bias.zero_()
    return layer


class ResidualBlock(nn.Module):
    def __init__(self, channels, scale):
        super().__init__()
        self.convs = nn.Sequential(
            *(layer_init_normed(nn.Conv2d(channels, channels, 3, padding=1), (1, 2, 3), scale) for _ in range(2))
        )

    def forward(self, x):
        return x + self.convs[1](torch.relu(self.convs[0](torch.relu(x))))


def conv_sequence(in_channels, out_channels, scale):
    """IMPALA's block: a 3x3 conv, a 3x3 max-pool of stride 2 (halving the frame), two residual blocks; the PPG code
    gives each block's output 1/sqrt(2) of `scale`, a square root of that to each of its two convs."""
    conv = layer_init_normed(nn.Conv2d(in_channels, out_channels, 3, padding=1), (1, 2, 3))
    blocks = [ResidualBlock(out_channels, np.sqrt(scale / np.sqrt(2))) for _ in range(2)]
    return nn.Sequential(conv, nn.MaxPool2d(3, stride=2, padding=1), *blocks)


class Agent(nn.Module):
    """The IMPALA CNN (Espeholt et al. 2018: 16, 32, 32 channels, then 256 units) shared by a policy head, the value
    head and PPG's auxiliary value head (upstream's single network). The value head reads the encoder detached, so
    neither phase's value loss shapes the policy's features; the auxiliary value head trains them, in the auxiliary
    phase only. Frames travel and are stored as uint8 (64, 64, 3), channels-first and scaled only in the network."""

    def __init__(self, envs):
        super().__init__()
        scale = 1 / np.sqrt(3)  # the PPG code's: split among the three sequences
        channels = [envs.single_observation_space.shape[-1], 16, 32, 32]
        sequences = [conv_sequence(channels[i], channels[i + 1], scale) for i in range(3)]
        encoder_top = layer_init_normed(nn.Linear(32 * 8 * 8, 256), 1, 1.4)  # 64x64 frames halved three times: 8x8
        self.network = nn.Sequential(*sequences, nn.Flatten(), nn.ReLU(), encoder_top, nn.ReLU())
        self.actor = layer_init_normed(nn.Linear(256, envs.single_action_space.n), 1, 0.1)
        self.critic, self.aux_critic = (layer_init_normed(nn.Linear(256, 1), 1, 0.1) for _ in range(2))

    def hidden(self, x):
        return self.network(x.permute(0, 3, 1, 2) / 255.0)  # (N, H, W, C) uint8 -> (N, C, H, W) in [0, 1]

    def get_action_and_value(self, x):
        """A sampled action with its log-probability and the state's value, in one pass."""
        hidden = self.hidden(x)
        log_probs = self.actor(hidden).log_softmax(dim=-1)
        # Gumbel-max: argmax(logits + Gumbel noise) samples softmax(logits) at a fraction of torch.distributions' cost
        action = (log_probs - torch.empty_like(log_probs).exponential_().log()).argmax(dim=-1)
        return action, log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1), self.critic(hidden).flatten()

    def get_action(self, x):
        return self.get_action_and_value(x)[0]

    def evaluate_actions(self, x, action):
        """Log-probability and entropy of the given actions under the current policy, and the (detached) values."""
        hidden = self.hidden(x)
        log_probs = self.actor(hidden).log_softmax(dim=-1)
        logprob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(dim=-1)
        return logprob, entropy, self.critic(hidden.detach()).flatten()


def scale_rewards(rewards, dones, discounted_returns, return_rms, gamma):
    """Upstream's reward scaling (Gym's NormalizeReward, then a clip to [-10, 10]): each reward divided by the running
    standard deviation of the discounted return, whose sum (updated in place) restarts where a game ended: one scale of
    value targets across games whose scores differ by orders of magnitude. The logged scores stay raw."""
    discounted_returns[:] = discounted_returns * gamma + rewards
    return_rms.update(discounted_returns)
    discounted_returns[dones] = 0.0
    return np.clip(rewards / np.sqrt(return_rms.var + 1e-8), -10, 10).astype(np.float32)


def compute_gae(rewards, values, last_value, dones, gamma, gae_lambda):
    """Generalized Advantage Estimation over a rollout of numpy arrays shaped (num_steps, num_envs). dones[t]: the
    episode ended at step t (obs[t + 1] is the next game's first). Every Procgen end is a termination, and Procgen
    gives no final observation to bootstrap from anyway: nothing flows across an end."""
    next_values = np.concatenate([values[1:], last_value.reshape(1, -1)])
    advantages = np.zeros_like(rewards)
    lastgaelam = 0.0
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + gamma * next_values[t] * (1.0 - dones[t]) - values[t]
        lastgaelam = delta + gamma * gae_lambda * (1.0 - dones[t]) * lastgaelam
        advantages[t] = lastgaelam
    return advantages, advantages + values


def behavior_cloning_targets(agent, frames, device, chunk):
    """The policy's logits on every frame of the phase (frames shaped (..., 64, 64, 3)), computed once before the
    auxiliary phase's first update: the fixed target its distillation keeps the policy to, in `chunk`-frame passes."""
    flat = frames.reshape((-1,) + frames.shape[-3:])
    with torch.no_grad():
        logits = [
            agent.actor(agent.hidden(torch.as_tensor(flat[i : i + chunk], device=device))) for i in range(0, len(flat), chunk)
        ]
    return torch.cat(logits).cpu().numpy().reshape(frames.shape[:-3] + (-1,))


def rollout_rows(arrays, rollouts, num_envs):
    """Whole rollouts of a phase's arrays shaped (n_iteration, num_steps, num_envs, ...): rollout r is env
    r % num_envs of the phase's iteration r // num_envs. Each array's rows, one per step, rollout after rollout."""
    its, env_ids = rollouts // num_envs, rollouts % num_envs
    return [array[its, :, env_ids].reshape((-1,) + array.shape[3:]) for array in arrays]


def auxiliary_loss(agent, obs, returns, old_logits, beta_clone):
    """PPG's auxiliary objective on a minibatch: the joint loss (the auxiliary value head's squared error to the
    phase's returns, plus beta_clone * KL(pi_before_phase || pi), through the encoder) plus the value head's own
    squared error (its head alone: it reads the encoder detached). Returns it with its three parts."""
    hidden = agent.hidden(obs)
    old_log_probs, log_probs = old_logits.log_softmax(dim=-1), agent.actor(hidden).log_softmax(dim=-1)
    kl = (old_log_probs.exp() * (old_log_probs - log_probs)).sum(dim=-1).mean()
    aux_value_loss = 0.5 * ((agent.aux_critic(hidden).flatten() - returns) ** 2).mean()
    real_value_loss = 0.5 * ((agent.critic(hidden.detach()).flatten() - returns) ** 2).mean()
    return aux_value_loss + beta_clone * kl + real_value_loss, kl, aux_value_loss, real_value_loss


def check_args(args):
    """Every check of the flags, before heavy work: a bad input ends with one line naming the flag, exit code 2."""
    positive = ["total_timesteps", "num_envs", "num_steps", "num_minibatches", "n_iteration", "e_policy", "v_value"]
    for flag in [*positive, "e_auxiliary", "num_aux_rollouts", "n_aux_grad_accum", "eval_episodes"]:
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "eval_interval"]:
        if getattr(args, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0 (0 = off), got {getattr(args, flag)}")
    if not 0 <= args.seed < 2**31:
        fail(f"--seed must be in [0, 2**31) (Procgen's seed range), got {args.seed}")
    batch_size = args.num_envs * args.num_steps
    if batch_size % args.num_minibatches:
        fail(f"--num-minibatches {args.num_minibatches} must divide --num-envs * --num-steps = {batch_size}; pick a divisor")
    rollouts, aux_step = args.num_envs * args.n_iteration, args.num_aux_rollouts * args.n_aux_grad_accum
    if rollouts % aux_step:
        fail(f"--num-aux-rollouts * --n-aux-grad-accum = {aux_step} must divide --num-envs * --n-iteration = {rollouts}")
    if args.total_timesteps < batch_size * args.n_iteration:
        fail(f"--total-timesteps {args.total_timesteps} is less than one phase (--num-envs * --num-steps * --n-iteration)")
    try:  # imported here, not at the top: Procgen needs numpy < 2, so it lives in an environment of its own
        from procgen.env import ENV_NAMES
    except ImportError:
        command = "UV_PROJECT_ENVIRONMENT=.venv-procgen uv run --no-dev --extra procgen python cleanrl/ppg_procgen.py"
        fail(f"procgen is not installed in this environment (it needs numpy < 2); run the script as: {command}")
    if args.env_id not in ENV_NAMES:
        fail(f"--env-id {args.env_id} is not a Procgen game; use one of {', '.join(ENV_NAMES)}")


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
    minibatch_size, aux_rollouts = batch_size // args.num_minibatches, args.num_envs * args.n_iteration
    num_iterations = args.total_timesteps // (batch_size * args.n_iteration) * args.n_iteration  # whole phases
    total_steps = num_iterations * batch_size  # the budget in whole phases: what the run does
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

    # env setup: the seed fixes Procgen's levels; the scores are raw, the loss sees the rewards scaled
    envs = make_env(args.env_id, args.num_envs, args.seed, f"videos/{run_name}" if args.capture_video else None)
    discounted_returns, return_rms = np.zeros(args.num_envs), RunningMeanStd()  # the reward scaling's statistics
    agent = Agent(envs).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-8, fused=True)  # fused: one kernel a step

    # ALGO Logic: Storage setup, in numpy: a write per step is far cheaper than into a tensor. Frames stay uint8
    obs = np.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape, dtype=np.uint8)
    actions = np.zeros((args.num_steps, args.num_envs), dtype=np.int64)
    logprobs, rewards, dones, values = (np.zeros((args.num_steps, args.num_envs), dtype=np.float32) for _ in range(4))
    # the phase's rollouts for the auxiliary phase, in host memory as uint8: 32 x 256 x 64 frames of 12 KiB, 6.4 GB at
    # the defaults (as float32 on the device it would be 26 GB); minibatches go to the device one at a time
    aux_obs = np.zeros((args.n_iteration,) + obs.shape, dtype=np.uint8)
    aux_returns = np.zeros((args.n_iteration, args.num_steps, args.num_envs), dtype=np.float32)
    global_step = 0
    next_obs = envs.reset()

    def checkpoint_state():  # what a checkpoint holds; mid-phase, the phase's rollouts (its auxiliary phase needs them)
        stored = global_step // batch_size % args.n_iteration  # as tensors: torch.save writes past pickle's 4 GiB limit
        state = dict(agent=agent, optimizer=optimizer, envs=envs, next_obs=next_obs, global_step=global_step)
        state |= dict(discounted_returns=discounted_returns, return_rms=return_rms)
        return dict(state, aux_obs=torch.from_numpy(aux_obs[:stored]), aux_returns=torch.from_numpy(aux_returns[:stored]))

    def save_and_evaluate(model_path, seed, video=False):  # the evaluations of --eval-interval and --save-model
        torch.save(agent.state_dict(), model_path)
        from cleanrl_utils.evals.ppo_procgen_eval import evaluate

        return evaluate(model_path, make_env, args.env_id, args.eval_episodes, f"{run_name}-eval", Agent, device, video, seed)

    run_state = None
    if args.checkpoint_interval or args.eval_interval or args.save_model or checkpoint:  # needs cleanrl_utils
        from cleanrl_utils.run_state import RunState

        run_state = RunState(run_dir, args, writer, checkpoint, save_and_evaluate)
        if checkpoint:  # the games, the reward scaling and the phase's rollouts continue exactly
            saved = run_state.restore(checkpoint_state())
            global_step, next_obs, discounted_returns = saved["global_step"], saved["next_obs"], saved["discounted_returns"]
            return_rms = saved["return_rms"]
            stored = len(saved["aux_obs"])
            aux_obs[:stored], aux_returns[:stored] = saved["aux_obs"].numpy(), saved["aux_returns"].numpy()

    print(f"{run_name}: training to {total_steps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    # a bar on a terminal; disable=None turns it off where stdout is not one (a log file), and the loop prints lines
    progress = tqdm(total=total_steps, initial=global_step, unit="step", file=sys.stdout, disable=None)
    recent_returns, start_time, start_step = deque(maxlen=20), time.time(), global_step

    for iteration in range(global_step // batch_size + 1, num_iterations + 1):
        # Annealing the rate if instructed to do so.
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        # POLICY PHASE: a PPO iteration
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            with torch.no_grad():
                action, logprob, value = agent.get_action_and_value(torch.as_tensor(next_obs, device=device))
            actions[step], logprobs[step], values[step] = action.cpu().numpy(), logprob.cpu().numpy(), value.cpu().numpy()

            next_obs, reward, done, ended = envs.step(actions[step])
            if not np.isfinite(reward).all():
                sys.exit(f"error: the environment returned a non-finite reward at step {global_step}; stopping")
            rewards[step], dones[step] = scale_rewards(reward, done, discounted_returns, return_rms, args.gamma), done
            for episodic_return, episodic_length in ended:  # the raw game scores
                recent_returns.append(episodic_return)
                writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                writer.add_scalar("charts/episodic_length", episodic_length, global_step)

        with torch.no_grad():
            last_value = agent.get_action_and_value(torch.as_tensor(next_obs, device=device))[2].cpu().numpy()
        advantages, returns = compute_gae(rewards, values, last_value, dones, args.gamma, args.gae_lambda)

        # flatten the batch
        b_obs = torch.as_tensor(obs.reshape((-1,) + obs.shape[2:]), device=device)
        b_actions, b_logprobs, b_values, b_advantages, b_returns = (
            torch.as_tensor(x.reshape(-1), device=device) for x in (actions, logprobs, values, advantages, returns)
        )
        if args.adv_norm_fullbatch:
            b_advantages = (b_advantages - b_advantages.mean()) / (b_advantages.std() + 1e-8)

        # Optimizing the policy (E_pi epochs) and the value head (E_V epochs)
        clipfracs = []
        for epoch in range(max(args.e_policy, args.v_value)):
            b_inds = torch.randperm(batch_size)
            for start in range(0, batch_size, minibatch_size):
                mb_inds = b_inds[start : start + minibatch_size]

                newlogprob, entropy, newvalue = agent.evaluate_actions(b_obs[mb_inds], b_actions[mb_inds])
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()

                with torch.no_grad():
                    # calculate approx_kl http://joschu.net/blog/kl-approx.html
                    old_approx_kl = (-logratio).mean()
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean().item()]

                # Policy loss
                mb_advantages = b_advantages[mb_inds]
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
                # an epoch past E_pi (or E_V) leaves that part out: its parameters get no gradient, so Adam skips them
                loss = v_loss * args.vf_coef if epoch < args.v_value else 0.0
                loss = loss + pg_loss - args.ent_coef * entropy_loss if epoch < args.e_policy else loss

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
        aux_obs[(iteration - 1) % args.n_iteration] = obs  # PPG storage: whole rollouts, for the auxiliary phase
        aux_returns[(iteration - 1) % args.n_iteration] = returns

        # AUXILIARY PHASE: after every N_pi iterations, E_aux epochs over all the phase's rollouts
        if iteration % args.n_iteration == 0:
            chunk = args.num_aux_rollouts * args.num_steps  # frames per pass: an auxiliary minibatch's
            old_logits = behavior_cloning_targets(agent, aux_obs, device, chunk)
            optimizer.zero_grad()
            for aux_epoch in range(args.e_auxiliary):
                aux_inds = torch.randperm(aux_rollouts)
                for i, start in enumerate(range(0, aux_rollouts, args.num_aux_rollouts)):
                    rollouts = aux_inds[start : start + args.num_aux_rollouts].numpy()
                    mb = rollout_rows((aux_obs, aux_returns, old_logits), rollouts, args.num_envs)
                    mb_obs, mb_returns, mb_old_logits = (torch.as_tensor(x, device=device) for x in mb)
                    aux_loss, kl_loss, aux_value_loss, real_value_loss = auxiliary_loss(
                        agent, mb_obs, mb_returns, mb_old_logits, args.beta_clone
                    )
                    (aux_loss / args.n_aux_grad_accum).backward()
                    if (i + 1) % args.n_aux_grad_accum == 0:
                        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)
                        optimizer.step()
                        optimizer.zero_grad()
            if not np.isfinite(aux_loss.item()):
                sys.exit(f"error: the auxiliary loss turned non-finite at step {global_step}; stopping (no model saved)")
            writer.add_scalar("losses/aux/kl_loss", kl_loss.item(), global_step)
            writer.add_scalar("losses/aux/aux_value_loss", aux_value_loss.item(), global_step)
            writer.add_scalar("losses/aux/real_value_loss", real_value_loss.item(), global_step)

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
