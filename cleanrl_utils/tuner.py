"""Tune a cleanrl script's hyperparameters with Optuna, with one worker or many sharing a study.

    from cleanrl_utils.tuner import Tuner

    tuner = Tuner(
        script="cleanrl/ppo.py",
        metric="charts/episodic_return",
        target_scores={"CartPole-v1": [0, 500], "Acrobot-v1": [-500, 0]},
        params_fn=lambda trial: {
            "learning_rate": trial.suggest_float("learning_rate", 3e-4, 3e-3, log=True),
            "total_timesteps": 100_000,
        },
        storage="sqlite:///tuner.db",
        study_name="ppo-classic-control",
    )
    tuner.tune(num_trials=100, num_seeds=3)

A trial trains `script` once for every seed (1 .. num_seeds) and every env of `target_scores`, each run a subprocess
`python SCRIPT --env-id ENV --seed SEED --exp-name {study_name}_trial{N} <params_fn's dict as tyro flags>`
(`{"anneal_lr": False}` becomes `--no-anneal-lr`). A run's score is the mean of the last
`metric_last_n_average_window` values of `metric` in its TensorBoard events, normalized by its env's target scores
to (x - lo) / (hi - lo). The trial's value is each env's score averaged over the seeds, then aggregated over the envs
(`aggregation_type`: average, median, max or min); after each seed this running value is reported to Optuna, so
`pruner` can stop a bad trial before its last seed.

Files, relative to the worker's working directory: each run's folder is
`runs/{env_id}__{study_name}_trial{N}__{seed}__{unix_time}` (the trial's user attr `run_dirs` maps "ENV seed SEED" to
it), and its stdout and stderr go to `tuner_logs/{study_name}_trial{N}/{env_id}__{seed}.log`. A run that exits non-zero
fails the trial and stops the worker with the command and the end of its log. A worker that stops (Ctrl-C, an
exception) kills its training run; on Linux, one killed outright (SIGKILL, out of memory) takes its run with it too.

Storage, shared by every worker (any number, on any machines) that gives the same `storage` and `study_name`:
- None: in memory; one worker, nothing kept after it ends.
- a URL (it holds "://"), e.g. "sqlite:///tuner.db" or "postgresql://user:pass@host/db": Optuna's RDBStorage.
- any other string: the path of an Optuna journal file (JournalStorage), e.g. on a filesystem every machine mounts.
- an optuna.storages.BaseStorage object: used as it is (its heartbeat settings are yours).
With a URL or a journal file, each running trial records a heartbeat every `heartbeat_interval` seconds; a trial
whose worker died (killed, preempted) stops beating, and after `grace_period` seconds the next worker to start a trial
marks it FAIL and queues a retry with the same params (up to 3 times). Optuna's RDBStorage has heartbeats built in;
its JournalStorage has none, so this module adds them (`HeartbeatJournalStorage`).

`num_trials` is the study's total, not each worker's: a worker stops once the study holds `num_trials` finished
(complete or pruned) trials, whoever ran them; failed trials do not count. Workers already inside a trial when the
total is reached finish it, so N workers can overshoot by up to N - 1 trials. Parallelism comes from several workers:
each runs its trials one after the other.
"""

import ctypes
import glob
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from cleanrl_utils.reproduce import args_to_flags

try:
    import optuna
    from optuna.storages._heartbeat import BaseHeartbeat
    from optuna.trial import FrozenTrial, TrialState
except ImportError as e:
    raise ImportError("cleanrl_utils.tuner needs optuna: `uv sync --extra optuna` or `pip install 'cleanrl[optuna]'`") from e

AGGREGATIONS = {"average": np.mean, "median": np.median, "max": np.max, "min": np.min}
# finished trials that count towards num_trials; a failed one is an error (or a killed worker's trial, retried)
COUNTED_STATES = (TrialState.COMPLETE, TrialState.PRUNED)
# the flags the tuner sets itself on every run
RESERVED_PARAMS = ("env_id", "seed", "exp_name")
LOG_TAIL_LINES = 20


