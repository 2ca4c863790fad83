"""cleanrl_utils/run_state.py, the one implementation of checkpoints, --resume, SIGTERM and the run-folder lock:
its contract tested once here, in this process, on a small stand-in for a script's state. Each script family keeps
one end-to-end resume test of its own."""

import dataclasses
import fcntl
import os
import pathlib
import random
import signal
import subprocess
import sys
import threading

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import checkpoint_files, refused, scalars
from torch.utils.tensorboard import SummaryWriter

from cleanrl_utils import run_state

SCRIPT = "stand_in.py"


@dataclasses.dataclass
class Args:
    hidden: int = 8
    """a size that shapes the saved state"""
    num_envs: int = 2
    """environments"""
    total_timesteps: int = 100
    """the budget"""
    checkpoint_interval: int = 10
    """steps between checkpoints"""
    resume: str | None = None
    """a run folder to continue"""
    save_model: bool = False
    """an output flag: may change on resume"""
    eval_interval: int = 0
    """steps between evaluations"""
    eval_episodes: int = 3
    """episodes per evaluation"""
    exp_name: str = "stand_in"
    """the experiment's name"""
    seed: int = 1
    """the seed"""
    capture_video: bool = False
    """videos"""
    config: str | None = None
    """a config file"""


class Run:
    """What a script holds: a network, its optimizer, an RNG of its own, vector envs and loop values."""

    def __init__(self, run_dir: pathlib.Path, args: Args, checkpoint=None, env_id="CartPole-v1", evaluate=None):
        self.args, self.global_step = args, 0
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, args.hidden)
        self.optimizer = torch.optim.Adam(self.net.parameters())
        self.rng = np.random.default_rng(0)
        self.envs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * args.num_envs)
        self.obs, _ = self.envs.reset(seed=0)
        self.writer = SummaryWriter(str(run_dir))
        self.state = run_state.RunState(str(run_dir), args, self.writer, checkpoint, evaluate)

    def checkpoint_state(self):
        return dict(net=self.net, optimizer=self.optimizer, rng=self.rng, envs=self.envs, obs=self.obs, step=self.global_step)

    def train(self, steps: int):
        for _ in range(steps):
            self.global_step += self.args.num_envs
            loss = self.net(torch.as_tensor(self.obs)).pow(2).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            self.obs, *_ = self.envs.step(self.rng.integers(0, 2, self.args.num_envs))
            self.state.step(self.global_step, self.checkpoint_state)


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    """A fresh run folder, this process seen as SCRIPT, and no lock carried over from another test."""
    monkeypatch.setattr(sys, "argv", [SCRIPT])
    monkeypatch.setattr(run_state, "_held_locks", {})
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # RunState's SIGTERM handler stays out of pytest
    folder = tmp_path / "runs" / "CartPole-v1__stand_in__1__1"
    folder.mkdir(parents=True)
    return folder


def release_locks():
    """What the exit of the process that trained the run does."""
    for descriptor in run_state._held_locks.values():
        os.close(descriptor)
    run_state._held_locks.clear()


def resume(run_dir, monkeypatch, *flags, script=SCRIPT):
    """`python <script> --resume run_dir <flags>`, as load_checkpoint sees it, after the saving process ended."""
    release_locks()
    monkeypatch.setattr(sys, "argv", [script, "--resume", str(run_dir), *flags])
    return run_state.load_checkpoint(Args, Args(resume=str(run_dir)), script)


def folder_listing(folder: pathlib.Path):
    return sorted((p.name, p.stat().st_mtime_ns) for p in folder.iterdir())


def test_resume_restores_weights_optimizer_rngs_envs_and_loop_values(run_dir, monkeypatch):
    uninterrupted = Run(run_dir.parent / "reference", Args())
    uninterrupted.train(20)

    first = Run(run_dir, Args())
    first.train(7)  # a checkpoint at step 10 (the interval), then 4 steps more that a kill loses
    assert torch.load(run_dir / "checkpoint.pt", weights_only=False)["global_step"] == 10
    torch.manual_seed(123)  # what a new process would have
    np.random.seed(123)

    args, checkpoint = resume(run_dir, monkeypatch)
    second = Run(run_dir, args, checkpoint)
    saved = second.state.restore(second.checkpoint_state())
    second.obs, second.global_step = saved["obs"], saved["step"]
    assert saved["envs"] is second.envs and second.global_step == 10
    second.train(15)
    for a, b in zip(uninterrupted.net.parameters(), second.net.parameters()):
        assert torch.equal(a, b)
    np.testing.assert_array_equal(uninterrupted.obs, second.obs)  # the same episodes, continued
    assert uninterrupted.rng.integers(1 << 30) == second.rng.integers(1 << 30)


