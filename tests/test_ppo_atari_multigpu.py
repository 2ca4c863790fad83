"""cleanrl/ppo_atari_multigpu.py: two ranks under torchrun with every flag (rank 0 alone writes, the ranks agree after
every update), SIGTERM to one rank stops both at one checkpoint that both resume from, one rank trains exactly as
ppo_atari.py, the agreement check, bad inputs (a resume with another world size)."""

import dataclasses
import json
import math
import os
import pathlib
import signal
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import (
    PPO_TAGS,
    REPO,
    assert_same_model,
    check_bad_input_in_process,
    check_evaluations,
    load_checkpoint,
    load_script,
    only_run_dir,
    require_e2e,
    scalar_tags,
    scalars,
    script_env,
    start_script,
)

SCRIPT = "ppo_atari_multigpu.py"
SHORT = ["--num-envs", "1", "--num-steps", "16"]  # a rollout of 2 ranks: 32 steps
# a rank-0 game of Breakout takes far more than these runs' steps: no episode ends, so no episodic tags
TAGS = set(PPO_TAGS) - {"charts/episodic_return", "charts/episodic_length"}

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def torchrun_command(*flags: str) -> list[str]:
    # --standalone: the rendezvous binds a free port of its own, so runs side by side do not collide
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(REPO / "cleanrl" / SCRIPT),
        *flags,
    ]


