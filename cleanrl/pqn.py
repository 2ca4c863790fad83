# PQN (Gallici et al. 2024): parallel Q(lambda), LayerNorm, no replay, no target network; docs: docs/algorithms/pqn.md
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
import torch.nn.functional as F
import tyro
from torch import nn, optim
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm


@dataclass
class Args:
    # Algorithm specific arguments
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 32
    """the number of parallel game environments"""
    num_steps: int = 64
    """the number of steps to run in each environment per rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing"""
    gamma: float = 0.99
    """the discount factor gamma"""
    num_minibatches: int = 16
    """the number of mini-batches"""
    update_epochs: int = 4
    """the K epochs to update the Q-network"""
    max_grad_norm: float = 10.0
    """the maximum norm for the gradient clipping"""
    start_e: float = 1.0
    """the starting epsilon for exploration"""
    end_e: float = 0.05
    """the ending epsilon for exploration"""
    exploration_fraction: float = 0.5
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
    env_id: str = "CartPole-v1"
    """the id of the environment (any Gymnasium id, or `module:EnvName-v0` for your own)"""
    total_timesteps: int = 500000
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


def make_env(env_id, idx, capture_video, run_name):
    def thunk():
        if capture_video and idx == 0:
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame draws rgb_array frames without a display
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        return env

    return thunk


