# QDagger (Agarwal et al. 2022) in JAX: a DQN student and its teacher; docs: docs/algorithms/qdagger_dqn_atari_jax_impalacnn.md
import glob
import json
import os
import random
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass

import ale_py
import flax
import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from flax.training import train_state
from stable_baselines3.common.atari_wrappers import ClipRewardEnv, EpisodicLifeEnv, FireResetEnv, MaxAndSkipEnv, NoopResetEnv
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
    """the replay memory size in frames of the teacher's buffer, then the student's (one at a time; 1M frames take 7.1 GB)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 1.0
    """the target network update rate (1.0 copies the Q-network)"""
    target_network_frequency: int = 1000
    """the number of vector steps (offline: updates) between target network updates"""
    batch_size: int = 32
    """the batch size of sample from the replay memory"""
    start_e: float = 1.0
    """the starting epsilon for exploration"""
    end_e: float = 0.01
    """the ending epsilon for exploration"""
    exploration_fraction: float = 0.10
    """the fraction of `total-timesteps` it takes from start-e to go end-e"""
    learning_starts: int = 80000
    """timestep of the online phase to start learning"""
    train_frequency: int = 4
    """the number of vector steps between gradient steps"""
    teacher_model_path: str | None = None
    """the teacher: a `.cleanrl_model` saved by `dqn_atari_jax.py --save-model` on the same game"""
    teacher_model_repo: str | None = None
    """or a Hugging Face Hub repository made by `dqn_atari_jax.py --upload-model` (downloads its `dqn_atari_jax.cleanrl_model`)"""
    teacher_eval_episodes: int = 10
    """the number of whole games the teacher plays (epsilon 0.05) to measure the return the student must reach"""
    teacher_steps: int = 500000
    """the number of steps the teacher acts to fill the teacher's replay buffer"""
    teacher_start_e: float = 0.1
    """the teacher's epsilon at its first step, falling linearly to end-e at its last (the original starts at 1.0)"""
    offline_steps: int = 500000
    """the number of student updates on the teacher's buffer before the student acts"""
    temperature: float = 1.0
    """the temperature of the softmax over Q-values in the distillation loss"""

    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
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
    total_timesteps: int = 10000000
    """total timesteps of the student's online phase (agent steps: 4 emulator frames each)"""
    checkpoint_interval: int = 0
    """environment steps between checkpoints in `runs/{run_name}/checkpoint.pt` (0 = off; needs cleanrl_utils)"""
    checkpoint_buffer: bool = False
    """whether checkpoints hold the phase's replay buffer (7.1 GB by default); else a resumed run refills it first"""
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


class TeacherNetwork(nn.Module):
    """dqn_atari_jax.py's QNetwork, the Nature DQN CNN, layer for layer: its saved parameters load as they are."""

    action_dim: int

    @nn.compact
    def __call__(self, x: jnp.ndarray):
        x = jnp.transpose(x, (0, 2, 3, 1)) / 255.0  # flax convolutions are NHWC: the 4 stacked frames are the channels
        x = nn.relu(nn.Conv(32, kernel_size=(8, 8), strides=(4, 4), padding="VALID")(x))
        x = nn.relu(nn.Conv(64, kernel_size=(4, 4), strides=(2, 2), padding="VALID")(x))
        x = nn.relu(nn.Conv(64, kernel_size=(3, 3), strides=(1, 1), padding="VALID")(x))
        x = x.reshape((x.shape[0], -1))  # 7 x 7 x 64 = 3136
        x = nn.relu(nn.Dense(512)(x))
        return nn.Dense(self.action_dim)(x)


