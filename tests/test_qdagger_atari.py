"""cleanrl/qdagger_dqn_atari_impalacnn.py: the IMPALA CNN on real frames, the distillation loss and its decaying
coefficient by hand, the teacher network shared with dqn_atari.py, and the script as a user runs it with a teacher made by
dqn_atari.py --save-model (every flag, resume in the offline phase to the same weights, SIGTERM in the online phase,
bad inputs). The student's IMPALA CNN is slow on a CPU: the budgets are a few dozen updates."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import (
    assert_clean_failure,
    check_bad_input_in_process,
    check_enjoy_replays_the_evaluation,
    check_evaluations,
    check_killed_run_resumes_to_the_same_weights,
    checkpoint_files,
    load_checkpoint,
    load_script,
    only_run_dir,
    run_script,
    run_with_every_flag,
    scalar_tags,
    scalars,
    sigterm_mid_run,
)

SCRIPT = "qdagger_dqn_atari_impalacnn.py"
SMALL = ["--buffer-size", "1000", "--batch-size", "32", "--teacher-eval-episodes", "2"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def untrained_teacher(tmp_path_factory):
    """A file of the teacher's format (a Nature-CNN Q-network's state dict for Breakout), made in this process: the bad
    inputs need a readable teacher, not a trained one."""
    qdagger = load_script("qdagger_dqn_atari_impalacnn")
    envs = gym.vector.SyncVectorEnv([qdagger.make_env("BreakoutNoFrameskip-v4", 0, False, "test")])
    path = tmp_path_factory.mktemp("untrained") / "dqn_atari.cleanrl_model"
    torch.save(qdagger.TeacherNetwork(envs).state_dict(), path)
    envs.close()
    return path


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A teacher as a user makes one: dqn_atari.py --save-model (a tiny budget: a weak but real DQN model)."""
    cwd = tmp_path_factory.mktemp("teacher")
    flags = ["--total-timesteps", "120", "--learning-starts", "100", "--buffer-size", "300", "--save-model"]
    result = run_script("dqn_atari.py", *flags, cwd=cwd, OMP_NUM_THREADS="1")
    assert result.returncode == 0, result.stderr[-3000:]
    return only_run_dir(cwd) / "dqn_atari.cleanrl_model"


def test_buffer_and_teacher_network_are_dqn_ataris():
    """The buffer is cleanrl_utils.buffers' (test_value_based_atari.py covers it); the teacher is dqn_atari.py's
    QNetwork, layer for layer, so that a dqn_atari.py model loads and gives the same Q-values."""
    from cleanrl_utils.buffers import FrameReplayBuffer

    qdagger, dqn_atari = load_script("qdagger_dqn_atari_impalacnn"), load_script("dqn_atari")
    assert qdagger.FrameReplayBuffer is FrameReplayBuffer
    envs = gym.vector.SyncVectorEnv([dqn_atari.make_env("BreakoutNoFrameskip-v4", 0, False, "test")])
    obs, _ = envs.reset(seed=0)
    torch.manual_seed(0)
    dqn_network, teacher = dqn_atari.QNetwork(envs), qdagger.TeacherNetwork(envs)
    teacher.load_state_dict(dqn_network.state_dict())  # strict: the same names and shapes
    torch.testing.assert_close(teacher(torch.as_tensor(obs)), dqn_network(torch.as_tensor(obs)))
    envs.close()