def read_metric(run_dir: str, tag: str, window: int) -> float:
    """The mean of the last `window` values of a scalar, read with TensorBoard's own reader."""
    accumulator = EventAccumulator(run_dir, size_guidance={"scalars": 0})  # 0: keep every value, not a sample
    accumulator.Reload()
    if tag not in accumulator.Tags()["scalars"]:
        raise RuntimeError(
            f"{run_dir} logged no {tag!r} (for episodic returns: did any episode end? give a larger --total-timesteps)"
        )
    values = [event.value for event in accumulator.Scalars(tag)]
    return float(np.mean(values[-window:]))


def aggregate(scores: dict[str, list[float]], aggregation_type: str) -> float:
    """Each env's normalized scores averaged over its seeds, then aggregated over the envs: seeds are noise to average
    away, envs are different tasks that `aggregation_type` summarises."""
    return float(AGGREGATIONS[aggregation_type]([np.mean(env_scores) for env_scores in scores.values()]))


class HeartbeatJournalStorage(optuna.storages.JournalStorage, BaseHeartbeat):
    """A journal file storage with Optuna's heartbeat protocol, which its JournalStorage lacks: the beat is a trial
    system attr (one journal line per beat), so a trial whose worker died is failed (and retried) by the next worker,
    as with RDBStorage."""

    HEARTBEAT_ATTR = "cleanrl_tuner:heartbeat"

    def __init__(self, path: str, heartbeat_interval: int, grace_period: int, stale_trial_callback: Callable):
        super().__init__(optuna.storages.journal.JournalFileBackend(path))
        self._heartbeat_interval = heartbeat_interval
        self._grace_period = grace_period
        self._stale_trial_callback = stale_trial_callback

    def record_heartbeat(self, trial_id: int) -> None:
        self.set_trial_system_attr(trial_id, self.HEARTBEAT_ATTR, time.time())

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        deadline = time.time() - self._grace_period
        running = self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
        # a retried trial inherits its predecessor's last beat: it is alive from its own start until its first beat
        return [
            trial._trial_id
            for trial in running
            if max(trial.system_attrs.get(self.HEARTBEAT_ATTR, 0.0), trial.datetime_start.timestamp()) < deadline
        ]

    def get_heartbeat_interval(self) -> int:
        return self._heartbeat_interval

    def get_heartbeat_stale_trial_callback(self) -> Callable:
        return self._stale_trial_callback


def make_storage(storage, heartbeat_interval: int, grace_period: int):
    """The Optuna storage that a `storage` argument names (see the module docstring)."""
    if storage is None or isinstance(storage, optuna.storages.BaseStorage):
        return storage
    # heartbeats are marked experimental in Optuna; they are what lets a study outlive a killed worker
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=3)
        if "://" in storage:
            return optuna.storages.RDBStorage(
                storage, heartbeat_interval=heartbeat_interval, grace_period=grace_period, heartbeat_stale_trial_callback=retry
            )
        return HeartbeatJournalStorage(storage, heartbeat_interval, grace_period, retry)


