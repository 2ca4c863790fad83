"""Run state for every cleanrl script: checkpoints, --resume, SIGTERM and the run-folder lock, in one place.

A script imports this module only when asked to (`--checkpoint-interval N` or `--resume RUN_DIR`), so a copied
script still trains without the package. It names WHAT a checkpoint holds in one dict; everything about HOW is
here:

    args = tyro.cli(Args)
    checkpoint = None
    if args.resume:  # the saved run's args under the flags given now; refuses (exit 2) what it cannot continue
        from cleanrl_utils.run_state import load_checkpoint
        args, checkpoint = load_checkpoint(Args, args, __file__)
    ...                                       # the run folder, the writer (purge_step from checkpoint["global_step"])
    run_state = None
    if args.checkpoint_interval or checkpoint:
        from cleanrl_utils.run_state import RunState
        run_state = RunState(run_dir, args, writer, checkpoint)
    def checkpoint_state():                   # what a checkpoint holds
        return {"agent": agent, "optimizer": optimizer, "envs": envs, "global_step": global_step, ...}
    if checkpoint:
        saved = run_state.restore(checkpoint_state())
    for iteration in ...:
        ...
        if run_state:
            run_state.step(global_step, checkpoint_state)   # at the interval; on SIGTERM: checkpoint, exit 143
    if run_state:
        run_state.finish(global_step, checkpoint_state)     # so the run can be extended with a larger budget

A checkpoint entry is stored by what it is: an object with `state_dict()` (torch modules and optimizers, the
Atari replay buffers) by its state dict, loaded back in place; a flax TrainState by flax's state dict of numpy
arrays, restored as a new TrainState; Stable-Baselines3's `ReplayBuffer` by its filled rows,
loaded back in place; a numpy `Generator` by its bit generator's state;
a Gymnasium `SyncVectorEnv` by its pickled sub-environments with their emulator or physics state (see
`snapshot_envs`); anything else (the step counter, an observation, a JAX PRNG key) as it is, JAX arrays as numpy
ones, and a tensor in it comes back on the device of the one it replaces. Python's, numpy's and
torch's global RNGs are always saved.

Data-parallel scripts (torch.distributed, one process per rank) pass `rank` and `world_size` to `resolve_args`, and
to RunState the keys of the entries each rank holds for itself (`per_rank=("envs", "next_obs")`): every rank calls
`step` and `finish`, the SIGTERM flag is shared (any rank's signal stops all of them at the same iteration), and rank
0 alone holds the lock and writes ONE checkpoint: the shared entries once, each rank's own entries and global RNGs
gathered under "ranks"; on resume each rank takes its own part, and a different world size is refused.

The previous checkpoint is kept as `checkpoint.prev.pt` until the next one is written, so one that cannot be read (a
damaged disk, a partial copy) still leaves a good one.
"""

import dataclasses
import fcntl
import math
import os
import pickle
import random
import shutil
import signal
import sys
import threading
from typing import NoReturn

import cloudpickle
import gymnasium as gym
import numpy as np
import torch

CHECKPOINT = "checkpoint.pt"
PREVIOUS = "checkpoint.prev.pt"
FORMAT = 2  # the layout of the dict written below; an older one is refused with a clear line
# the only Args a resumed run may change: its budget, its evaluations and its outputs. Any other field shaped the saved state
# (env counts, network and buffer sizes) or the learning it continues, and a change would not continue the same run
CHANGEABLE_ON_RESUME = {
    "total_timesteps",
    "checkpoint_interval",
    "resume",
    "track",
    "wandb_project_name",
    "wandb_entity",
    "capture_video",
    "save_model",
    "upload_model",
    "hf_entity",
    "cuda",
    "eval_interval",
    "eval_episodes",
}

_held_locks: dict[str, int] = {}  # run folder -> the descriptor whose flock says a live process owns it


