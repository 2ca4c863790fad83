# PPO with an LSTM core on Atari games from pixels: one frame per observation, the LSTM carries the history;
# docs: README.md#ppo_atari_lstmpy
import glob
import importlib
import json
import os
import pickle
import random
import shlex
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass

import ale_py
import cloudpickle
import gymnasium as gym
import numpy as np
import torch
import tyro
from stable_baselines3.common.atari_wrappers import ClipRewardEnv, EpisodicLifeEnv, FireResetEnv, MaxAndSkipEnv, NoopResetEnv
from torch import nn, optim
from torch.utils.tensorboard import SummaryWriter


@dataclass
class Args:
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
    """whether to save the model into `runs/{run_name}` and evaluate it for 10 episodes"""
    upload_model: bool = False
    """whether to upload the saved model, its evaluation and videos to the Hugging Face Hub (with --save-model)"""
    hf_entity: str | None = None
    """the user or organization of the Hugging Face Hub model repository (default: the token's user)"""
    checkpoint_interval: int = 0
    """environment steps between checkpoints written to `runs/{run_name}/checkpoint.pt` (0 = off)"""
    resume: str | None = None
    """a run folder (`runs/{run_name}`) to continue from its checkpoint up to `--total-timesteps`"""

    # Algorithm specific arguments
    env_id: str = "BreakoutNoFrameskip-v4"
    """the id of the Atari game (any ALE id: `BreakoutNoFrameskip-v4`, `ALE/Breakout-v5`, or `module:EnvName-v0`)"""
    total_timesteps: int = 10000000
    """total timesteps of the experiments (agent steps: each is 4 frames of the game)"""
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

    # to be filled in runtime
    batch_size: int = 0
    """the batch size (computed in runtime)"""
    minibatch_size: int = 0
    """the mini-batch size (computed in runtime)"""
    num_iterations: int = 0
    """the number of iterations (computed in runtime)"""


