"""Run a cleanrl script over a grid of env ids x seeds: locally with a pool of workers, or as a Slurm job array.

    uv run python -m cleanrl_utils.benchmark --env-ids CartPole-v1 Acrobot-v1 --command "python cleanrl/ppo.py" \\
        --num-seeds 3 --workers 2                      # 6 runs, 2 at a time
    uv run python -m cleanrl_utils.benchmark --env-ids CartPole-v1 --command "python cleanrl/ppo.py" --workers 0
                                                       # print the commands only (a dry run)
    uv run python -m cleanrl_utils.benchmark --env-ids CartPole-v1 Acrobot-v1 --command "python cleanrl/ppo.py" \\
        --num-seeds 3 --workers 4 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template
                                                       # one Slurm array task per run, at most 4 at a time

Each run is `COMMAND --env-id ENV --seed SEED --checkpoint-interval N` (seeds `--start-seed` ..
`--start-seed + --num-seeds - 1`), run from the current folder, so its run folder lands in `runs/` as usual. The
command must run a script: `python path/to/script.py [flags]` (or any interpreter whose name starts with `python`,
or the script itself). `--checkpoint-interval` (default 100000 environment steps; 0 = off, and then an interrupted
run restarts from scratch) is appended unless the command sets it itself.

A run's identity is a hash of the command as given (split into words, as a shell would), the env id and the seed:
`{env_id}__{script}__{seed}__{hash}` (a `/` in the env id becomes `_`). Its state lives in `--sweep-dir`
(default `benchmark_logs/`), one folder per run:

    benchmark_logs/{identity}/spec.json   the run: env id, seed, the full command, the working folder
    benchmark_logs/{identity}/log.txt     stdout and stderr of every attempt, each after a `=== attempt` line
    benchmark_logs/{identity}/run_dir     the run folder, read from the first line the script prints
                                          (`{run_name}: training to N steps ...; TensorBoard logs in runs/{run_name}`)
    benchmark_logs/{identity}/done        written after the run exits with code 0 (JSON: when, exit code, seconds)
    benchmark_logs/{identity}/lock        held while an attempt runs (flock): a second benchmark skips it
    benchmark_logs/{identity}/unfinished/ run folders of attempts that ended without a checkpoint (moved out of runs/)
    benchmark_logs/slurm/                 the job scripts, their task lists and Slurm's output files

Re-running the same sweep skips the finished runs (a `done` marker whose run folder still exists), resumes the
interrupted ones (a run folder holding `checkpoint.pt` and no `done` marker: the command gets
`--resume RUN_DIR`, so the same run folder continues) and starts the others afresh (a run folder an earlier attempt
left without a checkpoint moves to `unfinished/`). To run a finished run again, delete its state folder. So after a crash, a Ctrl-C or a
reboot, the same command picks up where the sweep stopped; adding seeds or env ids later runs only the new ones.

Locally, `--workers N` runs N at a time, each in its own process group and with OMP_NUM_THREADS = CPUs / N (unless
set), so that torch's threads do not oversubscribe the cores. A failing run does not stop the others; the
summary at the end lists each failure with the end of its log, and the exit code is 1 if any run failed. On a
terminal a live table shows the runs (done, running, failed, elapsed) with the last line each printed; otherwise
(CI, a log file) a line per started and finished run. Ctrl-C or SIGTERM stops the sweep: the running scripts get
SIGTERM, write a checkpoint and exit, and the next invocation resumes them. If the benchmark itself is killed
outright, the kernel sends its runs SIGTERM (Linux), with the same effect.

With `--slurm-template-path`, nothing runs here: the runs not finished yet become one array task each of a job script
rendered from the template into `{sweep-dir}/slurm/`, submitted with `sbatch` (`--workers` is the array's `%N`, how
many run at once). Each array task runs `python -m cleanrl_utils.benchmark --task-list FILE --run-task INDEX --launcher
srun`, which applies the same skip / resume rule to its one run and starts it as a Slurm step. When the run exits with
143 (its step got SIGTERM, e.g. `scancel --signal=TERM JOB_TASK.0` or a time limit with `#SBATCH --signal`, and it
wrote a checkpoint) the job script requeues its own array task (`scontrol requeue JOB_TASK`); the task starts again
and resumes. The job is also submitted `--requeue`, so Slurm's own requeues (node failure, preemption) resume too, from
the last periodic checkpoint.
Template placeholders (`{{name}}`):

    required: array          the array spec, e.g. 0-5%2
              task_command   the command that runs one array task (uses $SLURM_ARRAY_TASK_ID)
              ntasks         --slurm-ntasks
              cpus_per_task  --slurm-total-cpus / --slurm-ntasks
              gpus_per_task  --slurm-gpus-per-task (0 for CPU-only clusters; Slurm accepts --gpus-per-task=0)
              nodes          --slurm-nodes
    optional: job_name       cleanrl-{script}
              sweep_dir      the sweep folder (absolute), e.g. for --output

W&B: when the command has `--track`, the runs get `WANDB_TAGS` (wandb reads it; any tags already there are kept)
with `git describe --tags --always` and the commit hash of the repository holding the script (`--no-auto-tag` turns
this off).

Bad input (no env ids, a command that does not run an existing .py script, a negative count, a template without the
placeholders, no sbatch) ends with one line on stderr and exit code 2, before anything runs.
"""

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import tyro

