# TD3 (Fujimoto et al. 2018) for continuous actions; docs: docs/algorithms/td3_continuous_action.md
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
import torch.nn.functional as F
import tyro
from stable_baselines3.common.buffers import ReplayBuffer
from torch import nn, optim
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm


@dataclass
class Args:
    # Algorithm specific arguments
    learning_rate: float = 3e-4
    """the learning rate of the optimizer"""
    num_envs: int = 1
    """the number of parallel game environments (one gradient step per vector step)"""
    buffer_size: int = int(1e6)
    """the replay memory buffer size"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 0.005
    """target smoothing coefficient"""
    batch_size: int = 256
    """the batch size of sample from the replay memory"""
    policy_noise: float = 0.2
    """the scale of the target policy smoothing noise (times the action scale)"""
    exploration_noise: float = 0.1
    """the scale of the exploration noise (times the action scale)"""
    learning_starts: int = int(25e3)
    """timestep to start learning (random actions until then)"""
    policy_frequency: int = 2
    """the frequency of training policy (delayed), and of the target networks' updates"""
    noise_clip: float = 0.5
    """noise clip parameter of the target policy smoothing regularization (times the action scale)"""

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
    """the id of the environment (Gymnasium, `dm_control/{domain}-{task}-v0`, or `module:EnvName-v0` for your own)"""
    total_timesteps: int = 1000000
    """total timesteps of the experiments"""
    checkpoint_interval: int = 0
    """environment steps between checkpoints in `runs/{run_name}/checkpoint.pt` (0 = off; needs cleanrl_utils)"""
    checkpoint_buffer: bool = False
    """whether checkpoints hold the replay buffer (1M HalfCheetah transitions: 170 MB); else a resumed run refills it"""
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
        if env_id.startswith("dm_control/"):  # Shimmy registers the DeepMind Control tasks, imported only when asked for
            # dm_control loads Mesa's LLVM on import: torch's compiler first, or Triton's own LLVM crashes the process later
            importlib.import_module("torch._dynamo")
            import shimmy

            gym.register_envs(shimmy)
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)  # a `module:EnvName-v0` id imports its module, which registers the env
        if isinstance(env.observation_space, gym.spaces.Dict):  # dm_control observes a dict of arrays
            env = gym.wrappers.FlattenObservation(env)
        return gym.wrappers.RecordEpisodeStatistics(env)

    return thunk


# ALGO LOGIC: initialize agent here:
class QNetwork(nn.Module):
    def __init__(self, envs):
        super().__init__()
        self.fc1 = nn.Linear(np.prod(envs.single_observation_space.shape) + np.prod(envs.single_action_space.shape), 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, 1)

    def forward(self, x, a):
        x = torch.cat([x.flatten(1), a], 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x).squeeze(1)  # (batch,), as rewards are: never broadcast (batch, 1) against (batch,)


class Actor(nn.Module):
    def __init__(self, envs):
        super().__init__()
        action_space = envs.single_action_space
        self.fc1 = nn.Linear(np.prod(envs.single_observation_space.shape), 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc_mu = nn.Linear(256, np.prod(action_space.shape))
        # tanh's (-1, 1) stretched onto the env's bounds, whatever they are (Pendulum's are [-2, 2])
        high, low = action_space.high.flatten(), action_space.low.flatten()
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, x):
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.relu(self.fc2(x))
        return torch.tanh(self.fc_mu(x)) * self.action_scale + self.action_bias


def td3_target(
    rewards, terminations, next_obs, target_actor, qf1_target, qf2_target, gamma, policy_noise, noise_clip, scale, low, high
):
    """r + gamma * min(Q1'(s', a'), Q2'(s', a')), no bootstrap where the episode terminated (a truncation is stored as
    not terminated). Target policy smoothing: a' is the target actor's action plus Gaussian noise of std policy_noise,
    clipped to +-noise_clip, both in units of the action scale, then clipped to the env's bounds [low, high]."""
    next_actions = target_actor(next_obs)
    noise = (torch.randn_like(next_actions) * policy_noise).clamp(-noise_clip, noise_clip) * scale
    next_actions = torch.clamp(next_actions + noise, low, high)
    next_q = torch.min(qf1_target(next_obs, next_actions), qf2_target(next_obs, next_actions))
    return rewards + gamma * (1.0 - terminations) * next_q


def real_next_observations(next_obs, infos):
    """Where an episode ended, next_obs is already the next episode's first one: the real one is infos["final_obs"]."""
    real_next_obs = next_obs.copy()
    if "final_obs" in infos:
        real_next_obs[infos["_final_obs"]] = np.stack(infos["final_obs"][infos["_final_obs"]])
    return real_next_obs