def die_with_worker(worker_pid: int) -> Callable[[], None]:
    """A Popen preexec_fn (Linux): the kernel SIGKILLs the training run when the worker dies, even by SIGKILL, when no
    cleanup of ours can run. prctl ties this to the thread that started the run, which is the one waiting for it."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1

    def preexec():
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
        if os.getppid() != worker_pid:  # the worker died before prctl took effect
            os._exit(1)

    return preexec


def run_to_completion(command: list[str], log) -> int:
    """Run a training command, its output to `log`; never leave it running behind the worker."""
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        # its own process group: a Ctrl-C reaches the worker alone, and killpg reaches the run's own children too
        start_new_session=True,
        # the preexec_fn calls prctl alone, taking no lock that another thread (Optuna's heartbeat) could hold at fork
        preexec_fn=die_with_worker(os.getpid()) if sys.platform == "linux" else None,  # noqa: PLW1509
    )
    try:
        return process.wait()
    finally:
        if process.poll() is None:  # the worker is stopping (Ctrl-C, an exception): the run stops with it
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


class Tuner:
    def __init__(
        self,
        script: str,
        metric: str,
        target_scores: dict[str, list[float]],
        params_fn: Callable[[optuna.Trial], dict[str, Any]],
        direction: str = "maximize",
        aggregation_type: str = "average",
        metric_last_n_average_window: int = 50,
        sampler: optuna.samplers.BaseSampler | None = None,
        pruner: optuna.pruners.BasePruner | None = None,
        storage: str | optuna.storages.BaseStorage | None = None,
        study_name: str | None = None,
        wandb_kwargs: dict[str, Any] | None = None,
        heartbeat_interval: int = 60,
        grace_period: int = 180,
    ) -> None:
        if not os.path.isfile(script):
            raise ValueError(f"script {script!r} does not exist (relative paths start from {os.getcwd()})")
        if not target_scores:
            raise ValueError("target_scores is empty: give at least one env, e.g. {'CartPole-v1': [0, 500]}")
        for env_id, scores in target_scores.items():
            if len(scores) != 2 or scores[0] == scores[1]:
                raise ValueError(f"target_scores[{env_id!r}] must be two different scores [low, high], got {scores!r}")
        if aggregation_type not in AGGREGATIONS:
            raise ValueError(f"aggregation_type must be one of {list(AGGREGATIONS)}, got {aggregation_type!r}")
        if direction not in ("maximize", "minimize"):
            raise ValueError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
        if metric_last_n_average_window < 1:
            raise ValueError(f"metric_last_n_average_window must be positive, got {metric_last_n_average_window}")
        if storage is not None and study_name is None:
            raise ValueError("a storage needs a study_name: every worker that gives the same one joins the same study")
        if study_name is not None and ("/" in study_name or "__" in study_name):
            # it becomes part of run folder names, whose fields are separated by "__"
            raise ValueError(f"study_name must contain neither '/' nor '__', got {study_name!r}")
        if heartbeat_interval < 1 or grace_period <= heartbeat_interval:
            raise ValueError(
                f"need 1 <= heartbeat_interval < grace_period (seconds), got {heartbeat_interval} and {grace_period}"
            )
        self.script = os.path.abspath(script)
        self.metric = metric
        self.target_scores = target_scores
        self.params_fn = params_fn
        self.direction = direction
        self.aggregation_type = aggregation_type
        self.metric_last_n_average_window = metric_last_n_average_window
        self.sampler = sampler
        self.pruner = pruner
        self.storage = storage
        self.study_name = study_name or f"{os.path.basename(script).removesuffix('.py')}_{int(time.time())}"
        self.wandb_kwargs = wandb_kwargs
        self.heartbeat_interval = heartbeat_interval
        self.grace_period = grace_period

    def tune(self, num_trials: int, num_seeds: int) -> FrozenTrial | None:
        """Run trials until the study holds `num_trials` finished ones; print and return the best trial (None when no
        trial completed, e.g. all were pruned)."""
        if num_trials < 1 or num_seeds < 1:
            raise ValueError(f"num_trials and num_seeds must be positive, got {num_trials} and {num_seeds}")
        study = optuna.create_study(
            study_name=self.study_name,
            storage=make_storage(self.storage, self.heartbeat_interval, self.grace_period),
            direction=self.direction,
            sampler=self.sampler,
            pruner=self.pruner,
            load_if_exists=True,  # the first worker creates the study, every other one joins it
        )
        # optimize would start one more trial before its callback could stop it
        if len(study.get_trials(deepcopy=False, states=COUNTED_STATES)) < num_trials:
            study.optimize(
                lambda trial: self.objective(trial, num_seeds),
                callbacks=[optuna.study.MaxTrialsCallback(num_trials, states=COUNTED_STATES)],
            )
        if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            print(f"study {self.study_name}: no trial completed (all were pruned or failed)")
            return None
        best = study.best_trial
        print(f"study {self.study_name}: best trial {best.number}, value {best.value:.4f}, params {best.params}")
        return best

    def objective(self, trial: optuna.Trial, num_seeds: int) -> float:
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
        params = self.params_fn(trial)
        reserved = [name for name in RESERVED_PARAMS if name in params]
        if reserved:
            raise ValueError(f"params_fn must not set {reserved}: the tuner sets them for every run")
        wandb_run = self.start_wandb_run(trial, params) if self.wandb_kwargs is not None else None
        state = "failed"
        try:
            value = self.train_and_score(trial, params, num_seeds, wandb_run)
            state = "complete"
            return value
        except optuna.TrialPruned:
            state = "pruned"
            raise
        finally:
            if wandb_run is not None:
                wandb_run.summary["state"] = state
                wandb_run.finish(exit_code=1 if state == "failed" else 0)

    def train_and_score(self, trial: optuna.Trial, params: dict[str, Any], num_seeds: int, wandb_run) -> float:
        exp_name = f"{self.study_name}_trial{trial.number}"
        scores: dict[str, list[float]] = {env_id: [] for env_id in self.target_scores}
        run_dirs = {}
        for step, seed in enumerate(range(1, num_seeds + 1)):
            for env_id, (low, high) in self.target_scores.items():
                run_dir = self.train(env_id, seed, exp_name, params)
                run_dirs[f"{env_id} seed {seed}"] = run_dir
                trial.set_user_attr("run_dirs", run_dirs)
                metric = read_metric(run_dir, self.metric, self.metric_last_n_average_window)
                scores[env_id].append((metric - low) / (high - low))
            value = aggregate(scores, self.aggregation_type)
            trial.set_user_attr("normalized_scores", scores)
            trial.report(value, step)
            if wandb_run is not None:
                wandb_run.log({"value": value, **{f"normalized_score/{env}": s[-1] for env, s in scores.items()}}, step=step)
            if step + 1 < num_seeds and trial.should_prune():
                raise optuna.TrialPruned(f"pruned after seed {seed} with value {value:.4f}")
        return value

    def train(self, env_id: str, seed: int, exp_name: str, params: dict[str, Any]) -> str:
        """One training run; returns its run folder."""
        command = [sys.executable, self.script, "--env-id", env_id, "--seed", str(seed), "--exp-name", exp_name]
        command += args_to_flags(params)
        # the folder name is unique to (study, trial, env, seed) but for its time stamp; the folders there before the run
        # (a deleted study's trial of the same number) are not this run's
        pattern = os.path.join("runs", glob.escape(f"{env_id}__{exp_name}__{seed}__") + "*")
        before = set(glob.glob(pattern))
        log_path = os.path.join("tuner_logs", exp_name, f"{env_id}__{seed}.log")
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        with open(log_path, "w") as log:
            returncode = run_to_completion(command, log)
        if returncode != 0:
            with open(log_path, errors="replace") as log:
                tail = "".join(log.readlines()[-LOG_TAIL_LINES:])
            raise RuntimeError(f"`{shlex.join(command)}` exited with code {returncode}; the end of {log_path}:\n{tail}")
        new = sorted(set(glob.glob(pattern)) - before)
        if len(new) != 1:
            raise RuntimeError(f"`{shlex.join(command)}` should have made one new folder {pattern}, found {new}")
        return new[0]

    def start_wandb_run(self, trial: optuna.Trial, params: dict[str, Any]):
        import wandb  # only when asked: W&B is slow to import and may not be set up

        kwargs = {"name": f"{self.study_name}_trial{trial.number}", "group": self.study_name, **self.wandb_kwargs}
        kwargs["config"] = {**kwargs.get("config", {}), **params, "trial": trial.number, "script": self.script}
        return wandb.init(**kwargs)
