# PPO with a Transformer-XL episodic memory (Pleines et al. 2023, Memory Gym); docs: docs/algorithms/ppo_trxl.md
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
from torch import nn, optim
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm


@dataclass
class Args:
    # Algorithm specific arguments (upstream's defaults)
    learning_rate: float = 2.75e-4
    """the learning rate of the optimizer"""
    num_envs: int = 32
    """the number of parallel game environments"""
    num_steps: int = 512
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.995
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 8
    """the number of mini-batches"""
    update_epochs: int = 3
    """the K epochs to update the policy"""
    norm_adv: bool = False
    """Toggles advantages normalization"""
    clip_coef: float = 0.1
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 1e-4
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.25
    """the maximum norm for the gradient clipping"""
    target_kl: float | None = None
    """the target KL divergence threshold (stops the update epochs early when exceeded)"""
    trxl_num_layers: int = 3
    """the number of transformer layers"""
    trxl_num_heads: int = 4
    """the number of heads of each layer's multi-head attention"""
    trxl_dim: int = 384
    """the dimension of the transformer (the embedding of a step)"""
    trxl_memory_length: int = 119
    """the number of past steps of its episode each step attends over (the sliding memory window)"""
    trxl_positional_encoding: str = "absolute"
    """the positional encoding: `absolute` (sinusoids of the place in the episode), `learned` (of the window) or `none`"""

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
    env_id: str = "MiniGrid-MemoryS9-v0"
    """the id of the environment: `ProofOfMemory-v0` (built in), a MiniGrid id (`MiniGrid-MemoryS9-v0`) or a Gymnasium one"""
    total_timesteps: int = 5000000
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


class ProofOfMemoryEnv(gym.Env):
    """A cue (0 or 1) shown at the first step only, `delay` blank steps, then a query whose action must name the cue
    (reward 1, else 0; the episode ends). Blank and query steps look the same for both cues: without memory, chance."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, delay: int = 4, render_mode: str | None = None):
        self.delay, self.render_mode = delay, render_mode
        self.observation_space = gym.spaces.Box(0.0, 1.0, (3,), np.float32)  # [cue 0, cue 1, query]
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cue, self.t = int(self.np_random.integers(2)), 0
        return np.eye(3, dtype=np.float32)[self.cue], {}

    def step(self, action):
        query = self.t > self.delay
        self.t += not query
        return np.float32([0, 0, self.t > self.delay]), float(query and action == self.cue), query, False, {}

    def render(self):  # the cue as a yellow half, the query as a white bar
        frame = np.full((32, 64, 3), 64, np.uint8)
        frame[:, 32 * self.cue : 32 * (self.cue + 1)] = (255, 200, 0) if self.t == 0 else 64
        frame[12:20] = 255 if self.t > self.delay else 64
        return frame


if "ProofOfMemory-v0" not in gym.registry:  # importing the script twice (tests, enjoy) registers it once
    gym.register("ProofOfMemory-v0", entry_point=ProofOfMemoryEnv, max_episode_steps=32)


def make_env(env_id, idx, capture_video, run_name):
    def thunk():
        render_mode = "rgb_array" if capture_video and idx == 0 else None
        if env_id.startswith("MiniGrid-"):  # the minigrid extra; importing it registers its ids
            from minigrid.wrappers import ImgObsWrapper, RGBImgPartialObsWrapper

            # upstream's setting: a 3x3 view (the cue leaves it at once), seen as 84x84 RGB pixels, 96 steps at most
            env = gym.make(env_id, agent_view_size=3, max_episode_steps=96, render_mode=render_mode)
            env = ImgObsWrapper(RGBImgPartialObsWrapper(env, tile_size=28))
        else:
            env = gym.make(env_id, render_mode=render_mode)
        if capture_video and idx == 0:
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        return gym.wrappers.RecordEpisodeStatistics(env)

    return thunk


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def attention_mask(episode_step, memory_length):
    """True where a key is hidden. A step's keys are its window (the L earlier steps, oldest first) and itself, last: it
    sees the window's last min(episode_step, L) entries, none from before its episode; no later step is ever there."""
    hidden_before = memory_length - episode_step.clamp(max=memory_length)
    return torch.arange(memory_length + 1, device=episode_step.device) < hidden_before.unsqueeze(1)


class TransformerLayer(nn.Module):
    """Upstream's pre-layer-norm block: attention over the memory window and the step, then a ReLU projection."""

    def __init__(self, dim, num_heads):
        super().__init__()
        self.norm_query, self.norm_keys, self.norm_projection = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attention = nn.MultiheadAttention(dim, num_heads, batch_first=True)
        self.projection = nn.Sequential(nn.Linear(dim, dim), nn.ReLU())

    def forward(self, x, keys, mask):
        keys = self.norm_keys(keys)
        attended, _ = self.attention(self.norm_query(x).unsqueeze(1), keys, keys, key_padding_mask=mask, need_weights=False)
        x = x + attended.squeeze(1)
        return x + self.projection(self.norm_projection(x))