def check_args(args):
    """Every check of the flags, before heavy work: a bad input ends with one line naming the flag, exit code 2."""
    positive = ["total_timesteps", "num_envs", "buffer_size", "batch_size", "policy_frequency", "learning_rate"]
    for flag in positive + ["eval_episodes"]:
        if not getattr(args, flag) > 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "learning_starts", "policy_noise", "exploration_noise", "noise_clip", "eval_interval"]:
        if not getattr(args, flag) >= 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}")
    if not 0 <= args.seed < 2**32:
        fail(f"--seed must be in [0, 2**32) (numpy's seed range), got {args.seed}")
    if args.learning_starts >= args.total_timesteps:
        fail(f"--learning-starts {args.learning_starts} must be below --total-timesteps {args.total_timesteps}")
    if not 0.0 < args.tau <= 1.0:
        fail(f"--tau must be in (0, 1], got {args.tau}")
    if not 0.0 <= args.gamma <= 1.0:
        fail(f"--gamma must be in [0, 1], got {args.gamma}")
    if args.batch_size > args.buffer_size:
        fail(f"--batch-size {args.batch_size} is larger than --buffer-size {args.buffer_size}")
    if args.capture_video:  # before the first env is made: MuJoCo chooses how to render when it is first imported
        from cleanrl_utils.rendering import render_offscreen

        render_offscreen(args.env_id)  # no display: EGL for MuJoCo, SDL's dummy driver for pygame; exit 2 if neither
    try:
        env = make_env(args.env_id, 0, False, "")()
    except (gym.error.Error, ImportError) as e:
        fail(f"--env-id {args.env_id}: {e}")
    space = env.action_space
    if not isinstance(space, gym.spaces.Box):
        fail(f"--env-id {args.env_id} has a {type(space).__name__} action space; td3 needs a Box one (or use dqn.py)")
    if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
        fail(f"--env-id {args.env_id} has unbounded actions; the actor's tanh is rescaled onto them: they must be finite")
    if not isinstance(env.observation_space, gym.spaces.Box):
        fail(f"--env-id {args.env_id} has a {type(env.observation_space).__name__} observation space; td3 needs a Box one")
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

    # env setup: SAME_STEP autoreset returns the reset observation at once and the real last one in infos["final_obs"]
    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, i, args.capture_video, run_name) for i in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    actor = Actor(envs).to(device)
    qf1, qf2 = QNetwork(envs).to(device), QNetwork(envs).to(device)
    target_actor = Actor(envs).to(device)
    qf1_target, qf2_target = QNetwork(envs).to(device), QNetwork(envs).to(device)
    target_actor.load_state_dict(actor.state_dict())
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    q_optimizer = optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=args.learning_rate, fused=True)
    actor_optimizer = optim.Adam(list(actor.parameters()), lr=args.learning_rate, fused=True)  # fused: one kernel a step
    online_params = [*actor.parameters(), *qf1.parameters(), *qf2.parameters()]
    target_params = [*target_actor.parameters(), *qf1_target.parameters(), *qf2_target.parameters()]
    action_low = torch.as_tensor(envs.single_action_space.low.flatten(), dtype=torch.float32, device=device)
    action_high = torch.as_tensor(envs.single_action_space.high.flatten(), dtype=torch.float32, device=device)
    smoothing = (args.policy_noise, args.noise_clip, actor.action_scale, action_low, action_high)
    obs_space = gym.spaces.Box(-np.inf, np.inf, envs.single_observation_space.shape, np.float32)  # as the networks take them
    # the done flag stored is termination only: a truncated episode still bootstraps from its real last observation
    rb = ReplayBuffer(
        args.buffer_size, obs_space, envs.single_action_space, device, args.num_envs, handle_timeout_termination=False
    )
    envs.action_space.seed(args.seed)  # the random actions of the warm-up
    global_step, updates_start = 0, args.learning_starts  # a resume without the buffer learns again later
    obs, _ = envs.reset(seed=args.seed)

    def checkpoint_state():  # what a checkpoint holds: the learner, the loop's values and (--checkpoint-buffer) the buffer
        learner = dict(actor=actor, target_actor=target_actor, qf1=qf1, qf2=qf2, qf1_target=qf1_target, qf2_target=qf2_target)
        learner |= dict(q_optimizer=q_optimizer, actor_optimizer=actor_optimizer)
        loop = dict(envs=envs, obs=obs, global_step=global_step, updates_start=updates_start)
        return dict(learner, action_space_rng=envs.action_space.np_random, rb=rb if args.checkpoint_buffer else None, **loop)

    def save_and_evaluate(model_path, seed, video=False):  # the evaluations of --eval-interval and --save-model
        torch.save(nn.ModuleDict({"actor": actor, "qf1": qf1, "qf2": qf2}).state_dict(), model_path)
        from cleanrl_utils.evals.ddpg_eval import evaluate

        return evaluate(model_path, make_env, args.env_id, args.eval_episodes, f"{run_name}-eval", Actor, device, video, seed)

    run_state = None
    if args.checkpoint_interval or args.eval_interval or args.save_model or checkpoint:  # needs cleanrl_utils
        from cleanrl_utils.run_state import RunState

        run_state = RunState(run_dir, args, writer, checkpoint, save_and_evaluate)
        if checkpoint:
            saved = run_state.restore(checkpoint_state())
            global_step, obs, updates_start = saved["global_step"], saved["obs"], saved["updates_start"]
            if not saved["envs"]:  # they could not be pickled (e.g. while recording video): new episodes
                obs, _ = envs.reset(seed=args.seed + global_step)

    if checkpoint and not args.checkpoint_buffer:  # an empty buffer: act with the policy, without learning, to refill it
        updates_start = run_state.refill(global_step, args.learning_starts)

    print(f"{run_name}: training to {total_steps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    # a bar on a terminal; disable=None turns it off where stdout is not one (a log file), and the loop prints lines
    progress = tqdm(total=total_steps, initial=global_step, unit="step", file=sys.stdout, disable=None)
    recent_returns, start_time, start_step = deque(maxlen=20), time.time(), global_step
    report_every, actor_loss = max(1, num_iterations // 20), None

    for iteration in range(global_step // args.num_envs + 1, num_iterations + 1):
        global_step += args.num_envs
        # ALGO LOGIC: put action logic here
        if global_step <= args.learning_starts:
            actions = envs.action_space.sample()
        else:
            with torch.no_grad():
                actions = actor(torch.as_tensor(obs, dtype=torch.float32, device=device))
                actions += torch.randn_like(actions) * (actor.action_scale * args.exploration_noise)
                actions = torch.clamp(actions, action_low, action_high)
            actions = actions.cpu().numpy().reshape(envs.action_space.shape)

        # TRY NOT TO MODIFY: execute the game and log data.
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        if not np.isfinite(rewards).all():
            sys.exit(f"error: the environment returned a non-finite reward at step {global_step}; stopping")
        if "final_info" in infos:
            for i in np.flatnonzero(infos["final_info"]["_episode"]):
                episodic_return = float(infos["final_info"]["episode"]["r"][i])
                recent_returns.append(episodic_return)
                writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                writer.add_scalar("charts/episodic_length", int(infos["final_info"]["episode"]["l"][i]), global_step)
        rb.add(obs, real_next_observations(next_obs, infos), actions, rewards, terminations, infos)
        obs = next_obs

        # ALGO LOGIC: training.
        if global_step > updates_start:
            data = rb.sample(args.batch_size)
            b_obs, b_actions, b_next_obs = data.observations, data.actions, data.next_observations
            b_rewards, b_terminations = data.rewards.flatten(), data.dones.flatten()  # (batch, 1) to the critics' (batch,)
            with torch.no_grad():
                next_q_value = td3_target(
                    b_rewards, b_terminations, b_next_obs, target_actor, qf1_target, qf2_target, args.gamma, *smoothing
                )
            qf1_a_values, qf2_a_values = qf1(b_obs, b_actions), qf2(b_obs, b_actions)
            qf1_loss, qf2_loss = F.mse_loss(qf1_a_values, next_q_value), F.mse_loss(qf2_a_values, next_q_value)
            qf_loss = qf1_loss + qf2_loss
            q_optimizer.zero_grad()
            qf_loss.backward()
            q_optimizer.step()

            if iteration % args.policy_frequency == 0:  # delayed policy update
                actor_loss = -qf1(b_obs, actor(b_obs)).mean()
                actor_optimizer.zero_grad()
                actor_loss.backward()
                actor_optimizer.step()

                # update the target networks: target += tau * (online - target)
                with torch.no_grad():
                    for param, target_param in zip(online_params, target_params):
                        target_param.lerp_(param, args.tau)

            if iteration % 100 == 0:  # .item() waits for the GPU: only when logging
                if not np.isfinite(qf_loss.item()):
                    sys.exit(f"error: the loss turned non-finite at step {global_step}; stopping (no model saved)")
                writer.add_scalar("losses/qf1_values", qf1_a_values.mean().item(), global_step)
                writer.add_scalar("losses/qf2_values", qf2_a_values.mean().item(), global_step)
                writer.add_scalar("losses/qf1_loss", qf1_loss.item(), global_step)
                writer.add_scalar("losses/qf2_loss", qf2_loss.item(), global_step)
                writer.add_scalar("losses/qf_loss", qf_loss.item() / 2.0, global_step)
                if actor_loss is not None:
                    writer.add_scalar("losses/actor_loss", actor_loss.item(), global_step)

        # a bar update costs more than a vector step: every 100 of them, and the plain lines every 5%
        if iteration % 100 == 0 or iteration % report_every == 0 or iteration == num_iterations:
            sps = int((global_step - start_step) / (time.time() - start_time))
            stats = f"{sps} SPS, return {np.mean(recent_returns):.1f}" if recent_returns else f"{sps} SPS"
            writer.add_scalar("charts/SPS", sps, global_step)
            progress.set_postfix_str(stats, refresh=False)
            progress.update(global_step - progress.n)
            if progress.disable and (iteration % report_every == 0 or iteration == num_iterations):
                left = (total_steps - global_step) / max(sps, 1)  # seconds, at the speed so far
                timing = f"{tqdm.format_interval(time.time() - start_time)} elapsed, {tqdm.format_interval(left)} left"
                print(f"step {global_step}/{total_steps}, {stats}, {timing}", flush=True)
        if run_state:
            run_state.step(global_step, checkpoint_state)

    progress.close()
    if not all(p.isfinite().all() for p in online_params):  # the loss is checked only where it is logged
        sys.exit(f"error: the loss turned non-finite before step {global_step}; stopping (no model saved)")
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