class QNetwork(nn.Module):
    """LayerNorm after each hidden layer is what lets PQN learn without a target network or a replay buffer."""

    def __init__(self, envs):
        super().__init__()
        self.network = nn.Sequential(
            nn.Linear(np.array(envs.single_observation_space.shape).prod(), 120),
            nn.LayerNorm(120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.LayerNorm(84),
            nn.ReLU(),
            nn.Linear(84, envs.single_action_space.n),
        )

    def forward(self, x):
        return self.network(x.flatten(1))


def linear_schedule(start_e: float, end_e: float, duration: int, t: int) -> float:
    """Epsilon falls linearly from start_e at step 0 to end_e at step `duration`, then stays there."""
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


def q_lambda_returns(rewards, max_q, last_max_q, final_max_q, terminations, episode_ends, gamma, q_lambda):
    """Peng's Q(lambda) returns over a rollout of numpy arrays shaped (num_steps, num_envs).

    max_q[t] = max_a Q(obs[t], a); last_max_q is that of the observation after the rollout. Each step bootstraps
    from a blend of the next step's return and the next state's max Q: G_t = r_t + gamma * (lambda * G_{t+1} +
    (1 - lambda) * max_q[t + 1]). Where an episode ended at step t, obs[t + 1] is already the next episode's reset
    observation: a truncation bootstraps from final_max_q[t] (its real last observation) alone, a termination not
    at all. The rollout's last step bootstraps from last_max_q alone.
    """
    returns = np.zeros_like(rewards)
    blended_next = last_max_q  # nothing beyond the rollout to blend with
    for t in reversed(range(rewards.shape[0])):
        bootstrap = np.where(episode_ends[t], final_max_q[t], blended_next)
        returns[t] = rewards[t] + gamma * bootstrap * (1.0 - terminations[t])
        blended_next = q_lambda * returns[t] + (1.0 - q_lambda) * max_q[t]
    return returns


def check_args(args):
    """Every check of the flags, before heavy work: a bad input ends with one line naming the flag, exit code 2."""
    for flag in ["total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs", "eval_episodes"]:
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "eval_interval"]:
        if getattr(args, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0 (0 = off), got {getattr(args, flag)}")
    if not 0 <= args.seed < 2**32:
        fail(f"--seed must be in [0, 2**32) (numpy's seed range), got {args.seed}")
    if not 0.0 < args.exploration_fraction <= 1.0:
        fail(f"--exploration-fraction must be in (0, 1], got {args.exploration_fraction}")
    if not 0.0 <= args.q_lambda <= 1.0:
        fail(f"--q-lambda must be in [0, 1], got {args.q_lambda}")
    if (args.num_envs * args.num_steps) % args.num_minibatches != 0:
        fail(
            f"--num-minibatches {args.num_minibatches} must divide --num-envs * --num-steps = {args.num_envs * args.num_steps}"
        )
    if args.total_timesteps < args.num_envs * args.num_steps:
        fail(f"--total-timesteps {args.total_timesteps} is less than one rollout (--num-envs * --num-steps)")
    try:
        env = gym.make(args.env_id)  # a `module:EnvName-v0` id imports its module, which registers the env
    except (gym.error.Error, ModuleNotFoundError) as e:
        fail(f"--env-id {args.env_id}: {e}")
    if not isinstance(env.observation_space, gym.spaces.Box) or not isinstance(env.action_space, gym.spaces.Discrete):
        fail(
            f"--env-id {args.env_id} has a {type(env.observation_space).__name__} observation space and a "
            f"{type(env.action_space).__name__} action space; pqn.py needs a Box observation space (wrap others with "
            "gymnasium.wrappers.FlattenObservation) and a Discrete action space (sac_continuous_action.py takes Box ones)"
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
    torch.set_num_threads(1 if device.type == "cpu" else torch.get_num_threads())  # a small MLP gains nothing from more

    # env setup: SAME_STEP autoreset returns the reset observation at once and the real last one in infos["final_obs"]
    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, i, args.capture_video, run_name) for i in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    q_network = QNetwork(envs).to(device)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, fused=True)  # fused: one kernel a step

    # ALGO Logic: Storage setup, in numpy: a write per step is far cheaper than into a tensor
    obs = np.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape, dtype=np.float32)
    actions = np.zeros((args.num_steps, args.num_envs), dtype=np.int64)
    rewards, max_q, terminations, episode_ends = (
        np.zeros((args.num_steps, args.num_envs), dtype=np.float32) for _ in range(4)
    )
    final_obs = np.zeros_like(obs)  # the real last observation where an episode ended (obs[t + 1] is a reset one)
    global_step = 0
    next_obs, _ = envs.reset(seed=args.seed)

    def checkpoint_state():  # what a checkpoint holds
        return dict(q_network=q_network, optimizer=optimizer, envs=envs, next_obs=next_obs, global_step=global_step)

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
            global_step, next_obs = saved["global_step"], saved["next_obs"]
            if not saved["envs"]:  # they could not be pickled (e.g. while recording video): new episodes
                next_obs, _ = envs.reset(seed=args.seed + global_step)

    print(f"{run_name}: training to {total_steps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
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
            obs[step] = next_obs

            # epsilon-greedy, one coin per environment; the greedy pass also gives the max Q the returns need
            epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
            with torch.inference_mode():
                max_q_values, greedy = q_network(torch.as_tensor(next_obs, dtype=torch.float32, device=device)).max(dim=1)
            explore = np.random.random(args.num_envs) < epsilon
            random_actions = np.random.randint(envs.single_action_space.n, size=args.num_envs)
            action = np.where(explore, random_actions, greedy.cpu().numpy())
            actions[step], max_q[step] = action, max_q_values.cpu().numpy()

            next_obs, reward, terminated, truncated, infos = envs.step(action)
            if not np.isfinite(reward).all():
                sys.exit(f"error: the environment returned a non-finite reward at step {global_step}; stopping")
            rewards[step], terminations[step], episode_ends[step] = reward, terminated, terminated | truncated

            if "final_obs" in infos:
                ended = infos["_final_obs"]
                final_obs[step, ended] = np.stack(infos["final_obs"][ended])
                for i in np.flatnonzero(infos["final_info"]["_episode"]):
                    episodic_return = float(infos["final_info"]["episode"]["r"][i])
                    recent_returns.append(episodic_return)
                    writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                    writer.add_scalar("charts/episodic_length", int(infos["final_info"]["episode"]["l"][i]), global_step)

        with torch.no_grad():
            last_max_q = q_network(torch.as_tensor(next_obs, dtype=torch.float32, device=device)).max(dim=1).values
            # a truncated episode is not over for the agent: it bootstraps from its real last observation
            final_max_q = q_network(torch.as_tensor(final_obs, device=device).flatten(0, 1)).max(dim=1).values
        final_max_q = final_max_q.cpu().numpy().reshape(args.num_steps, args.num_envs)
        returns = q_lambda_returns(
            rewards, max_q, last_max_q.cpu().numpy(), final_max_q, terminations, episode_ends, args.gamma, args.q_lambda
        )

        # flatten the batch
        b_obs = torch.as_tensor(obs.reshape((-1,) + envs.single_observation_space.shape), device=device)
        b_actions = torch.as_tensor(actions.reshape(-1), device=device)
        b_returns = torch.as_tensor(returns.reshape(-1), device=device)

        # ALGO LOGIC: regress Q(s, a) on the Q(lambda) returns, in minibatches, for a few epochs
        for epoch in range(args.update_epochs):
            b_inds = torch.randperm(batch_size)
            for start in range(0, batch_size, minibatch_size):
                mb_inds = b_inds[start : start + minibatch_size]
                old_val = q_network(b_obs[mb_inds]).gather(1, b_actions[mb_inds].unsqueeze(1)).squeeze(1)
                loss = F.mse_loss(b_returns[mb_inds], old_val)

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
        writer.add_scalar("losses/q_values", old_val.mean().item(), global_step)
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
