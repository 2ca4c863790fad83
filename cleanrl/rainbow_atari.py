# Rainbow (Hessel et al. 2018) on Atari games; docs: docs/algorithms/rainbow_atari.md
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

from cleanrl_utils.buffers import FrameReplayBuffer, SumTree


@dataclass
class Args:
    # Algorithm specific arguments
    learning_rate: float = 6.25e-5
    """the learning rate of the optimizer (Adam, epsilon 1.5e-4: the paper's)"""
    num_envs: int = 1
    """the number of parallel game environments"""
    buffer_size: int = 1000000
    """the replay memory size in frames, about as many transitions (each frame stored once: 1M take 7.1 GB, 8.1 GB peak RSS)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    n_step: int = 3
    """the number of steps of the multi-step return (bootstrapped at gamma**n_step)"""
    prioritized_replay_alpha: float = 0.5
    """how much the priorities shape sampling: P(i) proportional to priority**alpha (0 = uniform)"""
    prioritized_replay_beta: float = 0.4
    """the importance-sampling exponent at the start; it grows linearly to 1 at `total-timesteps`"""
    n_atoms: int = 51
    """the number of atoms of the return distribution's support"""
    v_min: float = -10
    """the return corresponding to the lowest atom (rewards are clipped to their sign)"""
    v_max: float = 10
    """the return corresponding to the highest atom"""
    target_network_frequency: int = 8000
    """the number of vector steps between copies of the Q-network into the target network"""
    batch_size: int = 32
    """the batch size of sample from the replay memory"""
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


class NoisyLinear(nn.Module):
    """A linear layer with factorised Gaussian noise (Fortunato et al. 2018), drawn afresh at each forward pass in training
    mode: weights mu_w + sigma_w * outer(f(eps_out), f(eps_in)), f(x) = sign(x) sqrt(|x|), bias mu_b + sigma_b * f(eps_out)."""

    def __init__(self, in_features, out_features, sigma0=0.5):  # sigma_0 0.5: the paper's
        super().__init__()
        bound = in_features**-0.5
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma0 * bound))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma0 * bound))

    def forward(self, x):
        if not self.training:  # eval() plays the mean weights
            return nn.functional.linear(x, self.weight_mu, self.bias_mu)
        # new tensors at each pass, never drawn in place (autograd keeps them); the last ones stay for inspection
        self.eps_in, self.eps_out = torch.randn_like(self.weight_mu[0]), torch.randn_like(self.bias_mu)
        f_in, f_out = (eps.sign() * eps.abs().sqrt() for eps in (self.eps_in, self.eps_out))
        # (sigma_w * outer(f_out, f_in)) x = f_out * (sigma_w (f_in * x)): the noise matrix is never built
        noise = nn.functional.linear(x * f_in, self.weight_sigma) * f_out
        return nn.functional.linear(x, self.weight_mu, self.bias_mu + self.bias_sigma * f_out) + noise


# ALGO LOGIC: initialize agent here:
class QNetwork(nn.Module):
    """The Nature DQN CNN, then a dueling distributional head of noisy layers (value and advantage streams, 512 units
    each); it scales the uint8 frames itself, so the buffer and the batches stay uint8."""

    def __init__(self, envs, n_atoms=51, v_min=-10, v_max=10):
        super().__init__()
        self.n_actions, self.n_atoms = envs.single_action_space.n, n_atoms
        self.register_buffer("atoms", torch.linspace(v_min, v_max, steps=n_atoms))
        # the Nature CNN: three convolutions, each followed by a ReLU, to 64 x 7 x 7 = 3136 features
        channels = envs.single_observation_space.shape[0]
        convs = [nn.Conv2d(channels, 32, 8, stride=4), nn.Conv2d(32, 64, 4, stride=2), nn.Conv2d(64, 64, 3, stride=1)]
        self.network = nn.Sequential(*(layer for conv in convs for layer in (conv, nn.ReLU())), nn.Flatten())
        self.value = nn.Sequential(NoisyLinear(3136, 512), nn.ReLU(), NoisyLinear(512, n_atoms))
        self.advantage = nn.Sequential(NoisyLinear(3136, 512), nn.ReLU(), NoisyLinear(512, self.n_actions * n_atoms))

    def forward(self, x):
        """The probability mass functions, shaped (batch, actions, atoms); each call draws new noise."""
        hidden = self.network(x / 255.0)
        value = self.value(hidden).view(len(x), 1, self.n_atoms)
        advantage = self.advantage(hidden).view(len(x), self.n_actions, self.n_atoms)
        return torch.softmax(value + advantage - advantage.mean(dim=1, keepdim=True), dim=2)

    def get_action(self, x, action=None):
        """The greedy action under the expected returns (unless one is given), and its return distribution."""
        pmfs = self(x)
        if action is None:
            action = (pmfs * self.atoms).sum(dim=2).argmax(dim=1)
        return action, pmfs[torch.arange(len(x), device=x.device), action]


