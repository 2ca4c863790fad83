"""cleanrl/sac_atari.py: the discrete soft target and the actor and temperature losses against values computed by hand,
the networks on real Breakout frames (the replay buffer is cleanrl_utils.buffers', tested in test_value_based_atari.py),
and the script as a user runs it (smoke with every flag, resume with the buffer to the same weights, SIGTERM then a
resume that refills the buffer, bad inputs)."""

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
    run_script,
    run_with_every_flag,
    scalar_tags,
    scalars,
    sigterm_mid_run,
)

SCRIPT = "sac_atari.py"
SMALL = ["--buffer-size", "1000", "--batch-size", "8"]  # a gradient step of the five CNNs costs ~0.3 s here at batch 8


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


# two states, two actions: pi(.|s) = (0.25, 0.75) and (0.5, 0.5)
PROBS = torch.tensor([[0.25, 0.75], [0.5, 0.5]])
Q1 = torch.tensor([[1.0, 2.0], [3.0, -1.0]])
Q2 = torch.tensor([[2.0, 1.0], [0.0, 4.0]])  # min(Q1, Q2) = [[1, 1], [0, -1]]


def test_soft_td_target_by_hand():
    """r + gamma * sum_a' pi(a'|s') (min(Q1', Q2')(s', a') - alpha log pi(a'|s')), computed exactly over the actions;
    the terminal transition (a lost life) keeps its reward alone, the other (a truncation is stored as one) bootstraps."""
    sac_atari = load_script("sac_atari")
    rewards, terminations = torch.tensor([1.0, -1.0]), torch.tensor([0.0, 1.0])
    alpha, gamma = 0.5, 0.9
    target = sac_atari.soft_td_target(rewards, terminations, PROBS, PROBS.log(), Q1, Q2, alpha, gamma)
    next_value = 0.25 * (1 - 0.5 * math.log(0.25)) + 0.75 * (1 - 0.5 * math.log(0.75))  # 1 + alpha * entropy
    torch.testing.assert_close(target, torch.tensor([1 + 0.9 * next_value, -1.0]))
    # both transitions bootstrapped: the second state's soft value is 0.5 * (0 - 0.5 log 0.5) + 0.5 * (-1 - 0.5 log 0.5)
    target = sac_atari.soft_td_target(rewards, torch.zeros(2), PROBS, PROBS.log(), Q1, Q2, alpha, gamma)
    torch.testing.assert_close(target[1], torch.tensor(-1 + 0.9 * (-0.5 - 0.5 * math.log(0.5))))
    # alpha 0: the expected minimum Q under the policy, nothing of the entropy
    target = sac_atari.soft_td_target(rewards, torch.zeros(2), PROBS, PROBS.log(), Q1, Q2, 0.0, 1.0)
    torch.testing.assert_close(target, torch.tensor([1 + 1.0, -1 + (0.5 * 0 - 0.5 * 1)]))


def test_actor_loss_by_hand_and_its_minimum_is_the_boltzmann_policy():
    """mean_s sum_a pi(a|s) (alpha log pi(a|s) - min(Q1, Q2)(s, a)); its gradient in the logits vanishes exactly at
    pi ~ exp(min Q / alpha) and nowhere else."""
    sac_atari = load_script("sac_atari")
    loss = sac_atari.actor_loss_fn(PROBS, PROBS.log(), Q1, Q2, 0.5)
    first = 0.25 * (0.5 * math.log(0.25) - 1) + 0.75 * (0.5 * math.log(0.75) - 1)
    second = 0.5 * (0.5 * math.log(0.5) - 0) + 0.5 * (0.5 * math.log(0.5) + 1)
    torch.testing.assert_close(loss, torch.tensor((first + second) / 2))

    generator = torch.Generator().manual_seed(0)
    q1, q2 = torch.randn(5, 4, generator=generator), torch.randn(5, 4, generator=generator)
    for logits, at_minimum in [(torch.min(q1, q2) / 0.3, True), (torch.randn(5, 4, generator=generator), False)]:
        logits = logits.clone().requires_grad_(True)
        log_probs = torch.log_softmax(logits, dim=1)
        sac_atari.actor_loss_fn(log_probs.exp(), log_probs, q1, q2, 0.3).backward()
        assert (logits.grad.abs().max() < 1e-6) == at_minimum, logits.grad