class Agent(nn.Module):
    """An MLP (vectors) or the Nature CNN (HWC uint8 images) -> Transformer-XL layers -> ReLU layer -> policy, value."""

    def __init__(self, envs, args):
        super().__init__()
        shape, dim, self.positional_encoding = (
            envs.single_observation_space.shape,
            args.trxl_dim,
            args.trxl_positional_encoding,
        )
        if len(shape) == 3:
            convs = [nn.Conv2d(shape[2], 32, 8, 4), nn.Conv2d(32, 64, 4, 2), nn.Conv2d(64, 64, 3, 1)]
            cnn = nn.Sequential(*[m for conv in convs for m in (layer_init(conv), nn.ReLU())], nn.Flatten())
            features = cnn(torch.zeros((1, shape[2], *shape[:2]))).shape[1]  # 3136 for 84x84 frames
            self.encoder = nn.Sequential(cnn, layer_init(nn.Linear(features, dim)), nn.ReLU())
        else:
            self.encoder = nn.Sequential(layer_init(nn.Linear(shape[0], dim)), nn.ReLU())
        if self.positional_encoding == "learned":  # one embedding per place in the window, the step itself last
            self.learned_positions = nn.Parameter(torch.randn(args.trxl_memory_length + 1, dim))
        self.layers = nn.ModuleList([TransformerLayer(dim, args.trxl_num_heads) for _ in range(args.trxl_num_layers)])
        self.hidden_post_trxl = nn.Sequential(layer_init(nn.Linear(dim, dim)), nn.ReLU())
        self.actor = layer_init(nn.Linear(dim, envs.single_action_space.n), std=0.01)
        self.critic = layer_init(nn.Linear(dim, 1), std=1)

    def get_hidden(self, x, window, episode_step):
        """One step of B envs, x (B, *obs), with its window (B, L, num_layers, dim) and its index in its episode (B,):
        the heads' input, and this step's layer inputs (B, num_layers, dim), which the next steps' windows hold."""
        x = self.encoder(x.permute(0, 3, 1, 2) / 255.0 if x.dim() == 4 else x)  # frames travel as uint8 HWC
        memory_length, dim = window.shape[1], x.shape[1]
        encoding = 0.0  # --trxl-positional-encoding none
        if self.positional_encoding == "absolute":  # sinusoids (Vaswani et al. 2017) of the place in the episode
            positions = episode_step.unsqueeze(1) - memory_length + torch.arange(memory_length + 1, device=x.device)
            angles = positions.clamp(min=0).unsqueeze(-1) * 10000.0 ** (-torch.arange(0, dim, 2, device=x.device) / dim)
            encoding = torch.cat([angles.sin(), angles.cos()], dim=-1)
        elif self.positional_encoding == "learned":
            encoding = self.learned_positions
        layer_inputs, mask = [], attention_mask(episode_step, memory_length)
        for i, layer in enumerate(self.layers):
            layer_inputs.append(x.detach())  # the memory is what this layer saw: not trained through (as upstream)
            x = layer(x, torch.cat([window[:, :, i], x.unsqueeze(1)], dim=1) + encoding, mask)
        return self.hidden_post_trxl(x), torch.stack(layer_inputs, dim=1)

    def get_action_and_value(self, x, window, episode_step, action=None):
        """Sampled (or given) actions, their log-probabilities, the entropy, the values and this step's layer inputs."""
        hidden, layer_inputs = self.get_hidden(x, window, episode_step)
        log_probs = self.actor(hidden).log_softmax(dim=-1)
        if action is None:  # Gumbel-max: argmax(logits + Gumbel noise) samples softmax(logits)
            action = (log_probs - torch.empty_like(log_probs).exponential_().log()).argmax(dim=-1)
        logprob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(dim=-1)
        return action, logprob, entropy, self.critic(hidden).flatten(), layer_inputs


