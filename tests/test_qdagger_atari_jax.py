"""cleanrl/qdagger_dqn_atari_jax_impalacnn.py, the JAX twin of qdagger_dqn_atari_impalacnn.py: its flax IMPALA CNN
against the torch twin's (the torch weights moved into it give the same Q-values), the distillation loss and its
decaying coefficient by hand, the teacher read from a file in dqn_atari_jax.py's format, and the script as a user runs
it (every flag, a resume that extends the finished run, bad inputs). The teacher file is written in this process in
dqn_atari_jax.py's format (its QNetwork's layers, flax.serialization.to_bytes): running dqn_atari_jax.py --save-model
for one takes about 20 s on 2 cores. The IMPALA CNN is slow on a CPU: the budgets are a few updates."""

import math
import shutil
from types import SimpleNamespace

import flax
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from helpers import (
    check_bad_input_in_process,
    check_evaluations,
    checkpoint_files,
    load_checkpoint,
    load_script,
    run_script,
    run_with_every_flag,
    scalar_tags,
    scalars,
)

SCRIPT = "qdagger_dqn_atari_jax_impalacnn.py"
SMALL = ["--buffer-size", "1000", "--batch-size", "32", "--teacher-eval-episodes", "1"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def qdagger():
    return load_script(SCRIPT[: -len(".py")])


@pytest.fixture(scope="module")
def breakout_obs(qdagger):
    """Two different real Breakout observations (uint8, 4 stacked frames)."""
    envs = gym.vector.SyncVectorEnv([qdagger.make_env("BreakoutNoFrameskip-v4", i, False, "test") for i in range(2)])
    obs, _ = envs.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(12):  # random play, past the reset's repeated frames
        obs, *_ = envs.step(rng.integers(envs.single_action_space.n, size=2))
    envs.close()
    assert obs.dtype == np.uint8 and obs.shape == (2, 4, 84, 84) and (obs[0] != obs[1]).any()
    return obs


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A Breakout teacher in exactly the format of dqn_atari_jax.py --save-model: parameters of the layers of its
    QNetwork, serialized by flax.serialization.to_bytes. Random (drawn with numpy: initialising the network compiles
    for seconds), as the run and the checks need a readable teacher, not a good one."""
    q_network = load_script("dqn_atari_jax").QNetwork(action_dim=4)
    shapes = jax.eval_shape(q_network.init, jax.random.PRNGKey(0), np.zeros((1, 4, 84, 84), np.uint8))
    rng = np.random.default_rng(0)
    params = jax.tree_util.tree_map(lambda leaf: (0.05 * rng.standard_normal(leaf.shape)).astype(np.float32), shapes)
    path = tmp_path_factory.mktemp("teacher") / "dqn_atari_jax.cleanrl_model"
    path.write_bytes(flax.serialization.to_bytes(params))
    return path


def test_a_dqn_atari_jax_file_loads_as_the_teacher(qdagger, teacher, breakout_obs):
    """load_teacher reads the file's parameters as they are, and TeacherNetwork (dqn_atari_jax.py's QNetwork, layer for
    layer) gives with them the Q-values dqn_atari_jax.py's own network gives."""
    args = SimpleNamespace(teacher_model_path=str(teacher), teacher_model_repo=None, env_id="BreakoutNoFrameskip-v4")
    path, params = qdagger.load_teacher(args)
    assert path == str(teacher)
    expected = load_script("dqn_atari_jax").QNetwork(action_dim=4).apply(params, breakout_obs)
    q_values = qdagger.TeacherNetwork(action_dim=4).apply(params, breakout_obs)
    assert q_values.shape == (2, 4) and not np.allclose(q_values[0], q_values[1])
    np.testing.assert_array_equal(q_values, expected)
    saved = flax.serialization.to_bytes(params)  # what load_teacher read is the file, byte for byte
    assert saved == teacher.read_bytes()


def torch_weights_in_flax(torch_network):
    """The torch twin's IMPALA weights in the flax network's layout: convolutions (out, in, h, w) -> (h, w, in, out),
    linear layers transposed, and the first one's inputs reordered from torch's (C, H, W) flattening to flax's (H, W, C)."""
    state = {name: value.detach().numpy() for name, value in torch_network.state_dict().items()}

    def conv(prefix):
        return {"kernel": state[f"{prefix}.weight"].transpose(2, 3, 1, 0), "bias": state[f"{prefix}.bias"]}

    params = {}
    for i in range(3):
        convs = [f"network.{i}.conv"] + [f"network.{i}.res_convs.{j}" for j in range(4)]
        params[f"ConvSequence_{i}"] = {f"Conv_{j}": conv(prefix) for j, prefix in enumerate(convs)}
    dense_0 = state["network.5.weight"].T.reshape(32, 11, 11, 256).transpose(1, 2, 0, 3).reshape(32 * 11 * 11, 256)
    params["Dense_0"] = {"kernel": dense_0, "bias": state["network.5.bias"]}
    params["Dense_1"] = {"kernel": state["network.7.weight"].T, "bias": state["network.7.bias"]}
    return {"params": params}