def test_alpha_loss_by_hand():
    """mean_s sum_a pi(a|s) (-alpha (log pi(a|s) + target)) = mean_s alpha (H(s) - target): its gradient in log alpha
    is the loss itself, positive (alpha falls) while the entropy is above the target, negative below; the policy gets
    none."""
    sac_atari = load_script("sac_atari")
    target_entropy = 0.89 * math.log(2)  # the script's default scale over two actions
    entropies = [-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), math.log(2)]  # 0.562 and 0.693, target 0.617
    log_alpha = torch.tensor([math.log(0.5)], requires_grad=True)
    logits = PROBS.log().clone().requires_grad_(True)
    log_probs = torch.log_softmax(logits, dim=1)
    loss = sac_atari.alpha_loss_fn(log_probs.exp(), log_probs, log_alpha, target_entropy)
    expected = 0.5 * ((entropies[0] - target_entropy) + (entropies[1] - target_entropy)) / 2
    torch.testing.assert_close(loss, torch.tensor(expected))
    loss.backward()
    torch.testing.assert_close(log_alpha.grad, torch.tensor([expected]))
    assert log_alpha.grad.item() > 0 and logits.grad is None  # mean entropy above the target: alpha falls
    # a near-deterministic policy: entropy far below the target, so the gradient raises alpha
    log_alpha = torch.zeros(1, requires_grad=True)
    peaked = torch.tensor([[0.999, 0.001]])
    sac_atari.alpha_loss_fn(peaked, peaked.log(), log_alpha, target_entropy).backward()
    assert log_alpha.grad.item() < 0


def test_networks_on_real_frames():
    """On Breakout's uint8 observations: Q-values of every action from each critic, a categorical policy whose
    probabilities sum to 1 and whose samples cover the actions; four separate trunks (no weight shared); the float
    observations of the evaluator give the same outputs as the uint8 ones of training. The buffer is the shared one."""
    from cleanrl_utils.buffers import FrameReplayBuffer

    sac_atari = load_script("sac_atari")
    assert sac_atari.FrameReplayBuffer is FrameReplayBuffer
    envs = gym.vector.SyncVectorEnv([sac_atari.make_env("BreakoutNoFrameskip-v4", 0, False, "test")])
    obs, _ = envs.reset(seed=0)
    envs.close()
    assert obs.shape == (1, 4, 84, 84) and obs.dtype == np.uint8
    torch.manual_seed(0)
    actor, qf1, qf2 = sac_atari.Actor(envs), sac_atari.SoftQNetwork(envs), sac_atari.SoftQNetwork(envs)
    batch = torch.as_tensor(np.repeat(obs, 256, axis=0))
    assert qf1(batch).shape == qf2(batch).shape == (256, 4) and not torch.equal(qf1(batch), qf2(batch))
    actions, log_probs, probs = actor.get_action(batch)
    assert actions.shape == (256,) and actions.dtype == torch.int64 and probs.shape == (256, 4)
    torch.testing.assert_close(probs.sum(dim=1), torch.ones(256))
    torch.testing.assert_close(log_probs.exp(), probs)
    torch.testing.assert_close(probs[0], torch.softmax(actor(batch[:1]), dim=1)[0])
    # sampled, not the argmax: 256 draws of the same state hit every action of probability above 5%
    assert set(actions.tolist()) >= set(np.flatnonzero(probs[0].detach().numpy() > 0.05)) and len(set(actions.tolist())) > 1
    pointers = [{p.data_ptr() for p in net.parameters()} for net in (actor, qf1, qf2)]
    assert not (pointers[0] & pointers[1]) and not (pointers[1] & pointers[2])
    torch.testing.assert_close(actor(batch[:1].float()), actor(batch[:1]))


@pytest.mark.e2e
def test_smoke_with_every_flag(tmp_path):
    flags = ["--total-timesteps", "400", "--learning-starts", "380", "--buffer-size", "500", "--batch-size", "32"]
    flags += ["--capture-video", "--save-model", "--track", "--checkpoint-interval", "200", "--checkpoint-buffer"]
    flags += ["--eval-interval", "150", "--eval-episodes", "2"]
    run_dir = run_with_every_flag(SCRIPT, flags, tmp_path)
    checkpoint = load_checkpoint(checkpoint_files(run_dir)[0])
    frames, counts = checkpoint["state"]["rb"]["frames"], checkpoint["state"]["rb"]["counts"]
    assert checkpoint["global_step"] == 400 and 400 < counts[0] < 500 and frames.shape == (1, counts[0], 84, 84)
    tags = scalar_tags(run_dir)
    for tag in ["charts/episodic_return", "charts/episodic_length", "charts/SPS", "losses/qf_loss", "losses/qf2_values"]:
        assert tag in tags, tag
    # sac_continuous_action.py's names, logged every 100 gradient steps (every 400 env steps) once learning started
    for tag in ["losses/qf1_values", "losses/qf1_loss", "losses/qf2_loss", "losses/actor_loss", "losses/alpha_loss"]:
        assert [step for step, _ in scalars(run_dir, tag)] == [400], tag
    # autotuned alpha starts at 1 and has taken 5 small Adam steps
    assert 0.99 < scalars(run_dir, "losses/alpha")[0][1] < 1.01
    # whole games: Breakout's five lives take far more than the ~30 agent steps of one
    assert all(length > 100 for _, length in scalars(run_dir, "charts/episodic_length"))
    check_evaluations(run_dir, 150, 2, 400)
    check_enjoy_replays_the_evaluation(run_dir, tmp_path)


