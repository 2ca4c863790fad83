"""cleanrl_utils/tuner.py: trial values from the run folders, W&B, pruning, failed runs, shared studies across worker
processes, a worker killed mid-trial, bad inputs."""

import itertools
import json
import os
import pathlib
import runpy
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import optuna
import pytest
from helpers import REPO, run_dirs, scalars, script_env
from optuna.trial import TrialState

from cleanrl_utils.tuner import Tuner, aggregate

PPO = str(REPO / "cleanrl" / "ppo.py")
SHORT = {"total_timesteps": 2048, "num_envs": 4, "num_steps": 128}
CARTPOLE = {"CartPole-v1": [0, 500]}

# a worker process as a user would start one: argv is the storage, the study's num_trials and the runs' total_timesteps
WORKER = f"""
import sys
from cleanrl_utils.tuner import Tuner

Tuner(
    script={PPO!r},
    metric="charts/episodic_return",
    target_scores={CARTPOLE!r},
    params_fn=lambda trial: {{
        "learning_rate": trial.suggest_float("learning_rate", 1e-4, 1e-2, log=True),
        **{SHORT!r},
        "total_timesteps": int(sys.argv[3]),
    }},
    storage=sys.argv[1],
    study_name="shared",
    heartbeat_interval=1,
    grace_period=2,
).tune(num_trials=int(sys.argv[2]), num_seeds=1)
assert "wandb" not in sys.modules, "W&B was imported without wandb_kwargs"
"""


def load_study(storage: str) -> optuna.Study:
    if "://" not in storage:
        storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(storage))
    return optuna.load_study(study_name="shared", storage=storage)