def memory_windows(memory, env_index, time_index, memory_length):
    """In a rollout's memory (num_envs, L + num_steps, num_layers, dim), step t's window: memory[env, t : t + L]."""
    return memory[env_index.unsqueeze(1), time_index.unsqueeze(1) + torch.arange(memory_length, device=memory.device)]


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
    positive = ["total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs", "eval_episodes"]
    for flag in positive + ["trxl_num_layers", "trxl_num_heads", "trxl_memory_length"]:
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "eval_interval"]:
        if getattr(args, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0 (0 = off), got {getattr(args, flag)}")
    if not 0 <= args.seed < 2**32:
        fail(f"--seed must be in [0, 2**32) (numpy's seed range), got {args.seed}")
    if args.trxl_positional_encoding not in ["absolute", "learned", "none"]:
        fail(f"--trxl-positional-encoding must be absolute, learned or none, got {args.trxl_positional_encoding}")
    if args.trxl_dim <= 0 or args.trxl_dim % (2 * args.trxl_num_heads):
        fail(f"--trxl-dim {args.trxl_dim} must be a positive multiple of 2 * --trxl-num-heads ({2 * args.trxl_num_heads})")
    if (args.num_envs * args.num_steps) % args.num_minibatches != 0:
        fail(
            f"--num-minibatches {args.num_minibatches} must divide --num-envs * --num-steps ({args.num_envs * args.num_steps})"
        )
    if args.total_timesteps < args.num_envs * args.num_steps:
        fail(f"--total-timesteps {args.total_timesteps} is less than one rollout (--num-envs * --num-steps)")
    try:
        env = make_env(args.env_id, 0, False, "check")()  # a `module:EnvName-v0` id imports its module, which registers it
    except (gym.error.Error, ModuleNotFoundError, TypeError) as e:  # TypeError: a MiniGrid env without agent_view_size
        fail(f"--env-id {args.env_id}: {e} (memory-gym ids are not supported: see docs/algorithms/ppo_trxl.md)")
    space, shape = env.observation_space, env.observation_space.shape
    if not isinstance(env.action_space, gym.spaces.Discrete):
        fail(f"--env-id {args.env_id} has a {type(env.action_space).__name__} action space; ppo_trxl.py needs a Discrete one")
    image = isinstance(space, gym.spaces.Box) and len(shape) == 3 and space.dtype == np.uint8 and min(shape[:2]) >= 36
    if not (image or isinstance(space, gym.spaces.Box) and len(shape) == 1):
        fail(f"--env-id {args.env_id} observes {space}; ppo_trxl.py takes 1-D vectors or HWC uint8 images of >= 36x36")
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
    batch_size, memory_length = args.num_envs * args.num_steps, args.trxl_memory_length
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

    # env setup: SAME_STEP autoreset returns the reset observation at once and the real last one in infos["final_obs"]
    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, i, args.capture_video, run_name) for i in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    agent = Agent(envs, args).to(device)
    optimizer = optim.AdamW(agent.parameters(), lr=args.learning_rate)  # upstream's optimizer

    # ALGO Logic: Storage setup. Observations, rewards and ends in numpy (a write per step is far cheaper than into a tensor)
    obs = np.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape, envs.single_observation_space.dtype)
    actions = np.zeros((args.num_steps, args.num_envs), dtype=np.int64)
    rewards, terminations, episode_ends = (np.zeros((args.num_steps, args.num_envs), dtype=np.float32) for _ in range(3))
    logprobs, values = torch.zeros((2, args.num_steps, args.num_envs), device=device)
    # The rollout's memory: per env, the layer inputs of the L steps before the rollout, then of each of its steps
    # (step t at L + t). Step t's window is memory[:, t : t + L] and episode_steps[t] says how much of it is its episode's
    memory = torch.zeros((args.num_envs, memory_length + args.num_steps, args.trxl_num_layers, args.trxl_dim), device=device)
    episode_steps = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long, device=device)
    global_step = 0
    next_obs, _ = envs.reset(seed=args.seed)
    next_episode_step = torch.zeros(args.num_envs, dtype=torch.long, device=device)  # 0: a new episode, no memory

    def checkpoint_state():  # what a checkpoint holds: the episodes in progress and their memory (the last L steps)
        live_memory = (next_obs, memory[:, args.num_steps :].clone(), next_episode_step)
        return dict(agent=agent, optimizer=optimizer, envs=envs, memory=live_memory, global_step=global_step)

    def save_and_evaluate(model_path, seed, video=False):  # the evaluations of --eval-interval and --save-model
        torch.save({"model_weights": agent.state_dict(), "args": vars(args)}, model_path)  # the args size the network
        from cleanrl_utils.evals.ppo_trxl_eval import evaluate

        return evaluate(model_path, make_env, args.env_id, args.eval_episodes, f"{run_name}-eval", Agent, device, video, seed)

    run_state = None
    if args.checkpoint_interval or args.eval_interval or args.save_model or checkpoint:  # needs cleanrl_utils
        from cleanrl_utils.run_state import RunState

        run_state = RunState(run_dir, args, writer, checkpoint, save_and_evaluate)
        if checkpoint:
            saved = run_state.restore(checkpoint_state())
            global_step, (next_obs, memory[:, args.num_steps :], next_episode_step) = saved["global_step"], saved["memory"]
            if not saved["envs"]:  # they could not be pickled (e.g. while recording video): new episodes, no memory
                next_obs, _ = envs.reset(seed=args.seed + global_step)
                next_episode_step.zero_()

    print(f"{run_name}: training to {total_steps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    # a bar on a terminal; disable=None turns it off where stdout is not one (a log file), and the loop prints lines
    progress = tqdm(total=total_steps, initial=global_step, unit="step", file=sys.stdout, disable=None)
    recent_returns, start_time, start_step = deque(maxlen=20), time.time(), global_step

    for iteration in range(global_step // batch_size + 1, num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        memory[:, :memory_length] = memory[:, args.num_steps :].clone()  # the last L steps open the new rollout's memory
        final_values = np.zeros_like(rewards)  # V(real last observation) where an episode was truncated
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step], episode_steps[step] = next_obs, next_episode_step
            with torch.no_grad():
                action, logprobs[step], _, values[step], memory[:, memory_length + step] = agent.get_action_and_value(
                    torch.as_tensor(next_obs, device=device), memory[:, step : step + memory_length], next_episode_step
                )
            actions[step] = action = action.cpu().numpy()

            next_obs, reward, terminated, truncated, infos = envs.step(action)
            if not np.isfinite(reward).all():
                sys.exit(f"error: the environment returned a non-finite reward at step {global_step}; stopping")
            rewards[step], terminations[step], episode_ends[step] = reward, terminated, terminated | truncated
            following = next_episode_step + 1
            next_episode_step = following * torch.as_tensor(1 - episode_ends[step], dtype=torch.long, device=device)

            # a truncated episode bootstraps from V(its real last observation), seen with that episode's memory
            cut = truncated & ~terminated
            if cut.any():
                last_obs = torch.as_tensor(np.stack(infos["final_obs"][cut]), device=device)
                cut_envs = torch.as_tensor(np.flatnonzero(cut), device=device)
                window = memory_windows(memory, cut_envs, torch.full_like(cut_envs, step + 1), memory_length)
                with torch.no_grad():
                    final_values[step, cut] = (
                        agent.get_action_and_value(last_obs, window, following[cut_envs])[3].cpu().numpy()
                    )
            if "final_obs" in infos:
                for i in np.flatnonzero(infos["final_info"]["_episode"]):
                    episodic_return = float(infos["final_info"]["episode"]["r"][i])
                    recent_returns.append(episodic_return)
                    writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                    writer.add_scalar("charts/episodic_length", int(infos["final_info"]["episode"]["l"][i]), global_step)

        with torch.no_grad():
            last_obs = torch.as_tensor(next_obs, device=device)
            last_value = agent.get_action_and_value(last_obs, memory[:, args.num_steps :], next_episode_step)[3]
        values_np = values.cpu().numpy()
        advantages, returns = compute_gae(
            rewards, values_np, last_value.cpu().numpy(), final_values, terminations, episode_ends, args.gamma, args.gae_lambda
        )

        # flatten the batch (time-major: index t * num_envs + env); each step keeps its place in the rollout's memory
        b_obs = torch.as_tensor(obs.reshape((-1,) + envs.single_observation_space.shape), device=device)
        b_actions = torch.as_tensor(actions.reshape(-1), device=device)
        b_logprobs, b_values, b_episode_steps = logprobs.reshape(-1), values.reshape(-1), episode_steps.reshape(-1)
        b_advantages = torch.as_tensor(advantages.reshape(-1), device=device)
        b_returns = torch.as_tensor(returns.reshape(-1), device=device)
        flat = torch.arange(batch_size, device=device)
        b_time, b_env = flat // args.num_envs, flat % args.num_envs

        # Optimizing the policy and value network: any steps together, each with the memory window it acted with
        clipfracs = []
        for epoch in range(args.update_epochs):
            b_inds = torch.randperm(batch_size, device=device)
            for start in range(0, batch_size, minibatch_size):
                mb_inds = b_inds[start : start + minibatch_size]
                mb_windows = memory_windows(memory, b_env[mb_inds], b_time[mb_inds], memory_length)

                _, newlogprob, entropy, newvalue, _ = agent.get_action_and_value(
                    b_obs[mb_inds], mb_windows, b_episode_steps[mb_inds], b_actions[mb_inds]
                )
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
        explained_var = np.nan if var_y == 0 else 1 - np.var(returns - values_np) / var_y

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
        stats = f"{sps} SPS, return {np.mean(recent_returns):.2f}" if recent_returns else f"{sps} SPS"
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
