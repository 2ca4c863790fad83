# PPO with Random Network Distillation (Burda et al. 2018) on EnvPool's Atari; docs: docs/algorithms/ppo_rnd_envpool.md
import glob
import json
import os
import random
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass

import envpool
import numpy as np
import torch
import tyro
from envpool.registration import registry
from torch import nn, optim
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm


@dataclass
class Args:
    # Algorithm specific arguments
    learning_rate: float = 1e-4
    """the learning rate of the optimizer (the policy, both value heads and the RND predictor)"""
    num_envs: int = 128
    """the number of parallel game environments"""
    num_steps: int = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.999
    """the discount factor of the extrinsic (game) reward"""
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
    """Toggles whether or not to use a clipped loss for the extrinsic value function, as per the paper."""
    ent_coef: float = 0.001
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: float | None = None
    """the target KL divergence threshold (stops the update epochs early when exceeded)"""
    update_proportion: float = 0.25
    """the fraction of each minibatch the RND predictor is trained on"""
    int_coef: float = 1.0
    """coefficient of the intrinsic advantage"""
    ext_coef: float = 2.0
    """coefficient of the extrinsic advantage"""
    int_gamma: float = 0.99
    """the discount factor of the intrinsic reward"""
    num_iterations_obs_norm_init: int = 50
    """rollouts of random play (not counted in the steps) that initialize the observation normalizer"""

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
    env_id: str = "MontezumaRevenge-v5"
    """the id of the Atari game in EnvPool (`MontezumaRevenge-v5`, `Venture-v5`, ...), played with sticky actions"""
    total_timesteps: int = 2000000000
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
    """The standard Atari preprocessing done by EnvPool in C++ (1 to 30 no-op frames at the start of each game, 4 frames
    a step max-pooled over the last two, FIRE where the game needs it, 84 x 84 grayscale, the last 4 frames stacked,
    games truncated at 108,000 frames), with sticky actions as RND (Machado et al. 2018: the last action repeats with
    probability 0.25 at each frame). A lost life ends the *training* episode only (`terminated`), the reward the agent
    sees is clipped to its sign; the game's own score is in `info["reward"]`. With `capture_video`, env 0 renders."""
    return envpool.make(
        env_id,
        env_type="gymnasium",
        num_envs=num_envs,
        seed=seed,
        episodic_life=True,
        reward_clip=True,
        repeat_action_probability=0.25,
        render_mode="rgb_array" if capture_video else None,
    )


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """RND's policy network: a Nature CNN torso to 448 features, a two-layer policy head, and an extrinsic and an
    intrinsic value head on the torso's features plus a residual layer. It sees the raw frames / 255 (never the
    normalized ones of the RND networks), stored and carried as uint8."""

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
            layer_init(nn.Linear(64 * 7 * 7, 256)),
            nn.ReLU(),
            layer_init(nn.Linear(256, 448)),
            nn.ReLU(),
        )
        self.extra_layer = nn.Sequential(layer_init(nn.Linear(448, 448), std=0.1), nn.ReLU())
        self.actor = nn.Sequential(
            layer_init(nn.Linear(448, 448), std=0.01),
            nn.ReLU(),
            layer_init(nn.Linear(448, envs.action_space.n), std=0.01),
        )
        self.critic_ext = layer_init(nn.Linear(448, 1), std=0.01)
        self.critic_int = layer_init(nn.Linear(448, 1), std=0.01)

    def forward(self, x):
        """The policy's logits and the extrinsic and intrinsic values."""
        hidden = self.network(x / 255.0)
        features = self.extra_layer(hidden) + hidden
        return self.actor(hidden), self.critic_ext(features).flatten(), self.critic_int(features).flatten()

    def get_action(self, x):
        logits = self.actor(self.network(x / 255.0))
        # Gumbel-max: argmax(logits + Gumbel noise) samples softmax(logits) at a fraction of torch.distributions' cost
        return (logits - torch.empty_like(logits).exponential_().log()).argmax(dim=-1)

    def evaluate_actions(self, x, action):
        """Log-probability and entropy of the given actions under the current policy, and the two state values."""
        logits, ext_value, int_value = self(x)
        log_probs = logits.log_softmax(dim=-1)
        logprob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(dim=-1)
        return logprob, entropy, ext_value, int_value