def test_impala_cnn_is_the_torch_twins_layer_for_layer(qdagger, breakout_obs):
    """Three IMPALA stacks (16, 32, 32 channels) halve 84 to 42, 21, 11 (max-pool padded by 1 on both sides, as torch's);
    the flax network has the torch twin's parameters one for one, and with the torch twin's weights it gives the torch
    twin's Q-values on real frames."""
    shapes, x = [], jax.ShapeDtypeStruct((1, 84, 84, 4), jnp.float32)
    for channels in [16, 32, 32]:
        stack = qdagger.ConvSequence(channels)
        x = jax.eval_shape(lambda x, stack=stack: stack.init_with_output(jax.random.PRNGKey(0), x)[0], x)
        shapes.append(x.shape)
    assert shapes == [(1, 42, 42, 16), (1, 21, 21, 32), (1, 11, 11, 32)]

    q_network = qdagger.QNetwork(action_dim=4)
    params = jax.eval_shape(q_network.init, jax.random.PRNGKey(0), breakout_obs)  # shapes only: nothing computed
    torch_twin = load_script("qdagger_dqn_atari_impalacnn")
    envs = gym.vector.SyncVectorEnv([torch_twin.make_env("BreakoutNoFrameskip-v4", 0, False, "test")])
    torch.manual_seed(0)
    torch_network = torch_twin.QNetwork(envs)
    envs.close()
    n_params = sum(leaf.size for leaf in jax.tree_util.tree_leaves(params))
    assert n_params == sum(p.numel() for p in torch_network.parameters()) == 1_090_260, n_params
    moved = torch_weights_in_flax(torch_network)
    assert jax.tree_util.tree_map(np.shape, moved) == jax.tree_util.tree_map(np.shape, params)
    q_values = jax.jit(q_network.apply)(moved, breakout_obs)
    assert q_values.shape == (2, 4) and q_values.dtype == jnp.float32
    with torch.no_grad():
        expected = torch_network(torch.as_tensor(breakout_obs)).numpy()
    np.testing.assert_allclose(q_values, expected, rtol=1e-4, atol=1e-5)


def test_distillation_loss_by_hand(qdagger):
    teacher_q = jnp.array([[0.0, 0.0, 0.0], [math.log(3.0), 0.0, 0.0]])
    student_q = jnp.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    # row 1: teacher uniform, student log-probs (1 - ln(e+2), -ln(e+2), -ln(e+2)): ln(e + 2) - 1/3
    # row 2: teacher p = (3/5, 1/5, 1/5), student uniform: ln 3 whatever p
    expected = (math.log(math.e + 2) - 1 / 3 + math.log(3)) / 2
    assert float(qdagger.distillation_loss(teacher_q, student_q, 1.0)) == pytest.approx(expected, rel=1e-6)
    # temperature 2: row 1's student log-probs (0.5 - ln(e^.5 + 2), ...): ln(e^.5 + 2) - 1/6; row 2: ln 3 again
    expected_t2 = (math.log(math.exp(0.5) + 2) - 1 / 6 + math.log(3)) / 2
    assert float(qdagger.distillation_loss(teacher_q, student_q, 2.0)) == pytest.approx(expected_t2, rel=1e-6)
    # a student equal to the teacher pays the teacher's entropy, its minimum: H(3/5, 1/5, 1/5)
    entropy = -(0.6 * math.log(0.6) + 2 * 0.2 * math.log(0.2))
    assert float(qdagger.distillation_loss(teacher_q[1:], teacher_q[1:], 1.0)) == pytest.approx(entropy, rel=1e-6)
    # its gradient pulls each student logit towards the teacher's probability: (softmax(student) - p) / batch size
    grad = jax.grad(lambda s: qdagger.distillation_loss(teacher_q, s, 1.0))(student_q)
    np.testing.assert_allclose(grad[1], (np.full(3, 1 / 3) - [0.6, 0.2, 0.2]) / 2, atol=1e-6)