def test_impala_cnn_on_real_frames():
    """Three IMPALA stacks (16, 32, 32 channels) halve 84 to 42, 21, 11; 32*11*11 features -> 256 -> 4 Q-values for
    Breakout's uint8 observation, scaled inside the network (float observations give the same values)."""
    qdagger = load_script("qdagger_dqn_atari_impalacnn")
    envs = gym.vector.SyncVectorEnv([qdagger.make_env("BreakoutNoFrameskip-v4", 0, False, "test")])
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (1, 4, 84, 84) and obs.dtype == np.uint8
    torch.manual_seed(0)
    q_network = qdagger.QNetwork(envs)
    x = torch.as_tensor(obs)
    shapes = []
    for stack in q_network.network[:3]:
        x = stack(x / 255.0 if x.dtype == torch.uint8 else x)
        shapes.append(tuple(x.shape))
    assert shapes == [(1, 16, 42, 42), (1, 32, 21, 21), (1, 32, 11, 11)]
    linears = [m for m in q_network.network if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(32 * 11 * 11, 256), (256, 4)]
    q_values = q_network(torch.as_tensor(obs))
    assert q_values.shape == (1, 4) and q_values.dtype == torch.float32
    torch.testing.assert_close(q_network(torch.as_tensor(obs, dtype=torch.float32)), q_values)
    # each residual block adds its input back: zeroed convolutions leave the block the identity
    block_input = torch.randn(1, 16, 42, 42)
    stack = q_network.network[0]
    with torch.no_grad():
        for conv in stack.res_convs:
            conv.weight.zero_(), conv.bias.zero_()
        pooled = torch.nn.functional.max_pool2d(stack.conv(block_input[:, :4]), 3, 2, padding=1)
        torch.testing.assert_close(stack(block_input[:, :4]), pooled)
    envs.close()


def test_distillation_loss_by_hand():
    qdagger = load_script("qdagger_dqn_atari_impalacnn")
    teacher_q = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    student_q = torch.tensor([[0.0, 0.0], [2.0, 0.0]])
    # row 1: teacher p = (e/(1+e), 1/(1+e)), student uniform: cross-entropy ln 2 whatever p
    # row 2: teacher uniform, student log-probs (2 - ln(1+e^2), -ln(1+e^2)): -(0.5 * 2 - ln(1 + e^2))
    row2 = math.log(1 + math.e**2) - 1.0
    expected = (math.log(2) + row2) / 2
    assert qdagger.distillation_loss(teacher_q, student_q, 1.0).item() == pytest.approx(expected, rel=1e-6)
    # temperature 2 halves every Q-value: row 1's teacher p = (e^.5/(1+e^.5), .), student uniform: ln 2 again;
    # row 2: student log-probs (1 - ln(1+e), -ln(1+e))
    expected_t2 = (math.log(2) + math.log(1 + math.e) - 0.5) / 2
    assert qdagger.distillation_loss(teacher_q, student_q, 2.0).item() == pytest.approx(expected_t2, rel=1e-6)
    # the student that copies the teacher's softmax pays the teacher's entropy, its minimum
    same = qdagger.distillation_loss(teacher_q[:1], teacher_q[:1], 1.0).item()
    p = math.e / (1 + math.e)
    assert same == pytest.approx(-(p * math.log(p) + (1 - p) * math.log(1 - p)), rel=1e-6)
    # gradients reach the student only
    student = student_q.clone().requires_grad_()
    qdagger.distillation_loss(teacher_q, student, 1.0).backward()
    assert student.grad.abs().sum() > 0


def test_distill_coefficient_by_hand():
    qdagger = load_script("qdagger_dqn_atari_impalacnn")
    coefficient = qdagger.distill_coefficient
    assert coefficient([5.0] * 9, 10.0) == 1.0  # fewer than 10 whole games: no mean yet, full distillation
    assert coefficient([5.0] * 10, 10.0) == pytest.approx(0.5)  # 1 - 5 / 10
    assert coefficient([2.0, 4.0] * 5, 12.0) == pytest.approx(0.75)  # 1 - 3 / 12
    assert coefficient([30.0] * 10, 10.0) == 0.0  # the student passed the teacher
    assert coefficient([-3.0] * 10, 10.0) == 1.0  # a negative mean does not push it past 1
    # a teacher that scores <= 0 (e.g. Pong): full weight while the student is below it, none once it is not
    assert coefficient([-21.0] * 10, -15.0) == 1.0 and coefficient([-10.0] * 10, -15.0) == 0.0