def start_worker(tmp_path: pathlib.Path, storage: str, num_trials: int, total_timesteps: int = 2048) -> subprocess.Popen:
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    return subprocess.Popen(
        [sys.executable, str(worker), storage, str(num_trials), str(total_timesteps)],
        cwd=tmp_path,
        env=script_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(worker: subprocess.Popen) -> str:
    output, _ = worker.communicate(timeout=300)
    assert worker.returncode == 0, output[-5000:]
    return output


def live_processes(predicate) -> list[int]:
    """Pids of the processes (zombies aside: they run nothing) for which predicate(pid, ppid) holds."""
    pids = []
    for entry in pathlib.Path("/proc").iterdir():
        try:
            # /proc/PID/stat: "pid (command) state ppid ..."; the command may hold spaces, so split after its ")"
            state, ppid = (entry / "stat").read_text().rpartition(")")[2].split()[:2]
            if state != "Z" and predicate(int(entry.name), int(ppid)):
                pids.append(int(entry.name))
        except (ValueError, OSError):  # not a process, or one that has just ended
            continue
    return pids


def processes_working_in(folder: pathlib.Path) -> list[int]:
    return live_processes(lambda pid, ppid: os.readlink(f"/proc/{pid}/cwd") == str(folder))


@pytest.fixture
def stop_leftovers(tmp_path):
    """A failing test's processes still running in tmp_path (e.g. an orphaned training run) are stopped after it."""
    yield
    for pid in processes_working_in(tmp_path):
        os.kill(pid, signal.SIGKILL)


def test_aggregation_by_hand():
    # each env's seeds averaged first (A: 0.4, B: 0.1, C: 0.8), then aggregated over the envs; the other order (per
    # seed over the envs, then the mean over seeds) would give a median of 0.35 and a max of 0.9
    scores = {"A": [0.0, 0.8], "B": [0.1, 0.1], "C": [1.0, 0.6]}
    assert aggregate(scores, "average") == pytest.approx(1.3 / 3)
    assert aggregate(scores, "median") == pytest.approx(0.4)
    assert aggregate(scores, "max") == pytest.approx(0.8)
    assert aggregate(scores, "min") == pytest.approx(0.1)


def test_bad_inputs_raise_a_clear_value_error(tmp_path):
    def tuner(**changes):
        kwargs = {"script": PPO, "metric": "charts/episodic_return", "target_scores": CARTPOLE, "params_fn": lambda trial: {}}
        return Tuner(**{**kwargs, **changes})

    cases = [
        ({"script": str(tmp_path / "nope.py")}, "does not exist"),
        ({"target_scores": {}}, "target_scores is empty"),
        ({"target_scores": {"CartPole-v1": [500, 500]}}, "two different scores"),
        ({"aggregation_type": "mean"}, "aggregation_type must be one of"),
        ({"direction": "up"}, "direction must be 'maximize' or 'minimize'"),
        ({"metric_last_n_average_window": 0}, "metric_last_n_average_window must be positive"),
        ({"storage": str(tmp_path / "tuner.journal")}, "a storage needs a study_name"),
        ({"study_name": "a__b"}, "study_name must contain neither"),
        ({"heartbeat_interval": 60, "grace_period": 30}, "heartbeat_interval < grace_period"),
    ]
    for changes, message in cases:
        with pytest.raises(ValueError, match=message):
            tuner(**changes)
    with pytest.raises(ValueError, match="num_trials and num_seeds must be positive"):
        tuner().tune(num_trials=0, num_seeds=1)


@pytest.mark.e2e
def test_tiny_study_values_come_from_the_run_folders_and_reach_wandb(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    storage = f"sqlite:///{tmp_path / 'tuner.db'}"
    best = Tuner(
        script=PPO,
        metric="charts/episodic_return",
        target_scores=CARTPOLE,
        params_fn=lambda trial: {
            "learning_rate": trial.suggest_float("learning_rate", 1e-4, 1e-2, log=True),
            "num_minibatches": trial.suggest_categorical("num_minibatches", [2, 4]),
            **SHORT,
        },
        storage=storage,
        study_name="shared",
        wandb_kwargs={"project": "tuner-test"},
    ).tune(num_trials=2, num_seeds=1)

    trials = load_study(storage).trials
    assert [trial.state for trial in trials] == [TrialState.COMPLETE] * 2
    assert len(run_dirs(tmp_path)) == 2, "one run per trial x env x seed"
    for trial in trials:
        (run_dir,) = trial.user_attrs["run_dirs"].values()
        assert pathlib.Path(run_dir).name.startswith(f"CartPole-v1__shared_trial{trial.number}__1__")
        args = json.loads((tmp_path / run_dir / "args.json").read_text())["args"]
        assert args["learning_rate"] == trial.params["learning_rate"]
        assert args["num_minibatches"] == trial.params["num_minibatches"]
        returns = [value for _, value in scalars(tmp_path / run_dir, "charts/episodic_return")]
        assert len(returns) > 50, "the window must cut: a short budget still ends many CartPole episodes"
        assert trial.value == pytest.approx(np.mean(returns[-50:]) / 500, rel=1e-6)
        assert trial.intermediate_values == {0: trial.value}
        assert (
            "training to 2048 steps"
            in (tmp_path / "tuner_logs" / f"shared_trial{trial.number}" / "CartPole-v1__1.log").read_text()
        )

        (wandb_file,) = [
            f for f in tmp_path.glob("wandb/offline-run-*/*.wandb") if f"shared_trial{trial.number}".encode() in f.read_bytes()
        ]
        # W&B keeps an offline run as protobuf records, and no Python reader for them: look for the config's JSON values
        record = wandb_file.read_bytes()
        assert b"learning_rate" in record and json.dumps(trial.params["learning_rate"]).encode() in record
        assert b"normalized_score/CartPole-v1" in record

    assert best.number == max(trials, key=lambda trial: trial.value).number
    assert best.value == max(trial.value for trial in trials)
    assert f"best trial {best.number}, value {best.value:.4f}, params {best.params}" in capsys.readouterr().out


@pytest.mark.e2e
def test_pruner_stops_a_trial_with_a_bad_value(tmp_path, monkeypatch):
    """The metric is the logged learning rate, which --no-anneal-lr keeps at the given one: trial 0 (rate 0) scores 0
    after its first seed and is pruned there; trial 1 scores 0.001 / 0.002 = 0.5 and runs both seeds."""
    monkeypatch.chdir(tmp_path)
    storage = str(tmp_path / "tuner.journal")
    best = Tuner(
        script=PPO,
        metric="charts/learning_rate",
        target_scores={"CartPole-v1": [0, 0.002]},
        params_fn=lambda trial: {"learning_rate": [0.0, 0.001][trial.number], "anneal_lr": False, **SHORT},
        pruner=optuna.pruners.ThresholdPruner(lower=0.1),
        storage=storage,
        study_name="shared",
    ).tune(num_trials=2, num_seeds=2)

    bad, good = load_study(storage).trials
    assert bad.state == TrialState.PRUNED
    assert bad.intermediate_values == {0: 0.0}
    assert list(bad.user_attrs["run_dirs"]) == ["CartPole-v1 seed 1"], "the pruned trial must not train its second seed"
    assert good.state == TrialState.COMPLETE
    assert good.value == pytest.approx(0.5, rel=1e-6)  # float32 in the event file
    assert list(good.user_attrs["run_dirs"]) == ["CartPole-v1 seed 1", "CartPole-v1 seed 2"]
    assert len(run_dirs(tmp_path)) == 3
    assert best.number == good.number


@pytest.mark.e2e
def test_a_failed_run_fails_the_trial_with_its_command_and_log(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    storage = f"sqlite:///{tmp_path / 'tuner.db'}"
    tuner = Tuner(
        script=PPO,
        metric="charts/episodic_return",
        target_scores=CARTPOLE,
        params_fn=lambda trial: {"num_minibatches": 7, **SHORT},  # 7 does not divide the batch of 512: ppo.py exits 2
        storage=storage,
        study_name="shared",
    )
    with pytest.raises(RuntimeError) as error:
        tuner.tune(num_trials=1, num_seeds=1)
    message = str(error.value)
    assert "exited with code 2" in message
    assert f"{PPO} --env-id CartPole-v1 --seed 1 --exp-name shared_trial0 --num-minibatches 7" in message
    assert "error: --num-minibatches 7 must divide" in message, "the end of the run's log belongs in the message"
    assert [trial.state for trial in load_study(storage).trials] == [TrialState.FAIL]


@pytest.mark.e2e
def test_two_workers_share_one_study(tmp_path):
    storage = str(tmp_path / "tuner.journal")
    workers = [start_worker(tmp_path, storage, num_trials=4) for _ in range(2)]
    outputs = [finish(worker) for worker in workers]

    trials = load_study(storage).trials
    assert all(trial.state == TrialState.COMPLETE for trial in trials)
    # num_trials is the study's total; a worker inside a trial when it is reached finishes that trial
    assert 4 <= len(trials) <= 5
    assert {trial.user_attrs["worker"] for trial in trials} == {f"{socket.gethostname()}:{w.pid}" for w in workers}
    folders = [folder for trial in trials for folder in trial.user_attrs["run_dirs"].values()]
    assert sorted(folders) == sorted(str(path.relative_to(tmp_path)) for path in run_dirs(tmp_path))
    assert all("best trial" in output for output in outputs)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc; the tuner's parent-death signal is Linux-only")
@pytest.mark.parametrize("storage_kind", ["sqlite", "journal"])
@pytest.mark.e2e
def test_a_killed_worker_leaves_no_orphan_and_a_restarted_one_continues(tmp_path, storage_kind, stop_leftovers):
    storage = f"sqlite:///{tmp_path / 'tuner.db'}" if storage_kind == "sqlite" else str(tmp_path / "tuner.journal")
    # a run long enough (about a minute) that an orphan would still be training when the test looks for it
    worker = start_worker(tmp_path, storage, num_trials=2, total_timesteps=500_000)
    deadline = time.time() + 120
    while not (training := live_processes(lambda pid, ppid: ppid == worker.pid)):
        assert worker.poll() is None and time.time() < deadline, "the worker started no training run"
        time.sleep(0.05)
    time.sleep(1.0)
    worker.kill()
    worker.wait()
    deadline = time.time() + 5
    while processes_working_in(tmp_path):
        assert time.time() < deadline, f"the training run {training} outlived its killed worker"
        time.sleep(0.05)
    (killed,) = load_study(storage).get_trials(states=(TrialState.RUNNING,))

    time.sleep(3)  # the killed trial's last heartbeat is now older than the grace period (2 s)
    finish(start_worker(tmp_path, storage, num_trials=2))

    trials = load_study(storage).trials
    assert trials[killed.number].state == TrialState.FAIL
    complete = [trial for trial in trials if trial.state == TrialState.COMPLETE]
    assert len(complete) == 2 and len(trials) == 3
    # the killed trial is retried with its params
    (retry,) = [trial for trial in complete if trial.system_attrs.get("failed_trial") == killed.number]
    assert retry.params == killed.params
    assert not processes_working_in(tmp_path)


@pytest.mark.e2e
def test_the_example_builds_a_tuner_whose_every_choice_ppo_accepts(monkeypatch):
    monkeypatch.chdir(REPO)  # the example names cleanrl/ppo.py from the repository root
    tuner = runpy.run_path(str(REPO / "tuner_example.py"))["tuner"]  # its tune() call waits for __main__
    assert set(tuner.target_scores) == {"CartPole-v1", "Acrobot-v1"}
    sampled = optuna.create_study().ask()
    assert tuner.params_fn(sampled)["total_timesteps"] == 100000
    # --num-minibatches must divide --num-envs * --num-steps for every pair of choices, or ppo.py fails the trial
    choices = {name: sampled.distributions[name].choices for name in ("num_steps", "num_minibatches")}
    for num_steps, num_minibatches in itertools.product(*choices.values()):
        trial = optuna.trial.FixedTrial({**sampled.params, "num_steps": num_steps, "num_minibatches": num_minibatches})
        params = tuner.params_fn(trial)
        assert (params["num_envs"] * params["num_steps"]) % params["num_minibatches"] == 0, params