def refuse(message: str) -> NoReturn:
    """What cannot be honoured ends before anything is touched: one line on stderr, exit code 2."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def lock_run_folder(run_dir: str):
    """Hold an exclusive lock on the run folder for the life of this process: a second process training or
    resuming the same folder would interleave checkpoints and TensorBoard points. The kernel drops the lock when the
    process dies, however it dies, so a killed run never leaves a stale lock behind."""
    run_dir = os.path.realpath(run_dir)
    if run_dir in _held_locks:
        return
    descriptor = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        refuse(f"{run_dir} is being trained or resumed by another live process; wait for it to end (or stop it)")
    _held_locks[run_dir] = descriptor


def resolve_args(args_class, args, script_file: str, rank: int = 0, world_size: int = 1):
    """The Args of a run started with `--config FILE` (the file's values under the flags given now) or continued with
    `--resume RUN_DIR` (see load_checkpoint), and the checkpoint to continue from (None for a new run)."""
    if args.config and args.resume:
        refuse(
            "--config and --resume together: a resumed run continues with its saved arguments (flags may change its budget)"
        )
    if args.resume:
        return load_checkpoint(args_class, args, script_file, rank, world_size)
    from cleanrl_utils.config import load_config

    values = load_config(args_class, args.config, args.env_id, os.path.basename(script_file))
    return _parse_again(args_class, args_class(**values)), None


def load_checkpoint(args_class, args, script_file: str, rank: int = 0, world_size: int = 1):
    """`--resume RUN_DIR`: the saved run's Args with the flags given now over them, and its checkpoint. Refuses,
    with exit code 2 and the folder untouched, what a resume cannot continue exactly: a missing or unreadable
    checkpoint, another script's folder, a changed field other than the budget and the outputs, a budget below the
    steps already done, a folder another process holds, another number of data-parallel ranks. Ranks other than 0
    read the same file without taking the lock rank 0 holds."""
    run_dir = args.resume.rstrip("/")
    path, previous = os.path.join(run_dir, CHECKPOINT), os.path.join(run_dir, PREVIOUS)
    if not os.path.isdir(run_dir):
        refuse(f"--resume {run_dir}: no such folder")
    if not os.path.isfile(path):
        hint = f"; the previous one, {previous}, is there: rename it to {CHECKPOINT} to resume from it"
        refuse(
            f"--resume {run_dir}: no {CHECKPOINT} there (a run writes one with --checkpoint-interval)"
            + (hint if os.path.isfile(previous) else "")
        )
    if rank == 0:
        lock_run_folder(run_dir)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
        if not isinstance(checkpoint, dict) or checkpoint.get("format") != FORMAT:
            raise ValueError("not a checkpoint of this version of cleanrl")
    except Exception as e:  # torch.load raises what its unpickler meets: any of them means the file is unusable
        good = f"the previous checkpoint {previous} is kept: rename it to {CHECKPOINT} to resume from it"
        refuse(
            f"--resume: {path} cannot be read ({type(e).__name__}: {e}); "
            + (good if os.path.isfile(previous) else "no older one exists")
        )
    script = os.path.basename(script_file)
    if checkpoint["script"] != script:
        refuse(f"--resume {run_dir}: that run was made by {checkpoint['script']}; resume it with that script, not {script}")

    try:
        saved_args = args_class(**checkpoint["args"])
    except TypeError as e:  # the script's Args changed since the run was saved
        refuse(f"--resume {run_dir}: its saved arguments do not fit this version of {script} ({e})")
    args = _parse_again(args_class, saved_args)
    changed = [
        f"--{field.name.replace('_', '-')} {getattr(saved_args, field.name)} -> {getattr(args, field.name)}"
        for field in dataclasses.fields(args_class)
        if field.name not in CHANGEABLE_ON_RESUME and getattr(args, field.name) != getattr(saved_args, field.name)
    ]
    if changed:
        refuse(
            f"--resume continues a run as it was started, only --total-timesteps and the outputs may change; "
            f"changed: {', '.join(changed)} (start a new run for that)"
        )
    saved_world_size = len(checkpoint.get("ranks") or [None])
    if saved_world_size != world_size:
        refuse(
            f"--resume {run_dir}: that run had {saved_world_size} rank(s) (processes) and this one has {world_size}; "
            f"resume it with {saved_world_size} in all (torchrun's --nnodes x --nproc-per-node)"
        )
    done = checkpoint["global_step"]
    if args.total_timesteps < done:
        refuse(f"--total-timesteps {args.total_timesteps} is below the {done} steps {run_dir} has done; give more")
    if checkpoint["finished"] and args.total_timesteps <= saved_args.total_timesteps:
        refuse(
            f"{run_dir} finished its {done} steps; to extend it, give a --total-timesteps above {saved_args.total_timesteps}"
        )
    if checkpoint["wandb_run_id"]:  # with --track, wandb.init reads these: the resumed run appends to its own W&B run
        os.environ.setdefault("WANDB_RUN_ID", checkpoint["wandb_run_id"])
        os.environ.setdefault("WANDB_RESUME", "allow")
    if rank == 0:
        print(f"resuming {run_dir} at step {done} of {args.total_timesteps}", flush=True)
    return args, checkpoint


def _parse_again(args_class, defaults):
    """The command line parsed again with `defaults` (a config file's, a saved run's) in place of the script's, so
    that only the flags given now override them."""
    import tyro

    return tyro.cli(args_class, default=defaults)


def snapshot_envs(envs: gym.vector.SyncVectorEnv) -> bytes | None:
    """The sub-environments pickled with everything that continues an episode: their wrappers (time limits, episode
    statistics, frame stacks, lives), their RNGs and, for the families that pickle as their constructor's arguments
    only (EzPickle), the simulator itself: the ALE emulator with its RNG, MuJoCo's physics. None where they cannot be
    pickled (a video recorder holds a file handle): the resumed run then starts new episodes. The vector env steps in
    SAME_STEP autoreset mode, as every script makes it, so no reset is pending between two steps."""
    try:
        return cloudpickle.dumps([(env, _simulator_state(env)) for env in envs.envs])
    except (pickle.PicklingError, TypeError, AttributeError, ValueError):  # ValueError: ctypes pointers
        return None


def _simulator_state(env):
    unwrapped = env.unwrapped
    if hasattr(unwrapped, "ale"):  # ale-py's AtariEnv; np_random drives its no-op and sticky-action choices
        return "ale", unwrapped.ale.cloneState(include_rng=True), unwrapped.np_random
    mujoco = sys.modules.get("mujoco")
    if mujoco is not None and isinstance(getattr(unwrapped, "data", None), mujoco.MjData):
        state = np.empty(mujoco.mj_stateSize(unwrapped.model, mujoco.mjtState.mjSTATE_INTEGRATION))
        mujoco.mj_getState(unwrapped.model, unwrapped.data, state, mujoco.mjtState.mjSTATE_INTEGRATION)
        return "mujoco", state, unwrapped.np_random
    return None  # pure-Python envs (classic control, dm_control through shimmy) pickle whole


def restore_envs(envs: gym.vector.SyncVectorEnv, snapshot: bytes):
    """Put the pickled sub-environments in place of the freshly made ones, in the same vector env."""
    restored = []
    for env, simulator in pickle.loads(snapshot):
        if simulator is not None:
            kind, state, np_random = simulator
            if kind == "ale":
                env.unwrapped.ale.restoreState(state)
            else:
                import mujoco

                mujoco.mj_setState(env.unwrapped.model, env.unwrapped.data, state, mujoco.mjtState.mjSTATE_INTEGRATION)
            env.unwrapped.np_random = np_random
        restored.append(env)
    if len(restored) != envs.num_envs:  # the resume checks refuse a changed --num-envs before this point
        raise ValueError(f"the checkpoint holds {len(restored)} environments, the run has {envs.num_envs}")
    for env in envs.envs:
        env.close()
    envs.envs = restored


class RunState:
    """What runs beside a script's training loop: checkpoints (at every `--checkpoint-interval` steps, on SIGTERM, then
    exit 143, and when the run ends, holding the run-folder lock while the run lives), the evaluations of
    `--eval-interval`, and with `--save-model` the final model and its evaluation.

    `evaluate(model_path, seed, video=False) -> returns` is the script's own: it saves the model at
    `model_path` as enjoy loads it and plays `--eval-episodes` episodes with the script's evaluator (greedy or
    deterministic, normalization statistics frozen). Evaluations during training run on their own env with their own
    seed (the same episodes each time, so two evaluations compare policies, not draws), and the global RNGs are put
    back afterwards: a seeded run learns the same with or without them.

    `per_rank` (data-parallel scripts, see the module's docstring): the keys of the state entries each rank holds
    for itself; the rank and world size are torch.distributed's, and ranks other than 0 pass writer None."""

    def __init__(self, run_dir: str, args, writer, checkpoint: dict | None = None, evaluate=None, per_rank=()):
        self.run_dir, self.args, self.writer, self.evaluate = run_dir, args, writer, evaluate
        self.per_rank = per_rank
        self.rank, self.world_size = 0, 1
        if per_rank and torch.distributed.is_available() and torch.distributed.is_initialized():
            self.rank, self.world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
        self.path, self.previous = os.path.join(run_dir, CHECKPOINT), os.path.join(run_dir, PREVIOUS)
        self.script = os.path.basename(sys.argv[0])
        self.checkpoint = checkpoint
        self.saved_step = self.evaluated_step = checkpoint["global_step"] if checkpoint else 0
        self.best_return = checkpoint.get("best_eval_return", -math.inf) if checkpoint else -math.inf
        self.checkpointing = bool(args.checkpoint_interval or checkpoint)
        self.stop_requested = threading.Event()
        if self.checkpointing and self.rank == 0:
            lock_run_folder(run_dir)
        if self.checkpointing:
            # Slurm and spot instances send SIGTERM before they kill: finish the iteration, checkpoint, exit 143
            signal.signal(signal.SIGTERM, lambda signum, frame: self.stop_requested.set())

    def restore(self, state: dict) -> dict:
        """Load a resumed checkpoint into the objects of `state` (the script's checkpoint dict, freshly built) and
        the global RNGs. Returns the saved entries: the objects themselves, restored in place, and the plain values
        (loop counters, observations) to assign back; a vector env's entry is None where its episodes could not be
        saved, and the script starts new ones."""
        saved, rng = self.checkpoint["state"], self.checkpoint["rng"]
        if self.per_rank:  # this rank's own entries and RNGs
            own = self.checkpoint["ranks"][self.rank]
            saved, rng = {**saved, **own["state"]}, own["rng"]
        if saved.keys() != state.keys():
            refuse(f"--resume: the checkpoint holds {sorted(saved)}, this script {sorted(state)}: a changed script")
        values = {}
        for key, part in state.items():
            if isinstance(part, gym.vector.VectorEnv):
                if saved[key] is None:
                    print(
                        "warning: the checkpoint holds no env state (it could not be pickled); new episodes", file=sys.stderr
                    )
                else:
                    restore_envs(part, saved[key])
                values[key] = part if saved[key] is not None else None
            elif isinstance(part, np.random.Generator):
                part.bit_generator.state = saved[key]
                values[key] = part
            elif _is_sb3_replay_buffer(part):
                _load_replay_buffer(part, saved[key])
                values[key] = part
            elif _is_flax_struct(part):  # immutable: the restored state is a new object
                values[key] = sys.modules["flax.serialization"].from_state_dict(part, saved[key])
            elif hasattr(part, "load_state_dict"):
                part.load_state_dict(saved[key])
                values[key] = part
            else:
                values[key] = _on_device_of(saved[key], part)
        if any(isinstance(part, gym.vector.VectorEnv) and values[key] is None for key, part in state.items()):
            for part in state.values():  # a frame replay buffer ends the episodes it holds where the new games start
                if hasattr(part, "cut_episodes"):
                    part.cut_episodes()
        _set_global_rngs(rng)
        return values

    def refill(self, global_step: int, steps: int) -> int:
        """A resumed run whose checkpoint holds no replay buffer (--checkpoint-buffer was off) acts without learning
        for `steps` steps to refill it: says so, and returns the step after which learning starts again."""
        message = "the checkpoint holds no replay buffer (--checkpoint-buffer was off): refilling it"
        print(f"{message} for {steps} steps, learning again after step {global_step + steps}", file=sys.stderr)
        return global_step + steps

    def step(self, global_step: int, checkpoint_state):
        """Call once per iteration: evaluates when `--eval-interval` is crossed, checkpoints when
        `--checkpoint-interval` is, and on SIGTERM checkpoints and exits with code 143 (128 + SIGTERM, what schedulers
        read as 'terminated')."""
        eval_interval, interval = self.args.eval_interval, self.args.checkpoint_interval
        if eval_interval and global_step // eval_interval > self.evaluated_step // eval_interval and self.rank == 0:
            self.evaluate_during_training(global_step)
        stop = self.stop_requested.is_set()
        if self.world_size > 1 and self.checkpointing:  # every rank stops at the same iteration, whichever got the signal
            stops = [False] * self.world_size
            torch.distributed.all_gather_object(stops, stop)
            stop = any(stops)
        if interval and global_step // interval > self.saved_step // interval or stop:
            self.save(global_step, checkpoint_state(), finished=False)
        if stop:
            if self.rank == 0:
                print(
                    f"SIGTERM at step {global_step}: checkpoint written; continue with --resume {self.run_dir}",
                    file=sys.stderr,
                )
                self.writer.close()
            for part in checkpoint_state().values():  # closing the envs completes a video being recorded
                if isinstance(part, gym.vector.VectorEnv):
                    part.close()
            sys.exit(128 + signal.SIGTERM)

    def finish(self, global_step: int, checkpoint_state) -> list[float] | None:
        """The end of a run: its checkpoint (`--resume` with a larger budget continues from there), then with
        `--save-model` the model, evaluated on episodes the run never saw: their returns."""
        if self.checkpointing:
            self.save(global_step, checkpoint_state(), finished=True)
        if not self.args.save_model or self.rank != 0:
            return None
        episodic_returns = self.evaluate(
            f"{self.run_dir}/{self.args.exp_name}.cleanrl_model", self.args.seed + 100_000, self.args.capture_video
        )
        for episode, episodic_return in enumerate(episodic_returns):  # each episode, for the model card
            self.writer.add_scalar("eval/final_episodic_return", episodic_return, episode)
        self._log_evaluation(global_step, episodic_returns, "final evaluation")
        return episodic_returns

    def evaluate_during_training(self, global_step: int):
        """One evaluation of the policy as it is now, logged at the training step; with --save-model, a policy that
        beats every earlier evaluation is kept as `{exp_name}.best.cleanrl_model`."""
        model_path = os.path.join(self.run_dir, f"{self.args.exp_name}.evaluated.cleanrl_model")
        rngs = _global_rngs()
        try:
            episodic_returns = self.evaluate(model_path, self.args.seed + 200_000)
        finally:
            _set_global_rngs(rngs)
        mean = float(np.mean(episodic_returns))
        if self.args.save_model and mean > self.best_return:
            os.replace(model_path, os.path.join(self.run_dir, f"{self.args.exp_name}.best.cleanrl_model"))
        elif os.path.exists(model_path):
            os.remove(model_path)
        self.best_return = max(self.best_return, mean)
        self.evaluated_step = global_step
        self._log_evaluation(global_step, episodic_returns, f"evaluation at step {global_step}")

    def _log_evaluation(self, global_step: int, episodic_returns: list[float], what: str):
        mean, std = float(np.mean(episodic_returns)), float(np.std(episodic_returns))
        self.writer.add_scalar("eval/episodic_return", mean, global_step)
        self.writer.add_scalar("eval/episodic_return_std", std, global_step)
        print(f"{what}: {mean:.1f} +- {std:.1f} over {len(episodic_returns)} episodes", flush=True)

    def save(self, global_step: int, state: dict, finished: bool):
        """Write the checkpoint atomically (a temporary file, then os.replace): a reader sees the old checkpoint or
        the new one, never half of one. A state holding NaN is never written over a good one; a write error names
        the path and the cause, keeps the previous checkpoint and removes the temporary file."""
        stored = {key: _stored(part) for key, part in state.items() if self.rank == 0 or key in self.per_rank}
        if _holds_nan(stored):
            print(f"error: the state turned NaN by step {global_step}; no checkpoint written, {self._kept()}", file=sys.stderr)
            sys.exit(1)
        ranks = None
        if self.per_rank:  # each rank's own entries and RNGs, gathered on rank 0, which alone writes
            own = {"state": {key: stored.pop(key) for key in self.per_rank}, "rng": _global_rngs()}
            ranks = [None] * self.world_size if self.rank == 0 else None
            if self.world_size > 1:
                torch.distributed.gather_object(own, ranks, dst=0)
            else:
                ranks = [own]
            if self.rank != 0:
                self.saved_step = global_step
                return
        checkpoint = {
            "format": FORMAT,
            "script": self.script,
            "run_name": os.path.basename(os.path.normpath(self.run_dir)),
            "args": dataclasses.asdict(self.args),
            "global_step": global_step,
            "finished": finished,
            "wandb_run_id": wandb.run.id if (wandb := sys.modules.get("wandb")) and wandb.run else None,
            "rng": _global_rngs(),
            "best_eval_return": self.best_return,
            "state": stored,
            **({"ranks": ranks} if ranks else {}),
        }
        self.writer.flush()  # the logged points up to this checkpoint are on disk before it is
        temporary = f"{self.path}.tmp"
        try:
            with open(temporary, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            if os.path.exists(self.path):
                os.replace(self.path, self.previous)
            os.replace(temporary, self.path)
        except (OSError, RuntimeError) as e:
            cause = _cause(e, self.run_dir)  # before the temporary file is removed: a full disk is still full
            if os.path.exists(temporary):
                os.remove(temporary)
            print(f"error: cannot write the checkpoint {self.path}: {cause}; {self._kept()}", file=sys.stderr)
            sys.exit(1)
        self.saved_step = global_step

    def _kept(self) -> str:
        for path in (self.path, self.previous):
            if os.path.exists(path):
                return f"the previous checkpoint {path} (step {self.saved_step}) is intact"
        return "no earlier checkpoint exists"


def _global_rngs() -> dict:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
    }


def _set_global_rngs(rng: dict):
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])


