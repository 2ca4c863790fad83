"""cleanrl_utils.benchmark, locally: the grid, a failing run among good ones, skipping finished runs, resuming runs
a killed sweep left behind, the live display on a terminal, W&B tags, the rendered Slurm script, and bad inputs.
(The Slurm path on a real cluster: test_slurm.py.)"""

import fcntl
import importlib
import os
import pty
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import (
    REPO,
    assert_clean_failure,
    load_checkpoint,
    load_script,
    procgen_python,
    run_dirs,
    run_utility,
    scalars,
    script_env,
)

# every test here starts a script or a utility in a new process
pytestmark = pytest.mark.e2e

PPO = f"{sys.executable} {REPO / 'cleanrl' / 'ppo.py'}"
TEMPLATE = REPO / "benchmark" / "cleanrl_1gpu.slurm_template"

# a stand-in for a cleanrl script, fast to start: prints the line the scripts print first, makes its run folder, and
# reports WANDB_TAGS and OMP_NUM_THREADS; env id Fail-v0 fails, and FAKE_SLEEP keeps it running
FAKE_SCRIPT = """\
import argparse, os, sys, time

parser = argparse.ArgumentParser()
for flag in ["--env-id", "--seed", "--checkpoint-interval", "--resume"]:
    parser.add_argument(flag)
parser.add_argument("--track", action="store_true")
args = parser.parse_args()
run_name = f"{args.env_id}__fake__{args.seed}__{time.time_ns()}"
os.makedirs(f"runs/{run_name}")
print(f"{run_name}: training to 10 steps on cpu; TensorBoard logs in runs/{run_name}", flush=True)
print("WANDB_TAGS=" + os.environ.get("WANDB_TAGS", "(unset)"), flush=True)
print("OMP_NUM_THREADS=" + os.environ.get("OMP_NUM_THREADS", "(unset)"), flush=True)
for step in range(int(float(os.environ.get("FAKE_SLEEP", "0")) * 10)):
    print(f"step {step}", flush=True)
    time.sleep(0.1)
if args.env_id == "Fail-v0":
    print("error: this env always fails", file=sys.stderr)
    sys.exit(3)
"""


@pytest.fixture
def fake(tmp_path) -> str:
    (tmp_path / "fake.py").write_text(FAKE_SCRIPT)
    return f"{sys.executable} fake.py"


def benchmark(cwd: Path, *flags: str, **env) -> subprocess.CompletedProcess:
    return run_utility("benchmark", *flags, cwd=cwd, **env)


def states(cwd: Path) -> dict[str, Path]:
    """env id and seed -> the run's state folder under benchmark_logs/."""
    folders = [p for p in (cwd / "benchmark_logs").iterdir() if (p / "spec.json").is_file()]
    return {"__".join(p.name.split("__")[i] for i in (0, 2)): p for p in folders}


def attempts(state: Path) -> list[str]:
    return re.findall(r"^=== attempt \((\w+)\)", (state / "log.txt").read_text(), flags=re.MULTILINE)


def test_dry_run_prints_the_grid_and_runs_nothing(tmp_path, fake):
    result = benchmark(tmp_path, "--env-ids", "A-v0", "B-v0", "--command", f"{fake} --lr 3", "--num-seeds", "2",
                       "--start-seed", "5", "--workers", "0")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"{fake} --lr 3 --env-id {env_id} --seed {seed} --checkpoint-interval 100000"
        for env_id in ("A-v0", "B-v0")
        for seed in (5, 6)
    ]
    assert not (tmp_path / "benchmark_logs").exists() and not (tmp_path / "runs").exists()