class RNDModel(nn.Module):
    """The fixed random target network and the predictor trained to match its 512 features, both on the last frame
    normalized (see normalize_frames). The prediction error is the novelty bonus: high on frames seldom seen."""

    def __init__(self):
        super().__init__()
        self.predictor, self.target = (
            nn.Sequential(
                layer_init(nn.Conv2d(1, 32, 8, stride=4)),
                nn.LeakyReLU(),
                layer_init(nn.Conv2d(32, 64, 4, stride=2)),
                nn.LeakyReLU(),
                layer_init(nn.Conv2d(64, 64, 3, stride=1)),
                nn.LeakyReLU(),
                nn.Flatten(),
                layer_init(nn.Linear(64 * 7 * 7, 512)),
                *head,
            )
            for head in [[nn.ReLU(), layer_init(nn.Linear(512, 512)), nn.ReLU(), layer_init(nn.Linear(512, 512))], []]
        )
        self.target.requires_grad_(False)

    def forward(self, x):
        return self.predictor(x), self.target(x)


class Statistics:
    """State kept in checkpoints as plain numpy values (its attributes)."""

    def state_dict(self):
        return dict(vars(self))

    def load_state_dict(self, state):
        vars(self).update(state)


class RunningMeanStd(Statistics):
    """Mean and variance of a stream of batches (over their first axis), merged with the parallel-variance formula of
    Chan et al. (1979): after any sequence of batches they are those of the batches concatenated. As upstream's, it
    starts as a prior of `epsilon` samples with mean 0 and variance 1. Its state is float64 numpy."""

    def __init__(self, shape=(), epsilon=1e-4):
        self.mean, self.var, self.count = np.zeros(shape), np.ones(shape), epsilon

    def update(self, x: torch.Tensor):
        if len(x) == 0:
            return
        var, mean = torch.var_mean(x if x.is_floating_point() else x.float(), dim=0, correction=0)
        var, mean, n = var.double().cpu().numpy(), mean.double().cpu().numpy(), len(x)
        delta, total = mean - self.mean, self.count + n
        self.mean = self.mean + delta * n / total
        self.var = (self.var * self.count + var * n + delta**2 * self.count * n / total) / total
        self.count = total


class RewardForwardFilter(Statistics):
    """Each env's discounted sum of its intrinsic rewards so far, run forward in time and never reset (the intrinsic
    return is non-episodic): the spread of these sums scales the intrinsic reward."""

    def __init__(self, gamma, num_envs):
        self.gamma, self.rewems = gamma, np.zeros(num_envs)

    def update(self, rewards, real):
        """`rewards` and `real` (num_steps, num_envs): a row not real (EnvPool's reset step) leaves that env's sum as it
        is. Returns the sums after each real row, in time order."""
        sums = []
        for reward, mask in zip(rewards, real):
            self.rewems = np.where(mask, self.rewems * self.gamma + reward, self.rewems)
            sums.append(self.rewems[mask])
        return np.concatenate(sums)


def normalize_frames(frames, obs_rms):
    """uint8 frames (B, 84, 84) as RND's networks see them: standardized per pixel by the running statistics, clipped
    to [-5, 5], one channel."""
    mean = torch.as_tensor(obs_rms.mean, dtype=torch.float32, device=frames.device)
    std = torch.as_tensor(np.sqrt(obs_rms.var), dtype=torch.float32, device=frames.device)
    return ((frames.float() - mean) / std).clip(-5, 5).unsqueeze(1)


def update_normalizers(obs_rms, reward_rms, reward_filter, frames, curiosity, is_reset_step):
    """RND's statistics after a rollout, from its real rows only (EnvPool's reset step is no transition): the
    observation normalizer from each row's last frame (`frames`, (num_steps * num_envs, 84, 84) time-major), the scale
    of the intrinsic reward from the spread of the per-env discounted sums of the raw bonus `curiosity` (num_steps,
    num_envs)."""
    real = ~is_reset_step
    reward_rms.update(torch.as_tensor(reward_filter.update(curiosity, real)))
    obs_rms.update(frames[torch.as_tensor(real.reshape(-1), device=frames.device)])


