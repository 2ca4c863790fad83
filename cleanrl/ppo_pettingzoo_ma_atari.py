# PPO self-play on PettingZoo's multi-agent Atari (Schulman et al. 2017); docs: docs/algorithms/ppo_pettingzoo_ma_atari.md
import glob
import importlib
import json
import os
import pathlib
import random
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass

import ale_py
import numpy as np
import supersuit as ss
import torch
import tyro
from pettingzoo.atari.all_modules import atari_environments
from pettingzoo.utils.wrappers import BaseParallelWrapper
from torch import nn, optim
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

GAMES = sorted(name.removeprefix("atari/") for name in atari_environments)  # pong_v3, warlords_v3, ...
ROMS = pathlib.Path(ale_py.__file__).parent / "roms"  # ale-py ships the ROMs: no download step


@dataclass
class Args:
    # Algorithm specific arguments
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 8
    """the number of parallel games (each with all its players: 16 policy inputs a step for a two-player game)"""
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
    env_id: str = "pong_v3"
    """the PettingZoo multi-agent Atari game (`pong_v3`, `surround_v2`, `tennis_v3`, `warlords_v3`, ...)"""
    total_timesteps: int = 20000000
    """total timesteps of the experiments (player steps: a step of a two-player game counts 2, each 4 frames)"""
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


class PlayerStatistics(BaseParallelWrapper):
    """Above SuperSuit's wrappers: each player's real score and steps in `info["episode"]` at the game's end. A player out
    early (Warlords), which they drop, stays: black screen, reward 0, `terminated`; supersuit's vector env needs them all."""

    def reset(self, seed=None, options=None):
        self.agents = self.possible_agents  # every player, to the end of the game
        self.returns, self.lengths = np.zeros(len(self.possible_agents)), np.zeros(len(self.possible_agents), dtype=int)
        return self.env.reset(seed=seed, options=options)

    def step(self, actions):
        self.lengths += [agent in self.env.agents for agent in self.possible_agents]
        obs, rewards, terminations, truncations, infos = self.env.step({a: actions[a] for a in self.env.agents})
        for agent in set(self.possible_agents) - set(obs):  # out of the game before this step
            obs[agent] = np.zeros(self.observation_space(agent).shape, np.uint8)
            rewards[agent], terminations[agent], truncations[agent], infos[agent] = 0.0, True, False, {}
        self.returns += [rewards[agent] for agent in self.possible_agents]
        if all(terminations[agent] or truncations[agent] for agent in self.possible_agents):
            for i, agent in enumerate(self.possible_agents):
                infos[agent]["episode"] = {"r": float(self.returns[i]), "l": int(self.lengths[i])}
        return obs, rewards, terminations, truncations, infos


def make_env(env_id, idx, capture_video, run_name):
    """One game as a vector env of its players; SuperSuit's Atari preprocessing as upstream (4 frames a step max-pooled,
    84 x 84 gray, 4 stacked), then one channel per player, 255 for the one it names: (84, 84, 4 + players) uint8."""

    def thunk():
        game = importlib.import_module(f"pettingzoo.atari.{env_id}")  # rendered only with --capture-video
        env = ss.max_observation_v0(game.parallel_env(render_mode="rgb_array", auto_rom_install_path=ROMS), 2)
        env = ss.frame_skip_v0(env, 4)
        env = ss.color_reduction_v0(env, mode="B")
        env = ss.resize_v1(env, x_size=84, y_size=84)
        env = ss.frame_stack_v1(env, 4)
        env = PlayerStatistics(ss.agent_indicator_v0(env, type_only=False))
        if capture_video and idx == 0:  # env 0's screen, whole games (needs cleanrl_utils)
            from cleanrl_utils.evals.ppo_pettingzoo_eval import RecordGames

            env = RecordGames(env, f"videos/{run_name}")
        return ss.pettingzoo_env_to_vec_env_v1(env)

    return thunk


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """The Nature CNN (Mnih et al. 2015) shared by the policy and value heads and by every player (the indicator channels
    say which it plays). Frames stay uint8 (4x smaller than float32) until the network's input scales them to [0, 1]."""

    def __init__(self, envs):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(envs.observation_space.shape[-1], 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, envs.action_space.n), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1)

    def hidden(self, x):  # height x width x channels -> channels first
        return self.network(x.permute(0, 3, 1, 2) / 255.0)

    def get_value(self, x):
        return self.critic(self.hidden(x))

    def get_action(self, x):
        logits = self.actor(self.hidden(x))
        # Gumbel-max: argmax(logits + Gumbel noise) samples softmax(logits) at a fraction of torch.distributions' cost
        return (logits - torch.empty_like(logits).exponential_().log()).argmax(dim=-1)

    def evaluate_actions(self, x, action):
        """Log-probability and entropy of the given actions under the current policy, and the state values."""
        hidden = self.hidden(x)
        log_probs = self.actor(hidden).log_softmax(dim=-1)
        logprob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(dim=-1)
        return logprob, entropy, self.critic(hidden).flatten()


