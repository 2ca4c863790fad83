# DQN (Mnih et al. 2015) on Atari games, frame-once replay; docs: docs/algorithms/dqn_atari.md
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
import tyro
from stable_baselines3.common.atari_wrappers import ClipRewardEnv, EpisodicLifeEnv, FireResetEnv, MaxAndSkipEnv, NoopResetEnv
from torch import nn, optim
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from cleanrl_utils.buffers import FrameReplayBuffer


@dataclass
class Args:
    # Algorithm specific arguments
    learning_rate: float = 1e-4
    """the learning rate of the optimizer"""
    num_envs: int = 1
    """the number of parallel game environments"""
    buffer_size: int = 1000000
    """the replay memory size in frames, about as many transitions (each frame stored once: 1M take 7.1 GB, 7.7 GB peak RSS)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 1.0
    """the target network update rate (1.0 copies the Q-network)"""
    target_network_frequency: int = 1000
    """the number of vector steps between target network updates"""
    batch_size: int = 32
    """the batch size of sample from the replay memory"""
    start_e: float = 1.0
    """the starting epsilon for exploration"""
    end_e: float = 0.01
    """the ending epsilon for exploration"""
    exploration_fraction: float = 0.10
    """the fraction of `total-timesteps` it takes from start-e to go end-e"""
    learning_starts: int = 80000
    """timestep to start learning"""
    train_frequency: int = 4
    """the number of vector steps between gradient steps"""

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
    """the id of the Atari game (any ALE id: `BreakoutNoFrameskip-v4` has no sticky actions, `ALE/Breakout-v5` repeats the last action with probability 0.25)"""
    total_timesteps: int = 10000000
    """total timesteps of the experiments (agent steps: 4 emulator frames each)"""
    checkpoint_interval: int = 0
    """environment steps between checkpoints in `runs/{run_name}/checkpoint.pt` (0 = off; needs cleanrl_utils)"""
    checkpoint_buffer: bool = False
    """whether checkpoints hold the replay buffer too (7.1 GB at 1M frames); without it a resumed run refills it first"""
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
    def thunk():
        gym.register_envs(ale_py)
        # the ALE's own frame skip off (the v5 ids skip 4 by default): MaxAndSkipEnv skips, max-pooling the last two frames
        env = gym.make(env_id, frameskip=1, render_mode="rgb_array" if capture_video and idx == 0 else None)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # innermost: the real game score over all lives, unclipped
        if capture_video and idx == 0:
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")  # the real frames, whole games
        env = NoopResetEnv(env, noop_max=30)
        env = MaxAndSkipEnv(env, skip=4)
        env = EpisodicLifeEnv(env)  # a life lost ends the *training* episode only
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = FireResetEnv(env)
        env = ClipRewardEnv(env)  # sign of the reward, for the loss
        env = gym.wrappers.ResizeObservation(env, (84, 84))
        env = gym.wrappers.GrayscaleObservation(env)
        env = gym.wrappers.FrameStackObservation(env, 4)  # (4, 84, 84) uint8
        return env

    return thunk


# ALGO LOGIC: initialize agent here:
class QNetwork(nn.Module):
    """The Nature DQN CNN; it takes the uint8 frames and scales them itself, so the buffer and the batches stay uint8."""

    def __init__(self, envs):
        super().__init__()
        self.network = nn.Sequential(
            nn.Conv2d(envs.single_observation_space.shape[0], 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(3136, 512),
            nn.ReLU(),
            nn.Linear(512, envs.single_action_space.n),
        )

    def forward(self, x):
        return self.network(x / 255.0)


def linear_schedule(start_e: float, end_e: float, duration: int, t: int) -> float:
    """Epsilon falls linearly from start_e at step 0 to end_e at step `duration`, then stays there."""
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


def real_next_observations(next_obs, infos):
    """Where an episode ended, next_obs is already the next episode's first one: the real one is infos["final_obs"]."""
    real_next_obs = next_obs.copy()
    if "final_obs" in infos:
        real_next_obs[infos["_final_obs"]] = np.stack(infos["final_obs"][infos["_final_obs"]])
    return real_next_obs