@pytest.mark.e2e
def test_smoke_with_every_flag(tmp_path, teacher):
    """All three phases run with every flag; the teacher's weights are the file's, its logged score is the one the
    evaluator gets from the file on the same games, and the student is saved, evaluated and replayed on video."""
    flags = ["--teacher-model-path", str(teacher), "--teacher-steps", "50", "--offline-steps", "3", *SMALL]
    flags += ["--total-timesteps", "400", "--learning-starts", "388", "--capture-video", "--save-model", "--track"]
    flags += ["--checkpoint-interval", "400", "--checkpoint-buffer", "--eval-interval", "150", "--eval-episodes", "2"]
    run_dir = run_with_every_flag(SCRIPT, flags, tmp_path)
    checkpoint = load_checkpoint(checkpoint_files(run_dir)[0])
    state = checkpoint["state"]
    assert state["phase"] == "online" and checkpoint["global_step"] == 400 and checkpoint["finished"]
    assert (state["teacher_step"], state["offline_step"]) == (50, 3) and state["rb"] is not None
    for name, tensor in torch.load(teacher).items():
        assert torch.equal(state["teacher"][name].cpu(), tensor), name
    from cleanrl_utils.evals.dqn_eval import evaluate

    qdagger = load_script("qdagger_dqn_atari_impalacnn")
    env_id, network = "BreakoutNoFrameskip-v4", qdagger.TeacherNetwork
    expected = evaluate(str(teacher), qdagger.make_env, env_id, 2, "t", network, capture_video=False, seed=1 + 100_000)
    assert state["teacher_returns"] == expected
    [(step, logged_mean)] = scalars(run_dir, "charts/teacher/avg_episodic_return")
    assert step == 0 and logged_mean == pytest.approx(np.mean(expected))

    tags = scalar_tags(run_dir)
    # offline: its last update logged on its own tags and axis; online: env step s logged at offline_steps + s
    for tag in ["offline/td_loss", "offline/distill_loss", "offline/loss", "offline/q_values"]:
        assert [step for step, _ in scalars(run_dir, tag)] == [3], tag
    for tag in ["losses/td_loss", "losses/distill_loss", "losses/q_values", "charts/distill_coeff", "charts/epsilon"]:
        assert [step for step, _ in scalars(run_dir, tag)] == [403], tag
    assert scalars(run_dir, "charts/distill_coeff")[0][1] == 1.0  # fewer than 10 student games so far
    assert {"charts/episodic_return", "charts/episodic_length", "charts/SPS"} <= tags
    assert all(step > 3 for step, _ in scalars(run_dir, "charts/episodic_return"))
    assert all(length > 100 for _, length in scalars(run_dir, "charts/episodic_length"))  # whole games, 5 lives
    check_evaluations(run_dir, 150, 2, 400)  # logged at online steps
    check_enjoy_replays_the_evaluation(run_dir, tmp_path)  # the saved IMPALA student


@pytest.mark.e2e
def test_run_killed_in_the_offline_phase_resumes_there_to_the_same_weights(tmp_path, teacher):
    """The first checkpoint falls in the offline phase (the teacher's 3 steps are fewer than the interval), after 4 of
    its 20 updates; the run is killed there and resumed with the teacher's buffer: it goes on with the offline updates,
    then the online phase (2 updates), and ends with the weights of the uninterrupted run."""
    flags = ["--teacher-model-path", str(teacher), "--teacher-steps", "3", "--offline-steps", "20", *SMALL]
    flags += ["--total-timesteps", "24", "--learning-starts", "16", "--seed", "3", "--save-model"]
    flags += ["--checkpoint-interval", "4", "--checkpoint-buffer"]
    run_dir = check_killed_run_resumes_to_the_same_weights(SCRIPT, flags, tmp_path, "offline/q_values")
    checkpoint = load_checkpoint(checkpoint_files(run_dir)[0])
    assert checkpoint["state"]["phase"] == "online" and checkpoint["global_step"] == 24
    assert checkpoint["state"]["offline_step"] == 20