def fail(message: str):
    """Bad input ends with one line on stderr and exit code 2, before any heavy work."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def make_env(env_id, idx, capture_video, run_name):
    """The standard Atari preprocessing (Mnih et al. 2015; Machado et al. 2018), from Stable-Baselines3's and
    Gymnasium's wrappers. Sticky actions stay as the id defines them: none for the v4 `NoFrameskip` ids, a 0.25
    probability of repeating the previous action for the v5 ones (`ALE/Breakout-v5`)."""

    def thunk():
        module, _, registered_id = env_id.rpartition(":")
        if module:  # a user's own env: importing its module registers it, as gym.make would
            importlib.import_module(module)
        gym.register_envs(ale_py)
        # the ALE's own frame skip off (the v5 ids skip 4 by default): MaxAndSkipEnv skips, max-pooling the last two frames
        env = gym.make(registered_id, frameskip=1, render_mode="rgb_array" if capture_video and idx == 0 else None)
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
        # (1, 84, 84) uint8: one frame, no stack; the LSTM remembers what came before (motion included)
        env = gym.wrappers.FrameStackObservation(env, 1)
        return env

    return thunk


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """The Nature CNN (Mnih et al. 2015) on one frame -> an LSTM (state h, c: (1, N, 128)) -> policy and value heads."""

    def __init__(self, envs):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(1, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.lstm = nn.LSTM(512, 128)
        for name, param in self.lstm.named_parameters():  # weights orthogonal with gain 1, biases 0
            nn.init.orthogonal_(param, 1.0) if "weight" in name else nn.init.constant_(param, 0)
        self.actor = layer_init(nn.Linear(128, envs.single_action_space.n), std=0.01)
        self.critic = layer_init(nn.Linear(128, 1), std=1)

    def initial_state(self, num_envs, device=None):
        """The recurrent state (h, c) of envs that have seen nothing yet: zeros."""
        return tuple(torch.zeros(1, num_envs, self.lstm.hidden_size, device=device) for _ in range(2))

    def get_states(self, x, lstm_state, done):
        """Unroll the LSTM over T steps of N envs from lstm_state; x (T * N, 1, 84, 84) and done (T * N) time-major. Where
        done, an observation starts a new episode: that env's state is zeroed before it, so no memory leaks from one
        episode (one life) into the next. Returns the LSTM output of every step (T * N, 128) and the last state."""
        # frames travel and are stored as uint8 (4x smaller than float32); scaled to [0, 1] only here
        hidden = self.network(x / 255.0).reshape((-1, lstm_state[0].shape[1], self.lstm.input_size))
        keep = (1.0 - done.float()).reshape((len(hidden), 1, -1, 1))  # 0 where an episode starts
        outputs = []
        for h, k in zip(hidden, keep):  # step by step: a reset can fall on any step of any env
            h, lstm_state = self.lstm(h.unsqueeze(0), (k * lstm_state[0], k * lstm_state[1]))
            outputs.append(h)
        return torch.cat(outputs).flatten(0, 1), lstm_state

    def get_value(self, x, lstm_state, done):
        return self.critic(self.get_states(x, lstm_state, done)[0])

    def get_action(self, x, lstm_state, done):
        """Sample one action per env for one step, and the state after it: all that acting needs."""
        hidden, lstm_state = self.get_states(x, lstm_state, done)
        logits = self.actor(hidden)
        # Gumbel-max trick: argmax(logits + Gumbel noise) is a sample from softmax(logits), at a fraction of the
        # cost of torch.distributions
        return (logits - torch.empty_like(logits).exponential_().log()).argmax(dim=-1), lstm_state

    def evaluate_actions(self, x, lstm_state, done, action):
        """Log-probabilities and entropy of the actions and the state values, over a sequence as get_states takes it."""
        hidden, _ = self.get_states(x, lstm_state, done)
        log_probs = self.actor(hidden).log_softmax(dim=-1)
        logprob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(dim=-1)
        return logprob, entropy, self.critic(hidden).flatten()


def compute_gae(rewards, values, last_value, final_values, terminations, episode_ends, gamma, gae_lambda):
    """Generalized Advantage Estimation over a rollout of numpy arrays shaped (num_steps, num_envs). values[t] is
    V(obs[t]), last_value V of the observation after the rollout. Where an episode ended at step t, obs[t + 1] is
    already the next episode's reset observation, so the bootstrap comes from final_values[t] = V(real last
    observation) instead: a truncation keeps the value of where it stopped, a termination zeroes it, and no episode
    end lets the lambda-return leak into the next episode."""
    next_values = np.concatenate([values[1:], last_value.reshape(1, -1)])
    next_values = np.where(episode_ends, final_values, next_values)
    advantages = np.zeros_like(rewards)
    lastgaelam = 0.0
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + gamma * next_values[t] * (1.0 - terminations[t]) - values[t]
        lastgaelam = delta + gamma * gae_lambda * (1.0 - episode_ends[t]) * lastgaelam
        advantages[t] = lastgaelam
    return advantages, advantages + values


def pickle_envs(envs):
    """The sub-environments of a vector env, pickled with their wrappers' state (lives, episode statistics); None
    where they cannot be. The ALE pickles only its constructor's arguments (gymnasium's EzPickle), so each emulator's
    state, RNG included, and the env's own RNG (NoopResetEnv draws from it) travel beside it. Sticky actions (v5 ids):
    the ALE does not save its last action, so a repeat right after a resume can differ; v4 ids continue exactly."""
    try:
        return cloudpickle.dumps(
            [(env, env.unwrapped.ale.cloneState(include_rng=True), env.unwrapped.np_random) for env in envs.envs]
        )
    except (pickle.PicklingError, TypeError):
        return None


def unpickle_envs(data):
    """The sub-environments pickle_envs saved, each emulator back where it was."""
    envs = []
    for env, ale_state, np_random in pickle.loads(data):
        env.unwrapped.ale.restoreState(ale_state)
        env.unwrapped.np_random = np_random
        envs.append(env)
    return envs


def atomic_save(obj, path):
    """A reader (or a resumed run) sees the old file or the new one, never a half-written one."""
    tmp_path = f"{path}.tmp"
    torch.save(obj, tmp_path)
    os.replace(tmp_path, path)


if __name__ == "__main__":
    args = tyro.cli(Args)
    checkpoint = None
    if args.resume is not None:
        checkpoint_path = os.path.join(args.resume, "checkpoint.pt")
        if not os.path.isfile(checkpoint_path):
            fail(f"--resume {args.resume}: no checkpoint.pt there (was the run started with --checkpoint-interval?)")
        checkpoint = torch.load(checkpoint_path, weights_only=False)
        # the saved run's Args are the defaults; flags given now (e.g. a larger --total-timesteps) override them
        args = tyro.cli(Args, default=Args(**checkpoint["args"]))

    for flag in ["total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs"]:
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    if args.checkpoint_interval < 0:
        fail(f"--checkpoint-interval must be >= 0 (0 = off), got {args.checkpoint_interval}")
    args.batch_size = int(args.num_envs * args.num_steps)
    if args.num_envs % args.num_minibatches != 0:
        fail(
            f"--num-minibatches {args.num_minibatches} must divide --num-envs {args.num_envs} (minibatches are split "
            "by environment, to replay whole sequences); pick a divisor of it"
        )
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size
    if args.num_iterations == 0:
        fail(
            f"--total-timesteps {args.total_timesteps} is less than one rollout (--num-envs * --num-steps = {args.batch_size})"
        )
    try:
        module, _, registered_id = args.env_id.rpartition(":")
        if module:  # a user's own env: importing its module registers it, as gym.make would
            importlib.import_module(module)
        gym.register_envs(ale_py)
        probe = gym.make(registered_id)
    except (gym.error.Error, ModuleNotFoundError) as e:
        fail(f"--env-id {args.env_id}: {e}")
    if not hasattr(probe.unwrapped, "ale"):  # the preprocessing reads the ALE's lives and action meanings
        fail(
            f"--env-id {args.env_id} is not an Atari game (its observations are {probe.observation_space}, not "
            "the screen of the ALE); ppo_atari_lstm.py needs one: use ppo.py for it"
        )
    probe.close()
    if args.upload_model:
        if not args.save_model:
            fail("--upload-model uploads the model that --save-model saves: add --save-model")
        from cleanrl_utils.huggingface import check_upload

        try:  # before training: a missing token must not cost a whole run
            hf_repo_id = check_upload(args.hf_entity, args.env_id, args.exp_name, args.seed)
        except ValueError as e:
            fail(f"--upload-model: {e}")

    if checkpoint is None:
        run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
        run_dir = f"runs/{run_name}"
    else:
        run_name, run_dir = checkpoint["run_name"], args.resume.rstrip("/")

    # seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    # env setup: SAME_STEP autoreset returns the reset observation at once and the real last one in infos["final_obs"]
    if checkpoint is not None and checkpoint["envs"] is not None:
        env_fns = [lambda env=env: env for env in unpickle_envs(checkpoint["envs"])]
    else:
        env_fns = [make_env(args.env_id, i, args.capture_video, run_name) for i in range(args.num_envs)]
    envs = gym.vector.SyncVectorEnv(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    if not isinstance(envs.single_action_space, gym.spaces.Discrete):
        fail(
            f"--env-id {args.env_id} has a {type(envs.single_action_space).__name__} action space; ppo_atari_lstm.py "
            "supports Discrete ones only (make the game with its default discrete action set)"
        )

    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "args.json"), "w") as f:
        json.dump({"script": os.path.basename(__file__), "run_name": run_name, "args": asdict(args)}, f, indent=2)

    agent = Agent(envs).to(device)
    # fused: one kernel per step instead of a dozen small ops per parameter tensor
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)

    # storage for one rollout, in numpy: a write per step is far cheaper than into a tensor; the update
    # converts the whole rollout to tensors once. Frames stay uint8: 7 MB for 8 envs x 128 steps, not 29
    obs = np.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape, dtype=np.uint8)
    actions = np.zeros((args.num_steps, args.num_envs), dtype=np.int64)
    rewards = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    terminations = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    episode_ends = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    final_obs = np.zeros_like(obs)  # the real last observation where an episode ended (obs[t + 1] is a reset one)
    dones = torch.zeros((args.num_steps, args.num_envs), device=device)  # obs[t] starts an episode: the LSTM resets
    # (h, c) after obs[t] where an episode ended at t: the memory the real last observation (final_obs[t]) follows
    final_lstm_states = torch.zeros((2, args.num_steps, args.num_envs, agent.lstm.hidden_size), device=device)

    global_step, start_iteration = 0, 1
    # the LSTM's memory of the games in progress (none at the start) and which envs start a new episode next
    next_lstm_state, next_done = agent.initial_state(args.num_envs, device), torch.zeros(args.num_envs, device=device)
    if checkpoint is None:
        next_obs, _ = envs.reset(seed=args.seed)
        wandb_run_id = None
    else:
        agent.load_state_dict(checkpoint["agent"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        global_step, start_iteration = checkpoint["global_step"], checkpoint["iteration"] + 1
        random.setstate(checkpoint["rng"]["python"])
        np.random.set_state(checkpoint["rng"]["numpy"])
        torch.set_rng_state(checkpoint["rng"]["torch"])
        if device.type == "cuda" and checkpoint["rng"]["cuda"] is not None:
            torch.cuda.set_rng_state_all(checkpoint["rng"]["cuda"])
        if checkpoint["envs"] is not None:  # the games continue, and so does the memory of them
            next_obs, next_done = checkpoint["next_obs"], checkpoint["next_done"].to(device)
            next_lstm_state = tuple(state.to(device) for state in checkpoint["next_lstm_state"])
        else:
            print("warning: the checkpoint holds no env state (could not be pickled); starting new episodes", file=sys.stderr)
            next_obs, _ = envs.reset(seed=args.seed + global_step)
        wandb_run_id = checkpoint["wandb_run_id"]

    if args.track:
        import wandb

        wandb_run = wandb.init(
            project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True, config=vars(args),
            name=run_name, id=wandb_run_id, resume="allow", save_code=True,  # id None: a new W&B run; else append to it
        )  # fmt: skip
        wandb_run_id = wandb_run.id
    # on resume, purge_step hides whatever the killed run logged after its last checkpoint: no step repeats
    writer = SummaryWriter(run_dir, purge_step=global_step + 1 if checkpoint is not None else None)
    if checkpoint is None:
        writer.add_text(
            "hyperparameters",
            "|param|value|\n|-|-|\n" + "\n".join(f"|{key}|{value}|" for key, value in vars(args).items()),
        )

    def save_checkpoint(iteration):
        state = {
            "args": asdict(args),
            "run_name": run_name,
            "iteration": iteration,
            "global_step": global_step,
            "agent": agent.state_dict(),
            "optimizer": optimizer.state_dict(),
            "rng": {
                "python": random.getstate(),
                "numpy": np.random.get_state(),
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if device.type == "cuda" else None,
            },
            "envs": pickle_envs(envs),
            "next_obs": next_obs,
            "next_lstm_state": tuple(state.cpu() for state in next_lstm_state),
            "next_done": next_done.cpu(),
            "wandb_run_id": wandb_run_id,
        }
        atomic_save(state, os.path.join(run_dir, "checkpoint.pt"))

    # Slurm and spot instances send SIGTERM before killing: finish the iteration, checkpoint, exit non-zero
    stop_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop_requested.set())

    recent_returns = deque(maxlen=20)
    on_terminal = sys.stdout.isatty()
    print(f"{run_name}: training to {args.total_timesteps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    if on_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[stats]}"),
            TimeRemainingColumn(),
        )  # fmt: skip
        progress_task = progress.add_task(
            args.exp_name, total=args.num_iterations * args.batch_size, completed=global_step, stats=""
        )
        progress.start()
    start_time, start_step = time.time(), global_step

    for iteration in range(start_iteration, args.num_iterations + 1):
        # Annealing the rate if instructed to do so.
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        # the update replays each rollout from the state it started with
        initial_lstm_state = (next_lstm_state[0].clone(), next_lstm_state[1].clone())
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step], dones[step] = next_obs, next_done

            with torch.inference_mode():
                action, next_lstm_state = agent.get_action(torch.tensor(next_obs, device=device), next_lstm_state, next_done)
            actions[step] = action = action.cpu().numpy()

            next_obs, reward, terminated, truncated, infos = envs.step(action)
            rewards[step], terminations[step], episode_ends[step] = reward, terminated, terminated | truncated
            next_done = torch.tensor(episode_ends[step], device=device)  # the next step resets these envs' state

            if "final_obs" in infos:
                ended = infos["_final_obs"]
                final_obs[step, ended] = np.stack(infos["final_obs"][ended])
                ended_envs = torch.as_tensor(ended, device=device)
                final_lstm_states[:, step, ended_envs] = torch.stack(next_lstm_state)[:, 0, ended_envs]
                # a lost life ends the training episode only: statistics come with the end of a whole game
                for i in np.flatnonzero(infos["final_info"].get("_episode", [])):
                    episodic_return = float(infos["final_info"]["episode"]["r"][i])
                    recent_returns.append(episodic_return)
                    writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                    writer.add_scalar("charts/episodic_length", int(infos["final_info"]["episode"]["l"][i]), global_step)

        b_obs = torch.as_tensor(obs.reshape((-1,) + envs.single_observation_space.shape), device=device)
        b_actions = torch.as_tensor(actions.reshape(-1), device=device)
        b_dones = dones.reshape(-1)
        # acting did not need them, so the log-probabilities of the rollout policy and the values come from one
        # pass replaying the rollout from its initial state (the same code as the update's: the first ratio is 1)
        with torch.no_grad():
            b_logprobs, _, b_values = agent.evaluate_actions(b_obs, initial_lstm_state, b_dones, b_actions)
            last_value = agent.get_value(torch.as_tensor(next_obs, device=device), next_lstm_state, next_done)
            last_value = last_value.flatten().cpu().numpy()
            # a truncated game (the ALE stops at 108,000 frames) is not over for the agent: it bootstraps from the
            # value of its real last observation, seen with the memory of the episode it ends (the state before the
            # reset). A termination, a lost life included, zeroes it, so only the rare truncations go through the network
            final_values = np.zeros_like(rewards)
            truncated_steps = (episode_ends == 1) & (terminations == 0)
            if truncated_steps.any():
                truncated_obs = torch.as_tensor(final_obs[truncated_steps], device=device)
                # each truncated step as its own one-step sequence (a batch of them), no reset before it
                state = tuple(final_lstm_states[:, torch.as_tensor(truncated_steps, device=device)].unsqueeze(1))
                no_reset = torch.zeros(len(truncated_obs), device=device)
                final_values[truncated_steps] = agent.get_value(truncated_obs, state, no_reset).flatten().cpu().numpy()
        values = b_values.cpu().numpy().reshape(args.num_steps, args.num_envs)
        advantages, returns = compute_gae(
            rewards, values, last_value, final_values, terminations, episode_ends, args.gamma, args.gae_lambda
        )
        b_advantages = torch.as_tensor(advantages.reshape(-1), device=device)
        b_returns = torch.as_tensor(returns.reshape(-1), device=device)

        # Optimizing the policy and value network on minibatches of whole sequences of some envs (time-major: env e's
        # steps are e, e + N, ...), each replayed from the state its rollout started with
        envs_per_batch = args.num_envs // args.num_minibatches
        flat_inds = torch.arange(args.batch_size, device=device).reshape(args.num_steps, args.num_envs)
        clipfracs = []
        for epoch in range(args.update_epochs):
            env_inds = torch.randperm(args.num_envs)
            for start in range(0, args.num_envs, envs_per_batch):
                mb_envs = env_inds[start : start + envs_per_batch].to(device)
                mb_inds = flat_inds[:, mb_envs].reshape(-1)

                mb_state = (initial_lstm_state[0][:, mb_envs], initial_lstm_state[1][:, mb_envs])
                newlogprob, entropy, newvalue = agent.evaluate_actions(
                    b_obs[mb_inds], mb_state, b_dones[mb_inds], b_actions[mb_inds]
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
                    v_loss_max = torch.max(v_loss_unclipped, v_loss_clipped)
                    v_loss = 0.5 * v_loss_max.mean()
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

        y_pred, y_true = values.reshape(-1), returns.reshape(-1)
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

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

        recent = f"return {np.mean(recent_returns):.1f}" if recent_returns else "return -"
        if on_terminal:
            progress.update(progress_task, completed=global_step, stats=f"{sps} SPS, {recent}")
        elif iteration % max(1, args.num_iterations // 20) == 0 or iteration == args.num_iterations:
            print(f"step {global_step}/{args.num_iterations * args.batch_size}, {sps} SPS, {recent}", flush=True)

        interval = args.checkpoint_interval
        if (interval and global_step // interval > (global_step - args.batch_size) // interval) or stop_requested.is_set():
            save_checkpoint(iteration)
        if stop_requested.is_set():
            if on_terminal:
                progress.stop()
            print(f"SIGTERM at step {global_step}: checkpoint written; continue with --resume {run_dir}", file=sys.stderr)
            envs.close()
            writer.close()
            sys.exit(128 + signal.SIGTERM)

    if on_terminal:
        progress.stop()

    if args.save_model:
        model_path = f"{run_dir}/{args.exp_name}.cleanrl_model"
        torch.save(agent.state_dict(), model_path)
        print(f"model saved to {model_path}")
        from cleanrl_utils.evals.ppo_atari_lstm_eval import evaluate

        episodic_returns = evaluate(
            model_path, make_env, args.env_id, eval_episodes=10, run_name=f"{run_name}-eval", Model=Agent, device=device,
            capture_video=args.capture_video, seed=args.seed + 100_000,
        )  # fmt: skip
        for idx, episodic_return in enumerate(episodic_returns):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)
        mean_return, std_return = np.mean(episodic_returns), np.std(episodic_returns)
        print(f"evaluation over {len(episodic_returns)} games: {mean_return:.1f} +- {std_return:.1f}")

    envs.close()
    writer.close()
    if args.upload_model:  # after the envs close, so the last videos are complete
        from cleanrl_utils.huggingface import push

        push(run_dir, episodic_returns, hf_repo_id, command=shlex.join(["python", *sys.argv]))
    if args.track and args.capture_video:
        for video_path in sorted(glob.glob(f"videos/{run_name}*/*.mp4")):
            wandb.log({f"videos/{os.path.basename(os.path.dirname(video_path))}": wandb.Video(video_path)})