def compute_gae(rewards, values, last_value, terminations, episode_ends, spliced, gamma, gae_lambda):
    """GAE. `terminations[t]`: no bootstrap after step t; `episode_ends[t]`: the advantage does not run on past t (a
    truncated game bootstraps from the value of its real last observation, obs[t+1]: EnvPool resets one step late).
    A `spliced` row is cut out of the sequence: its advantage is 0, the row before runs on into the row after it."""
    advantages = np.zeros_like(rewards)
    next_value, lastgaelam = last_value, np.zeros_like(last_value)
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + gamma * next_value * (1.0 - terminations[t]) - values[t]
        advantages[t] = ~spliced[t] * (delta + gamma * gae_lambda * (1.0 - episode_ends[t]) * lastgaelam)
        next_value = np.where(spliced[t], next_value, values[t])
        lastgaelam = np.where(spliced[t], lastgaelam, advantages[t])
    return advantages, advantages + values


def check_args(args):
    """Every check of the flags, before heavy work: a bad input ends with one line naming the flag, exit code 2."""
    positive = ["total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs", "eval_episodes"]
    for flag in [*positive, "num_iterations_obs_norm_init"]:
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "eval_interval"]:
        if getattr(args, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0 (0 = off), got {getattr(args, flag)}")
    if not 0 < args.update_proportion <= 1:
        fail(f"--update-proportion must be in (0, 1] (the predictor's share of each minibatch), got {args.update_proportion}")
    if not 0 <= args.seed < 2**31:
        fail(f"--seed must be in [0, 2**31) (EnvPool's seed range), got {args.seed}")
    batch_size = args.num_envs * args.num_steps
    if batch_size % args.num_minibatches:
        fail(f"--num-minibatches {args.num_minibatches} must divide --num-envs * --num-steps = {batch_size}; pick a divisor")
    if args.total_timesteps < batch_size:
        fail(f"--total-timesteps {args.total_timesteps} is less than one rollout (--num-envs * --num-steps = {batch_size})")
    game = args.env_id.removeprefix("ALE/").removesuffix("-v5").removesuffix("NoFrameskip-v4").removesuffix("-v4")
    if args.env_id not in registry.specs and f"{game}-v5" in registry.specs:
        fail(f"--env-id {args.env_id}: EnvPool names this game {game}-v5 (this script adds the sticky actions)")
    if args.env_id not in registry.specs:
        fail(f"--env-id {args.env_id} is not an EnvPool environment (its Atari games: MontezumaRevenge-v5, Venture-v5, ...)")
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

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    envs = make_env(args.env_id, args.num_envs, args.seed, args.capture_video)
    agent = Agent(envs).to(device)
    rnd_model = RNDModel().to(device)
    trained = [*agent.parameters(), *rnd_model.predictor.parameters()]  # the target network stays as initialized
    optimizer = optim.Adam(trained, lr=args.learning_rate, eps=1e-5, fused=True)  # fused: one kernel a step
    obs_rms, reward_rms = RunningMeanStd(shape=envs.observation_space.shape[1:]), RunningMeanStd()
    reward_filter = RewardForwardFilter(args.int_gamma, args.num_envs)

    # ALGO Logic: Storage setup, in numpy: a write per step is far cheaper than into a tensor. Frames stay uint8 (4x smaller)
    obs = np.zeros((args.num_steps, args.num_envs) + envs.observation_space.shape, dtype=np.uint8)
    actions = np.zeros((args.num_steps, args.num_envs), dtype=np.int64)
    rewards, terminations, episode_ends = (np.zeros((args.num_steps, args.num_envs), dtype=np.float32) for _ in range(3))
    is_reset_step = np.zeros((args.num_steps, args.num_envs), dtype=bool)  # EnvPool's step after an episode's end
    global_step = 0

    def checkpoint_state():  # what a checkpoint holds: EnvPool's games cannot be saved, a resumed run starts new ones
        networks = dict(agent=agent, rnd_model=rnd_model, optimizer=optimizer, global_step=global_step)
        return dict(**networks, obs_rms=obs_rms, reward_rms=reward_rms, reward_filter=reward_filter)  # RND's statistics

    def save_and_evaluate(model_path, seed, video=False):  # the evaluations of --eval-interval and --save-model
        torch.save(agent.state_dict(), model_path)  # the policy alone: acting needs no RND network or normalizer
        from cleanrl_utils.evals.ppo_envpool_eval import evaluate

        return evaluate(model_path, make_env, args.env_id, args.eval_episodes, f"{run_name}-eval", Agent, device, video, seed)

    run_state = None
    if args.checkpoint_interval or args.eval_interval or args.save_model or checkpoint:  # needs cleanrl_utils
        from cleanrl_utils.run_state import RunState

        run_state = RunState(run_dir, args, writer, checkpoint, save_and_evaluate)
        if checkpoint:
            saved = run_state.restore(checkpoint_state())
            global_step = saved["global_step"]
            envs.close()  # new games, seeded by the step: a resumed run does not replay the games it began with
            envs = make_env(args.env_id, args.num_envs, (args.seed + global_step) % 2**31, args.capture_video)
            print(f"resumed at step {global_step}: the games start anew (EnvPool cannot save them)", file=sys.stderr)
    next_obs, _ = envs.reset()
    next_is_reset_step = np.zeros(args.num_envs, dtype=bool)
    print(f"{run_name}: training to {total_steps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    if not checkpoint:  # RND's normalizer starts from random play; a resumed run has its statistics in the checkpoint
        init_steps = args.num_iterations_obs_norm_init * batch_size
        print(f"observation normalizer: {init_steps} steps of random play, not counted in the budget", flush=True)
        for _ in range(args.num_iterations_obs_norm_init):
            frames = []
            for _ in range(args.num_steps):
                frames.append(next_obs[~next_is_reset_step, -1])
                next_obs, _, terminated, truncated, _ = envs.step(np.random.randint(envs.action_space.n, size=args.num_envs))
                next_is_reset_step = terminated | truncated
            obs_rms.update(torch.as_tensor(np.concatenate(frames), device=device))
        next_obs, _ = envs.reset()  # training starts with new games: whole games in its statistics and videos
        next_is_reset_step[:] = False
    game_returns = np.zeros(args.num_envs)  # the game's own score so far, all lives, unclipped
    recorder = None
    if args.capture_video:  # env 0's screen, whole games (needs cleanrl_utils)
        from cleanrl_utils.envpool_atari import GameRecorder

        recorder = GameRecorder(envs, f"videos/{run_name}")

    # a bar on a terminal; disable=None turns it off where stdout is not one (a log file), and the loop prints lines
    progress = tqdm(total=total_steps, initial=global_step, unit="step", file=sys.stdout, disable=None)
    recent_returns, start_time, start_step = deque(maxlen=20), time.time(), global_step

    for iteration in range(global_step // batch_size + 1, num_iterations + 1):
        # Annealing the rate if instructed to do so.
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step], is_reset_step[step] = next_obs, next_is_reset_step
            with torch.no_grad():
                action = agent.get_action(torch.as_tensor(next_obs, device=device)).cpu().numpy()
            actions[step] = action

            next_obs, reward, terminated, truncated, info = envs.step(action)
            if not np.isfinite(reward).all():
                sys.exit(f"error: the environment returned a non-finite reward at step {global_step}; stopping")
            rewards[step], terminations[step], episode_ends[step] = reward, terminated, terminated | truncated

            # after an episode's end (a lost life too) EnvPool's next step is its reset step, left out of the update.
            # A lost life ends the training episode only: statistics come with the end of a whole game
            next_is_reset_step = terminated | truncated
            game_returns += info["reward"]
            games_over = info["terminated"].astype(bool) | truncated
            if recorder:
                recorder.after_step(games_over)
            for i in np.flatnonzero(games_over):
                recent_returns.append(game_returns[i])
                writer.add_scalar("charts/episodic_return", game_returns[i], global_step)
                writer.add_scalar("charts/episodic_length", info["elapsed_step"][i], global_step)
                game_returns[i] = 0.0

        # flatten the batch
        b_obs = torch.as_tensor(obs.reshape((-1,) + envs.observation_space.shape), device=device)
        b_actions = torch.as_tensor(actions.reshape(-1), device=device)
        # one batched pass after the rollout: the rollout policy's log-probabilities and values (the update's code, so
        # the first ratio is exactly 1), and the novelty bonus of each step's next frame (row t + 1's, or next_obs)
        with torch.no_grad():
            b_logprobs, _, b_ext_values, b_int_values = agent.evaluate_actions(b_obs, b_actions)
            next_obs_tensor = torch.as_tensor(next_obs, device=device)
            _, last_ext, last_int = (x.cpu().numpy() for x in agent(next_obs_tensor))
            next_frames = torch.cat([b_obs[args.num_envs :, -1], next_obs_tensor[:, -1]])
            predicted, target = rnd_model(normalize_frames(next_frames, obs_rms))
            curiosity = ((target - predicted) ** 2).sum(1).div(2).cpu().numpy().reshape(args.num_steps, args.num_envs)
        update_normalizers(obs_rms, reward_rms, reward_filter, b_obs[:, -1], curiosity, is_reset_step)
        int_rewards = curiosity / np.sqrt(reward_rms.var)
        ext_values, int_values = (v.cpu().numpy().reshape(args.num_steps, args.num_envs) for v in (b_ext_values, b_int_values))
        never = np.zeros_like(is_reset_step)
        # the extrinsic return is episodic (a lost life ends it; the reset rows' own advantages are left out below); the
        # intrinsic one is not (RND's): it runs on through lost lives and games, EnvPool's reset step cut out of it
        (ext_advantages, ext_returns), (int_advantages, int_returns) = (
            compute_gae(rewards, ext_values, last_ext, terminations, episode_ends, never, args.gamma, args.gae_lambda),
            compute_gae(int_rewards, int_values, last_int, never, never, is_reset_step, args.int_gamma, args.gae_lambda),
        )
        b_advantages, b_ext_returns, b_int_returns = (
            torch.as_tensor(x.reshape(-1), dtype=torch.float32, device=device)
            for x in [args.ext_coef * ext_advantages + args.int_coef * int_advantages, ext_returns, int_returns]
        )
        # the update's minibatches split the real transitions; the reset steps (one per episode's end) are left out
        transitions = torch.as_tensor(np.flatnonzero(~is_reset_step.reshape(-1)))

        # Optimizing the policy, the value heads and the RND predictor
        clipfracs = []
        for epoch in range(args.update_epochs):
            for mb_inds in transitions[torch.randperm(len(transitions))].tensor_split(args.num_minibatches):
                # the predictor learns on a random share of the minibatch (with many envs the bonus would fade too fast);
                # only those rows go through the RND networks, the others would get no gradient
                chosen = mb_inds[torch.rand(len(mb_inds)) < args.update_proportion]
                predicted, target = rnd_model(normalize_frames(b_obs[chosen, -1], obs_rms))
                forward_loss = ((predicted - target) ** 2).sum() / max(predicted.numel(), 1)  # 0 if no row is chosen

                newlogprob, entropy, new_ext, new_int = agent.evaluate_actions(b_obs[mb_inds], b_actions[mb_inds])
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

                # Value loss: the extrinsic head's clipped as PPO's, the intrinsic head's plain (as RND)
                mb_ext_returns, mb_ext_values = b_ext_returns[mb_inds], b_ext_values[mb_inds]
                if args.clip_vloss:
                    v_loss_unclipped = (new_ext - mb_ext_returns) ** 2
                    v_clipped = mb_ext_values + torch.clamp(new_ext - mb_ext_values, -args.clip_coef, args.clip_coef)
                    ext_v_loss = 0.5 * torch.max(v_loss_unclipped, (v_clipped - mb_ext_returns) ** 2).mean()
                else:
                    ext_v_loss = 0.5 * ((new_ext - mb_ext_returns) ** 2).mean()
                v_loss = ext_v_loss + 0.5 * ((new_int - b_int_returns[mb_inds]) ** 2).mean()

                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef + forward_loss

                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(trained, args.max_grad_norm, foreach=True)
                optimizer.step()

            if args.target_kl is not None and approx_kl > args.target_kl:
                break

        if not np.isfinite(loss.item()):
            sys.exit(f"error: the loss turned non-finite at step {global_step}; stopping (no model saved)")
        real = ~is_reset_step  # over the rollout's real transitions
        var_y = np.var(ext_returns[real])
        explained_var = np.nan if var_y == 0 else 1 - np.var(ext_returns[real] - ext_values[real]) / var_y

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        sps = int((global_step - start_step) / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        writer.add_scalar("charts/episode_curiosity_reward", curiosity[real].mean(), global_step)
        writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
        writer.add_scalar("losses/policy_loss", pg_loss.item(), global_step)
        writer.add_scalar("losses/entropy", entropy_loss.item(), global_step)
        writer.add_scalar("losses/old_approx_kl", old_approx_kl.item(), global_step)
        writer.add_scalar("losses/approx_kl", approx_kl.item(), global_step)
        writer.add_scalar("losses/clipfrac", np.mean(clipfracs), global_step)
        writer.add_scalar("losses/fwd_loss", forward_loss.item(), global_step)
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