def compute_gae(rewards, values, last_value, final_values, terminations, episode_ends, gamma, gae_lambda):
    """GAE over numpy arrays shaped (num_steps, games x players). Where a game ended at step t, obs[t + 1] is the next
    game's: the bootstrap is final_values[t] = V(its real last observation), kept by a truncation, zeroed by a termination."""
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
    for flag in ["total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs", "eval_episodes"]:
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "eval_interval"]:
        if getattr(args, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0 (0 = off), got {getattr(args, flag)}")
    if not 0 <= args.seed < 2**31:
        fail(f"--seed must be in [0, 2**31) (the ALE's seed range), got {args.seed}")
    if args.env_id not in GAMES:
        fail(f"--env-id {args.env_id} is not a multi-agent Atari game of PettingZoo; one of {', '.join(GAMES)}")
    game = importlib.import_module(f"pettingzoo.atari.{args.env_id}").parallel_env(auto_rom_install_path=ROMS)
    batch_size = args.num_envs * len(game.possible_agents) * args.num_steps
    if batch_size % args.num_minibatches:
        fail(f"--num-minibatches {args.num_minibatches} must divide --num-envs x players x --num-steps = {batch_size}")
    if args.total_timesteps < batch_size:
        fail(f"--total-timesteps {args.total_timesteps} is below one rollout: {batch_size} player steps")


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

    # env setup: one row per player of each game, game i's players side by side (rows i * players ... + players - 1)
    envs = ss.vector.ConcatVecEnv([make_env(args.env_id, i, args.capture_video, run_name) for i in range(args.num_envs)])
    players, num_rows = envs.vec_envs[0].par_env.possible_agents, envs.num_envs  # first_0, second_0, ...
    batch_size = args.num_steps * num_rows
    num_iterations = args.total_timesteps // batch_size
    total_steps = num_iterations * batch_size  # the budget in whole rollouts: what the run does
    agent = Agent(envs).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)  # fused: one kernel a step

    # ALGO Logic: Storage setup, in numpy: a write per step is far cheaper than into a tensor. Frames stay uint8 (4x smaller)
    obs = np.zeros((args.num_steps, num_rows) + envs.observation_space.shape, dtype=np.uint8)
    actions = np.zeros((args.num_steps, num_rows), dtype=np.int64)
    rewards, terminations, episode_ends = (np.zeros((args.num_steps, num_rows), dtype=np.float32) for _ in range(3))
    final_obs = np.zeros_like(obs)  # the real last observation where a game ended (obs[t + 1] is a reset one)
    out_of_game = np.zeros((args.num_steps, num_rows), dtype=bool)  # a player already out: its steps are no transitions
    global_step = 0

    def checkpoint_state():  # what a checkpoint holds: supersuit's games cannot be saved, a resumed run starts new ones
        return dict(agent=agent, optimizer=optimizer, global_step=global_step)

    def save_and_evaluate(model_path, seed, video=False):  # the evaluations of --eval-interval and --save-model
        torch.save(agent.state_dict(), model_path)
        from cleanrl_utils.evals.ppo_pettingzoo_eval import evaluate

        return evaluate(model_path, make_env, args.env_id, args.eval_episodes, f"{run_name}-eval", Agent, device, video, seed)

    run_state, reset_seed = None, args.seed
    if args.checkpoint_interval or args.eval_interval or args.save_model or checkpoint:  # needs cleanrl_utils
        from cleanrl_utils.run_state import RunState

        run_state = RunState(run_dir, args, writer, checkpoint, save_and_evaluate)
        if checkpoint:
            global_step = run_state.restore(checkpoint_state())["global_step"]
            reset_seed = (args.seed + global_step) % 2**31  # new games: a resumed run does not replay those it began with
            print(f"resumed at step {global_step}: the games start anew (supersuit cannot save them)", file=sys.stderr)
    next_obs, _ = envs.reset(seed=reset_seed)  # game i is seeded reset_seed + i
    next_out_of_game = np.zeros(num_rows, dtype=bool)

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
            global_step += num_rows
            obs[step], out_of_game[step] = next_obs, next_out_of_game
            with torch.no_grad():
                action = agent.get_action(torch.as_tensor(next_obs, device=device)).cpu().numpy()
            actions[step] = action

            next_obs, reward, terminated, truncated, infos = envs.step(action)
            if not np.isfinite(reward).all():
                sys.exit(f"error: the environment returned a non-finite reward at step {global_step}; stopping")
            # the loss sees the rewards clipped to [-1, 1] (upstream's clip_reward_v0), the statistics the real score
            rewards[step], terminations[step], episode_ends[step] = np.clip(reward, -1, 1), terminated, terminated | truncated

            # supersuit resets a game once all its players are done, the real last obs in info["terminal_observation"].
            # A player out before (Warlords) is `terminated` at each step until then: no transitions, left out of the update
            ended = np.repeat(episode_ends[step].reshape(args.num_envs, -1).all(axis=1), len(players))
            next_out_of_game = (terminations[step] == 1) & ~ended
            for i in np.flatnonzero(ended):
                final_obs[step, i] = infos[i]["terminal_observation"]
                episode = infos[i]["episode"]  # the player's real score and its frames in the game
                recent_returns.append(episode["r"])
                writer.add_scalar("charts/episodic_return", episode["r"], global_step)
                writer.add_scalar(f"charts/episodic_return/{players[i % len(players)]}", episode["r"], global_step)
                writer.add_scalar("charts/episodic_length", episode["l"], global_step)

        # flatten the batch
        b_obs = torch.as_tensor(obs.reshape((-1,) + envs.observation_space.shape), device=device)
        b_actions = torch.as_tensor(actions.reshape(-1), device=device)
        # acting did not need them, so the log-probabilities of the rollout policy and the values come from one
        # batched pass over the whole rollout (the same code as the update's: the first ratio is exactly 1)
        with torch.no_grad():
            b_logprobs, _, b_values = agent.evaluate_actions(b_obs, b_actions)
            last_value = agent.get_value(torch.as_tensor(next_obs, device=device)).cpu().numpy()
            # a game truncated at 100,000 frames is not over for the players: they bootstrap from the value of their
            # real last observation. A termination zeroes it, so only the rare truncations go through the network
            final_values = np.zeros_like(rewards)
            truncated_steps = (episode_ends == 1) & (terminations == 0)
            if truncated_steps.any():
                truncated_obs = torch.as_tensor(final_obs[truncated_steps], device=device)
                final_values[truncated_steps] = agent.get_value(truncated_obs).flatten().cpu().numpy()
        values = b_values.cpu().numpy().reshape(args.num_steps, num_rows)
        advantages, returns = compute_gae(
            rewards, values, last_value, final_values, terminations, episode_ends, args.gamma, args.gae_lambda
        )
        b_advantages = torch.as_tensor(advantages.reshape(-1), device=device)
        b_returns = torch.as_tensor(returns.reshape(-1), device=device)
        # the update's minibatches split the real transitions; the steps of players already out are left out
        transitions = torch.as_tensor(np.flatnonzero(~out_of_game.reshape(-1)))

        # Optimizing the policy and value network
        clipfracs = []
        for epoch in range(args.update_epochs):
            for mb_inds in transitions[torch.randperm(len(transitions))].tensor_split(args.num_minibatches):
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
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)
                optimizer.step()

            if args.target_kl is not None and approx_kl > args.target_kl:
                break

        if not np.isfinite(loss.item()):
            sys.exit(f"error: the loss turned non-finite at step {global_step}; stopping (no model saved)")
        var_y = np.var(returns[~out_of_game])  # over the rollout's real transitions
        explained_var = np.nan if var_y == 0 else 1 - np.var((returns - values)[~out_of_game]) / var_y

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