@pytest.mark.parametrize("env_id", ["ALE/Breakout-v5", "HalfCheetah-v5", "CartPole-v1"])
def test_env_snapshot_continues_the_same_episode(env_id):
    """ALE and MuJoCo envs pickle as their constructor's arguments: the snapshot carries the emulator's and the
    physics' state (and the RNGs), so a restored env steps on as the original does."""
    if env_id.startswith("ALE/"):
        import ale_py

        gym.register_envs(ale_py)
    same_step = gym.vector.AutoresetMode.SAME_STEP  # as the scripts make them: no reset pending between two steps
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * 2, autoreset_mode=same_step)
    envs.reset(seed=3)
    envs.action_space.seed(3)
    actions = [envs.action_space.sample() for _ in range(30)]
    for action in actions[:10]:
        envs.step(action)
    snapshot = run_state.snapshot_envs(envs)
    restored = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * 2, autoreset_mode=same_step)
    restored.reset(seed=99)
    run_state.restore_envs(restored, snapshot)
    for action in actions[10:]:
        expected, got = envs.step(action), restored.step(action)
        np.testing.assert_array_equal(expected[0], got[0])
        np.testing.assert_array_equal(expected[1], got[1])


def test_unpicklable_envs_are_not_saved_and_the_resume_says_so(run_dir, monkeypatch, capsys):
    run = Run(run_dir, Args())
    run.envs.envs[0].unwrapped.recorder = threading.Lock()  # something that cannot be pickled, as a video recorder
    run.train(5)
    args, checkpoint = resume(run_dir, monkeypatch)
    second = Run(run_dir, args, checkpoint)
    assert second.state.restore(second.checkpoint_state())["envs"] is None
    assert "new episodes" in capsys.readouterr().err


def test_a_stable_baselines3_replay_buffer_is_saved_by_its_filled_rows_and_restored_in_place(run_dir, monkeypatch):
    from stable_baselines3.common.buffers import ReplayBuffer

    def filled_buffer(transitions):
        space = gym.spaces.Box(-1.0, 1.0, (3,))
        buffer = ReplayBuffer(50, space, gym.spaces.Discrete(2), "cpu", n_envs=2, handle_timeout_termination=False)
        for i in range(transitions):
            obs = np.full((2, 3), i, np.float32)
            buffer.add(obs, obs + 1, np.array([i % 2, 1]), np.array([i, -i], np.float32), np.array([i == 3, False]), [])
        return buffer

    run = Run(run_dir, Args())
    saved_buffer = filled_buffer(7)
    run.state.save(14, {"rb": saved_buffer}, finished=False)
    stored = torch.load(run_dir / "checkpoint.pt", weights_only=False)["state"]["rb"]
    assert stored["observations"].shape == (7, 2, 3) and stored["pos"] == 7  # the 18 empty rows are not stored
    args, checkpoint = resume(run_dir, monkeypatch)
    restored = filled_buffer(0)
    assert Run(run_dir, args, checkpoint).state.restore({"rb": restored})["rb"] is restored
    for name in ["observations", "next_observations", "actions", "rewards", "dones"]:
        np.testing.assert_array_equal(getattr(restored, name), getattr(saved_buffer, name))
    assert (restored.pos, restored.full) == (7, False)


def test_a_resumed_run_appends_to_its_own_wandb_run(run_dir, monkeypatch):
    run = Run(run_dir, Args())
    monkeypatch.setitem(sys.modules, "wandb", type("wandb", (), {"run": type("run", (), {"id": "abc123"})}))
    run.train(5)
    monkeypatch.delenv("WANDB_RUN_ID", raising=False)
    monkeypatch.delenv("WANDB_RESUME", raising=False)
    resume(run_dir, monkeypatch)
    assert (os.environ["WANDB_RUN_ID"], os.environ["WANDB_RESUME"]) == ("abc123", "allow")  # what wandb.init reads