def project_distribution(next_pmfs, rewards, terminations, gamma, atoms):
    """C51's target (Algorithm 1): each atom z_j of the next state's distribution moves to r + gamma * z_j (just r where the
    episode terminated), is clipped to [v_min, v_max], and its mass is split between the two nearest atoms."""
    v_min, v_max, n_atoms = atoms[0], atoms[-1], len(atoms)
    delta_z = (v_max - v_min) / (n_atoms - 1)
    next_atoms = (rewards.unsqueeze(1) + gamma * atoms * (1.0 - terminations.unsqueeze(1))).clamp(v_min, v_max)
    b = (next_atoms - v_min) / delta_z  # fractional index of each moved atom
    lower, upper = b.floor().clamp(0, n_atoms - 1), b.ceil().clamp(0, n_atoms - 1)
    # where b lands exactly on an atom (lower == upper), all of the mass goes to it
    lower_mass = (upper + (lower == upper).float() - b) * next_pmfs
    upper_mass = (b - lower) * next_pmfs
    target_pmfs = torch.zeros_like(next_pmfs)
    target_pmfs.scatter_add_(1, lower.long(), lower_mass)
    target_pmfs.scatter_add_(1, upper.long(), upper_mass)
    return target_pmfs


class PrioritizedFrameReplayBuffer(FrameReplayBuffer):
    """cleanrl_utils.buffers.FrameReplayBuffer's frame-once storage, plus Rainbow's prioritized n-step replay:
    - a sum tree over the slots holds priority**alpha per transition; a new one gets the highest priority yet;
    - the n-step return is summed at sampling time from the following slots' rewards, stopping at a termination
      (discount 0) or a truncation (discount gamma**k, bootstrapping from the real last observation), never crossing
      into the next episode; a transition is sampled once its n next steps are written or its episode is over."""

    def __init__(self, buffer_size, num_envs, observation_space, n_step=3, gamma=0.99, alpha=0.5):
        super().__init__(buffer_size, num_envs, observation_space)
        self.n_step, self.gamma, self.alpha = n_step, gamma, alpha
        self.tree, self.max_priority = SumTree(self.positions.size), 1.0  # leaf env * capacity + slot

    def add(self, obs, next_obs, actions, rewards, terminations, truncations):
        written = super().add(obs, next_obs, actions, rewards, terminations, truncations)  # env * capacity + slot
        # a new transition gets the highest priority yet; a frame that only starts an episode gets none
        self.tree.set(written, np.where(self.ends_transition.flat[written], self.max_priority**self.alpha, 0.0))

    def n_step_transitions(self, envs, slots):
        """For each transition: whether it is valid, its n-step return, its discount (gamma**k after k <= n steps, 0
        if a termination came first) and the slot whose next observation ends it."""
        positions, starts, valid = self.positions[envs, slots], self.episode_starts[envs, slots], self.is_valid(envs, slots)
        ended = (starts != self.current_starts[envs]) | ~self.open[envs]  # the episode is over: no more steps will come
        returns, discounts = np.zeros(len(envs), dtype=np.float32), np.ones(len(envs), dtype=np.float32)
        last, running = slots.copy(), valid.copy()  # running: the return goes on through the next step
        for k in range(self.n_step):
            step = (positions + k) % self.capacity
            # a step of the same episode: written (the slot may still hold an old frame) and of the same run of frames
            in_episode = (positions + k < self.counts[envs]) & (self.episode_starts[envs, step] == starts)
            valid &= in_episode | ended | ~running  # the episode goes on past the newest frame: not yet an n-step transition
            running &= in_episode
            returns += np.where(running, discounts * self.rewards[envs, step], 0.0)
            discounts = np.where(running, discounts * self.gamma * (1.0 - self.terminations[envs, step]), discounts)
            last = np.where(running, step, last)
        return valid, returns, discounts.astype(np.float32), last

    def get(self, envs, slots):
        """obs, actions, next obs (after n steps or at the episode's end), n-step returns, discounts, as numpy arrays."""
        _, returns, discounts, last = self.n_step_transitions(envs, slots)
        obs, next_obs = self._frames(envs, slots)[:, :-1], self._frames(envs, last)[:, 1:]
        return obs, self.actions[envs, slots], next_obs, returns, discounts

    def sample(self, batch_size, beta, device):
        """A batch drawn in proportion to priority**alpha, importance weights (N * P(i))**-beta divided by the batch's
        largest, and the batch's indices in the sum tree (env * capacity + slot) for update_priorities."""
        # a draw that is not a whole transition yet (or any more) is drawn again
        indices = self.tree.sample(batch_size, lambda drawn: self.n_step_transitions(*np.divmod(drawn, self.capacity))[0])
        envs, slots = np.divmod(indices, self.capacity)
        probabilities = self.tree.nodes[self.tree.leaves + indices] / self.tree.nodes[1]
        weights = (np.count_nonzero(self.tree.nodes[self.tree.leaves :]) * probabilities) ** -beta
        batch = (*self.get(envs, slots), (weights / weights.max()).astype(np.float32))
        return *(torch.from_numpy(np.ascontiguousarray(x)).to(device) for x in batch), indices

    def update_priorities(self, indices, priorities):
        """The new priorities (the transitions' losses) of the transitions sampled at these sum-tree indices."""
        self.max_priority = max(self.max_priority, float(priorities.max()))
        self.tree.set(indices, priorities**self.alpha)


