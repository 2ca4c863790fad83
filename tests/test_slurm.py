"""cleanrl_utils.benchmark on a real Slurm cluster: one node on this machine (munged, slurmctld and slurmd on loopback
ports, everything they write in a temporary folder), started once for the module and stopped even when a test fails.

Needs slurm-wlm and munge (Debian: `apt-get install slurm-wlm munge`): installed here when missing and we are root, as
in CI; skipped otherwise.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, load_checkpoint, run_utility, scalar_tags, scalars

# every test here starts a script or a utility in a new process
pytestmark = pytest.mark.e2e

TEMPLATE = REPO / "benchmark" / "cleanrl_1gpu.slurm_template"
PPO = f"{sys.executable} {REPO / 'cleanrl' / 'ppo.py'}"
SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
COMMANDS = ["munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo"]
# a requeued job waits this long before it may start again (Slurm's default is 120 s); 5 is Slurm's minimum
CRED_EXPIRE = 5


def install_slurm():
    if all(shutil.which(command, path=SBIN_PATH) for command in COMMANDS):
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("Slurm is not installed, and installing it needs root and apt-get: apt-get install slurm-wlm munge")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", "slurm-wlm", "munge"]):
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
        assert result.returncode == 0, f"{' '.join(command)} failed: {result.stderr[-2000:]}"
    missing = [command for command in COMMANDS if not shutil.which(command, path=SBIN_PATH)]
    assert not missing, f"apt-get installed slurm-wlm and munge, but these are still missing: {missing}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slurm_conf(root, ctld_port: int, slurmd_port: int) -> str:
    return f"""\
ClusterName=cleanrltest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge.socket,cred_expire={CRED_EXPIRE}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=1
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
JobRequeue=1
NodeName=localhost NodeAddr=127.0.0.1 CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