def test_checkpoints_at_each_interval_and_when_the_run_ends(run_dir):
    run = Run(run_dir, Args(checkpoint_interval=6))
    steps = []
    save = run.state.save
    run.state.save = lambda step, state, finished: (steps.append((step, finished)), save(step, state, finished))
    run.train(8)
    run.state.finish(run.global_step, run.checkpoint_state)
    assert steps == [(6, False), (12, False), (16, True)]
    assert (run_dir / "checkpoint.prev.pt").exists() and not list(run_dir.glob("*.tmp"))


def test_sigterm_finishes_the_iteration_checkpoints_and_exits_143(run_dir, capsys):
    run = Run(run_dir, Args(checkpoint_interval=0))
    run.train(3)
    assert not (run_dir / "checkpoint.pt").exists()
    run.state.stop_requested.set()  # what RunState's SIGTERM handler does
    with pytest.raises(SystemExit) as exit_info:
        run.train(1)
    assert exit_info.value.code == 143
    assert torch.load(run_dir / "checkpoint.pt", weights_only=False)["global_step"] == 8
    assert f"--resume {run_dir}" in capsys.readouterr().err


def test_a_finished_run_extends_with_a_larger_budget(run_dir, monkeypatch, capsys):
    run = Run(run_dir, Args(total_timesteps=20))
    run.train(10)
    run.state.finish(run.global_step, run.checkpoint_state)
    assert "finished its 20 steps" in refused(capsys, lambda: resume(run_dir, monkeypatch))
    args, checkpoint = resume(run_dir, monkeypatch, "--total-timesteps", "40", "--save-model")
    assert (args.total_timesteps, args.save_model, checkpoint["global_step"]) == (40, True, 20)


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--num-envs", "4"], "changed: --num-envs 2 -> 4"),
        (["--hidden", "16"], "changed: --hidden 8 -> 16"),
        (["--total-timesteps", "5"], "--total-timesteps 5 is below the 10 steps"),
    ],
)
def test_what_a_resume_cannot_continue_is_refused_before_anything_is_touched(run_dir, monkeypatch, capsys, flags, fragment):
    Run(run_dir, Args()).train(5)
    before = folder_listing(run_dir)
    assert fragment in refused(capsys, lambda: resume(run_dir, monkeypatch, *flags))
    assert folder_listing(run_dir) == before


def test_another_scripts_folder_and_missing_checkpoints_are_refused(run_dir, monkeypatch, capsys):
    assert "no checkpoint.pt there" in refused(capsys, lambda: resume(run_dir, monkeypatch))
    assert "no such folder" in refused(capsys, lambda: resume(run_dir / "nope", monkeypatch))
    Run(run_dir, Args()).train(5)
    message = refused(capsys, lambda: resume(run_dir, monkeypatch, script="other.py"))
    assert f"made by {SCRIPT}; resume it with that script, not other.py" in message


@pytest.mark.parametrize("damage", [b"", b"garbage", "truncated"])
def test_an_unreadable_checkpoint_is_named_and_the_previous_one_kept(run_dir, monkeypatch, capsys, damage):
    Run(run_dir, Args()).train(10)  # checkpoints at steps 10 and 20: the previous one is step 10's
    path = run_dir / "checkpoint.pt"
    path.write_bytes(path.read_bytes()[:200] if damage == "truncated" else damage)
    message = refused(capsys, lambda: resume(run_dir, monkeypatch))
    assert f"{path} cannot be read" in message and "checkpoint.prev.pt is kept" in message
    (run_dir / "checkpoint.prev.pt").rename(path)  # as the message says
    assert resume(run_dir, monkeypatch)[1]["global_step"] == 10


