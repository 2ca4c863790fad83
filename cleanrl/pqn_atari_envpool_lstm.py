# PQN (Gallici et al. 2024) with an LSTM, Atari by EnvPool, one frame a step; docs: docs/algorithms/pqn_atari_envpool_lstm.md
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
import torch.nn.functional as F
import tyro
from envpool.registration import registry
from torch import nn, optim
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm


@dataclass
class Args:
    # Algorithm specific arguments
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 128
    """the number of parallel game environments"""
    num_steps: int = 32
    """the number of steps to run in each environment per rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing"""
    gamma: float = 0.99
    """the discount factor gamma"""
    num_minibatches: int = 32
    """the number of mini-batches"""
    update_epochs: int = 2
    """the K epochs to update the Q-network"""
    max_grad_norm: float = 10.0
    """the maximum norm for the gradient clipping"""
    start_e: float = 1.0
    """the starting epsilon for exploration"""
    end_e: float = 0.01
    """the ending epsilon for exploration"""
    exploration_fraction: float = 0.10
    """the fraction of `total-timesteps` it takes from start-e to go end-e"""
    q_lambda: float = 0.65
    """the lambda of the Q(lambda) returns"""

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
    needs it, 84 x 84 grayscale, one frame per observation (the LSTM remembers the motion), games truncated at 108,000
    frames, no sticky actions. A lost life ends the *training* episode only (`terminated`) and the reward the agent
    sees is clipped to its sign; the game's own score is in `info["reward"]`. With `capture_video`, env 0's screen can
    be rendered."""
    return envpool.make(
        env_id,
        env_type="gymnasium",
        num_envs=num_envs,
        seed=seed,
        episodic_life=True,
        reward_clip=True,
        stack_num=1,
        render_mode="rgb_array" if capture_video else None,
    )


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class QNetwork(nn.Module):
    """The Nature CNN (Mnih et al. 2015) on one frame, with LayerNorm after every hidden layer (what lets PQN learn
    without a target network or a replay buffer) -> an LSTM (state h, c: (1, N, 128)) -> one Q-value per action."""

    def __init__(self, envs):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(1, 32, 8, stride=4)),
            nn.LayerNorm([32, 20, 20]),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.LayerNorm([64, 9, 9]),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.LayerNorm([64, 7, 7]),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.LayerNorm(512),
            nn.ReLU(),
        )
        self.lstm = nn.LSTM(512, 128)
        for name, param in self.lstm.named_parameters():  # weights orthogonal with gain 1, biases 0
            nn.init.orthogonal_(param, 1.0) if "weight" in name else nn.init.constant_(param, 0)
        self.q_func = layer_init(nn.Linear(128, envs.action_space.n))

    def initial_state(self, num_envs, device=None):
        return tuple(torch.zeros(1, num_envs, self.lstm.hidden_size, device=device) for _ in range(2))

    def forward(self, x, lstm_state, done):
        """The Q-values over T steps of N envs, x (T * N, 1, 84, 84) and done (T * N) time-major, and the last state.
        Where done, an episode (a life) starts: the state is zeroed first, no memory leaks across."""
        # frames travel and are stored as uint8 (4x smaller than float32); scaled to [0, 1] only here
        hidden = self.network(x / 255.0).reshape((-1, lstm_state[0].shape[1], self.lstm.input_size))
        keep = (1.0 - done.float()).reshape((len(hidden), 1, -1, 1))  # 0 where an episode starts
        outputs = []
        for h, k in zip(hidden, keep):  # step by step: a reset can fall on any step of any env
            h, lstm_state = self.lstm(h.unsqueeze(0), (k * lstm_state[0], k * lstm_state[1]))
            outputs.append(h)
        return self.q_func(torch.cat(outputs).flatten(0, 1)), lstm_state


def linear_schedule(start_e: float, end_e: float, duration: int, t: int) -> float:
    """Epsilon falls linearly from start_e at step 0 to end_e at step `duration`, then stays there."""
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


def compute_q_lambda(rewards, max_q, last_max_q, terminations, episode_ends, is_reset_step, gamma, q_lambda):
    """Peng's Q(lambda) returns over a rollout of numpy arrays shaped (num_steps, num_envs), and the rows the loss takes.

    max_q[t] = max_a Q(obs[t], a); last_max_q is that of the observation after the rollout. Backward over the rollout,
    G_t = r_t + gamma * (1 - terminated_t) * (lambda * G_{t+1} + (1 - lambda) * max_q[t + 1]). EnvPool resets an env
    one step late, so obs[t + 1] is the real observation after step t even where an episode ended: a truncation
    bootstraps from max_q[t + 1] alone (no return crosses an episode's end), a termination (a lost life included) not
    at all. The row after an episode's end is EnvPool's reset step (its action ignored, reward 0): not a transition,
    it gets no target (0) and stays out of the loss.
    """
    next_max_q = np.concatenate([max_q[1:], last_max_q.reshape(1, -1)])
    returns = np.zeros_like(rewards)
    next_return = last_max_q  # beyond the rollout: the bootstrap alone
    for t in reversed(range(rewards.shape[0])):
        blended = q_lambda * next_return + (1.0 - q_lambda) * next_max_q[t]
        returns[t] = rewards[t] + gamma * (1.0 - terminations[t]) * np.where(episode_ends[t], next_max_q[t], blended)
        next_return = returns[t]
    returns[is_reset_step] = 0.0
    return returns, ~is_reset_step


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
    if not 0.0 < args.exploration_fraction <= 1.0:
        fail(f"--exploration-fraction must be in (0, 1], got {args.exploration_fraction}")
    if not 0.0 <= args.q_lambda <= 1.0:
        fail(f"--q-lambda must be in [0, 1], got {args.q_lambda}")
    batch_size = args.num_envs * args.num_steps
    if args.num_envs % args.num_minibatches:
        fail(f"--num-minibatches {args.num_minibatches} must divide --num-envs {args.num_envs}: minibatches are whole envs")
    if args.total_timesteps < batch_size:
        fail(f"--total-timesteps {args.total_timesteps} is less than one rollout (--num-envs * --num-steps = {batch_size})")
    game = args.env_id.removeprefix("ALE/").removesuffix("-v5").removesuffix("NoFrameskip-v4").removesuffix("-v4")
    if args.env_id not in registry.specs and f"{game}-v5" in registry.specs:
        fail(f"--env-id {args.env_id}: EnvPool names this game {game}-v5 (without sticky actions, as the v4 NoFrameskip ids)")
    if args.env_id not in registry.specs:
        fail(f"--env-id {args.env_id} is not an EnvPool environment (its Atari games: Breakout-v5, Pong-v5, ...)")
    if registry.specs[args.env_id][0] != "envpool.atari":
        fail(f"--env-id {args.env_id} is not an Atari game; {os.path.basename(__file__)} needs one (use pqn.py for it)")


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
    envs_per_batch, num_iterations = args.num_envs // args.num_minibatches, args.total_timesteps // batch_size
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
    q_network = QNetwork(envs).to(device)
    optimizer = optim.RAdam(q_network.parameters(), lr=args.learning_rate)  # RAdam, as the paper's code
    rng = np.random.default_rng(args.seed)  # epsilon-greedy's coins and random actions

    # ALGO Logic: Storage setup, in numpy: a write per step is far cheaper than into a tensor. Frames stay uint8 (4x smaller)
    obs = np.zeros((args.num_steps, args.num_envs) + envs.observation_space.shape, dtype=np.uint8)
    actions = np.zeros((args.num_steps, args.num_envs), dtype=np.int64)
    rewards, max_q, terminations, episode_ends = (
        np.zeros((args.num_steps, args.num_envs), dtype=np.float32) for _ in range(4)
    )
    is_reset_step = np.zeros((args.num_steps, args.num_envs), dtype=bool)  # EnvPool's step after an episode's end
    dones = torch.zeros((args.num_steps, args.num_envs), device=device)  # obs[t] starts an episode: the LSTM resets
    global_step = 0

    def checkpoint_state():  # what a checkpoint holds: EnvPool's games cannot be saved, a resumed run starts new ones
        return dict(q_network=q_network, optimizer=optimizer, rng=rng, global_step=global_step)

    def save_and_evaluate(model_path, seed, video=False):  # the evaluations of --eval-interval and --save-model
        torch.save(q_network.state_dict(), model_path)
        from cleanrl_utils.evals.pqn_envpool_eval import evaluate

        return evaluate(
            model_path, make_env, args.env_id, args.eval_episodes, f"{run_name}-eval", QNetwork, device, 0.05, video, seed
        )

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
    # the LSTM's memory of the games in progress (none: new games) and which envs start a new episode next
    next_lstm_state, next_done = q_network.initial_state(args.num_envs, device), torch.zeros(args.num_envs, device=device)
    game_returns = np.zeros(args.num_envs)  # the game's own score so far, all lives, unclipped
    recorder = None
    if args.capture_video:  # env 0's screen, whole games (needs cleanrl_utils)
        from cleanrl_utils.envpool_atari import GameRecorder

        recorder = GameRecorder(envs, f"videos/{run_name}")

    print(f"{run_name}: training to {total_steps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    # a bar on a terminal; disable=None turns it off where stdout is not one (a log file), and the loop prints lines
    progress = tqdm(total=total_steps, initial=global_step, unit="step", file=sys.stdout, disable=None)
    recent_returns, start_time, start_step = deque(maxlen=20), time.time(), global_step

    for iteration in range(global_step // batch_size + 1, num_iterations + 1):
        # Annealing the rate if instructed to do so.
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        initial_lstm_state = next_lstm_state  # the update replays the rollout from here (the LSTM never writes in place)
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step], is_reset_step[step], dones[step] = next_obs, next_is_reset_step, next_done

            # epsilon-greedy, one coin per env; the greedy pass also gives the max Q the returns bootstrap from
            epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
            with torch.no_grad():  # the LSTM steps on every observation, whichever action epsilon picks
                q_values, next_lstm_state = q_network(torch.as_tensor(next_obs, device=device), next_lstm_state, next_done)
            max_q_values, greedy = q_values.max(dim=1)
            explore = rng.random(args.num_envs) < epsilon
            action = np.where(explore, rng.integers(envs.action_space.n, size=args.num_envs), greedy.cpu().numpy())
            actions[step], max_q[step] = action, max_q_values.cpu().numpy()

            next_obs, reward, terminated, truncated, info = envs.step(action)
            if not np.isfinite(reward).all():
                sys.exit(f"error: the environment returned a non-finite reward at step {global_step}; stopping")
            rewards[step], terminations[step], episode_ends[step] = reward, terminated, terminated | truncated

            # after an episode's end (a lost life too) EnvPool's next step is its reset step, left out of the update. It
            # returns the next episode's first observation, where the LSTM state resets once (the real last observation
            # before it is seen with the episode's memory: its max Q bootstraps a truncation). A lost life ends the
            # training episode only: statistics come with the end of a whole game
            next_done = torch.as_tensor(next_is_reset_step, dtype=torch.float32, device=device)
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

        with torch.no_grad():
            last_q = q_network(torch.as_tensor(next_obs, device=device), next_lstm_state, next_done)[0]
        last_max_q = last_q.max(dim=1).values.cpu().numpy()
        returns, in_loss = compute_q_lambda(
            rewards, max_q, last_max_q, terminations, episode_ends, is_reset_step, args.gamma, args.q_lambda
        )

        # flatten the batch
        b_obs = torch.as_tensor(obs.reshape((-1,) + envs.observation_space.shape), device=device)
        b_actions = torch.as_tensor(actions.reshape(-1), device=device)
        b_returns = torch.as_tensor(returns.reshape(-1), device=device)
        b_in_loss, b_dones = torch.as_tensor(in_loss.reshape(-1), device=device), dones.reshape(-1)

        # ALGO LOGIC: regress Q(s, a) on the Q(lambda) returns, on minibatches of whole sequences: all the steps of some envs
        flat_inds = torch.arange(batch_size, device=device).reshape(args.num_steps, args.num_envs)
        for epoch in range(args.update_epochs):
            env_inds = torch.randperm(args.num_envs)
            for start in range(0, args.num_envs, envs_per_batch):
                mb_envs = env_inds[start : start + envs_per_batch].to(device)
                mb_inds = flat_inds[:, mb_envs].reshape(-1)
                q_values, _ = q_network(  # from the minibatch envs' initial state, as they acted
                    b_obs[mb_inds], tuple(s[:, mb_envs] for s in initial_lstm_state), b_dones[mb_inds]
                )
                q_taken = q_values.gather(1, b_actions[mb_inds].unsqueeze(1)).squeeze(1)
                real = b_in_loss[mb_inds]  # the reset steps go through the LSTM in their place but not into the loss
                loss = F.mse_loss(q_taken[real], b_returns[mb_inds][real])

                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm, foreach=True)
                optimizer.step()

        td_loss = loss.item()
        if not np.isfinite(td_loss):
            sys.exit(f"error: the loss turned non-finite at step {global_step}; stopping (no model saved)")

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        sps = int((global_step - start_step) / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        writer.add_scalar("charts/epsilon", epsilon, global_step)
        writer.add_scalar("losses/td_loss", td_loss, global_step)
        writer.add_scalar("losses/q_values", q_taken.mean().item(), global_step)
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