class Cluster:
    def __init__(self, root):
        self.root = root
        self.conf = root / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf), PATH=SBIN_PATH)
        self.daemons: list[subprocess.Popen] = []

    def run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=60, check=False)
        assert not check or result.returncode == 0, f"{' '.join(command)}: {result.stderr}"
        return result

    def start_daemon(self, *command: str):
        with open(self.root / f"{command[0]}.out", "w") as log:  # the daemon writes to its own copy of the file
            self.daemons.append(subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT))

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(self.root.glob("*.out")))

    def start(self):
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        for folder in ("state", "spool"):
            (self.root / folder).mkdir()
        self.conf.write_text(slurm_conf(self.root, free_port(), free_port()))
        r = self.root
        self.start_daemon(
            "munged", "--foreground", "--force", f"--socket={r}/munge.socket", f"--key-file={key}",
            f"--pid-file={r}/munged.pid", f"--seed-file={r}/munged.seed", f"--log-file={r}/munged.log",
        )  # fmt: skip
        self.wait_for(lambda: (r / "munge.socket").exists(), "munged's socket")
        self.start_daemon("slurmctld", "-D", "-i", "-f", str(self.conf))
        self.wait_for(lambda: self.run("sinfo", check=False).returncode == 0, "slurmctld")
        self.start_daemon("slurmd", "-D", "-N", "localhost", "-f", str(self.conf))
        self.wait_for(lambda: self.run("sinfo", "-h", "-o", "%T").stdout.strip() == "idle", "the node to be idle")

    def wait_for(self, predicate, what: str, timeout: float = 60):
        deadline = time.time() + timeout
        while not predicate():
            for daemon in self.daemons:
                assert daemon.poll() is None, f"{daemon.args[0]} exited while waiting for {what}:\n{self.logs()}"
            assert time.time() < deadline, f"timed out waiting for {what}:\n{self.logs()}"
            time.sleep(0.2)

    def queue(self, job_id: str | None = None) -> list[str]:
        command = ["squeue", "-h", "-o", "%i %T %r"] + (["-j", job_id] if job_id else [])
        return self.run(*command, check=False).stdout.split("\n")[:-1]

    def stop(self):
        """Cancel every job (so no job step outlives the daemons), then stop each daemon we started, by its pid."""
        try:
            if self.daemons and all(daemon.poll() is None for daemon in self.daemons):
                self.run("scancel", "--full", "--partition=debug", check=False)
                deadline = time.time() + 60
                while self.queue() and time.time() < deadline:
                    time.sleep(0.5)
        finally:
            for daemon in reversed(self.daemons):
                if daemon.poll() is None:
                    daemon.send_signal(signal.SIGTERM)
                    try:
                        daemon.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        daemon.kill()
                        daemon.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    install_slurm()
    cluster = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def submit(cluster: Cluster, cwd, *flags: str) -> tuple[str, dict]:
    """Submit a sweep through the benchmark; returns the job id and the task list it wrote."""
    result = run_utility(
        "benchmark", *flags, "--slurm-template-path", str(TEMPLATE), "--slurm-gpus-per-task", "0",
        cwd=cwd, SLURM_CONF=str(cluster.conf), PATH=SBIN_PATH,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    job_id = re.search(r"submitted job array (\d+)", result.stdout).group(1)
    task_list = re.search(r"job script: (\S+)\.slurm", result.stdout).group(1) + ".json"
    return job_id, json.loads(open(task_list).read())


def wait_for_job(cluster: Cluster, job_id: str, timeout: float = 400):
    deadline = time.time() + timeout
    while cluster.queue(job_id):
        assert time.time() < deadline, f"job {job_id} still queued: {cluster.queue(job_id)}\n{cluster.logs()}"
        time.sleep(1)


def state_folder(cwd, task: dict):
    return cwd / "benchmark_logs" / task["key"]


def check_completed(cwd, tasks: list[dict], total_timesteps: int, batch_size: int = 512):
    """Every task: a done marker, one run folder for its (env, seed) with episodic returns, and TensorBoard steps that
    reach the budget with none repeated."""
    for task in tasks:
        state = state_folder(cwd, task)
        log = (state / "log.txt").read_text() if (state / "log.txt").exists() else "(no log)"
        assert (state / "done").is_file(), f"{task['env_id']} seed {task['seed']} did not finish:\n{log[-3000:]}"
        run_dir = Path((state / "run_dir").read_text().strip())
        assert run_dir.is_dir()
        same_run = list((cwd / "runs").glob(f"{task['env_id']}__ppo__{task['seed']}__*"))
        assert same_run == [run_dir], f"expected one run folder for {task['env_id']} seed {task['seed']}: {same_run}"
        assert "charts/episodic_return" in scalar_tags(run_dir)
        steps = [step for step, _ in scalars(run_dir, "charts/SPS")]
        assert steps == sorted(set(steps)), f"{run_dir}: a step was logged twice"
        assert steps[-1] == total_timesteps // batch_size * batch_size, steps[-3:]


def test_sweep_runs_as_a_job_array(cluster, tmp_path):
    """2 envs x 2 seeds of ppo.py as one array (2 tasks at a time, no GPU): every run completes; submitting again
    submits nothing."""
    flags = [
        "--env-ids", "CartPole-v1", "Acrobot-v1", "--num-seeds", "2", "--workers", "2",
        "--command", f"{PPO} --total-timesteps 2048",
    ]  # fmt: skip
    job_id, task_list = submit(cluster, tmp_path, *flags)
    assert len(task_list["tasks"]) == 4
    script = next((tmp_path / "benchmark_logs" / "slurm").glob("*.slurm")).read_text()
    assert "#SBATCH --array=0-3%2" in script and "#SBATCH --gpus-per-task=0" in script and "{{" not in script
    wait_for_job(cluster, job_id)
    check_completed(tmp_path, task_list["tasks"], 2048)
    outputs = sorted((tmp_path / "benchmark_logs" / "slurm").glob(f"*_{job_id}_*.out"))
    assert len(outputs) == 4
    assert all("ends with exit code 0" in out.read_text() for out in outputs)

    again = run_utility(
        "benchmark", *flags, "--slurm-template-path", str(TEMPLATE), "--slurm-gpus-per-task", "0",
        cwd=tmp_path, SLURM_CONF=str(cluster.conf), PATH=SBIN_PATH,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "all 4 runs finished already: nothing to submit" in again.stdout
    assert again.stdout.count("skip ") == 4


def test_signalled_task_requeues_and_resumes_from_its_checkpoint(cluster, tmp_path):
    """The judged scenario: 2 envs x 3 seeds with checkpoints every 2048 steps; one array task gets
    `scancel --signal=TERM JOB_TASK` after its first checkpoint. It requeues itself and the same run folder continues
    from the checkpoint: all 6 runs complete, the signalled one started again as a resume and logged no step twice."""
    total = 30720
    flags = [
        # Acrobot first: task 0 is its slowest run, which leaves the widest window to signal it mid-way
        "--env-ids", "Acrobot-v1", "CartPole-v1", "--num-seeds", "3", "--workers", "2", "--checkpoint-interval", "2048",
        "--command", f"{PPO} --total-timesteps {total}",
    ]  # fmt: skip
    job_id, task_list = submit(cluster, tmp_path, *flags)
    tasks = task_list["tasks"]
    assert len(tasks) == 6
    state = state_folder(tmp_path, tasks[0])

    def checkpoint_path():
        run_dir_file = state / "run_dir"
        if not run_dir_file.is_file():
            return None
        path = Path(run_dir_file.read_text().strip()) / "checkpoint.pt"
        return path if path.is_file() else None

    deadline = time.time() + 120
    while checkpoint_path() is None:
        assert time.time() < deadline, f"no checkpoint for task 0: {cluster.queue(job_id)}\n{cluster.logs()}"
        time.sleep(0.05)
    # as a user would; scancel may keep retrying for a while (see below), so it runs in the background
    scancel = subprocess.Popen(["scancel", "--signal=TERM", f"{job_id}_0"], env=cluster.env, stderr=subprocess.PIPE)
    try:
        check_signalled_task(cluster, tmp_path, job_id, tasks, state, checkpoint_path, total)
    finally:
        if scancel.poll() is None:
            scancel.kill()
        scancel.wait()


def check_signalled_task(cluster, tmp_path, job_id, tasks, state, checkpoint_path, total):
    target = tasks[0]

    # the run checkpoints and exits with 143; the task requeues itself
    deadline = time.time() + 60
    while "=== exit code 143" not in (state / "log.txt").read_text():
        assert time.time() < deadline, f"task 0 did not stop:\n{(state / 'log.txt').read_text()[-3000:]}"
        time.sleep(0.2)
    step_at_signal = load_checkpoint(checkpoint_path())["global_step"]
    assert 0 < step_at_signal < total, "the run finished before the signal: give it a larger budget"
    assert "SIGTERM at step" in (state / "log.txt").read_text()

    wait_for_job(cluster, job_id)
    check_completed(tmp_path, tasks, total)

    log = (state / "log.txt").read_text()
    attempts = re.findall(r"^=== attempt \((\w+)\)", log, flags=re.MULTILINE)
    # Slurm 22.05's scancel says "Job is in transitional state, retrying" for a task of an array that still has pending
    # tasks, and may signal the task again once it runs again: every start after the first must be a resume
    assert attempts[0] == "run" and len(attempts) >= 2 and set(attempts[1:]) == {"resume"}, log[-3000:]
    run_dir = Path((state / "run_dir").read_text().strip())
    assert f"--resume {run_dir}" in log
    # the resumed run continued the same TensorBoard run: steps before the signal are there once, the rest follow
    steps = [step for step, _ in scalars(run_dir, "charts/SPS")]
    assert steps == list(range(512, total + 1, 512))
    slurm_out = next((tmp_path / "benchmark_logs" / "slurm").glob(f"*_{job_id}_0.out")).read_text()
    assert "start 1" in slurm_out and "start 2" in slurm_out, slurm_out
    assert slurm_out.count("requeueing array task") == len(attempts) - 1
    assert f"resuming {target['env_id']} seed {target['seed']}" in slurm_out
    # the other tasks ran once each
    for task in tasks[1:]:
        other = (state_folder(tmp_path, task) / "log.txt").read_text()
        assert re.findall(r"^=== attempt \((\w+)\)", other, flags=re.MULTILINE) == ["run"], other[-2000:]
    assert not cluster.queue()