DEFAULT_SWEEP_DIR = "benchmark_logs"
CHECKPOINT = "checkpoint.pt"  # what cleanrl_utils.run_state writes in a run folder
# the first line every cleanrl script prints; the run folder is what follows "TensorBoard logs in "
RUN_DIR_LINE = re.compile(r"TensorBoard logs in (\S.*?)\s*$")
PLACEHOLDER = re.compile(r"{{\s*(\w+)\s*}}")
REQUIRED_PLACEHOLDERS = ["array", "task_command", "ntasks", "cpus_per_task", "gpus_per_task", "nodes"]
OPTIONAL_PLACEHOLDERS = ["job_name", "sweep_dir"]
LOG_TAIL_LINES = 15
INTERRUPTED = 128 + signal.SIGTERM  # what a cleanrl script exits with after a SIGTERM and its checkpoint


@dataclass
class Args:
    env_ids: list[str] = field(default_factory=list)
    """the environment ids to run the command on"""
    command: str | None = None
    """the command that runs the script, e.g. "python cleanrl/ppo.py --total-timesteps 100000" (each run appends to it)"""
    num_seeds: int = 3
    """how many seeds per env id"""
    start_seed: int = 1
    """the first seed"""
    workers: int = 0
    """how many runs at once (locally: processes; Slurm: the array's %N); 0 prints the commands only"""
    checkpoint_interval: int = 100_000
    """steps between checkpoints, appended to each command so that interrupted runs resume (0: not appended)"""
    sweep_dir: str = DEFAULT_SWEEP_DIR
    """the folder that keeps each run's log and state (finished / interrupted) and the Slurm job scripts"""
    auto_tag: bool = True
    """runs whose command has --track get WANDB_TAGS with `git describe --tags --always` and the commit"""
    slurm_template_path: str | None = None
    """submit the runs as a Slurm job array rendered from this template, e.g. benchmark/cleanrl_1gpu.slurm_template"""
    slurm_ntasks: int = 1
    """Slurm tasks per array task (srun starts the script on each; 1 for the single-process cleanrl scripts)"""
    slurm_gpus_per_task: int = 1
    """GPUs per Slurm task (0 on a CPU-only cluster)"""
    slurm_total_cpus: int | None = None
    """CPUs per array task, split evenly over its --slurm-ntasks (default: one per task)"""
    slurm_nodes: int = 1
    """nodes per array task"""
    task_list: str | None = None
    """(inside a Slurm job) the task list a submission wrote"""
    run_task: int | None = None
    """(inside a Slurm job) run the task of --task-list at this index, with the skip / resume rule"""
    launcher: str | None = None
    """(with --run-task) a command that starts the run, e.g. srun"""


def fail(message: str):
    """Bad input ends with one line on stderr and exit code 2, no traceback."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


@dataclass
class Task:
    key: str
    """the run's identity, and the name of its state folder"""
    env_id: str
    seed: int
    command: list[str]
    """the full command: the given one, --env-id, --seed and --checkpoint-interval"""
    cwd: str
    wandb_tags: str | None = None


