# SAC for discrete actions (Christodoulou 2019) on Atari games; docs: docs/algorithms/sac_atari.md
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
import torch.nn.functional as F
import tyro
from stable_baselines3.common.atari_wrappers import ClipRewardEnv, EpisodicLifeEnv, FireResetEnv, MaxAndSkipEnv, NoopResetEnv
from torch import nn, optim
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from cleanrl_utils.buffers import FrameReplayBuffer


@dataclass
class Args:
    # Algorithm specific arguments
    num_envs: int = 1
    """the number of parallel game environments"""
    buffer_size: int = 1000000
    """the replay memory size in frames, about as many transitions (each frame stored once: 1M take 7.1 GB, 8.1 GB peak RSS)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 1.0
    """the target networks' update rate (1.0 copies the critics)"""
    batch_size: int = 64
    """the batch size of sample from the replay memory"""
    learning_starts: int = 20000
    """timestep to start learning (uniformly random actions until then)"""
    policy_lr: float = 3e-4
    """the learning rate of the policy network optimizer"""
    q_lr: float = 3e-4
    """the learning rate of the Q network optimizer (and of the entropy coefficient's)"""
    update_frequency: int = 4
    """the number of vector steps between gradient steps (each updates the critics, the actor and alpha)"""
    target_network_frequency: int = 8000
    """the number of vector steps between target network updates"""
    alpha: float = 0.2
    """entropy regularization coefficient (when not autotuned)"""
    autotune: bool = True
    """automatic tuning of the entropy coefficient"""
    target_entropy_scale: float = 0.89
    """the target entropy is this fraction of the uniform policy's, log(number of actions); in (0, 1]"""

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
    """whether to save the model into `runs/{run_name}` and evaluate it for `--eval-episodes` games"""
    upload_model: bool = False
    """whether to upload the saved model, its evaluation and videos to the Hugging Face Hub (with --save-model)"""
    hf_entity: str | None = None
    """the user or organization of the Hugging Face Hub model repository (default: the token's user)"""
    env_id: str = "BreakoutNoFrameskip-v4"
    """the id of the Atari game (any ALE id: `BreakoutNoFrameskip-v4` has no sticky actions, `ALE/Breakout-v5` repeats the last action with probability 0.25)"""
    total_timesteps: int = 5000000
    """total timesteps of the experiments (agent steps: 4 emulator frames each)"""
    checkpoint_interval: int = 0
    """environment steps between checkpoints in `runs/{run_name}/checkpoint.pt` (0 = off; needs cleanrl_utils)"""
    checkpoint_buffer: bool = False
    """whether checkpoints hold the replay buffer (7.1 GB by default); else a resumed run refills it for `--learning-starts` steps"""
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


class SoftQNetwork(nn.Module):
    """A Nature-CNN critic: Q(s, a) of every action at once (the soft value is an exact sum); uint8 in, scaled here."""

    def __init__(self, envs):
        super().__init__()
        stack, n_actions = envs.single_observation_space.shape[0], envs.single_action_space.n
        convs = [nn.Conv2d(stack, 32, 8, stride=4), nn.Conv2d(32, 64, 4, stride=2), nn.Conv2d(64, 64, 3, stride=1)]
        fc, self.head = nn.Linear(3136, 512), nn.Linear(512, n_actions)
        self.trunk = nn.Sequential(*[m for conv in convs for m in (conv, nn.ReLU())], nn.Flatten(), fc, nn.ReLU())
        for layer in [*convs, fc, self.head]:  # Kaiming-normal weights and zero biases, as the original initializes
            nn.init.kaiming_normal_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, x):
        return self.head(self.trunk(x / 255.0))


class Actor(SoftQNetwork):
    """The categorical policy: a critic's architecture with its own weights, as in the original; outputs: logits."""

    def get_action(self, x):
        log_probs = F.log_softmax(self(x), dim=1)
        return torch.multinomial(log_probs.exp(), 1).squeeze(1), log_probs, log_probs.exp()