@pytest.mark.e2e
def test_killed_run_resumes_to_the_same_weights_with_the_buffer(tmp_path):
    """With --checkpoint-buffer the resumed run has everything the uninterrupted one had (the emulators' states, the
    RNGs the random warm-up and the policy's samples draw from, alpha and its optimizer): identical weights at the end,
    the target critics updated twice on the way."""
    flags = ["--total-timesteps", "800", "--learning-starts", "740", *SMALL, "--seed", "3", "--target-network-frequency", "40"]
    flags += ["--checkpoint-interval", "400", "--checkpoint-buffer", "--save-model"]
    run_dir = check_killed_run_resumes_to_the_same_weights(SCRIPT, flags, tmp_path, "losses/qf1_values")
    checkpoint = load_checkpoint(checkpoint_files(run_dir)[0])
    state = checkpoint["state"]
    assert checkpoint["global_step"] == 800 and checkpoint["finished"] and state["envs"] is not None
    assert state["rb"]["counts"][0] > 800  # a frame per step, plus one per episode start
    assert state["log_alpha"].item() != 0.0  # autotuned: alpha moved from 1
    for critic in ["qf1", "qf2"]:  # tau 1 copied the critics at step 800
        torch.testing.assert_close(state[f"{critic}_target"], state[critic])


@pytest.mark.e2e
def test_sigterm_checkpoints_then_the_resumed_run_refills_the_buffer(tmp_path):
    """SIGTERM mid-run: a checkpoint without the buffer (the default), exit code 143 and a line saying how to
    resume. The resumed run continues the games where they were, acts with its policy without an update for
    --learning-starts steps, then takes one gradient step every --update-frequency steps."""
    flags = ["--total-timesteps", "1000000", "--learning-starts", "150", *SMALL]
    # 5 s after the first log: the signal handler is in place once the envs and the five CNNs are built (a loaded machine)
    run_dir, checkpoint = sigterm_mid_run(SCRIPT, flags, tmp_path, delay=5.0)
    stopped = checkpoint["global_step"]
    assert 0 < stopped < 1_000_000 and checkpoint["state"]["rb"] is None and checkpoint["state"]["envs"] is not None

    def gradient_steps(checkpoint):
        state = checkpoint["state"]["q_optimizer"]["state"]
        return int(state[0]["step"]) if state else 0

    end = (stopped // 100 + 3) * 100  # 200 to 300 more steps, a checkpoint at each hundred and at the end
    flags = ["--resume", str(run_dir), "--total-timesteps", str(end), "--checkpoint-interval", "100"]
    result = run_script(SCRIPT, *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"refilling it for 150 steps, learning again after step {stopped + 150}" in result.stderr
    assert "no env state" not in result.stderr  # the games went on where they were
    final = load_checkpoint(checkpoint_files(run_dir)[0])
    assert final["global_step"] == end
    new_steps = len([step for step in range(stopped + 151, end + 1) if step % 4 == 0])
    assert gradient_steps(final) == gradient_steps(checkpoint) + new_steps


BAD_INPUTS = [
    (["--env-id", "CartPole-v1"], ["CartPole-v1", "not an ALE game with image observations", "use dqn.py or ppo.py"]),
    (["--env-id", "NoSuchGameNoFrameskip-v4"], ["--env-id NoSuchGameNoFrameskip-v4"]),
    (["--batch-size", "512", "--buffer-size", "100"], ["--buffer-size 100 must hold --batch-size 512"]),
    (["--target-entropy-scale", "0"], ["--target-entropy-scale must be in (0, 1]", "got 0.0"]),
    (["--target-entropy-scale", "1.5"], ["--target-entropy-scale must be in (0, 1]", "got 1.5"]),
    (["--seed", "-1"], ["--seed must be in [0, 2**32)"]),
    (["--learning-starts", "500", "--total-timesteps", "500"], ["--learning-starts 500 must be below --total-timesteps 500"]),
    (["--num-iterations", "5"], ["--num-iterations"]),  # computed from --total-timesteps and --num-envs: not a flag
    (["--resume", "runs/never-ran"], ["--resume runs/never-ran: no such folder"]),
]


@pytest.mark.parametrize("flags, fragments", BAD_INPUTS, ids=[" ".join(case[0]) for case in BAD_INPUTS])
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, flags, fragments):
    check_bad_input_in_process(SCRIPT, flags, fragments, tmp_path, monkeypatch, capsys)


@pytest.mark.e2e
def test_a_bad_input_in_a_new_process_is_one_clear_line(tmp_path):
    """A bad input as a user meets it, in a new process (the cases above run in this one)."""
    flags, fragments = BAD_INPUTS[0]
    assert_clean_failure(run_script(SCRIPT, *flags, cwd=tmp_path), *fragments)
    assert not (tmp_path / "runs").exists(), "a bad input started a run"