def test_distill_coefficient_by_hand(qdagger):
    coefficient = qdagger.distill_coefficient
    assert coefficient([8.0] * 9, 4.0) == 1.0  # 9 whole games: not yet a mean to trust, full distillation
    assert coefficient([1.0] * 10, 4.0) == pytest.approx(0.75)  # 1 - 1 / 4
    assert coefficient([0.0, 6.0] * 5, 4.0) == pytest.approx(0.25)  # 1 - 3 / 4
    assert coefficient(list(range(20)), 40.0) == pytest.approx(1 - 9.5 / 40)  # every game counts, not the last 10
    assert coefficient([4.0] * 10, 4.0) == 0.0 and coefficient([-1.0] * 10, 4.0) == 1.0  # kept within [0, 1]
    assert coefficient([-5.0] * 10, -2.0) == 1.0 and coefficient([-2.0] * 10, -2.0) == 0.0  # a teacher <= 0


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, teacher):
    """One run with every flag, its teacher a copy that is deleted afterwards (a resume must not need it)."""
    cwd = tmp_path_factory.mktemp("smoke")
    own_teacher = shutil.copy(teacher, cwd / "teacher.cleanrl_model")
    flags = ["--teacher-model-path", str(own_teacher), "--teacher-steps", "50", "--offline-steps", "3", *SMALL]
    flags += ["--total-timesteps", "400", "--learning-starts", "388", "--capture-video", "--save-model", "--track"]
    flags += ["--checkpoint-interval", "400", "--checkpoint-buffer", "--eval-interval", "150", "--eval-episodes", "1"]
    run_dir = run_with_every_flag(SCRIPT, flags, cwd)
    (cwd / "teacher.cleanrl_model").unlink()
    return cwd, run_dir, load_checkpoint(checkpoint_files(run_dir)[0])