def soft_td_target(rewards, terminations, next_probs, next_log_probs, next_q1, next_q2, alpha, gamma):
    """r + gamma E_a'~pi [min Q'(s', a') - alpha log pi(a'|s')], exact over a'; a lost life terminates, a time limit not."""
    next_value = (next_probs * (torch.min(next_q1, next_q2) - alpha * next_log_probs)).sum(dim=1)
    return rewards + gamma * (1.0 - terminations) * next_value


def actor_loss_fn(probs, log_probs, q1, q2, alpha):
    """E_s sum_a pi(a|s) (alpha log pi(a|s) - min Q(s, a)), minimal at pi ~ exp(min Q / alpha) (a sum, not a mean)."""
    return (probs * (alpha * log_probs - torch.min(q1, q2))).sum(dim=1).mean()


def alpha_loss_fn(probs, log_probs, log_alpha, target_entropy):
    """E_s alpha (H(pi(.|s)) - target_entropy), the policy held constant: alpha falls while the entropy is above target."""
    return (probs.detach() * (-log_alpha.exp() * (log_probs.detach() + target_entropy))).sum(dim=1).mean()


def check_args(args):
    """Every check of the flags, before heavy work: a bad input ends with one line naming the flag, exit code 2."""
    counts = ["total_timesteps", "num_envs", "buffer_size", "batch_size", "update_frequency", "target_network_frequency"]
    for flag in counts + ["policy_lr", "q_lr", "eval_episodes"]:
        if not getattr(args, flag) > 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "learning_starts", "alpha", "eval_interval"]:
        if not getattr(args, flag) >= 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}")
    if not 0 <= args.seed < 2**32:
        fail(f"--seed must be in [0, 2**32) (numpy's seed range), got {args.seed}")
    if args.learning_starts >= args.total_timesteps:
        fail(f"--learning-starts {args.learning_starts} must be below --total-timesteps {args.total_timesteps}")
    for flag in ["tau", "target_entropy_scale"]:  # no policy has more entropy than the uniform one: a scale above 1
        if not 0.0 < getattr(args, flag) <= 1.0:
            fail(f"--{flag.replace('_', '-')} must be in (0, 1], got {getattr(args, flag)}")
    if args.buffer_size < max(args.batch_size, 16 * args.num_envs):  # a stack needs 5 live frames per env; a margin
        fail(f"--buffer-size {args.buffer_size} must hold --batch-size {args.batch_size} and 16 frames per env")
    try:
        env = gym.make(args.env_id)  # a `module:EnvName-v0` id imports its module, which registers the env
    except (gym.error.Error, ModuleNotFoundError) as e:
        fail(f"--env-id {args.env_id}: {e}")
    if not hasattr(env.unwrapped, "ale") or len(getattr(env.observation_space, "shape", None) or ()) not in (2, 3):
        fail(f"--env-id {args.env_id} is not an ALE game with image observations; use dqn.py or ppo.py for other envs")
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
    env_fns = [make_env(args.env_id, i, args.capture_video, run_name) for i in range(args.num_envs)]
    envs = gym.vector.SyncVectorEnv(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    actor = Actor(envs).to(device)
    qf1, qf2, qf1_target, qf2_target = (SoftQNetwork(envs).to(device) for _ in range(4))
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    q_optimizer = optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=args.q_lr, eps=1e-4)  # 1e-4 as the original
    actor_optimizer = optim.Adam(actor.parameters(), lr=args.policy_lr, eps=1e-4)  # (1e-8 takes huge steps at tiny gradients)
    target_entropy = args.target_entropy_scale * np.log(envs.single_action_space.n)  # log(n): no policy reaches more
    log_alpha = torch.zeros(1, requires_grad=True, device=device)  # alpha starts at 1 when autotuned
    a_optimizer = optim.Adam([log_alpha], lr=args.q_lr, eps=1e-4)
    rb = FrameReplayBuffer(args.buffer_size, args.num_envs, envs.single_observation_space)
    global_step, updates_start = 0, args.learning_starts  # learning starts after updates_start (later on a refill)
    obs, _ = envs.reset(seed=args.seed)

    def checkpoint_state():  # what a checkpoint holds
        state = dict(actor=actor, qf1=qf1, qf2=qf2, qf1_target=qf1_target, qf2_target=qf2_target, log_alpha=log_alpha)
        state |= dict(q_optimizer=q_optimizer, actor_optimizer=actor_optimizer, a_optimizer=a_optimizer, envs=envs, obs=obs)
        return state | dict(rb=rb if args.checkpoint_buffer else None, global_step=global_step)

    def save_and_evaluate(model_path, seed, video=False):  # the evaluations of --eval-interval and --save-model
        # one flat state dict: "actor.trunk.0.weight", ..., "qf.0.trunk.0.weight", ...; the evaluation needs the actor only
        torch.save(nn.ModuleDict({"actor": actor, "qf": nn.ModuleList([qf1, qf2])}).state_dict(), model_path)
        from cleanrl_utils.evals.sac_atari_eval import evaluate

        return evaluate(model_path, make_env, args.env_id, args.eval_episodes, f"{run_name}-eval", Actor, device, video, seed)

    run_state = None
    if args.checkpoint_interval or args.eval_interval or args.save_model or checkpoint:  # needs cleanrl_utils
        from cleanrl_utils.run_state import RunState

        run_state = RunState(run_dir, args, writer, checkpoint, save_and_evaluate)
        if checkpoint:
            saved = run_state.restore(checkpoint_state())
            global_step, obs = saved["global_step"], saved["obs"]
            log_alpha.data.copy_(saved["log_alpha"])
            if not args.checkpoint_buffer:  # an empty buffer: the policy acts, without learning, until it refills
                updates_start = run_state.refill(global_step, args.learning_starts)
            if not saved["envs"]:  # they could not be pickled (e.g. while recording video): new games
                obs, _ = envs.reset(seed=args.seed + global_step)
    alpha = log_alpha.detach().exp() if args.autotune else torch.tensor(args.alpha, device=device)

    print(f"{run_name}: training to {total_steps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    # a bar on a terminal; disable=None turns it off where stdout is not one (a log file), and the loop prints lines
    progress = tqdm(total=total_steps, initial=global_step, unit="step", file=sys.stdout, disable=None)
    recent_returns, start_time, start_step = deque(maxlen=20), time.time(), global_step

    for iteration in range(global_step // args.num_envs + 1, num_iterations + 1):
        global_step += args.num_envs
        if global_step <= args.learning_starts:  # uniformly random actions fill the buffer first
            actions = np.random.randint(envs.single_action_space.n, size=args.num_envs)
        else:  # then the policy's samples: SAC explores through its entropy, there is no epsilon
            with torch.inference_mode():
                actions, _, _ = actor.get_action(torch.as_tensor(obs, device=device))
            actions = actions.cpu().numpy()

        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        if not np.isfinite(rewards).all():
            sys.exit(f"error: the environment returned a non-finite reward at step {global_step}; stopping")

        # TRY NOT TO MODIFY: record rewards for plotting purposes; whole games only (RecordEpisodeStatistics sits
        # inside EpisodicLifeEnv and ClipRewardEnv)
        real_next_obs = next_obs.copy()  # where an episode ended, next_obs is already the next one's first
        if "final_obs" in infos:
            ended = infos["_final_obs"]
            real_next_obs[ended] = np.stack(infos["final_obs"][ended])
            for i in np.flatnonzero(infos["final_info"].get("_episode", [])):
                episodic_return = float(infos["final_info"]["episode"]["r"][i])
                recent_returns.append(episodic_return)
                writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                writer.add_scalar("charts/episodic_length", int(infos["final_info"]["episode"]["l"][i]), global_step)
        # the done flag is termination only (a lost life included): a truncated game bootstraps from its last frame
        rb.add(obs, real_next_obs, actions, rewards, terminations, truncations)
        obs = next_obs

        # ALGO LOGIC: training; one batch updates the critics, then the actor, then alpha
        if global_step > updates_start and iteration % args.update_frequency == 0:
            b_obs, b_actions, b_next_obs, b_rewards, b_terminations = rb.sample(args.batch_size, device)
            with torch.no_grad():
                _, next_log_pi, next_pi = actor.get_action(b_next_obs)
                next_q1, next_q2 = qf1_target(b_next_obs), qf2_target(b_next_obs)
                target = soft_td_target(b_rewards, b_terminations, next_pi, next_log_pi, next_q1, next_q2, alpha, args.gamma)
            qf1_a_values = qf1(b_obs).gather(1, b_actions.unsqueeze(1)).squeeze(1)
            qf2_a_values = qf2(b_obs).gather(1, b_actions.unsqueeze(1)).squeeze(1)
            qf1_loss, qf2_loss = F.mse_loss(qf1_a_values, target), F.mse_loss(qf2_a_values, target)
            qf_loss = qf1_loss + qf2_loss
            q_optimizer.zero_grad()
            qf_loss.backward()
            q_optimizer.step()

            _, log_pi, pi = actor.get_action(b_obs)
            with torch.no_grad():  # the critics after their step, as constants
                q1_values, q2_values = qf1(b_obs), qf2(b_obs)
            actor_loss = actor_loss_fn(pi, log_pi, q1_values, q2_values, alpha)
            actor_optimizer.zero_grad()
            actor_loss.backward()
            actor_optimizer.step()

            if args.autotune:  # the same probabilities, detached: no second pass of the actor
                alpha_loss = alpha_loss_fn(pi, log_pi, log_alpha, target_entropy)
                a_optimizer.zero_grad()
                alpha_loss.backward()
                a_optimizer.step()
                alpha = log_alpha.detach().exp()

            if iteration % (100 * args.update_frequency) == 0:  # every 100 gradient steps; .item() waits for the GPU
                if not np.isfinite(qf_loss.item() + actor_loss.item()):
                    sys.exit(f"error: the loss turned non-finite at step {global_step}; stopping (no model saved)")
                writer.add_scalar("losses/qf1_values", qf1_a_values.mean().item(), global_step)
                writer.add_scalar("losses/qf2_values", qf2_a_values.mean().item(), global_step)
                writer.add_scalar("losses/qf1_loss", qf1_loss.item(), global_step)
                writer.add_scalar("losses/qf2_loss", qf2_loss.item(), global_step)
                writer.add_scalar("losses/qf_loss", qf_loss.item() / 2.0, global_step)
                writer.add_scalar("losses/actor_loss", actor_loss.item(), global_step)
                writer.add_scalar("losses/alpha", alpha.item(), global_step)
                if args.autotune:
                    writer.add_scalar("losses/alpha_loss", alpha_loss.item(), global_step)
                writer.add_scalar("charts/SPS", int((global_step - start_step) / (time.time() - start_time)), global_step)

        if global_step > updates_start and iteration % args.target_network_frequency == 0:  # tau 1 copies the critics
            with torch.no_grad():
                for qf, qf_target in [(qf1, qf1_target), (qf2, qf2_target)]:
                    for param, target_param in zip(qf.parameters(), qf_target.parameters()):
                        target_param.lerp_(param, args.tau)

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
    if not all(torch.isfinite(p).all() for p in [*actor.parameters(), *qf1.parameters(), *qf2.parameters()]):
        sys.exit(f"error: the loss turned non-finite by step {global_step} (the networks hold NaN); stopping (no model saved)")
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