class ConvSequence(nn.Module):
    """IMPALA's stack: conv 3x3, max-pool 3x3 stride 2 (halving height and width, rounding up), two residual blocks."""

    channels: int

    @nn.compact
    def __call__(self, x):
        # padded by 1 on both sides (with -inf) as torch's max_pool2d: "SAME" would pad only after and shift the windows
        x = nn.max_pool(nn.Conv(self.channels, (3, 3), padding=1)(x), (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        for _ in range(2):  # a residual block: x + conv(relu(conv(relu(x))))
            block = nn.Conv(self.channels, (3, 3), padding=1)(nn.relu(x))  # built first: Conv_1 as torch's res_convs[0]
            x = x + nn.Conv(self.channels, (3, 3), padding=1)(nn.relu(block))
        return x


class QNetwork(nn.Module):
    """The student, the IMPALA CNN (Espeholt et al. 2018), larger than the teacher as in the paper; uint8 in, scaled here."""

    action_dim: int

    @nn.compact
    def __call__(self, x: jnp.ndarray):
        x = jnp.transpose(x, (0, 2, 3, 1)) / 255.0  # NHWC, as the teacher
        for channels in [16, 32, 32]:
            x = ConvSequence(channels)(x)
        x = nn.relu(x.reshape((x.shape[0], -1)))  # 11 x 11 x 32 = 3872
        x = nn.relu(nn.Dense(256)(x))
        return nn.Dense(self.action_dim)(x)


class TrainState(train_state.TrainState):
    target_params: flax.core.FrozenDict  # the target network's parameters travel with the online ones

    def update_target(self, tau):  # tau 1 copies the Q-network
        return self.replace(target_params=optax.incremental_update(self.params, self.target_params, tau))


def distillation_loss(teacher_q, student_q, temperature):
    """QDagger's distillation term: the cross-entropy H(softmax(teacher_q / T), softmax(student_q / T)), averaged
    over the batch (upstream's JAX script averages the KL instead: it differs by the teacher's entropy, a constant)."""
    teacher_probs = jax.nn.softmax(teacher_q / temperature, axis=1)
    return -(teacher_probs * jax.nn.log_softmax(student_q / temperature, axis=1)).sum(axis=1).mean()


def distill_coefficient(student_returns, teacher_mean_return, min_games=10):
    """How much the student still imitates online: 1 - min(1, its mean recent score / the teacher's mean score), so 0
    once it matches the teacher; 1 until `min_games` whole games. A teacher <= 0: 1 while the student is below, else 0."""
    if len(student_returns) < min_games:
        return 1.0
    student_mean = float(np.mean(student_returns))
    if teacher_mean_return <= 0:
        return float(student_mean < teacher_mean_return)
    return 1.0 - min(1.0, max(0.0, student_mean / teacher_mean_return))


def load_teacher(args):
    """The teacher's file (from the Hub if asked) and its parameters, or one line saying why it cannot be the teacher."""
    path = args.teacher_model_path
    if args.teacher_model_repo is not None:  # the user asked for the network
        from huggingface_hub import hf_hub_download

        try:
            path = hf_hub_download(args.teacher_model_repo, "dqn_atari_jax.cleanrl_model")
        except (OSError, ValueError) as e:  # offline, no such repository or file
            fail(f"--teacher-model-repo {args.teacher_model_repo}: {type(e).__name__}: {str(e).splitlines()[0]}")
    if not os.path.isfile(path):
        fail(f"--teacher-model-path {path}: no such file")
    try:  # msgpack raises what it meets in another format (a torch zip file), a dict of other layers a KeyError
        with open(path, "rb") as f:
            params = flax.serialization.msgpack_restore(f.read())
        teacher_actions = params["params"]["Dense_1"]["bias"].shape[0]
    except Exception as e:
        fail(
            f"{path}: not a model saved by dqn_atari_jax.py --save-model ({type(e).__name__}: {str(e).partition(chr(10))[0]})"
        )
    expected = jax.eval_shape(TeacherNetwork(teacher_actions).init, jax.random.PRNGKey(0), jnp.zeros((1, 4, 84, 84)))
    if jax.tree_util.tree_map(np.shape, params) != jax.tree_util.tree_map(np.shape, expected):  # the layers, not run
        fail(f"{path}: not a model saved by dqn_atari_jax.py --save-model (its layers are not the Nature CNN's)")
    if teacher_actions != (n_actions := gym.make(args.env_id).action_space.n):
        fail(f"{path}: the teacher has {teacher_actions} actions, the game {n_actions}: use a teacher of the same game")
    return path, params


def linear_schedule(start_e: float, end_e: float, duration: int, t: int) -> float:
    return max((end_e - start_e) / duration * t + start_e, end_e)  # then stays at end_e


def check_args(args):
    """Every check of the flags, before heavy work: a bad input ends with one line naming the flag, exit code 2."""
    positive = ["total_timesteps", "num_envs", "buffer_size", "batch_size", "target_network_frequency", "train_frequency"]
    for flag in positive + ["teacher_steps", "teacher_eval_episodes", "temperature", "eval_episodes"]:
        if getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    for flag in ["checkpoint_interval", "learning_starts", "offline_steps", "eval_interval"]:
        if getattr(args, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}")
    if not 0 <= args.seed < 2**32:
        fail(f"--seed must be in [0, 2**32) (numpy's seed range), got {args.seed}")
    if args.learning_starts >= args.total_timesteps:
        fail(f"--learning-starts {args.learning_starts} must be below --total-timesteps {args.total_timesteps}")
    for flag in ["exploration_fraction", "tau"]:
        if not 0.0 < getattr(args, flag) <= 1.0:
            fail(f"--{flag.replace('_', '-')} must be in (0, 1], got {getattr(args, flag)}")
    if args.buffer_size < max(args.batch_size, 16 * args.num_envs):  # a stack needs 5 live frames per env; a margin
        fail(f"--buffer-size {args.buffer_size} must hold --batch-size {args.batch_size} and 16 frames per env")
    if (args.teacher_model_path is None) == (args.teacher_model_repo is None):
        fail("give exactly one teacher: --teacher-model-path (a dqn_atari_jax.py model) or --teacher-model-repo (a Hub repo)")
    try:
        env = gym.make(args.env_id)  # a `module:EnvName-v0` id imports its module, which registers the env
    except (gym.error.Error, ModuleNotFoundError) as e:
        fail(f"--env-id {args.env_id}: {e}")
    if not hasattr(env.unwrapped, "ale") or len(getattr(env.observation_space, "shape", None) or ()) not in (2, 3):
        fail(f"--env-id {args.env_id} is not an ALE game with image observations: this script trains on Atari; use dqn_jax.py")
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
    teacher_path, teacher_params = (None, None) if checkpoint else load_teacher(args)  # a resumed run's is in its checkpoint
    num_iterations = args.total_timesteps // args.num_envs  # online vector steps
    total_steps = num_iterations * args.num_envs  # the online budget in whole vector steps: what the run does
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
    # one step axis: offline update k at k, online step s at offline_steps + s; purge_step: a resume logs no step twice
    logged = checkpoint["state"]["offline_step"] + checkpoint["global_step"] if checkpoint else None
    writer = SummaryWriter(run_dir, purge_step=logged + 1 if checkpoint else None)
    if not checkpoint:  # a resumed run keeps its first table
        table = "\n".join(f"|{key}|{value}|" for key, value in vars(args).items())
        writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")

    # TRY NOT TO MODIFY: seeding (JAX picks its device itself: a GPU when jax[cuda] is installed and sees one)
    random.seed(args.seed)
    np.random.seed(args.seed)
    device = jax.devices()[0].platform

    # env setup: SAME_STEP autoreset returns the reset observation at once and the real last one in infos["final_obs"]
    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, i, args.capture_video, run_name) for i in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    q_network, teacher = QNetwork(action_dim=envs.single_action_space.n), TeacherNetwork(action_dim=envs.single_action_space.n)
    params = q_network.init(jax.random.PRNGKey(args.seed), envs.single_observation_space.sample()[None])
    tx = optax.adam(learning_rate=args.learning_rate)
    q_state = TrainState.create(apply_fn=q_network.apply, params=params, target_params=params, tx=tx)
    student_q_values, teacher_q_values = jax.jit(q_network.apply), jax.jit(teacher.apply)
    rb = FrameReplayBuffer(args.buffer_size, args.num_envs, envs.single_observation_space)  # the teacher's, then the student's
    phase, teacher_step, offline_step, global_step = "teacher", 0, 0, 0
    updates_start = args.learning_starts  # online learning starts after this step (later on a refill)
    recent_returns = deque(maxlen=10)  # the student's last whole games (as the original): the distillation coefficient's
    obs, _ = envs.reset(seed=args.seed)
    teacher_returns, eval_seed = None, args.seed + 100_000  # the teacher's and the student's evaluations: the same games

    def checkpoint_state():  # what a checkpoint holds; the phase's replay buffer only with --checkpoint-buffer
        state = dict(q_state=q_state, teacher=teacher_params, envs=envs, obs=obs, phase=phase, teacher_returns=teacher_returns)
        state |= dict(teacher_step=teacher_step, offline_step=offline_step, global_step=global_step)
        return state | dict(recent_returns=recent_returns, rb=rb if args.checkpoint_buffer else None)

    def save_and_evaluate(model_path, seed, video=False):  # the evaluations of --eval-interval and --save-model
        with open(model_path, "wb") as f:
            f.write(flax.serialization.to_bytes(q_state.params))
        from cleanrl_utils.evals.dqn_jax_eval import evaluate

        return evaluate(model_path, make_env, args.env_id, args.eval_episodes, f"{run_name}-eval", QNetwork, 0.05, video, seed)

    run_state = None
    if args.checkpoint_interval or args.eval_interval or args.save_model or checkpoint:  # needs cleanrl_utils
        from cleanrl_utils.run_state import RunState

        run_state = RunState(run_dir, args, writer, checkpoint, save_and_evaluate)
        if checkpoint:
            saved = run_state.restore(checkpoint_state())
            q_state, teacher_params, obs, phase = saved["q_state"], saved["teacher"], saved["obs"], saved["phase"]
            teacher_step, offline_step, global_step = saved["teacher_step"], saved["offline_step"], saved["global_step"]
            teacher_returns, recent_returns = saved["teacher_returns"], saved["recent_returns"]
            if not args.checkpoint_buffer and phase == "online":
                updates_start = run_state.refill(global_step, args.learning_starts)
            elif not args.checkpoint_buffer:  # the offline updates need the teacher's data: it plays again from its start
                teacher_step = 0
                print(f"no buffer in the checkpoint: the teacher refills it for {args.teacher_steps} steps", file=sys.stderr)
            if not saved["envs"]:  # they could not be pickled (e.g. while recording video): new games
                obs, _ = envs.reset(seed=args.seed + teacher_step + offline_step + global_step)
    if not checkpoint:  # a resumed run restored the teacher and its scores
        from cleanrl_utils.evals.dqn_jax_eval import evaluate  # epsilon 0.05, as dqn_atari_jax.py's evaluation

        teacher_returns = evaluate(
            teacher_path, make_env, args.env_id, args.teacher_eval_episodes, "", TeacherNetwork, 0.05, False, eval_seed
        )
        writer.add_scalar("charts/teacher/avg_episodic_return", np.mean(teacher_returns), 0)
    teacher_mean = float(np.mean(teacher_returns))
    teacher_params = jax.device_put(teacher_params)  # once: every update reads them

    @jax.jit
    def qdagger_update(q_state, teacher_params, distill_coeff, obs, actions, next_obs, rewards, terminations):
        # no bootstrap where the episode terminated (a lost life too); the ALE's time limit is not stored as one
        target = rewards + args.gamma * q_network.apply(q_state.target_params, next_obs).max(axis=1) * (1.0 - terminations)
        teacher_q = teacher.apply(teacher_params, obs)  # outside the loss: the gradient reaches the student only

        def loss_fn(params):
            student_q = q_network.apply(params, obs)
            old_val = student_q[jnp.arange(len(obs)), actions]
            td_loss, distill_loss = ((target - old_val) ** 2).mean(), distillation_loss(teacher_q, student_q, args.temperature)
            loss = td_loss + distill_coeff * distill_loss  # distill_coeff is traced: a new value compiles nothing
            return loss, {"loss": loss, "td_loss": td_loss, "distill_loss": distill_loss, "q_values": old_val.mean()}

        grads, losses = jax.grad(loss_fn, has_aux=True)(q_state.params)
        return q_state.apply_gradients(grads=grads), losses

    def play(q_values_fn, network_params, epsilon, step):
        """One vector step, epsilon-greedy on a network, stored in rb; the (score, length) of the whole games it ended."""
        global obs
        explore = np.random.random(args.num_envs) < epsilon
        actions = np.random.randint(envs.single_action_space.n, size=args.num_envs)
        if not explore.all():  # the network runs only when some environment exploits
            actions = np.where(explore, actions, np.asarray(q_values_fn(network_params, obs).argmax(axis=1)))
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        if not np.isfinite(rewards).all():
            sys.exit(f"error: the environment returned a non-finite reward at {phase} step {step}; stopping")
        real_next_obs = next_obs.copy()  # where an episode ended, next_obs is already the next one's first
        if "final_obs" in infos:
            real_next_obs[infos["_final_obs"]] = np.stack(infos["final_obs"][infos["_final_obs"]])
        # the done flag is termination only (a lost life included): a truncated game bootstraps from its last frame
        rb.add(obs, real_next_obs, actions, rewards, terminations, truncations)
        obs, games = next_obs, np.flatnonzero(infos.get("final_info", {}).get("_episode", []))
        return [(float(infos["final_info"]["episode"]["r"][i]), int(infos["final_info"]["episode"]["l"][i])) for i in games]

    def log_losses(prefix, losses, step):  # every 100 updates: float() waits for the device
        if not np.isfinite(float(losses["loss"])):
            sys.exit(f"error: the loss turned non-finite at {phase} step {step}; stopping (no model saved)")
        for name, value in losses.items():
            writer.add_scalar(f"{prefix}/{name}", float(value), step)

    def end_of_step(step, advance, stats):
        """About 20 reports a phase on its bar, then the checkpoint call (run_state's interval counts online steps)."""
        every = max(1, progress.total // 20)
        if step // every > (step - advance) // every or step >= progress.total:
            rate = (step - start_step) / (time.time() - start_time)
            progress.set_postfix_str(f"{phase}, {rate:.0f}/s, {stats}", refresh=False)
            progress.update(step - progress.n)
            if progress.disable:
                left = (progress.total - step) / max(rate, 1e-9)  # seconds, at the speed so far
                timing = f"{tqdm.format_interval(time.time() - start_time)} elapsed, {tqdm.format_interval(left)} left"
                print(f"step {step}/{progress.total} ({phase}), {rate:.0f}/s, {stats}, {timing}", flush=True)
        interval = args.checkpoint_interval  # the teacher's and the offline phase's checkpoints: at their own steps
        if run_state and phase != "online" and interval and step // interval > (step - advance) // interval:
            run_state.save(global_step, checkpoint_state(), finished=False)
        if run_state:
            run_state.step(global_step, checkpoint_state)

    print(f"{run_name}: training to {total_steps} steps on {device}; TensorBoard logs in {run_dir}", flush=True)
    print(f"the teacher scores {teacher_mean:.1f} on average over {len(teacher_returns)} games: {teacher_returns}")

    if phase != "online":
        # 1. the teacher fills a replay buffer (the paper does not assume the teacher's own buffer is at hand; Fig. A.19)
        phase, teacher_games, start_time, start_step = "teacher", deque(maxlen=10), time.time(), teacher_step
        # a bar on a terminal; disable=None turns it off where stdout is not one (a log file), and the loop prints lines
        progress = tqdm(total=args.teacher_steps, initial=teacher_step, unit="step", file=sys.stdout, disable=None)
        while teacher_step < args.teacher_steps:
            teacher_step += args.num_envs
            epsilon = linear_schedule(args.teacher_start_e, args.end_e, args.teacher_steps, teacher_step)
            teacher_games.extend(score for score, _ in play(teacher_q_values, teacher_params, epsilon, teacher_step))
            recent = f"teacher's return {np.mean(teacher_games):.1f}" if teacher_games else "teacher's return -"
            end_of_step(teacher_step, args.num_envs, recent)
        progress.close()

        # 2. offline: the student learns from the teacher's data alone, the distillation at full weight
        phase, start_time, start_step = "offline", time.time(), offline_step
        progress = tqdm(total=args.offline_steps, initial=offline_step, unit="update", file=sys.stdout, disable=None)
        while offline_step < args.offline_steps:
            offline_step += 1
            batch = [tensor.numpy() for tensor in rb.sample(args.batch_size, "cpu")]  # CPU tensors: no copy
            q_state, losses = qdagger_update(q_state, teacher_params, 1.0, *batch)
            if offline_step % args.target_network_frequency == 0:
                q_state = q_state.update_target(args.tau)
            if offline_step % 100 == 0 or offline_step == args.offline_steps:
                log_losses("offline", losses, offline_step)
            end_of_step(offline_step, 1, f"distillation loss {float(losses['distill_loss']):.3f}")
        progress.close()

        rb = None  # the teacher's buffer goes before the student's fills: one full buffer in memory at a time
        rb = FrameReplayBuffer(args.buffer_size, args.num_envs, envs.single_observation_space)
        obs, _ = envs.reset(seed=args.seed + 1)  # the student starts its own games

    # 3. online: the student acts and learns; the distillation fades as its score nears the teacher's
    phase, start_time, start_step = "online", time.time(), global_step
    progress = tqdm(total=total_steps, initial=global_step, unit="step", file=sys.stdout, disable=None)
    for iteration in range(global_step // args.num_envs + 1, num_iterations + 1):
        global_step += args.num_envs
        log_step = args.offline_steps + global_step
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
        for episodic_return, episodic_length in play(student_q_values, q_state.params, epsilon, global_step):
            recent_returns.append(episodic_return)
            writer.add_scalar("charts/episodic_return", episodic_return, log_step)
            writer.add_scalar("charts/episodic_length", episodic_length, log_step)

        # ALGO LOGIC: training
        if global_step > updates_start:
            if iteration % args.train_frequency == 0:
                distill_coeff = distill_coefficient(recent_returns, teacher_mean)
                batch = [tensor.numpy() for tensor in rb.sample(args.batch_size, "cpu")]
                q_state, losses = qdagger_update(q_state, teacher_params, distill_coeff, *batch)
                if iteration % (100 * args.train_frequency) == 0:
                    log_losses("losses", losses, log_step)
                    writer.add_scalar("charts/distill_coeff", distill_coeff, log_step)
                    writer.add_scalar("charts/epsilon", epsilon, log_step)
                    writer.add_scalar("charts/SPS", int((global_step - start_step) / (time.time() - start_time)), log_step)
            if iteration % args.target_network_frequency == 0:
                q_state = q_state.update_target(args.tau)

        recent = f"return {np.mean(recent_returns):.1f}" if recent_returns else "return -"
        end_of_step(global_step, args.num_envs, recent)

    progress.close()
    if not all(np.isfinite(leaf).all() for leaf in jax.tree_util.tree_leaves(jax.device_get(q_state.params))):
        sys.exit(f"error: the loss turned non-finite by step {global_step} (the weights hold NaN); stopping (no model saved)")
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