def test_a_folder_a_live_process_holds_is_refused(run_dir, monkeypatch, capsys):
    Run(run_dir, Args()).train(5)
    release_locks()
    hold = "import fcntl, os, sys, time; fcntl.flock(os.open(sys.argv[1], os.O_RDONLY), fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", hold, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        monkeypatch.setattr(sys, "argv", [SCRIPT, "--resume", str(run_dir)])
        message = refused(capsys, lambda: run_state.load_checkpoint(Args, Args(resume=str(run_dir)), SCRIPT))
        assert "another live process" in message
    finally:
        holder.kill()
        holder.wait()
    assert resume(run_dir, monkeypatch)[1]["global_step"] == 10  # the kernel dropped the dead holder's lock


def test_a_running_run_holds_its_folder(run_dir):
    Run(run_dir, Args())
    descriptor = os.open(run_dir, os.O_RDONLY)
    with pytest.raises(BlockingIOError):
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(descriptor)


def test_a_full_disk_names_the_path_and_the_cause_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch, capsys):
    """A real full device: a 1 MiB tmpfs (mounting needs root, which the test machines have)."""
    monkeypatch.setattr(sys, "argv", [SCRIPT])
    monkeypatch.setattr(run_state, "_held_locks", {})
    monkeypatch.setattr(signal, "signal", lambda *args: None)
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        run = Run(disk, Args(hidden=4))
        run.train(5)
        good = (disk / "checkpoint.pt").read_bytes()
        run.net = torch.nn.Linear(4, 100_000)  # 1.6 MB of weights: more than the device holds
        with pytest.raises(SystemExit) as exit_info:
            run.train(5)
        err = capsys.readouterr().err
        assert exit_info.value.code == 1 and err.count("\n") == 1, err
        assert f"cannot write the checkpoint {disk / 'checkpoint.pt'}: no space left on device" in err
        assert "is intact" in err
        assert (disk / "checkpoint.pt").read_bytes() == good and not list(disk.glob("*.tmp"))
    finally:
        run.writer.close()
        release_locks()  # the run's lock holds the folder open
        subprocess.run(["umount", str(disk)], check=True)


def test_a_write_error_names_the_path_and_the_cause(run_dir, monkeypatch, capsys):
    run = Run(run_dir, Args())

    def read_only(path, mode="r", *args, **kwargs):
        raise OSError(30, "Read-only file system", path)

    monkeypatch.setattr("builtins.open", read_only)
    with pytest.raises(SystemExit) as exit_info:
        run.train(5)
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert f"cannot write the checkpoint {run_dir / 'checkpoint.pt'}: Read-only file system" in err
    assert "no earlier checkpoint exists" in err and not list(run_dir.glob("*.tmp"))


def test_a_nan_state_is_never_written_over_a_good_checkpoint(run_dir, capsys):
    run = Run(run_dir, Args())
    run.train(5)
    good = (run_dir / "checkpoint.pt").read_bytes()
    with torch.no_grad():
        run.net.weight[0, 0] = float("nan")
    with pytest.raises(SystemExit) as exit_info:
        run.train(5)
    assert exit_info.value.code == 1
    assert "turned NaN by step 20" in capsys.readouterr().err
    assert (run_dir / "checkpoint.pt").read_bytes() == good


def test_infinity_is_not_taken_for_divergence():
    """A min segment tree's empty leaves are +inf on purpose (rainbow_atari.py's replay buffer)."""
    assert not run_state._holds_nan({"tree": np.full(4, np.inf), "weights": torch.ones(2)})
    assert run_state._holds_nan([{"deep": np.array([1.0, np.nan])}])


class Evaluator:
    """A script's save_and_evaluate: saves the network's weights where it is told, draws from every global RNG as a
    policy that samples would, and plays `returns` in turn."""

    def __init__(self, run: Run, returns: list[float]):
        self.run, self.returns, self.calls = run, list(returns), []

    def __call__(self, model_path, seed, video=False):
        self.calls.append((os.path.basename(model_path), seed, video))
        torch.save({"weights": self.run.net.state_dict(), "step": self.run.global_step}, model_path)
        random.random(), np.random.rand(), torch.rand(3)
        mean = self.returns.pop(0)
        return [mean - 1.0, mean, mean + 1.0]