def torchrun(*flags: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    require_e2e()
    return subprocess.run(torchrun_command(*flags), cwd=cwd, env=script_env(), capture_output=True, text=True, timeout=300)


def rank_pid(parent: int, rank: int) -> int:
    """The process torchrun (`parent`) started for `rank`: its child whose environment says RANK=rank."""
    children = [
        pid for task in pathlib.Path(f"/proc/{parent}/task").iterdir() for pid in (task / "children").read_text().split()
    ]
    for child in children:
        if f"RANK={rank}".encode() in pathlib.Path(f"/proc/{child}/environ").read_bytes().split(b"\0"):
            return int(child)
    raise AssertionError(f"no rank {rank} among torchrun's children {children}")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """Two ranks with every flag rank 0 takes, 2 updates."""
    tmp_path = tmp_path_factory.mktemp("smoke")
    flags = ["--total-timesteps", "64", "--capture-video", "--save-model", "--track", "--checkpoint-interval", "32"]
    result = torchrun(*SHORT, *flags, "--eval-interval", "32", "--eval-episodes", "1", cwd=tmp_path)
    return tmp_path, result


@pytest.mark.e2e
def test_two_ranks_with_every_flag_agree_and_rank_0_alone_writes(smoke):
    tmp_path, result = smoke
    assert result.returncode == 0, result.stderr[-3000:]
    # the fingerprints of both ranks were gathered and compared after each update (without the gradients'
    # all-reduce the ranks' parameters part at the first update and the run ends with exit code 1)
    assert "the 2 rank(s) agreed after each of the 2 updates" in result.stdout
    run_dir = only_run_dir(tmp_path)
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [run_dir.name]
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1
    assert len(list((tmp_path / "wandb").glob("offline-run-*"))) == 1
    assert {p.name for p in (tmp_path / "videos").iterdir()} == {run_dir.name, f"{run_dir.name}-eval"}
    assert list((tmp_path / "videos" / f"{run_dir.name}-eval").glob("*.mp4"))
    assert result.stdout.count("TensorBoard logs in") == 1
    assert TAGS <= scalar_tags(run_dir), TAGS - scalar_tags(run_dir)
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == [32, 64]  # global steps: both ranks' envs
    check_evaluations(run_dir, 32, 1, 64)
    assert (run_dir / "ppo_atari_multigpu.cleanrl_model").stat().st_size > 0
    saved = json.loads((run_dir / "args.json").read_text())
    assert saved["script"] == SCRIPT and saved["args"]["num_envs"] == 1 and saved["args"]["total_timesteps"] == 64
    # ONE checkpoint: the shared networks once, each rank's own envs and RNGs
    checkpoint = load_checkpoint(run_dir / "checkpoint.pt")
    assert checkpoint["finished"] and checkpoint["global_step"] == 64
    assert set(checkpoint["state"]) == {"agent", "optimizer", "global_step"}
    assert len(checkpoint["ranks"]) == 2 and all(set(r["state"]) == {"envs", "next_obs"} for r in checkpoint["ranks"])
    assert all(isinstance(r["state"]["envs"], bytes) for r in checkpoint["ranks"])  # the games in progress
    assert not torch.equal(checkpoint["ranks"][0]["rng"]["torch"], checkpoint["ranks"][1]["rng"]["torch"])
    assert not np.array_equal(checkpoint["ranks"][0]["state"]["next_obs"], checkpoint["ranks"][1]["state"]["next_obs"])


@pytest.mark.e2e
def test_sigterm_to_one_rank_stops_both_at_one_checkpoint_and_both_resume(tmp_path):
    require_e2e()
    process = subprocess.Popen(
        torchrun_command(*SHORT, "--total-timesteps", "1000000", "--checkpoint-interval", str(10**12)),
        cwd=tmp_path,
        env=script_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert "training to" in process.stdout.readline(), process.communicate()[1][-3000:]  # rank 0 is set up
    time.sleep(1.0)
    assert process.poll() is None, "the run ended before the signal: give it a larger budget"
    os.kill(
        rank_pid(process.pid, 1), signal.SIGTERM
    )  # rank 1 alone: its flag, all-gathered, stops rank 0 at the same iteration
    _, stderr = process.communicate(timeout=120)
    run_dir = only_run_dir(tmp_path)
    assert stderr.count("SIGTERM at step") == 1, stderr[-3000:]  # rank 0's line
    assert "exitcode  : 143" in stderr, stderr[-3000:]  # torchrun's report: a rank exited 143 after the checkpoint
    checkpoint = load_checkpoint(run_dir / "checkpoint.pt")
    done = checkpoint["global_step"]
    assert 0 < done < 1_000_000 and done % 32 == 0 and not checkpoint["finished"]
    assert all(isinstance(r["state"]["envs"], bytes) for r in checkpoint["ranks"])

    result = torchrun("--resume", str(run_dir.relative_to(tmp_path)), "--total-timesteps", str(done + 32), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count(f"resuming {run_dir.relative_to(tmp_path)} at step {done} of {done + 32}") == 1
    # both ranks loaded the one checkpoint's networks: else the agreement check stops the run
    assert "the 2 rank(s) agreed after each of the 1 updates" in result.stdout
    final = load_checkpoint(run_dir / "checkpoint.pt")
    assert final["finished"] and final["global_step"] == done + 32
    steps = [step for step, _ in scalars(run_dir, "charts/SPS")]
    assert steps == list(range(32, done + 32 + 1, 32)), steps


@pytest.mark.e2e
def test_one_rank_trains_exactly_as_ppo_atari(tmp_path):
    flags = ["--num-envs", "2", "--num-steps", "16", "--total-timesteps", "64", "--seed", "3", "--torch-deterministic"]
    flags += ["--save-model", "--eval-episodes", "1"]
    scripts = ["ppo_atari.py", SCRIPT]
    for script in scripts:
        (tmp_path / script).mkdir()
    processes = [start_script(script, *flags, cwd=tmp_path / script) for script in scripts]  # side by side: 2 cores
    for process in processes:
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr[-3000:]
    assert_same_model(*[only_run_dir(tmp_path / script) / f"{script[: -len('.py')]}.cleanrl_model" for script in scripts])


def agent_fingerprint(agent):
    return torch.stack([p.detach().double().sum() for p in agent.parameters()])


def test_agreement_check_stops_the_run_when_a_rank_differs(monkeypatch):
    module = load_script("ppo_atari_multigpu")
    spaces = {
        "single_observation_space": gym.spaces.Box(0, 255, (4, 84, 84), np.uint8),
        "single_action_space": gym.spaces.Discrete(4),
    }
    agents = []
    for _ in range(2):
        torch.manual_seed(0)
        agents.append(module.Agent(type("Envs", (), spaces)))
    gathered = []  # what each rank contributes to the all_gather, this rank (0) first

    def all_gather(out, mine):
        for row, value in zip(out, [mine, *gathered]):
            row.copy_(value)

    monkeypatch.setattr(module.dist, "all_gather", all_gather)
    gathered[:] = [agent_fingerprint(agents[1])]
    module.check_agreement(agent_fingerprint(agents[0]), 5, 2)  # identical parameters: the run goes on
    with torch.no_grad():
        agents[1].critic.bias += 1e-6  # one parameter, one rank
    gathered[:] = [agent_fingerprint(agents[1]), agent_fingerprint(agents[0])]
    with pytest.raises(SystemExit) as stopped:
        module.check_agreement(agent_fingerprint(agents[0]), 7, 3)
    assert stopped.value.code == "error: the parameters of rank(s) [1] differ from rank 0's after iteration 7; stopping"


def test_each_rank_restores_its_own_part_of_the_one_checkpoint(tmp_path, monkeypatch):
    """cleanrl_utils.run_state with per_rank: the shared entries for every rank, the entries and RNGs of its own rank."""
    from cleanrl_utils import run_state

    monkeypatch.setattr(run_state.signal, "signal", lambda *args: None)  # not this test process's SIGTERM handler
    parts = []
    for rank in range(2):
        torch.manual_seed(100 + rank)
        parts.append({"state": {"next_obs": np.full(3, rank)}, "rng": run_state._global_rngs()})
    checkpoint = {"global_step": 64, "state": {"global_step": 64}, "rng": parts[0]["rng"], "ranks": parts}
    state = run_state.RunState(
        str(tmp_path), load_script("ppo_atari_multigpu").Args(), None, checkpoint, per_rank=("next_obs",)
    )
    state.rank, state.world_size = 1, 2  # as torch.distributed would say on rank 1
    saved = state.restore({"global_step": 0, "next_obs": np.zeros(3)})
    assert saved["global_step"] == 64 and saved["next_obs"].tolist() == [1, 1, 1]
    assert torch.equal(torch.get_rng_state(), parts[1]["rng"]["torch"])


def hand_written_checkpoint(folder: pathlib.Path, ranks: int) -> pathlib.Path:
    """A run folder whose checkpoint says it was made by `ranks` ranks (the refusal reads no more than that)."""
    run_dir = folder / "BreakoutNoFrameskip-v4__ppo_atari_multigpu__1__1"
    run_dir.mkdir(parents=True)
    args = dataclasses.asdict(load_script("ppo_atari_multigpu").Args())
    checkpoint = {"format": 2, "script": SCRIPT, "run_name": run_dir.name, "args": args, "global_step": 2048}
    checkpoint |= {"finished": False, "wandb_run_id": None, "rng": None, "best_eval_return": -math.inf, "state": {}}
    torch.save(checkpoint | {"ranks": [{}] * ranks}, run_dir / "checkpoint.pt")
    return run_dir


BAD_INPUTS = [
    ({}, ["--env-id", "CartPole-v1"], ["--env-id CartPole-v1 is not an Atari game"]),
    ({}, ["--num-minibatches", "3"], ["--num-minibatches 3 must divide --num-envs * --num-steps = 1024"]),
    ({}, ["--total-timesteps", "1000"], ["less than one rollout of all ranks (1024 x 1)"]),
    ({"RANK": "1", "WORLD_SIZE": "2"}, ["--total-timesteps", "2000"], ["less than one rollout of all ranks (1024 x 2)"]),
    ({}, ["--batch-size", "5"], ["--batch-size"]),  # computed: not a flag
    ({}, ["--resume", "runs/never-ran"], ["--resume runs/never-ran: no such folder"]),
]


@pytest.mark.parametrize("env, flags, fragments", BAD_INPUTS)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, env, flags, fragments):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    check_bad_input_in_process(SCRIPT, flags, fragments, tmp_path, monkeypatch, capsys)


@pytest.mark.parametrize("saved_ranks, env", [(2, {}), (1, {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"})])
def test_resume_with_another_world_size_is_refused(tmp_path, monkeypatch, capsys, saved_ranks, env):
    run_dir = hand_written_checkpoint(tmp_path / "saved", saved_ranks)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "cwd").mkdir()
    world_size = int(env.get("WORLD_SIZE", 1))
    fragment = f"that run had {saved_ranks} rank(s) (processes) and this one has {world_size}"
    check_bad_input_in_process(SCRIPT, ["--resume", str(run_dir)], [fragment], tmp_path / "cwd", monkeypatch, capsys)
