"""What the script tests share: run a cleanrl script as a user would, and read back what it logged."""

import fcntl
import functools
import importlib.util
import os
import pathlib
import runpy
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

REPO = pathlib.Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
# the TensorBoard tags every PPO-family script logs (DESIGN.md's names, which plotting tools read)
PPO_TAGS = [
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/SPS",
    "charts/learning_rate",
    "losses/value_loss",
    "losses/policy_loss",
    "losses/entropy",
    "losses/approx_kl",
    "losses/old_approx_kl",
    "losses/clipfrac",
    "losses/explained_variance",
]
CURRENT_TEST = None  # the pytest item being set up or run (conftest.py's hook keeps it), for require_e2e
# Procgen needs numpy < 2, so its scripts run in an environment of their own beside the dev one: the one the docs give
# (docs/get-started.md), `.venv-procgen` at the repository root
PROCGEN_SCRIPTS = {"ppo_procgen.py", "ppg_procgen.py"}
PROCGEN_VENV = REPO / ".venv-procgen"


def require_e2e():
    """A test that starts a script or utility in a new process is marked e2e, so the fast loop
    (`-m "not slow and not e2e"`) leaves it out; one that is not fails here, naming itself."""
    if CURRENT_TEST is not None and CURRENT_TEST.get_closest_marker("e2e") is None:
        raise AssertionError(f"{CURRENT_TEST.nodeid} starts a process: mark it @pytest.mark.e2e")


@functools.cache
def procgen_python() -> str:
    """The interpreter of the Procgen environment, brought up to date with the lock file as the docs' command does it
    (`UV_PROJECT_ENVIRONMENT=.venv-procgen uv run --no-dev --extra procgen ...`); a few seconds from uv's cache. A file
    lock keeps pytest-xdist's workers from syncing it at the same time."""
    uv = os.environ.get("UV") or shutil.which("uv")  # `uv run pytest` names its own binary in $UV
    assert uv, "the Procgen tests need uv (https://docs.astral.sh/uv/) to build their environment"
    env = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}  # the dev venv's, not this one's
    with open(REPO / ".venv-procgen.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(
            [uv, "sync", "--frozen", "--no-dev", "--extra", "procgen", "--quiet"],
            cwd=REPO,
            env=dict(env, UV_PROJECT_ENVIRONMENT=str(PROCGEN_VENV)),
            check=True,
        )
    return str(PROCGEN_VENV / "bin" / "python")


def python_for(script: str) -> str:
    """The interpreter a user runs `script` with: the Procgen environment's for the Procgen scripts, else this one."""
    return procgen_python() if script in PROCGEN_SCRIPTS else sys.executable