def check_args(args):
    """Every check of the flags, before heavy work: a bad input ends with one line naming the flag, exit code 2."""
    positive = ["total_timesteps", "num_envs", "buffer_size", "batch_size", "target_network_frequency", "train_frequency"]
    for flag in positive + ["eval_episodes"]:
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "learning_starts", "eval_interval"]:
        if getattr(args, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}")
    if not 0 <= args.seed < 2**32:
        fail(f"--seed must be in [0, 2**32) (numpy's seed range), got {args.seed}")
    if args.learning_starts >= args.total_timesteps:
        fail(f"--learning-starts {args.learning_starts} must be below --total-timesteps {args.total_timesteps}")
    for flag in ["exploration_fraction", "tau"]:
        if not 0.0 < getattr(args, flag) <= 1.0:
            fail(f"--{flag.replace('_', '-')} must be in (0, 1], got {getattr(args, flag)}")
    if args.batch_size > args.buffer_size:
        fail(f"--batch-size {args.batch_size} is larger than --buffer-size {args.buffer_size}")
    if args.buffer_size < 16 * args.num_envs:  # a stack needs 5 live frames per env; keep a margin
        fail(f"--buffer-size {args.buffer_size} is too small: at least 16 frames per env ({16 * args.num_envs})")
    try:
        env = gym.make(args.env_id)  # a `module:EnvName-v0` id imports its module, which registers the env
    except (gym.error.Error, ModuleNotFoundError) as e:
        fail(f"--env-id {args.env_id}: {e}")
    if not hasattr(env.unwrapped, "ale"):  # the wrappers read the emulator's lives
        fail(f"--env-id {args.env_id} is not an ALE Atari game; dqn.py trains on vector observations")
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
    num_iterations = args.total_timesteps // args.num_envs  # vector steps
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

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    # (unlike dqn.py, torch keeps all CPU threads: a batch of 32 CNN passes is large enough to split)

    # env setup: SAME_STEP autoreset returns the reset observation at once and the real last one in infos["final_obs"]
    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, i, args.capture_video, run_name) for i in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    q_network = QNetwork(envs).to(device)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate)
    target_network = QNetwork(envs).to(device)
    target_network.load_state_dict(q_network.state_dict())
    rb = FrameReplayBuffer(args.buffer_size, args.num_envs, envs.single_observation_space)
    global_step, updates_start = 0, args.learning_starts  # learning starts after updates_start (later on a resume)
    obs, _ = envs.reset(seed=args.seed)

    def checkpoint_state():  # what a checkpoint holds; the replay buffer only with --checkpoint-buffer
        state = dict(q_network=q_network, target_network=target_network, optimizer=optimizer, envs=envs, obs=obs)
        return state | dict(rb=rb if args.checkpoint_buffer else None, global_step=global_step)

    def save_and_evaluate(model_path, seed, video=False):  # the evaluations of --eval-interval and --save-model
        torch.save(q_network.state_dict(), model_path)
        from cleanrl_utils.evals.dqn_eval import evaluate

        return evaluate(
            model_path, make_env, args.env_id, args.eval_episodes, f"{run_name}-eval", QNetwork, device, 0.05, video, seed
        )

    run_state = None
    if args.checkpoint_interval or args.eval_interval or args.save_model or checkpoint:  # needs cleanrl_utils
        from cleanrl_utils.run_state import RunState

        run_state = RunState(run_dir, args, writer, checkpoint, save_and_evaluate)
        if checkpoint:
            saved = run_state.restore(checkpoint_state())
            global_step, obs = saved["global_step"], saved["obs"]
            if not args.checkpoint_buffer:  # an empty buffer: acting without learning refills it first
                updates_start = run_state.refill(global_step, args.learning_starts)
            if not saved["envs"]:  # they could not be pickled (e.g. while recording video): new games
                obs, _ = envs.reset(seed=args.seed + global_step)

    print(f"{run_name}: training to {total_steps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    # a bar on a terminal; disable=None turns it off where stdout is not one (a log file), and the loop prints lines
    progress = tqdm(total=total_steps, initial=global_step, unit="step", file=sys.stdout, disable=None)
    recent_returns, start_time, start_step = deque(maxlen=20), time.time(), global_step

    for iteration in range(global_step // args.num_envs + 1, num_iterations + 1):
        global_step += args.num_envs
        # ALGO LOGIC: epsilon-greedy, per environment
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
        explore = np.random.random(args.num_envs) < epsilon
        random_actions = np.random.randint(envs.single_action_space.n, size=args.num_envs)
        with torch.no_grad():
            q_values = q_network(torch.as_tensor(obs, device=device))
        actions = np.where(explore, random_actions, q_values.argmax(dim=1).cpu().numpy())

        # TRY NOT TO MODIFY: execute the game and log data
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        if not np.isfinite(rewards).all():
            sys.exit(f"error: the environment returned a non-finite reward at step {global_step}; stopping")
        # whole games only: RecordEpisodeStatistics sits inside EpisodicLifeEnv and ClipRewardEnv
        if "final_info" in infos and "episode" in infos["final_info"]:
            for i in np.flatnonzero(infos["final_info"]["_episode"]):
                episodic_return = float(infos["final_info"]["episode"]["r"][i])
                recent_returns.append(episodic_return)
                writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                writer.add_scalar("charts/episodic_length", int(infos["final_info"]["episode"]["l"][i]), global_step)
        # the done flag is termination only (a lost life included): a truncated game bootstraps from its last frame
        rb.add(obs, real_next_observations(next_obs, infos), actions, rewards, terminations, truncations)
        obs = next_obs

        # ALGO LOGIC: training
        if global_step > updates_start:
            if iteration % args.train_frequency == 0:
                b_obs, b_actions, b_next_obs, b_rewards, b_terminations = rb.sample(args.batch_size, device)
                with torch.no_grad():
                    # no bootstrap where the episode terminated (a lost life too, as in the paper); the ALE's time
                    # limit is a truncation, stored as not terminated: it bootstraps
                    target_max = target_network(b_next_obs).max(dim=1).values
                    target = b_rewards + args.gamma * target_max * (1.0 - b_terminations)
                old_val = q_network(b_obs).gather(1, b_actions.unsqueeze(1)).squeeze(1)
                loss = nn.functional.mse_loss(target, old_val)

                if iteration % (100 * args.train_frequency) == 0:
                    if not np.isfinite(td_loss := loss.item()):
                        sys.exit(f"error: the loss turned non-finite at step {global_step}; stopping (no model saved)")
                    writer.add_scalar("losses/td_loss", td_loss, global_step)
                    writer.add_scalar("losses/q_values", old_val.mean().item(), global_step)
                    writer.add_scalar("charts/epsilon", epsilon, global_step)
                    writer.add_scalar("charts/SPS", int((global_step - start_step) / (time.time() - start_time)), global_step)

                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

            # update target network
            if iteration % args.target_network_frequency == 0:
                for target_param, q_param in zip(target_network.parameters(), q_network.parameters()):
                    target_param.data.copy_(args.tau * q_param.data + (1.0 - args.tau) * target_param.data)

        # a bar update costs about as much as the rest of a vector step's bookkeeping: every 100 of them, lines every 5%
        report = iteration % max(1, num_iterations // 20) == 0 or iteration == num_iterations
        if report or iteration % 100 == 0:
            sps = int((global_step - start_step) / (time.time() - start_time))
            stats = f"{sps} SPS, return {np.mean(recent_returns):.1f}" if recent_returns else f"{sps} SPS"
            progress.set_postfix_str(stats, refresh=False)
            progress.update(global_step - progress.n)
            if progress.disable and report:
                left = (total_steps - global_step) / max(sps, 1)  # seconds, at the speed so far
                timing = f"{tqdm.format_interval(time.time() - start_time)} elapsed, {tqdm.format_interval(left)} left"
                print(f"step {global_step}/{total_steps}, {stats}, {timing}", flush=True)
        if run_state:
            run_state.step(global_step, checkpoint_state)

    progress.close()
    if args.save_model and not all(param.isfinite().all() for param in q_network.parameters()):
        sys.exit(f"error: the loss turned non-finite by step {global_step} (the weights hold NaN); no model saved")
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