def _stored(part):
    if isinstance(part, gym.vector.VectorEnv):
        return snapshot_envs(part)
    if isinstance(part, np.random.Generator):
        return part.bit_generator.state
    if _is_sb3_replay_buffer(part):
        filled = part.buffer_size if part.full else part.pos  # the rest is zeros: a partly filled buffer stores less
        arrays = {name: value[:filled] for name, value in vars(part).items() if isinstance(value, np.ndarray)}
        return {"pos": part.pos, "full": part.full, **arrays}
    if _is_flax_struct(part):  # numpy arrays in flax's state dict: the checkpoint loads without JAX's devices
        return _to_numpy(sys.modules["flax.serialization"].to_state_dict(part))
    if hasattr(part, "state_dict"):
        return part.state_dict()
    return _to_numpy(part)


def _is_flax_struct(part) -> bool:
    """A flax TrainState (any flax struct: the JAX scripts' networks, optimizer states and targets), imported by the
    script that uses it."""
    struct = sys.modules.get("flax.struct")
    return struct is not None and sys.modules.get("flax.serialization") is not None and isinstance(part, struct.PyTreeNode)


def _to_numpy(value):
    """JAX arrays (a PRNG key, parameters), wherever they sit in a pytree, as numpy arrays on the host; every other
    leaf (a torch tensor too, which jax.device_get would turn into numpy) as it is."""
    jax = sys.modules.get("jax")
    if jax is None:
        return value
    return jax.tree_util.tree_map(lambda leaf: np.asarray(leaf) if isinstance(leaf, jax.Array) else leaf, value)