def test_failing_run_is_reported_and_a_rerun_skips_the_finished_ones(tmp_path):
    """ppo.py on a good env and on one that does not exist: the good run completes, the bad one is summarized with its
    log, the exit code is 1; the same command again skips the finished run and tries the failed one again."""
    flags = ["--env-ids", "CartPole-v1", "NoSuchEnv-v0", "--num-seeds", "1", "--workers", "2",
             "--command", f"{PPO} --total-timesteps 2048"]  # fmt: skip
    result = benchmark(tmp_path, *flags)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 finished, 0 skipped (finished before), 1 failed" in result.stdout
    assert "FAILED NoSuchEnv-v0 seed 1 (exit code 2)" in result.stdout
    assert "  | error: --env-id NoSuchEnv-v0" in result.stdout  # the end of its log
    (good_run,) = run_dirs(tmp_path)
    assert scalars(good_run, "charts/SPS")[-1][0] == 2048
    state = states(tmp_path)
    assert (state["CartPole-v1__1"] / "done").is_file() and not (state["NoSuchEnv-v0__1"] / "done").exists()
    assert Path((state["CartPole-v1__1"] / "run_dir").read_text().strip()) == good_run

    again = benchmark(tmp_path, *flags)
    assert again.returncode == 1
    assert re.search(r"^skip +\S+ .*--env-id CartPole-v1", again.stdout, flags=re.MULTILINE), again.stdout
    assert "0 finished, 1 skipped (finished before), 1 failed" in again.stdout
    assert run_dirs(tmp_path) == [good_run]  # not run again
    assert attempts(state["CartPole-v1__1"]) == ["run"]
    assert attempts(state["NoSuchEnv-v0__1"]) == ["run", "run"]


def wait_until(predicate, what: str, timeout: float = 120):
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def lock_is_free(state: Path) -> bool:
    with open(state / "lock") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


def test_killed_sweep_resumes_its_run_in_the_same_folder(tmp_path):
    """The benchmark's process group is SIGKILLed after the run's first checkpoint (the run, in a session of its own,
    gets SIGTERM from the kernel and checkpoints); the next invocation resumes it with --resume. That one gets SIGTERM
    itself (as from Slurm or Ctrl-C): it stops its run at a checkpoint and exits 143; the third finishes the run. One
    run folder, and TensorBoard steps that reach the budget with none twice."""
    total = 40960
    flags = ["--env-ids", "CartPole-v1", "--num-seeds", "1", "--workers", "1", "--checkpoint-interval", "2048",
             "--command", f"{PPO} --total-timesteps {total}"]  # fmt: skip

    def start() -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "cleanrl_utils.benchmark", *flags],
            cwd=tmp_path,
            env=script_env(PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")])),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def checkpoint_step() -> int:
        checkpoints = list((tmp_path / "runs").glob("*/checkpoint.pt"))
        return load_checkpoint(checkpoints[0])["global_step"] if checkpoints else 0

    first = start()
    wait_until(lambda: checkpoint_step() > 0, "the first checkpoint")
    os.killpg(first.pid, signal.SIGKILL)
    first.communicate()
    (state,) = states(tmp_path).values()
    wait_until(lambda: lock_is_free(state), "the orphaned run to checkpoint and exit")
    log = (state / "log.txt").read_text()
    assert "SIGTERM at step" in log, log[-2000:]
    step_after_kill = checkpoint_step()
    assert 0 < step_after_kill < total, "the run finished before it was killed: give it a larger budget"
    (run_dir,) = run_dirs(tmp_path)

    second = start()
    wait_until(lambda: checkpoint_step() > step_after_kill, "a checkpoint of the resumed run")
    second.send_signal(signal.SIGTERM)
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 143, out
    assert re.search(r"^resume .*--resume " + re.escape(str(run_dir)), out, flags=re.MULTILINE), out
    assert "interrupted CartPole-v1 seed 1" in out and "run the same command again to resume it" in out
    step_after_sigterm = checkpoint_step()
    assert step_after_kill < step_after_sigterm < total

    third = benchmark(tmp_path, *flags)
    assert third.returncode == 0, third.stdout + third.stderr
    assert "1 finished, 0 skipped (finished before), 0 failed" in third.stdout
    assert run_dirs(tmp_path) == [run_dir]
    assert attempts(state) == ["run", "resume", "resume"]
    steps = [step for step, _ in scalars(run_dir, "charts/SPS")]
    assert steps == list(range(512, total + 1, 512))
    assert (state / "done").is_file()


def test_live_display_on_a_terminal(tmp_path, fake):
    """On a terminal: rich's live table (the running runs and their last output line), then the summary."""
    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "cleanrl_utils.benchmark", "--env-ids", "A-v0", "Fail-v0", "--num-seeds", "1",
         "--workers", "2", "--command", fake],
        cwd=tmp_path, stdout=secondary, stderr=secondary, stdin=subprocess.DEVNULL,
        env=script_env(PYTHONPATH=str(REPO), FAKE_SLEEP="1.5", COLUMNS="200"),
    )  # fmt: skip
    os.close(secondary)
    output = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the terminal closed: the process is gone
            break
        if not chunk:
            break
        output += chunk
    os.close(primary)
    assert process.wait(timeout=60) == 1
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output.decode(errors="replace"))
    assert "\x1b[" in output.decode(errors="replace")  # rich drew on the terminal
    assert re.search(r"0/2 done \(0 skipped\), 2 running, 0 failed, elapsed", text), text[-3000:]
    assert re.search(r"A-v0 seed 1 +0:0\d +step \d+", text), text[-3000:]  # the run's last line in the table
    assert "1/2 done (0 skipped), 0 running, 1 failed" in text
    assert "FAILED Fail-v0 seed 1 (exit code 3)" in text and "| error: this env always fails" in text