def script_of(words: list[str], cwd: Path) -> Path:
    """The script a command runs: the word after the python interpreter, or else the first word ending in .py.
    ValueError when there is none, or it is not an existing .py file."""
    script = None
    for i, word in enumerate(words):
        if re.fullmatch(r"python[\d.]*", Path(word).name):
            if i + 1 >= len(words) or words[i + 1].startswith("-"):
                raise ValueError('the interpreter must be followed by the script, e.g. "python cleanrl/ppo.py"')
            script = words[i + 1]
            break
    if script is None:
        script = next((word for word in words if word.endswith(".py")), None)
    if script is None:
        raise ValueError('it does not run a python script; give e.g. "python cleanrl/ppo.py"')
    path = cwd / script
    if path.suffix != ".py":
        raise ValueError(f"{script} is not a .py script")
    if not path.is_file():
        raise ValueError(f"the script {script} does not exist (relative to {cwd})")
    return path


def run_key(command: list[str], env_id: str, seed: int, script: Path) -> str:
    digest = hashlib.sha256(json.dumps({"command": command, "env_id": env_id, "seed": seed}).encode()).hexdigest()
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', env_id)}__{script.stem}__{seed}__{digest[:12]}"


def git_tags(folder: Path) -> list[str]:
    """`git describe --tags --always` and the commit of the repository holding `folder`; [] outside one."""
    tags = []
    for git_command in (["describe", "--tags", "--always"], ["rev-parse", "HEAD"]):
        try:
            out = subprocess.run(["git", "-C", str(folder), *git_command], capture_output=True, text=True, check=True)
        except (OSError, subprocess.CalledProcessError):
            return []
        if out.stdout.strip() not in tags:
            tags.append(out.stdout.strip())
    return tags