def check_args(args):
    """Every check of the flags, before heavy work: a bad input ends with one line naming the flag, exit code 2."""
    positive = ["total_timesteps", "num_envs", "buffer_size", "batch_size", "target_network_frequency", "train_frequency"]
    for flag in [*positive, "n_step", "eval_episodes"]:
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "learning_starts", "eval_interval"]:
        if getattr(args, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}")
    if not 0 <= args.seed < 2**32:
        fail(f"--seed must be in [0, 2**32) (numpy's seed range), got {args.seed}")
    if args.learning_starts >= args.total_timesteps:
        fail(f"--learning-starts {args.learning_starts} must be below --total-timesteps {args.total_timesteps}")
    for flag in ["prioritized_replay_alpha", "prioritized_replay_beta"]:
        if not 0.0 <= getattr(args, flag) <= 1.0:
            fail(f"--{flag.replace('_', '-')} must be in [0, 1], got {getattr(args, flag)}")
    if args.n_atoms < 2:
        fail(f"--n-atoms must be at least 2, got {args.n_atoms}")
    if args.v_min >= args.v_max:
        fail(f"--v-min {args.v_min} must be below --v-max {args.v_max}")
    if args.buffer_size < max(args.batch_size, 16 * args.num_envs):  # a stack needs 5 live frames per env; a margin
        fail(f"--buffer-size {args.buffer_size} must hold --batch-size {args.batch_size} and 16 frames per env")
    try:
        env = gym.make(args.env_id)  # a `module:EnvName-v0` id imports its module, which registers the env
    except (gym.error.Error, ModuleNotFoundError) as e:
        fail(f"--env-id {args.env_id}: {e}")
    if not hasattr(env.unwrapped, "ale"):  # the wrappers read the emulator's lives
        fail(f"--env-id {args.env_id} is not an ALE Atari game; use c51.py (distributional DQN) for vector observations")
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
    table = "\n".join(f"|{key}|{value}|" for key, value in vars(args).items())
    if not checkpoint:
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
    q_network = QNetwork(envs, args.n_atoms, args.v_min, args.v_max).to(device)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=1.5e-4)  # the paper's Adam epsilon
    target_network = QNetwork(envs, args.n_atoms, args.v_min, args.v_max).to(device)
    target_network.load_state_dict(q_network.state_dict())
    n_step_args = dict(n_step=args.n_step, gamma=args.gamma, alpha=args.prioritized_replay_alpha)
    rb = PrioritizedFrameReplayBuffer(args.buffer_size, args.num_envs, envs.single_observation_space, **n_step_args)
    global_step, updates_start = 0, args.learning_starts  # learning starts after updates_start (later on a resume)
    obs, _ = envs.reset(seed=args.seed)

    def checkpoint_state():  # what a checkpoint holds; the replay buffer only with --checkpoint-buffer
        state = dict(q_network=q_network, target_network=target_network, optimizer=optimizer, envs=envs, obs=obs)
        return state | dict(rb=rb if args.checkpoint_buffer else None, global_step=global_step)

    def save_and_evaluate(model_path, seed, video=False):  # the evaluations of --eval-interval and --save-model
        # the support's size and range go with the weights; the games: greedy under fresh noise, as the agent acts
        torch.save({"model_weights": q_network.state_dict(), "args": vars(args)}, model_path)
        from cleanrl_utils.evals.rainbow_eval import evaluate

        return evaluate(
            model_path, make_env, args.env_id, args.eval_episodes, f"{run_name}-eval", QNetwork, device, video, seed
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
        # ALGO LOGIC: greedy under a fresh draw of the noisy layers' noise: that noise is the exploration, no epsilon
        with torch.no_grad():
            actions = q_network.get_action(torch.as_tensor(obs, device=device))[0].cpu().numpy()
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        if not np.isfinite(rewards).all():
            sys.exit(f"error: the environment returned a non-finite reward at step {global_step}; stopping")
        # TRY NOT TO MODIFY: whole games only: RecordEpisodeStatistics sits inside EpisodicLifeEnv and ClipRewardEnv
        if "final_info" in infos and "episode" in infos["final_info"]:
            for i in np.flatnonzero(infos["final_info"]["_episode"]):
                episodic_return = float(infos["final_info"]["episode"]["r"][i])
                recent_returns.append(episodic_return)
                writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                writer.add_scalar("charts/episodic_length", int(infos["final_info"]["episode"]["l"][i]), global_step)
        # the done flag is termination only (a lost life included): a truncated game bootstraps from its last frame
        real_next_obs = next_obs.copy()  # where an episode ended, next_obs is already the next one's first
        if "final_obs" in infos:
            real_next_obs[infos["_final_obs"]] = np.stack(infos["final_obs"][infos["_final_obs"]])
        rb.add(obs, real_next_obs, actions, rewards, terminations, truncations)
        obs = next_obs

        # ALGO LOGIC: training
        if global_step > updates_start and iteration % args.train_frequency == 0:
            # beta grows to 1: importance sampling corrects prioritized replay's bias fully by the end of training
            beta = args.prioritized_replay_beta + (1.0 - args.prioritized_replay_beta) * global_step / args.total_timesteps
            b_obs, b_actions, b_next_obs, b_returns, b_discounts, b_weights, indices = rb.sample(args.batch_size, beta, device)
            with torch.no_grad():
                # double Q-learning: the online network picks the next action, the target network evaluates it
                _, next_pmfs = target_network.get_action(b_next_obs, q_network.get_action(b_next_obs)[0])
                # c51's projection at each sample's discount (gamma**n; gamma**k if truncated after k steps; 0 if terminated)
                no_terminations, discounts = torch.zeros_like(b_returns), b_discounts.unsqueeze(1)
                target_pmfs = project_distribution(next_pmfs, b_returns, no_terminations, discounts, q_network.atoms)
            _, old_pmfs = q_network.get_action(b_obs, b_actions)
            # each sample's cross-entropy to its projected target is its new priority; importance weights scale it
            cross_entropy = -(target_pmfs * old_pmfs.clamp(min=1e-5, max=1 - 1e-5).log()).sum(dim=1)
            loss = (b_weights * cross_entropy).mean()
            rb.update_priorities(indices, cross_entropy.detach().cpu().numpy())
            if iteration % (100 * args.train_frequency) == 0:
                if not np.isfinite(loss_value := loss.item()):
                    sys.exit(f"error: the loss turned non-finite at step {global_step}; stopping (no model saved)")
                writer.add_scalar("losses/loss", loss_value, global_step)
                writer.add_scalar("losses/q_values", (old_pmfs * q_network.atoms).sum(dim=1).mean().item(), global_step)
                writer.add_scalar("charts/beta", beta, global_step)
                writer.add_scalar("charts/SPS", int((global_step - start_step) / (time.time() - start_time)), global_step)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if global_step > updates_start and iteration % args.target_network_frequency == 0:
            target_network.load_state_dict(q_network.state_dict())
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