def train_seeded(folder: pathlib.Path, args: Args, returns: list[float]) -> tuple[Run, Evaluator, tuple]:
    """A run of 40 steps from seeded global RNGs; what the global RNGs draw after it."""
    folder.mkdir(exist_ok=True)
    random.seed(0), np.random.seed(0)
    run = Run(folder, args)
    evaluator = run.state.evaluate = Evaluator(run, returns)
    run.train(20)  # 40 steps over 2 envs
    run.writer.flush()
    return run, evaluator, (random.random(), np.random.rand(), torch.rand(1).item())


def test_evaluations_log_at_their_steps_keep_the_best_model_and_change_nothing_in_training(run_dir, tmp_path):
    """Every crossing of --eval-interval evaluates once, logged at the training step; with --save-model the best
    evaluated model is kept; and the run trains exactly as the one without evaluations (weights and global RNGs)."""
    args = Args(checkpoint_interval=0, eval_interval=10, save_model=True)
    run, evaluator, draws = train_seeded(run_dir, args, returns=[1.0, 5.0, 3.0, 4.0])
    plain, _, plain_draws = train_seeded(tmp_path / "plain", Args(checkpoint_interval=0), returns=[])
    assert draws == plain_draws
    for name, tensor in plain.net.state_dict().items():
        assert torch.equal(tensor, run.net.state_dict()[name]), name

    assert [step for step, _ in scalars(run_dir, "eval/episodic_return")] == [10, 20, 30, 40]
    assert [value for _, value in scalars(run_dir, "eval/episodic_return")] == [1.0, 5.0, 3.0, 4.0]
    assert scalars(run_dir, "eval/episodic_return_std")[0][1] == pytest.approx(np.std([0.0, 1.0, 2.0]))
    # its own seed each time (the same episodes: evaluations compare policies), no video
    assert evaluator.calls == [("stand_in.evaluated.cleanrl_model", 200_001, False)] * 4
    assert torch.load(run_dir / "stand_in.best.cleanrl_model")["step"] == 20  # the model that scored 5
    assert not (run_dir / "stand_in.evaluated.cleanrl_model").exists()
    # a run that only evaluates writes no checkpoint and does not lock its folder
    assert not checkpoint_files(run_dir) and not run_state._held_locks


def test_a_resumed_run_keeps_the_best_evaluation_it_had(run_dir, monkeypatch):
    run = Run(run_dir, Args(checkpoint_interval=10, eval_interval=10, save_model=True))
    run.state.evaluate = Evaluator(run, returns=[5.0, 2.0])
    run.train(10)  # evaluates at 10 (5.0) and 20 (2.0), checkpoints after each
    run.writer.close()
    args, checkpoint = resume(run_dir, monkeypatch)
    resumed = Run(run_dir, args, checkpoint)
    resumed.state.restore(resumed.checkpoint_state())
    resumed.global_step = checkpoint["global_step"]
    resumed.state.evaluate = Evaluator(resumed, returns=[4.0])
    resumed.train(5)  # evaluates at 30: 4.0 does not beat the 5.0 of step 10
    assert torch.load(run_dir / "stand_in.best.cleanrl_model")["step"] == 10


def test_the_end_of_a_run_saves_and_evaluates_the_model(run_dir):
    """finish: the final checkpoint, then with --save-model the model saved as the script saves it and evaluated on
    the final evaluation's seed, each episode logged for the model card and the mean on the eval curve."""
    run = Run(run_dir, Args(checkpoint_interval=0, save_model=True, capture_video=True))
    evaluator = run.state.evaluate = Evaluator(run, returns=[7.0])
    run.train(5)
    assert run.state.finish(run.global_step, run.checkpoint_state) == [6.0, 7.0, 8.0]
    run.writer.flush()
    assert evaluator.calls == [("stand_in.cleanrl_model", 100_001, True)]
    assert [value for _, value in scalars(run_dir, "eval/final_episodic_return")] == [6.0, 7.0, 8.0]
    assert scalars(run_dir, "eval/episodic_return") == [(10, 7.0)]
    assert not checkpoint_files(run_dir), "no checkpoint was asked for"
    # without --save-model: no model, no evaluation
    assert Run(run_dir, Args(checkpoint_interval=0)).state.finish(0, dict) is None