def make_tasks(args: Args) -> list[Task]:
    """The grid of runs, validated: exits with code 2 on bad input."""
    for flag in ["num_seeds", "start_seed", "workers", "checkpoint_interval"]:
        if getattr(args, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must not be negative, got {getattr(args, flag)}")
    if args.command is None or not args.command.strip():
        fail('--command is required, e.g. --command "python cleanrl/ppo.py"')
    if not args.env_ids:
        fail("no --env-ids given: nothing to run (e.g. --env-ids CartPole-v1 Acrobot-v1)")
    if args.num_seeds == 0:
        fail("--num-seeds 0: nothing to run")
    duplicates = sorted({env_id for env_id in args.env_ids if args.env_ids.count(env_id) > 1})
    if duplicates:
        fail(f"--env-ids lists {', '.join(duplicates)} more than once")
    try:
        words = shlex.split(args.command)
    except ValueError as e:
        fail(f"--command {args.command!r}: {e}")
    cwd = Path.cwd()
    try:
        script = script_of(words, cwd)
    except ValueError as e:
        fail(f"--command {args.command!r}: {e}")
    for flag in ["--env-id", "--seed", "--resume"]:
        if any(word == flag or word.startswith(flag + "=") for word in words):
            fail(f"--command must not set {flag}: the benchmark adds it to each run")
    extra = []
    if args.checkpoint_interval and not any(word.split("=")[0] == "--checkpoint-interval" for word in words):
        extra = ["--checkpoint-interval", str(args.checkpoint_interval)]
    wandb_tags = None
    if args.auto_tag and "--track" in words:
        tags = git_tags(script.parent)
        wandb_tags = ",".join(filter(None, [os.environ.get("WANDB_TAGS"), *tags])) or None
        if args.workers > 0:
            print(
                f"W&B tags (WANDB_TAGS) of the runs: {wandb_tags}"
                if tags
                else f"note: {script.parent} is not in a git repository: the W&B runs get no version tags"
            )
    return [
        Task(
            key=run_key(words, env_id, seed, script),
            env_id=env_id,
            seed=seed,
            command=[*words, "--env-id", env_id, "--seed", str(seed), *extra],
            cwd=str(cwd),
            wandb_tags=wandb_tags,
        )
        for env_id in args.env_ids
        for seed in range(args.start_seed, args.start_seed + args.num_seeds)
    ]


class RunState:
    """What the sweep folder knows about one run (see the module docstring for the files)."""

    def __init__(self, sweep_dir: Path, task: Task):
        self.task = task
        self.folder = sweep_dir / task.key
        self.log_path = self.folder / "log.txt"

    def run_dir(self) -> Path | None:
        path = self.folder / "run_dir"
        return Path(path.read_text().strip()) if path.is_file() else None

    def checkpoint(self) -> Path | None:
        run_dir = self.run_dir()
        if run_dir is None:
            return None
        return run_dir / CHECKPOINT if (run_dir / CHECKPOINT).is_file() else None

    def finished(self) -> bool:
        """A `done` marker, and the run folder it names still there (a deleted run folder is run again)."""
        if not (self.folder / "done").is_file():
            return False
        run_dir = self.run_dir()
        return run_dir is None or run_dir.is_dir()

    def plan(self) -> tuple[str, list[str]]:
        """("skip" | "resume" | "run", the command to run)."""
        if self.finished():
            return "skip", self.task.command
        checkpoint = self.checkpoint()
        if checkpoint is not None:
            return "resume", [*self.task.command, "--resume", str(self.run_dir())]
        return "run", self.task.command

    def forget_earlier_attempts(self):
        """Before a run starts again from scratch. A run that stopped before its first checkpoint (or failed without
        one) gets a new run folder; its old one moves out of runs/, into this state folder, so a report does not count
        that seed twice. A finished run whose run folder was deleted loses its done marker."""
        run_dir = self.run_dir()
        if run_dir is not None and run_dir.is_dir() and not self.finished():
            target = self.folder / "unfinished" / run_dir.name
            target.parent.mkdir(exist_ok=True)
            shutil.move(run_dir, target)
            with open(self.log_path, "a") as log:
                log.write(f"=== {run_dir} has no checkpoint: moved to {target}; the run starts again\n")
        for name in ("run_dir", "done"):
            (self.folder / name).unlink(missing_ok=True)

    def write(self, name: str, text: str):
        tmp = self.folder / f"{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, self.folder / name)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> list[str]:
        """The last lines of the latest attempt."""
        if not self.log_path.is_file():
            return []
        text = self.log_path.read_text(errors="replace")
        attempt = text[text.rfind("=== attempt") :].splitlines()[1:]
        return [line for line in attempt if not line.startswith("=== ")][-lines:]


@dataclass
class Outcome:
    task: Task
    status: str
    """finished | skipped | failed | interrupted | busy | not started"""
    action: str = ""
    """run | resume | skip"""
    exit_code: int | None = None
    seconds: float = 0.0
    run_dir: Path | None = None


def die_with_parent(parent_pid: int):
    """A Popen preexec_fn (Linux): the kernel sends the run SIGTERM when the thread that started it dies, even by
    SIGKILL, so a killed benchmark leaves checkpoints rather than orphans. The thread waits for the run."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1

    def preexec():
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(INTERRUPTED)

    return preexec


class Runner:
    """Runs tasks with the skip / resume rule; shared by the local pool (threads) and --run-task."""

    def __init__(
        self,
        sweep_dir: Path,
        launcher: list[str] | None = None,
        forward_sigterm: bool = True,
        threads_per_run: int | None = None,
    ):
        self.sweep_dir = sweep_dir
        self.launcher = launcher or []
        self.threads_per_run = threads_per_run
        self.forward_sigterm = forward_sigterm
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.running: dict[str, tuple[Task, float, str]] = {}  # key -> (task, start time, last line it printed)

    def execute(self, task: Task, on_start=None) -> Outcome:
        state = RunState(self.sweep_dir, task)
        state.folder.mkdir(parents=True, exist_ok=True)
        if not (state.folder / "spec.json").is_file():
            spec = {"env_id": task.env_id, "seed": task.seed, "command": task.command, "cwd": task.cwd}
            state.write("spec.json", json.dumps(spec, indent=2))
        lock_fd = os.open(state.folder / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return Outcome(task, "busy", run_dir=state.run_dir())
            action, command = state.plan()
            if action == "skip":
                return Outcome(task, "skipped", action, run_dir=state.run_dir())
            if self.stop.is_set():
                return Outcome(task, "not started", action, run_dir=state.run_dir())
            if action == "run":
                state.forget_earlier_attempts()
            if on_start is not None:
                on_start(task, action, command)
            return self._attempt(task, state, action, command, lock_fd)
        finally:
            os.close(lock_fd)

    def _attempt(self, task: Task, state: RunState, action: str, command: list[str], lock_fd: int) -> Outcome:
        env = dict(os.environ)
        if self.threads_per_run is not None:
            # runs that share the cores divide them: torch (and numpy's BLAS) would otherwise start a thread per core in
            # every run, and oversubscribed threads wait on each other at every operation; a value of your own wins
            env.setdefault("OMP_NUM_THREADS", str(self.threads_per_run))
        if task.wandb_tags:
            env["WANDB_TAGS"] = task.wandb_tags
        full_command = [*self.launcher, *command]
        with open(state.log_path, "ab") as log:
            offset = log.tell()
            header = f"=== attempt ({action}) {datetime.now().isoformat(timespec='seconds')}: {shlex.join(full_command)}\n"
            log.write(header.encode())
            log.flush()
            offset += len(header.encode())
            start = time.time()
            with self.lock:
                self.running[task.key] = (task, start, "")
            try:
                process = subprocess.Popen(
                    full_command,
                    cwd=task.cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    # its own process group: a Ctrl-C reaches the benchmark alone, which then asks for a checkpoint
                    start_new_session=True,
                    # the run holds the lock too: a new benchmark cannot start it again while it still runs
                    pass_fds=(lock_fd,),
                    preexec_fn=die_with_parent(os.getpid()) if sys.platform == "linux" else None,  # noqa: PLW1509
                )
            except OSError as e:
                log.write(f"error: cannot start {full_command[0]}: {e}\n".encode())
                with self.lock:
                    self.running.pop(task.key, None)
                return Outcome(task, "failed", action, exit_code=127, seconds=time.time() - start)
        run_dir = state.run_dir() if action == "resume" else None
        sent_sigterm = False
        with open(state.log_path, "rb") as reader:
            reader.seek(offset)
            pending = b""
            while True:
                exit_code = process.poll()
                if exit_code is not None and exit_code < 0:  # killed by a signal: as a shell reports it
                    exit_code = 128 - exit_code
                chunk = reader.read()
                if chunk:
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        text = line.decode(errors="replace").strip()
                        if not text:
                            continue
                        match = RUN_DIR_LINE.search(text)
                        if run_dir is None and match:
                            run_dir = Path(task.cwd, match.group(1)).resolve()
                            state.write("run_dir", f"{run_dir}\n")
                        with self.lock:
                            self.running[task.key] = (task, start, text)
                if exit_code is not None:
                    break
                if self.stop.is_set() and self.forward_sigterm and not sent_sigterm:
                    process.send_signal(signal.SIGTERM)  # the script checkpoints and exits with 143
                    sent_sigterm = True
                time.sleep(0.2)
        seconds = time.time() - start
        with open(state.log_path, "a") as log:
            log.write(f"=== exit code {exit_code} after {seconds:.0f} s\n")
        with self.lock:
            self.running.pop(task.key, None)
        if exit_code == 0:
            done = {"exit_code": 0, "finished": datetime.now().isoformat(timespec="seconds"), "seconds": round(seconds, 1)}
            done["run_dir"] = str(run_dir) if run_dir else None
            state.write("done", json.dumps(done, indent=2))
            return Outcome(task, "finished", action, 0, seconds, run_dir)
        status = "interrupted" if exit_code == INTERRUPTED and state.checkpoint() is not None else "failed"
        return Outcome(task, status, action, exit_code, seconds, run_dir)


def describe(task: Task) -> str:
    return f"{task.env_id} seed {task.seed}"


def format_seconds(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


class Board:
    """Counts for the progress display and the summary."""

    def __init__(self, total: int):
        self.total = total
        self.outcomes: list[Outcome] = []
        self.start = time.time()

    def counts(self) -> dict[str, int]:
        counts = {"finished": 0, "skipped": 0, "failed": 0, "interrupted": 0, "busy": 0, "not started": 0}
        for outcome in self.outcomes:
            counts[outcome.status] += 1
        return counts

    def headline(self, running: int) -> str:
        counts = self.counts()
        done = counts["finished"] + counts["skipped"]
        text = f"{done}/{self.total} done ({counts['skipped']} skipped), {running} running, {counts['failed']} failed"
        if counts["interrupted"] or counts["busy"]:
            text += f", {counts['interrupted'] + counts['busy']} interrupted or busy"
        return f"{text}, elapsed {format_seconds(time.time() - self.start)}"


def rich_view(board: Board, runner: Runner):
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    with runner.lock:
        running = list(runner.running.values())
    table = Table(box=None, show_header=bool(running), pad_edge=False)
    table.add_column("running")
    table.add_column("for", justify="right")
    table.add_column("last output", overflow="ellipsis", no_wrap=True)
    now = time.time()
    for task, start, line in running:
        table.add_row(describe(task), format_seconds(now - start), line)
    return Group(Text(board.headline(len(running)), style="bold"), table)


def run_local(args: Args, tasks: list[Task], sweep_dir: Path) -> int:
    runner = Runner(sweep_dir, threads_per_run=max(1, (os.cpu_count() or 1) // args.workers))
    board = Board(len(tasks))
    on_terminal = sys.stdout.isatty()
    print_lock = threading.Lock()

    console = None
    if on_terminal:
        from rich.console import Console

        console = Console()

    def say(text: str):
        with print_lock:
            if console is not None:  # above the live table
                console.print(text, markup=False, highlight=False)
            else:
                print(f"[{format_seconds(time.time() - board.start)}] {text}", flush=True)

    def on_start(task, action, command):
        say(f"{'resuming' if action == 'resume' else 'starting'} {describe(task)}: {shlex.join(command)}")

    def work(task: Task) -> Outcome:
        try:
            outcome = runner.execute(task, on_start)
        except OSError as e:  # the sweep folder cannot be written, say: this run fails, the others go on
            outcome = Outcome(task, "failed")
            print(f"error: {describe(task)}: {e}", file=sys.stderr)
        with runner.lock:
            board.outcomes.append(outcome)
        if outcome.status != "skipped":
            code = "" if outcome.exit_code is None else f" (exit code {outcome.exit_code})"
            say(
                f"{outcome.status} {describe(task)}{code} in {format_seconds(outcome.seconds)}; {board.headline(len(runner.running))}"
            )
        return outcome

    received = []

    def on_signal(signum, frame):
        received.append(signum)
        runner.stop.set()

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        with ThreadPoolExecutor(max_workers=args.workers, thread_name_prefix="benchmark-worker") as pool:
            futures = [pool.submit(work, task) for task in tasks]
            if on_terminal:
                from rich.live import Live

                with Live(rich_view(board, runner), console=console, refresh_per_second=4) as live:
                    while not all(future.done() for future in futures):
                        live.update(rich_view(board, runner))
                        time.sleep(0.25)
                    live.update(rich_view(board, runner))
            else:
                last_heartbeat = time.time()
                while not all(future.done() for future in futures):
                    time.sleep(0.25)
                    if time.time() - last_heartbeat > 60:
                        say(board.headline(len(runner.running)))
                        last_heartbeat = time.time()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    for future in futures:
        future.result()  # a bug in a worker surfaces here, after the other runs ended
    return summarize(board, sweep_dir, received)


def summarize(board: Board, sweep_dir: Path, received: list[int]) -> int:
    counts = board.counts()
    print(
        f"summary: {board.total} runs in {format_seconds(time.time() - board.start)}: {counts['finished']} finished, "
        f"{counts['skipped']} skipped (finished before), {counts['failed']} failed, {counts['interrupted']} interrupted"
        + (f", {counts['busy']} running elsewhere" if counts["busy"] else "")
        + (f", {counts['not started']} not started" if counts["not started"] else ""),
        flush=True,
    )
    for outcome in board.outcomes:
        if outcome.status == "finished":
            continue
        state = RunState(sweep_dir, outcome.task)
        if outcome.status == "failed":
            print(f"FAILED {describe(outcome.task)} (exit code {outcome.exit_code}): {shlex.join(outcome.task.command)}")
            print(f"  log: {state.log_path}; its last lines:")
            for line in state.log_tail():
                print(f"  | {line}")
        elif outcome.status == "interrupted":
            where = f" (checkpoint in {outcome.run_dir})" if outcome.run_dir else ""
            print(f"interrupted {describe(outcome.task)}{where}: run the same command again to resume it")
        elif outcome.status == "busy":
            print(f"busy {describe(outcome.task)}: another benchmark is running it ({state.folder / 'lock'} is held)")
    if received:
        return 128 + received[0]
    return 0 if counts["finished"] + counts["skipped"] == board.total else 1


def render_template(args: Args, template: str, tasks: list[Task], task_list: Path, sweep_dir: Path, array: str) -> str:
    cpus = args.slurm_total_cpus if args.slurm_total_cpus is not None else args.slurm_ntasks
    task_command = shlex.join([sys.executable, "-m", "cleanrl_utils.benchmark", "--task-list", str(task_list), "--run-task"])
    values = {
        "array": array,
        "task_command": f'{task_command} "$SLURM_ARRAY_TASK_ID"',
        "ntasks": str(args.slurm_ntasks),
        "cpus_per_task": str(cpus // args.slurm_ntasks),
        "gpus_per_task": str(args.slurm_gpus_per_task),
        "nodes": str(args.slurm_nodes),
        "job_name": f"cleanrl-{tasks[0].key.split('__')[-3]}",
        "sweep_dir": str(sweep_dir),
    }
    return PLACEHOLDER.sub(lambda match: values[match.group(1)], template)


def braces(names: list[str]) -> str:
    return ", ".join("{{" + name + "}}" for name in names)


def check_slurm_args(args: Args) -> str:
    """The template's text, after checking the Slurm flags and the template (exit code 2 on bad input)."""
    for flag in ["slurm_ntasks", "slurm_nodes"]:
        if getattr(args, flag) < 1:
            fail(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
    if args.slurm_gpus_per_task < 0:
        fail(f"--slurm-gpus-per-task must not be negative, got {args.slurm_gpus_per_task} (0 for CPU-only clusters)")
    if args.slurm_total_cpus is not None and (args.slurm_total_cpus < 1 or args.slurm_total_cpus % args.slurm_ntasks != 0):
        fail(
            f"--slurm-total-cpus {args.slurm_total_cpus} must be a positive multiple of --slurm-ntasks "
            f"{args.slurm_ntasks} (each task gets the same number of CPUs)"
        )
    if args.checkpoint_interval == 0:
        fail(
            "--checkpoint-interval 0 with --slurm-template-path: a requeued array task could only start its run again; "
            "give a positive interval"
        )
    path = Path(args.slurm_template_path)
    if not path.is_file():
        fail(f"--slurm-template-path {path}: no such file")
    template = path.read_text()
    found = set(PLACEHOLDER.findall(template))
    unknown = sorted(found - set(REQUIRED_PLACEHOLDERS) - set(OPTIONAL_PLACEHOLDERS))
    if unknown:
        fail(
            f"--slurm-template-path {path}: unknown placeholder(s) {braces(unknown)}; "
            f"known: {braces(REQUIRED_PLACEHOLDERS + OPTIONAL_PLACEHOLDERS)}"
        )
    missing = [p for p in REQUIRED_PLACEHOLDERS if p not in found]
    if missing:
        fail(f"--slurm-template-path {path} lacks the placeholder(s) {braces(missing)}")
    if args.workers > 0 and shutil.which("sbatch") is None:
        fail("--slurm-template-path: sbatch not found on PATH (run this on a Slurm login node, or drop the flag)")
    return template


def submit_slurm(args: Args, template: str, tasks: list[Task], sweep_dir: Path) -> int:
    pending = []
    for task in tasks:
        action, command = RunState(sweep_dir, task).plan()
        print(f"{action:6} {shlex.join(command)}")
        if action != "skip":
            pending.append(task)
    if not pending:
        print(f"all {len(tasks)} runs finished already: nothing to submit (their state is in {sweep_dir})")
        return 0
    slurm_dir = sweep_dir / "slurm"
    slurm_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    digest = hashlib.sha256(json.dumps([task.key for task in pending]).encode()).hexdigest()[:8]
    task_list = slurm_dir / f"{stamp}_{digest}.json"
    job_script = slurm_dir / f"{stamp}_{digest}.slurm"
    task_list.write_text(json.dumps({"sweep_dir": str(sweep_dir), "tasks": [vars(task) for task in pending]}, indent=2))
    array = f"0-{len(pending) - 1}" + (f"%{args.workers}" if args.workers > 0 else "")
    job_script.write_text(render_template(args, template, pending, task_list, sweep_dir, array))
    print(f"job script: {job_script} ({len(pending)} array tasks, {array})")
    if args.workers == 0:
        print(f"dry run (--workers 0): not submitted; submit it with: sbatch {job_script}")
        return 0
    result = subprocess.run(["sbatch", "--parsable", str(job_script)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        print(f"error: sbatch {job_script} failed (exit code {result.returncode}): {result.stderr.strip()}", file=sys.stderr)
        return 1
    job_id = result.stdout.strip().split(";")[0]
    print(f"submitted job array {job_id}: {len(pending)} tasks, at most {args.workers} at a time")
    print(f"follow it with: squeue -j {job_id}; Slurm's output: {slurm_dir}/*_{job_id}_*.out; run logs: {sweep_dir}/*/log.txt")
    print(f"re-run this command to resume or submit whatever has not finished (job {job_id} must have ended first)")
    return 0


def run_task(args: Args) -> int:
    """One array task of a Slurm submission: its run, with the skip / resume rule; 143 asks for a requeue."""
    if args.task_list is None:
        fail("--run-task needs --task-list (the file a Slurm submission wrote)")
    try:
        listing = json.loads(Path(args.task_list).read_text())
        task = Task(**listing["tasks"][args.run_task])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        fail(f"--task-list {args.task_list} --run-task {args.run_task}: {type(e).__name__}: {e}")
    launcher = shlex.split(args.launcher) if args.launcher else None
    # under Slurm the run gets its signals from Slurm itself; forwarding ours would reach srun, which kills at once
    runner = Runner(Path(listing["sweep_dir"]), launcher, forward_sigterm=launcher is None)
    state = RunState(runner.sweep_dir, task)
    signal.signal(
        signal.SIGTERM,
        lambda signum, frame: (print("SIGTERM: waiting for the run to checkpoint", flush=True), runner.stop.set()),
    )

    def on_start(task, action, command):
        print(f"{'resuming' if action == 'resume' else 'starting'} {describe(task)}: {shlex.join(command)}", flush=True)
        print(f"log: {state.log_path}", flush=True)

    outcome = runner.execute(task, on_start)
    if outcome.status == "skipped":
        print(f"{describe(task)} finished before ({outcome.run_dir}): nothing to do")
        return 0
    if outcome.status == "busy":
        print(f"{describe(task)}: another process is running it ({state.folder / 'lock'} is held)", file=sys.stderr)
        return 1
    print(f"{describe(task)}: {outcome.status} with exit code {outcome.exit_code} after {format_seconds(outcome.seconds)}")
    if outcome.status == "failed":
        print("its last lines:")
        for line in state.log_tail():
            print(f"  | {line}")
    return outcome.exit_code if outcome.exit_code is not None else 1


def main():
    args = tyro.cli(Args)
    if args.run_task is not None:
        sys.exit(run_task(args))
    tasks = make_tasks(args)
    template = check_slurm_args(args) if args.slurm_template_path is not None else None
    sweep_dir = Path(args.sweep_dir).resolve()
    if template is not None:
        sys.exit(submit_slurm(args, template, tasks, sweep_dir))
    if args.workers == 0:
        for task in tasks:
            print(shlex.join(task.command))
        return
    print(
        f"{len(tasks)} runs ({len(args.env_ids)} env ids x {args.num_seeds} seeds), {args.workers} at a time; "
        f"logs and state in {sweep_dir}"
    )
    for task in tasks:
        action, command = RunState(sweep_dir, task).plan()
        print(f"{action:6} {shlex.join(command)}")
    sys.stdout.flush()
    sys.exit(run_local(args, tasks, sweep_dir))


if __name__ == "__main__":
    main()