def script_env(**extra) -> dict:
    """The user's environment, offline W&B, and the tests folder importable for `module:EnvName-v0` ids."""
    env = dict(os.environ, WANDB_MODE="offline", PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def run_script(script: str, *flags: str, cwd: pathlib.Path, timeout: float = 300, **env) -> subprocess.CompletedProcess:
    """`python cleanrl/<script> <flags>` from `cwd` (so runs/ and videos/ land there); fails the test on a timeout;
    `env` adds variables."""
    require_e2e()
    return subprocess.run(
        [python_for(script), str(REPO / "cleanrl" / script), *flags],
        cwd=cwd,
        env=script_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_utility(
    module: str, *flags: str, cwd: pathlib.Path, timeout: float = 300, python: str = sys.executable, **env
) -> subprocess.CompletedProcess:
    """`python -m cleanrl_utils.<module> <flags>` from `cwd`, as a user runs the utilities (`python`: another
    environment's interpreter); `env` adds variables."""
    require_e2e()
    return subprocess.run(
        [python, "-m", f"cleanrl_utils.{module}", *flags],
        cwd=cwd,
        env=script_env(PYTHONPATH=os.pathsep.join([str(REPO), str(TESTS)]), **env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_script(script: str, *flags: str, cwd: pathlib.Path) -> subprocess.Popen:
    require_e2e()
    return subprocess.Popen(
        [python_for(script), str(REPO / "cleanrl" / script), *flags],
        cwd=cwd,
        env=script_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_dirs(cwd: pathlib.Path) -> list[pathlib.Path]:
    """The run folders a script wrote under cwd/runs (env ids may hold a `/`, so search for event files)."""
    return sorted({p.parent for p in (cwd / "runs").rglob("events.out.tfevents.*")})


def only_run_dir(cwd: pathlib.Path) -> pathlib.Path:
    dirs = run_dirs(cwd)
    assert len(dirs) == 1, f"expected one run folder, found {dirs}"
    return dirs[0]


def scalars(run_dir: pathlib.Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) pairs of a TensorBoard tag, read with TensorBoard's own reader (which honours purge_step)."""
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    if tag not in accumulator.Tags()["scalars"]:
        return []
    return [(event.step, event.value) for event in accumulator.Scalars(tag)]


def scalar_tags(run_dir: pathlib.Path) -> set[str]:
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return set(accumulator.Tags()["scalars"])


def assert_clean_failure(result: subprocess.CompletedProcess, *expected_fragments: str):
    """Bad input: exit code 2, one clear line on stderr naming the problem, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr
    for fragment in expected_fragments:
        assert fragment in result.stderr, (fragment, result.stderr)


def refused(capsys, call) -> str:
    """The call ends with exit code 2 and one `error:` line; that line."""
    with pytest.raises(SystemExit) as exit_info:
        call()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def check_bad_input_in_process(script: str, flags: list[str], fragments: list[str], cwd: pathlib.Path, monkeypatch, capsys):
    """`python cleanrl/<script> <flags>` run in this process (a new one costs seconds of imports per case; each test
    module still runs a bad input as a user would, in a new process): exit code 2, the script's one `error:` line
    (tyro's own message for an unknown flag), no traceback, and nothing started. A bad input that slipped through
    would start a run: os.makedirs of a run folder fails the test at once. Returns what the script printed on stderr."""
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", [script, *flags])
    makedirs = os.makedirs

    def no_run_folder(path, *args, **kwargs):
        assert "runs" not in str(path), f"a bad input started a run ({path})"
        return makedirs(path, *args, **kwargs)

    monkeypatch.setattr(os, "makedirs", no_run_folder)
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(REPO / "cleanrl" / script), run_name="__main__")
    stderr = capsys.readouterr().err
    assert exit_info.value.code == 2, stderr
    assert "Traceback" not in stderr, stderr
    for fragment in fragments:
        assert fragment in stderr, (fragment, stderr)
    if stderr.startswith("error: "):
        assert stderr.count("\n") == 1, stderr
    assert not (cwd / "runs").exists(), "a bad input started a run"
    return stderr


def run_with_every_flag(script: str, flags: list[str], tmp_path: pathlib.Path) -> pathlib.Path:
    """Run a script with `flags`, which hold --capture-video --save-model --track: it exits cleanly, records videos of
    its training and of its evaluation, saves its model and args.json, and writes an offline W&B run. The run folder."""
    result = run_script(script, *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    videos = {path.parent.name for path in (tmp_path / "videos").rglob("*.mp4")}
    assert run_dir.name in videos and f"{run_dir.name}-eval" in videos, videos
    assert (run_dir / f"{script[: -len('.py')]}.cleanrl_model").stat().st_size > 0
    assert (run_dir / "args.json").exists()
    assert list((tmp_path / "wandb").glob("offline-run-*")), "--track with WANDB_MODE=offline wrote no W&B run"
    return run_dir


def check_evaluations(run_dir: pathlib.Path, eval_interval: int, eval_episodes: int, total_steps: int):
    """A run made with --eval-interval, --eval-episodes and --save-model: it logged the mean and spread of an evaluation
    at each crossing of the interval (at the step of the iteration that crossed it) and of its final one at the last
    step, kept the best evaluated model beside the final one, and logged the final evaluation's episodes one by one."""
    steps = [step for step, _ in scalars(run_dir, "eval/episodic_return")]
    assert len(steps) >= 3 and steps[:-1] == sorted(set(steps[:-1])), steps
    assert [step // eval_interval for step in steps[:-1]] == list(range(1, len(steps))), (steps, eval_interval)
    assert steps[-1] == total_steps, (steps, total_steps)
    assert len(scalars(run_dir, "eval/episodic_return_std")) == len(steps)
    assert len(scalars(run_dir, "eval/final_episodic_return")) == eval_episodes
    exp_name = run_dir.name.split("__")[1]
    assert (run_dir / f"{exp_name}.best.cleanrl_model").stat().st_size > 0
    assert not list(run_dir.glob("*.evaluated.cleanrl_model")), "an evaluation left its temporary model behind"


def check_enjoy_replays_the_evaluation(run_dir: pathlib.Path, tmp_path: pathlib.Path, games: int = 2):
    """enjoy, given the run's evaluation seed (the run's seed 1 + 100000), loads the very weights saved and replays the
    games of the run's own final evaluation."""
    eval_returns = [value for _, value in scalars(run_dir, "eval/final_episodic_return")]
    exp_name = run_dir.name.split("__")[1]
    flags = ["--model-path", str(run_dir / f"{exp_name}.cleanrl_model"), "--seed", "100001", "--eval-episodes", str(games)]
    result = run_utility("enjoy", *flags, cwd=tmp_path, python=python_for(f"{exp_name}.py"))
    assert result.returncode == 0, result.stderr[-3000:]
    played = [float(line.split()[-1]) for line in result.stdout.splitlines() if line.startswith("episode ")]
    assert played == eval_returns[:games], (played, eval_returns)


def load_script(name: str):
    """Import cleanrl/<name>.py as a module, as a test of its pure pieces would (importing must not train)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "cleanrl" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_same_model(path_a: pathlib.Path, path_b: pathlib.Path):
    """Two .cleanrl_model files hold identical weights: torch state dicts (alone, or beside the Args that shape the
    network) tensor by tensor; the JAX scripts' flax bytes byte for byte."""
    if path_a.parent.name.split("__")[1].endswith("_jax"):
        assert path_a.read_bytes() == path_b.read_bytes()
        return
    weights_a, weights_b = torch.load(path_a), torch.load(path_b)
    weights_a, weights_b = weights_a.get("model_weights", weights_a), weights_b.get("model_weights", weights_b)
    for name, tensor in weights_a.items():
        assert torch.equal(tensor, weights_b[name]), name


def checkpoint_files(folder: pathlib.Path) -> list[pathlib.Path]:
    """The latest checkpoints under a folder (cleanrl_utils.run_state writes `checkpoint.pt` in each run folder)."""
    return list(folder.rglob("checkpoint.pt"))


def load_checkpoint(path: pathlib.Path) -> dict:
    return torch.load(path, weights_only=False)


def wait_for(predicate, process: subprocess.Popen, timeout: float = 120):
    deadline = time.time() + timeout
    while not predicate():
        assert process.poll() is None, f"the run ended early: {process.communicate()[1][-3000:]}"
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


def check_killed_run_resumes_to_the_same_weights(script: str, flags: list[str], tmp_path: pathlib.Path, steps_tag: str):
    """Run `flags` (which include --save-model and --checkpoint-interval) once uninterrupted, and once SIGKILLed after
    its first checkpoint then resumed: the resumed run completes, logs `steps_tag` at the same steps as the
    uninterrupted one (none twice, none missing), and ends with identical weights. Returns the resumed run's folder."""
    model_file = f"{pathlib.Path(script).stem}.cleanrl_model"
    (tmp_path / "uninterrupted").mkdir()
    result = run_script(script, *flags, cwd=tmp_path / "uninterrupted")
    assert result.returncode == 0, result.stderr[-3000:]
    reference_dir = only_run_dir(tmp_path / "uninterrupted")

    (tmp_path / "killed").mkdir()
    process = start_script(script, *flags, cwd=tmp_path / "killed")
    wait_for(lambda: checkpoint_files(tmp_path / "killed" / "runs"), process)
    checkpoint_path = checkpoint_files(tmp_path / "killed" / "runs")[0]
    time.sleep(0.5)  # let it log past the checkpoint, so the resumed run must hide those steps
    process.kill()
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the run finished before it could be killed: give it a larger budget"
    run_dir = checkpoint_path.parent

    result = run_script(script, "--resume", str(run_dir), cwd=tmp_path / "killed")
    assert result.returncode == 0, result.stderr[-3000:]
    steps = [step for step, _ in scalars(run_dir, steps_tag)]
    assert steps == sorted(set(steps)), "a global step was logged twice"
    assert steps == [step for step, _ in scalars(reference_dir, steps_tag)], "the resumed run skipped or repeated steps"
    assert_same_model(reference_dir / model_file, run_dir / model_file)
    return run_dir


def sigterm_mid_run(script: str, flags: list[str], tmp_path: pathlib.Path, delay: float = 1.0):
    """Start a checkpointing run (an interval beyond its budget: only the signal writes one), SIGTERM it `delay`
    seconds after its first line: it must exit with 143 and say how to resume. Returns its run folder and the
    checkpoint it wrote."""
    process = start_script(script, *flags, "--checkpoint-interval", str(10**12), cwd=tmp_path)
    # the scripts print their first line once the run is set up, its SIGTERM handler included
    assert process.stdout.readline(), f"the run ended early: {process.communicate()[1][-3000:]}"
    time.sleep(delay)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    assert f"--resume {run_dir.relative_to(tmp_path)}" in stderr
    return run_dir, load_checkpoint(checkpoint_files(run_dir)[0])


def check_sigterm_checkpoints_and_resumes(script: str, tmp_path: pathlib.Path, long_budget: int, more_steps: int):
    """SIGTERM mid-run: a checkpoint, exit code 143 and a line saying how to resume; resuming with a
    --total-timesteps `more_steps` past the checkpoint then finishes, at that budget."""
    run_dir, checkpoint = sigterm_mid_run(script, ["--total-timesteps", str(long_budget)], tmp_path)
    assert 0 < checkpoint["global_step"] < long_budget
    budget = checkpoint["global_step"] + more_steps
    result = run_script(script, "--resume", str(run_dir), "--total-timesteps", str(budget), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resuming {run_dir} at step {checkpoint['global_step']} of {budget}" in result.stdout
    assert load_checkpoint(checkpoint_files(run_dir)[0])["finished"]  # the final checkpoint: it can be extended