def test_non_terminal_output_is_a_line_per_event(tmp_path, fake):
    result = benchmark(tmp_path, "--env-ids", "A-v0", "B-v0", "--num-seeds", "1", "--workers", "1", "--command", fake)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "\x1b[" not in result.stdout
    lines = result.stdout.splitlines()
    assert sum(line.startswith("[0:0") and "starting" in line for line in lines) == 2
    assert any("finished B-v0 seed 1 (exit code 0)" in line and "2/2 done" in line for line in lines)
    assert lines[-1].startswith("summary: 2 runs in ") and "2 finished" in lines[-1]


def test_rerun_moves_the_folder_of_a_run_that_failed_without_a_checkpoint_out_of_runs(tmp_path, fake):
    """A failed run without a checkpoint starts again in a new run folder; the old one leaves runs/ (so a report does
    not count that seed twice) for the run's state folder."""
    flags = ["--env-ids", "Fail-v0", "--num-seeds", "1", "--workers", "1", "--command", fake]
    assert benchmark(tmp_path, *flags).returncode == 1
    (first_run,) = run_dirs_of(tmp_path)
    again = benchmark(tmp_path, *flags)
    assert again.returncode == 1 and "FAILED Fail-v0 seed 1 (exit code 3)" in again.stdout
    (second_run,) = run_dirs_of(tmp_path)
    assert second_run != first_run
    (state,) = states(tmp_path).values()
    assert (state / "unfinished" / first_run.name).is_dir()
    assert f"{first_run} has no checkpoint: moved to" in (state / "log.txt").read_text()


def test_wandb_tags_name_the_code_version_when_tracking(tmp_path, fake):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    for command in (["init", "-q"], ["add", "fake.py"], ["commit", "-qm", "x"], ["tag", "v9.9"]):
        subprocess.run(git + command, check=True, capture_output=True)
    commit = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()

    tracked = benchmark(tmp_path, "--env-ids", "A-v0", "--num-seeds", "1", "--workers", "1",
                        "--command", f"{fake} --track", WANDB_TAGS="mine")  # fmt: skip
    assert tracked.returncode == 0, tracked.stdout + tracked.stderr
    (state,) = states(tmp_path).values()
    assert f"WANDB_TAGS=mine,v9.9,{commit}\n" in (state / "log.txt").read_text()

    untracked = benchmark(tmp_path, "--env-ids", "B-v0", "--num-seeds", "1", "--workers", "1", "--command", fake)
    assert untracked.returncode == 0
    assert "WANDB_TAGS=(unset)" in (states(tmp_path)["B-v0__1"] / "log.txt").read_text()