def _on_device_of(saved, current):
    """A saved plain value (a tensor, or tensors in tuples and lists) on the device of the value it replaces."""
    if isinstance(saved, torch.Tensor) and isinstance(current, torch.Tensor):
        return saved.to(current.device)
    if isinstance(saved, tuple | list) and isinstance(current, tuple | list) and len(saved) == len(current):
        return type(saved)(_on_device_of(s, c) for s, c in zip(saved, current))
    return saved


def _is_sb3_replay_buffer(part) -> bool:
    """Stable-Baselines3's ReplayBuffer, which the non-Atari replay scripts use as upstream cleanrl does (a script
    that uses it has imported it: this module does not)."""
    buffers = sys.modules.get("stable_baselines3.common.buffers")
    return buffers is not None and isinstance(part, buffers.ReplayBuffer)


def _load_replay_buffer(buffer, state: dict):
    for name, rows in state.items():
        if isinstance(rows, np.ndarray):
            getattr(buffer, name)[: len(rows)] = rows
    buffer.pos, buffer.full = state["pos"], state["full"]


def _holds_nan(value) -> bool:
    """NaN anywhere in the floating-point tensors and arrays of a checkpoint (the weights, optimizer moments, a
    stored observation): what a diverged run holds. Infinity is not looked for: some structures use it on purpose
    (a min segment tree's empty leaves)."""
    if isinstance(value, torch.Tensor):
        return value.is_floating_point() and bool(torch.isnan(value).any())
    if isinstance(value, np.ndarray) or hasattr(value, "__array__") and hasattr(value, "dtype"):
        array = np.asarray(value)
        return np.issubdtype(array.dtype, np.floating) and bool(np.isnan(array).any())
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, dict):
        return any(_holds_nan(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_nan(item) for item in value)
    return False


def _cause(error: Exception, folder: str) -> str:
    """An OSError's own words. torch's stream writer reports a full disk as a bare position mismatch
    ("unexpected pos 704 vs 598"): what is left on the device tells it apart."""
    if isinstance(error, OSError):
        return error.strerror or str(error)
    try:
        if shutil.disk_usage(folder).free < 16 * 2**20:
            return "no space left on device"
    except OSError:
        pass
    return str(error)