@pytest.mark.e2e
def test_sigterm_in_the_online_phase_then_the_resumed_run_refills_the_buffer(tmp_path, teacher):
    """SIGTERM in the online phase: a checkpoint without the buffer (the default) that says so, exit code 143 and a
    line saying how to resume. The resumed run stays online, continues the games, and refills the student's buffer
    for --learning-starts steps before it learns."""
    flags = [
        "--teacher-model-path",
        str(teacher),
        "--teacher-steps",
        "20",
        "--offline-steps",
        "0",
        "--teacher-eval-episodes",
        "1",
    ]
    flags += ["--buffer-size", "1000", "--total-timesteps", "1000000", "--learning-starts", "40"]
    # the first log comes before the teacher's evaluation game and its 20 steps: on a loaded machine they take seconds
    run_dir, checkpoint = sigterm_mid_run(SCRIPT, flags, tmp_path, delay=15.0)
    stopped, state = checkpoint["global_step"], checkpoint["state"]
    assert state["phase"] == "online" and 0 < stopped < 1_000_000, (state["phase"], stopped)
    assert state["rb"] is None and state["envs"] is not None

    end = stopped + 60
    result = run_script(SCRIPT, "--resume", str(run_dir), "--total-timesteps", str(end), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"refilling it for 40 steps, learning again after step {stopped + 40}" in result.stderr
    assert "no env state" not in result.stderr and "teacher refills" not in result.stderr
    assert f"step {end}/{end} (online)" in result.stdout and "(teacher)" not in result.stdout  # it stayed online


BAD_INPUTS = [
    ([], ["exactly one teacher", "--teacher-model-path", "--teacher-model-repo"]),
    (["--teacher-model-path", "t.cleanrl_model", "--teacher-model-repo", "me/dqn"], ["exactly one teacher"]),
    (["--teacher-model-path", "missing.cleanrl_model"], ["--teacher-model-path missing.cleanrl_model: no such file"]),
    (["--teacher-model-path", "{teacher}", "--env-id", "CartPole-v1"], ["CartPole-v1", "not an ALE game", "dqn.py"]),
    (["--teacher-model-path", "{teacher}", "--env-id", "NoSuchGameNoFrameskip-v4"], ["--env-id NoSuchGameNoFrameskip-v4"]),
    (["--teacher-model-path", "{teacher}", "--env-id", "PongNoFrameskip-v4"], ["teacher has 4 actions, the game 6"]),
    (["--teacher-model-path", "{teacher}", "--batch-size", "512", "--buffer-size", "100"], ["--buffer-size 100 must hold"]),
    (["--teacher-model-path", "{teacher}", "--offline-steps", "-1"], ["--offline-steps must be >= 0, got -1"]),
    (["--teacher-model-path", "{teacher}", "--temperature", "0"], ["--temperature must be positive"]),
    (["--teacher-model-path", "{teacher}", "--seed", "-1"], ["--seed must be in [0, 2**32)"]),
    (["--teacher-model-path", "{teacher}", "--learning-starts", "100", "--total-timesteps", "100"], ["--learning-starts 100"]),
    (["--teacher-model-path", "{teacher}", "--num-iterations", "5"], ["--num-iterations"]),  # computed: not a flag
    (["--resume", "runs/never-ran"], ["--resume runs/never-ran: no such folder"]),
]


@pytest.mark.parametrize("flags, fragments", BAD_INPUTS, ids=[" ".join(flags) for flags, _ in BAD_INPUTS])
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, untrained_teacher, flags, fragments):
    # in this process; the two tests below meet a bad teacher as a user does, in a new one
    flags = [flag.format(teacher=untrained_teacher) for flag in flags]
    check_bad_input_in_process(SCRIPT, flags, fragments, tmp_path, monkeypatch, capsys)


@pytest.mark.e2e
def test_a_file_that_is_not_a_dqn_atari_model_is_one_clear_line(tmp_path):
    torch.save({"something": torch.zeros(3)}, tmp_path / "other.cleanrl_model")
    (tmp_path / "text.cleanrl_model").write_text("not a model")
    for name in ["other.cleanrl_model", "text.cleanrl_model"]:
        result = run_script(SCRIPT, "--teacher-model-path", name, cwd=tmp_path)
        assert_clean_failure(result, f"{name}: not a model saved by dqn_atari.py --save-model")


@pytest.mark.e2e
def test_an_unreachable_hub_teacher_is_one_clear_line(tmp_path):
    """The Hub path without network (HF_HUB_OFFLINE, an empty cache): no traceback, the repository named."""
    flags = ["--teacher-model-repo", "someone/BreakoutNoFrameskip-v4-dqn_atari-seed1"]
    result = run_script(SCRIPT, *flags, cwd=tmp_path, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    assert_clean_failure(result, "--teacher-model-repo someone/BreakoutNoFrameskip-v4-dqn_atari-seed1: ")
    assert not (tmp_path / "runs").exists()