def test_parallel_runs_divide_the_cores_unless_the_user_set_threads(tmp_path, fake, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    shared = benchmark(tmp_path, "--env-ids", "A-v0", "--num-seeds", "2", "--workers", "2", "--command", fake)
    assert shared.returncode == 0, shared.stdout + shared.stderr
    for state in states(tmp_path).values():
        assert f"OMP_NUM_THREADS={max(1, os.cpu_count() // 2)}\n" in (state / "log.txt").read_text()

    own = benchmark(tmp_path, "--env-ids", "B-v0", "--num-seeds", "1", "--workers", "2", "--command", fake,
                    OMP_NUM_THREADS="3")  # fmt: skip
    assert own.returncode == 0
    assert "OMP_NUM_THREADS=3\n" in (states(tmp_path)["B-v0__1"] / "log.txt").read_text()


def test_slurm_dry_run_renders_the_job_script(tmp_path, fake):
    """--workers 0 with a template: the job script is written (not submitted); every placeholder filled in."""
    result = benchmark(tmp_path, "--env-ids", "A-v0", "B-v0", "--num-seeds", "2", "--workers", "0", "--command", fake,
                       "--slurm-template-path", str(TEMPLATE), "--slurm-ntasks", "2", "--slurm-total-cpus", "8",
                       "--slurm-gpus-per-task", "0", "--slurm-nodes", "1")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "not submitted" in result.stdout
    (script,) = (tmp_path / "benchmark_logs" / "slurm").glob("*.slurm")
    text = script.read_text()
    assert "{{" not in text
    for line in ["#SBATCH --array=0-3", "#SBATCH --ntasks=2", "#SBATCH --cpus-per-task=4", "#SBATCH --gpus-per-task=0",
                 "#SBATCH --nodes=1", "#SBATCH --requeue", "#SBATCH --job-name=cleanrl-fake",
                 f"#SBATCH --output={tmp_path}/benchmark_logs/slurm/%x_%A_%a.out"]:  # fmt: skip
        assert line + "\n" in text, line
    task_list = script.with_suffix(".json")
    assert f'--task-list {task_list} --run-task "$SLURM_ARRAY_TASK_ID" --launcher srun' in text
    assert 'scontrol requeue "$task"' in text


def test_run_task_skips_a_finished_run(tmp_path, fake):
    """The array task's mode, outside Slurm: runs its task, then (as a requeued task would) finds it done."""
    benchmark(tmp_path, "--env-ids", "A-v0", "--num-seeds", "1", "--workers", "0", "--command", fake,
              "--slurm-template-path", str(TEMPLATE))  # fmt: skip
    (task_list,) = (tmp_path / "benchmark_logs" / "slurm").glob("*.json")
    first = benchmark(tmp_path, "--task-list", str(task_list), "--run-task", "0")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "starting A-v0 seed 1" in first.stdout and "finished with exit code 0" in first.stdout
    second = benchmark(tmp_path, "--task-list", str(task_list), "--run-task", "0")
    assert second.returncode == 0
    assert "finished before" in second.stdout and len(run_dirs_of(tmp_path)) == 1


def run_dirs_of(cwd: Path) -> list[Path]:
    return sorted((cwd / "runs").iterdir())


BAD_INPUTS = [
    (["--env-ids", "--command", "{fake}", "--workers", "0"], "no --env-ids given"),
    (["--env-ids", "A-v0", "--command", "python missing.py"], "the script missing.py does not exist"),
    (["--env-ids", "A-v0", "--command", "python notes.txt"], "notes.txt is not a .py script"),
    (["--env-ids", "A-v0", "--command", "echo hello"], "it does not run a python script"),
    (["--env-ids", "A-v0", "--command", "{fake}", "--num-seeds", "-1"], "--num-seeds must not be negative"),
    (["--env-ids", "A-v0", "--command", "{fake}", "--workers", "-2"], "--workers must not be negative"),
    (["--env-ids", "A-v0", "--command", "{fake}", "--num-seeds", "0", "--workers", "0"], "--num-seeds 0: nothing"),
    (["--env-ids", "A-v0", "--command", "{fake} --seed 3"], "--command must not set --seed"),
    (["--env-ids", "A-v0", "A-v0", "--command", "{fake}"], "--env-ids lists A-v0 more than once"),
    (["--env-ids", "A-v0", "--command", "{fake}", "--slurm-template-path", "{bad_template}"],
     "lacks the placeholder(s) {{task_command}}, {{gpus_per_task}}"),
    (["--env-ids", "A-v0", "--command", "{fake}", "--slurm-template-path", "{template}", "--slurm-gpus-per-task", "-1"],
     "--slurm-gpus-per-task must not be negative"),
    (["--env-ids", "A-v0", "--command", "{fake}", "--slurm-template-path", "{template}", "--checkpoint-interval", "0"],
     "--checkpoint-interval 0 with --slurm-template-path"),
    (["--env-ids", "A-v0", "--command", "{fake}", "--slurm-template-path", "{template}", "--workers", "2",
      "NO_SBATCH"], "sbatch not found"),
]  # fmt: skip


@pytest.mark.parametrize("flags, message", BAD_INPUTS, ids=[message for _, message in BAD_INPUTS])
def test_bad_input_is_one_clear_line(tmp_path, fake, flags, message):
    bad_template = tmp_path / "bad.slurm_template"
    bad_template.write_text(TEMPLATE.read_text().replace("{{task_command}}", "python x.py").replace("{{gpus_per_task}}", "1"))
    (tmp_path / "notes.txt").write_text("")
    env = {}
    if "NO_SBATCH" in flags:
        flags = [flag for flag in flags if flag != "NO_SBATCH"]
        env["PATH"] = str(Path(sys.executable).parent)  # python, but no sbatch
    flags = [flag.format(fake=fake, bad_template=bad_template, template=TEMPLATE) for flag in flags]
    result = benchmark(tmp_path, *flags, **env)
    assert_clean_failure(result, message)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "benchmark_logs").exists()