@pytest.mark.e2e
def test_smoke_with_every_flag(smoke_run, teacher, qdagger):
    """All three phases run with every flag: the teacher's parameters are the file's, and its logged score its
    evaluation's; the losses are logged on their phases' tags and step axis; the student is saved and evaluated with
    cleanrl_utils/evals/dqn_jax_eval.py, the evaluator enjoy uses for it."""
    cwd, run_dir, checkpoint = smoke_run
    state = checkpoint["state"]
    assert state["phase"] == "online" and checkpoint["global_step"] == 400 and checkpoint["finished"]
    assert (state["teacher_step"], state["offline_step"]) == (50, 3) and state["rb"] is not None
    saved_teacher = flax.serialization.msgpack_restore(teacher.read_bytes())
    jax.tree_util.tree_map(np.testing.assert_array_equal, state["teacher"], saved_teacher)
    # a flax TrainState: 3 offline updates, then one every 4th online step after 388
    assert set(state["q_state"]) == {"step", "params", "target_params", "opt_state"} and int(state["q_state"]["step"]) == 6
    [(step, logged_mean)] = scalars(run_dir, "charts/teacher/avg_episodic_return")
    assert step == 0 and logged_mean == pytest.approx(np.mean(state["teacher_returns"]))

    tags = scalar_tags(run_dir)
    for tag in ["offline/td_loss", "offline/distill_loss", "offline/loss", "offline/q_values"]:
        assert [step for step, _ in scalars(run_dir, tag)] == [3], tag
    for tag in ["losses/loss", "losses/td_loss", "losses/distill_loss", "losses/q_values", "charts/distill_coeff"]:
        assert [step for step, _ in scalars(run_dir, tag)] == [403], tag
    assert scalars(run_dir, "charts/distill_coeff")[0][1] == 1.0  # fewer than 10 student games so far
    assert {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/epsilon"} <= tags
    assert all(step > 3 for step, _ in scalars(run_dir, "charts/episodic_return"))
    assert all(length > 100 for _, length in scalars(run_dir, "charts/episodic_length"))  # whole games, 5 lives
    check_evaluations(run_dir, 150, 1, 400)  # logged at online steps


# a larger budget; the evaluations, the video and W&B off: they cost seconds and the smoke run has tested them
RESUME_FLAGS = ["--total-timesteps", "404", "--eval-interval", "0", "--no-save-model", "--no-capture-video", "--no-track"]


@pytest.mark.e2e
def test_resume_extends_the_finished_run_without_the_teachers_file(smoke_run):
    """--resume with a larger budget continues the online phase from the final checkpoint (buffer included): the teacher
    neither plays nor is evaluated again (its file is gone; the checkpoint holds it), and nothing is logged twice."""
    cwd, run_dir, before = smoke_run
    result = run_script(SCRIPT, "--resume", str(run_dir), *RESUME_FLAGS, cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resuming {run_dir} at step 400 of 404" in result.stdout
    assert "step 404/404 (online)" in result.stdout and "(teacher)" not in result.stdout and "(offline)" not in result.stdout
    assert "refilling" not in result.stderr  # the buffer was in the checkpoint
    after = load_checkpoint(checkpoint_files(run_dir)[0])
    assert after["global_step"] == 404 and after["finished"] and after["state"]["offline_step"] == 3
    assert int(after["state"]["q_state"]["step"]) == 6 + 1  # at step 404: an update every 4th step
    assert after["state"]["teacher_returns"] == before["state"]["teacher_returns"]
    assert len(scalars(run_dir, "charts/teacher/avg_episodic_return")) == 1
    steps = [step for step, _ in scalars(run_dir, "charts/episodic_return")]
    assert steps == sorted(steps) and len(steps) == len(set(steps)), steps


def foreign_files(folder):
    """Files that are not dqn_atari_jax.py models: dqn_atari.py's (torch), dqn_jax.py's layers (an MLP), text."""
    torch.save({"network.9.weight": torch.zeros(4, 512)}, folder / "torch.cleanrl_model")
    mlp = {
        "params": {f"Dense_{i}": {"kernel": np.zeros((8, 8), np.float32), "bias": np.zeros(8, np.float32)} for i in range(3)}
    }
    (folder / "mlp.cleanrl_model").write_bytes(flax.serialization.to_bytes(mlp))
    (folder / "text.cleanrl_model").write_text("not a model")


BAD_INPUTS = [
    ([], ["exactly one teacher", "--teacher-model-path", "--teacher-model-repo"]),
    (["--teacher-model-path", "t.cleanrl_model", "--teacher-model-repo", "me/dqn"], ["exactly one teacher"]),
    (["--teacher-model-path", "missing.cleanrl_model"], ["--teacher-model-path missing.cleanrl_model: no such file"]),
    (["--teacher-model-path", "torch.cleanrl_model"], ["torch.cleanrl_model: not a model saved by dqn_atari_jax.py"]),
    (["--teacher-model-path", "mlp.cleanrl_model"], ["mlp.cleanrl_model: not a model saved by", "not the Nature CNN's"]),
    (["--teacher-model-path", "text.cleanrl_model"], ["text.cleanrl_model: not a model saved by dqn_atari_jax.py"]),
    (["--teacher-model-path", "{teacher}", "--env-id", "PongNoFrameskip-v4"], ["teacher has 4 actions, the game 6"]),
    (["--teacher-model-path", "{teacher}", "--env-id", "CartPole-v1"], ["CartPole-v1", "not an ALE game", "dqn_jax.py"]),
    (["--teacher-model-path", "{teacher}", "--env-id", "NoSuchGameNoFrameskip-v4"], ["--env-id NoSuchGameNoFrameskip-v4"]),
    (["--teacher-model-path", "{teacher}", "--batch-size", "512", "--buffer-size", "100"], ["--buffer-size 100 must hold"]),
    (["--teacher-model-path", "{teacher}", "--offline-steps", "-1"], ["--offline-steps must be >= 0, got -1"]),
    (["--teacher-model-path", "{teacher}", "--teacher-steps", "0"], ["--teacher-steps must be positive, got 0"]),
    (["--teacher-model-path", "{teacher}", "--temperature", "0"], ["--temperature must be positive"]),
    (["--teacher-model-path", "{teacher}", "--tau", "1.5"], ["--tau must be in (0, 1]"]),
    (["--teacher-model-path", "{teacher}", "--seed", "-1"], ["--seed must be in [0, 2**32)"]),
    (["--teacher-model-path", "{teacher}", "--learning-starts", "100", "--total-timesteps", "100"], ["--learning-starts 100"]),
    (["--teacher-model-path", "{teacher}", "--cuda"], ["--cuda"]),  # JAX picks its device: not a flag
    (["--resume", "runs/never-ran"], ["--resume runs/never-ran: no such folder"]),
]


@pytest.mark.parametrize("flags, fragments", BAD_INPUTS, ids=[" ".join(flags) for flags, _ in BAD_INPUTS])
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, teacher, flags, fragments):
    foreign_files(tmp_path)
    flags = [flag.format(teacher=teacher) for flag in flags]
    check_bad_input_in_process(SCRIPT, flags, fragments, tmp_path, monkeypatch, capsys)


def test_an_unreachable_hub_teacher_is_one_clear_line(tmp_path, monkeypatch, capsys):
    """The Hub path without network (offline mode, an empty cache): one line naming the repository."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    repo = "someone/BreakoutNoFrameskip-v4-dqn_atari_jax-seed1"
    check_bad_input_in_process(
        SCRIPT, ["--teacher-model-repo", repo], [f"--teacher-model-repo {repo}: "], tmp_path, monkeypatch, capsys
    )