SWEEPS = sorted(path for path in (REPO / "benchmark").glob("*.sh") if not path.name.startswith("speed_"))


def procgen_games() -> set[str]:
    """Procgen's game names, read in its own environment (numpy < 2: it cannot be imported here)."""
    command = [procgen_python(), "-c", "from procgen.env import ENV_NAMES; print(*ENV_NAMES)"]
    return set(subprocess.run(command, capture_output=True, text=True, check=True).stdout.split())


@pytest.mark.parametrize("sweep", SWEEPS, ids=[path.stem for path in SWEEPS])
def test_every_sweep_script_lists_three_seeds_of_its_script_on_registered_envs(sweep):
    import ale_py
    import gymnasium as gym
    import minigrid
    from brax import envs as brax_envs
    from envpool.registration import registry as envpool_registry

    gym.register_envs(ale_py)  # the Atari sweeps' ids
    gym.register_envs(minigrid)  # ppo_trxl.py's memory tasks, and its own ProofOfMemory-v0 below
    load_script("ppo_trxl")
    result = subprocess.run(["bash", str(sweep), "--workers", "0"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    commands = [line.split() for line in result.stdout.splitlines() if line.startswith("python cleanrl/")]
    assert commands, result.stdout
    runs = set()
    for command in commands:
        assert (REPO / command[1]).is_file(), command
        env_id, seed = command[command.index("--env-id") + 1], command[command.index("--seed") + 1]
        if "envpool" in command[1]:
            assert env_id in envpool_registry.specs, env_id  # EnvPool's own ids (Breakout-v5, ...)
        elif "pettingzoo" in command[1]:
            importlib.import_module(f"pettingzoo.atari.{env_id}")  # PettingZoo's multi-agent games (pong_v3, ...)
        elif "procgen" in command[1]:
            assert env_id in procgen_games(), env_id  # Procgen's games (starpilot, bigfish, ...)
        elif "brax" in command[1]:
            brax_envs.get_environment(env_id)  # Brax's own environments (ant, hopper, ...); raises for another name
        else:
            gym.spec(env_id)  # raises for an id Gymnasium does not know
        runs.add((command[1], env_id, seed))
    env_ids = {env_id for _, env_id, _ in runs}
    assert runs == {(f"cleanrl/{sweep.stem}.py", env_id, seed) for env_id in env_ids for seed in "123"}
