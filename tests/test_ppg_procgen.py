"""cleanrl/ppg_procgen.py: the IMPALA CNN with PPG's heads and the auxiliary phase's pieces (the behavior-cloning
target, the rows of its whole rollouts, its loss) by hand in the dev environment (the reward scaling and the GAE, the
same as ppo_procgen.py's, are tested for both scripts in test_ppo_procgen.py); smoke with
every flag, a SIGTERM mid-phase resumed across an auxiliary phase to the same weights, and bad inputs in Procgen's
own environment (`.venv-procgen`: tests/helpers.py runs the script there)."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import (
    PPO_TAGS,
    assert_clean_failure,
    check_bad_input_in_process,
    check_enjoy_replays_the_evaluation,
    check_evaluations,
    load_checkpoint,
    load_script,
    run_script,
    run_with_every_flag,
    scalar_tags,
    scalars,
    sigterm_mid_run,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

SCRIPT = "ppg_procgen.py"
AUX_TAGS = ["losses/aux/kl_loss", "losses/aux/aux_value_loss", "losses/aux/real_value_loss"]


def load_ppg():
    return load_script("ppg_procgen")


def make_agent(seed=0):
    torch.manual_seed(seed)
    spaces = {"single_observation_space": gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)}
    return load_ppg().Agent(type("Envs", (), {**spaces, "single_action_space": gym.spaces.Discrete(15)}))


def frames(*shape, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (*shape, 64, 64, 3), dtype=np.uint8)


def test_impala_cnn_shapes_parameters_and_normed_init():
    agent = make_agent()
    x = torch.as_tensor(frames(5))
    assert agent.hidden(x).shape == (5, 256)
    action, logprob, value = agent.get_action_and_value(x)
    assert action.shape == logprob.shape == value.shape == (5,) and agent.get_action(x).shape == (5,)
    conv = lambda c_in, c_out: c_in * c_out * 9 + c_out  # noqa: E731
    sequences = sum(conv(c_in, c_out) + 4 * conv(c_out, c_out) for c_in, c_out in [(3, 16), (16, 32), (32, 32)])
    heads = (256 * 15 + 15) + 2 * (256 + 1)  # policy, value, auxiliary value
    assert sum(p.numel() for p in agent.parameters()) == sequences + (32 * 8 * 8 * 256 + 256) + heads == 626_513
    # the PPG code's init: every output unit's weights at norm `scale`, biases 0
    norms = lambda layer: layer.weight.flatten(1).norm(dim=1)  # noqa: E731
    torch.testing.assert_close(norms(agent.actor), torch.full((15,), 0.1))
    torch.testing.assert_close(norms(agent.aux_critic), torch.full((1,), 0.1))
    torch.testing.assert_close(norms(agent.network[5]), torch.full((256,), 1.4))
    torch.testing.assert_close(norms(agent.network[0][0]), torch.full((16,), 1.0))
    block_scale = float(np.sqrt(1 / np.sqrt(3) / np.sqrt(2)))
    torch.testing.assert_close(norms(agent.network[1][2].convs[1]), torch.full((32,), block_scale))
    assert all(not layer.bias.any() for layer in agent.modules() if isinstance(layer, torch.nn.Conv2d | torch.nn.Linear))


def test_rollout_rows_are_whole_rollouts_in_order():
    """Rollout r of a phase is env r % num_envs of iteration r // num_envs: its steps in order, then the next one's."""
    n_iteration, num_steps, num_envs = 3, 4, 2
    returns = np.fromfunction(lambda it, t, env: 100 * it + 10 * env + t, (n_iteration, num_steps, num_envs))
    obs = frames(n_iteration, num_steps, num_envs)
    obs_rows, return_rows = load_ppg().rollout_rows((obs, returns), np.array([5, 0]), num_envs)
    np.testing.assert_array_equal(return_rows, [210, 211, 212, 213, 0, 1, 2, 3])  # iteration 2 env 1, then 0, 0
    np.testing.assert_array_equal(obs_rows, np.concatenate([obs[2, :, 1], obs[0, :, 0]]))


def test_behavior_cloning_target_is_the_policy_before_the_phase():
    """The targets are the policy's logits on each stored frame before any auxiliary update, computed in chunks; the
    KL term is 0 against them before the first auxiliary step and positive once the policy has moved."""
    ppg, agent = load_ppg(), make_agent()
    phase = frames(2, 3, 2)  # (n_iteration, num_steps, num_envs)
    targets = ppg.behavior_cloning_targets(agent, phase, "cpu", chunk=5)
    assert targets.shape == (2, 3, 2, 15)
    with torch.no_grad():
        expected = agent.actor(agent.hidden(torch.as_tensor(phase.reshape(-1, 64, 64, 3)))).reshape(2, 3, 2, 15)
    np.testing.assert_allclose(targets, expected.numpy(), rtol=1e-5, atol=1e-6)

    obs, returns, old_logits = ppg.rollout_rows((phase, np.ones((2, 3, 2), np.float32), targets), np.arange(4), 2)
    obs, returns, old_logits = torch.as_tensor(obs), torch.as_tensor(returns), torch.as_tensor(old_logits)
    _, kl, _, _ = ppg.auxiliary_loss(agent, obs, returns, old_logits, beta_clone=1.0)
    assert abs(kl.item()) < 1e-6
    ppg.auxiliary_loss(agent, obs, returns, old_logits, beta_clone=1.0)[0].backward()
    with torch.no_grad():  # a plain gradient step: value distillation moves the shared encoder, and the policy with it
        for parameter in (p for p in agent.parameters() if p.grad is not None):
            parameter -= 0.01 * parameter.grad
    assert ppg.auxiliary_loss(agent, obs, returns, old_logits, beta_clone=1.0)[1].item() > 1e-6


def test_auxiliary_loss_by_hand():
    """The loss is 0.5 * mean((aux value - return)^2) + beta * KL(old || new) + 0.5 * mean((value - return)^2); the
    value head's part trains that head alone (it reads the encoder detached), the joint part trains the encoder."""
    ppg, agent = load_ppg(), make_agent()
    obs = torch.as_tensor(frames(6))
    returns = torch.arange(6, dtype=torch.float32)
    old_logits = torch.randn(6, 15, generator=torch.Generator().manual_seed(1))
    loss, kl, aux_value_loss, real_value_loss = ppg.auxiliary_loss(agent, obs, returns, old_logits, beta_clone=0.5)
    with torch.no_grad():
        hidden = agent.hidden(obs)
        p, q = old_logits.softmax(-1), agent.actor(hidden).softmax(-1)
        expected_kl = (p * (p.log() - q.log())).sum(-1).mean()
        expected_aux = 0.5 * ((agent.aux_critic(hidden).flatten() - returns) ** 2).mean()
        expected_real = 0.5 * ((agent.critic(hidden).flatten() - returns) ** 2).mean()
    torch.testing.assert_close(kl, expected_kl)
    torch.testing.assert_close(aux_value_loss, expected_aux)
    torch.testing.assert_close(real_value_loss, expected_real)
    torch.testing.assert_close(loss, expected_aux + 0.5 * expected_kl + expected_real)
    real_value_loss.backward()
    assert agent.critic.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in agent.network.parameters()), "the value head's loss reached the encoder"


def test_in_the_dev_environment_the_script_names_the_procgen_command(tmp_path, monkeypatch, capsys):
    """procgen (numpy < 2) is not importable where the tests run: the script refuses with the command that runs it."""
    command = "UV_PROJECT_ENVIRONMENT=.venv-procgen uv run --no-dev --extra procgen python cleanrl/ppg_procgen.py"
    check_bad_input_in_process(SCRIPT, [], [command], tmp_path, monkeypatch, capsys)


BAD_INPUTS = [
    (["--num-envs", "0"], ["--num-envs must be positive"]),
    (["--e-auxiliary", "0"], ["--e-auxiliary must be positive"]),
    (["--seed", str(2**31)], ["--seed must be in [0, 2**31)"]),
    (["--eval-interval", "-1"], ["--eval-interval must be >= 0"]),
    (["--num-minibatches", "3"], ["--num-minibatches 3 must divide", "16384"]),
    (["--num-aux-rollouts", "3"], ["--num-aux-rollouts * --n-aux-grad-accum = 3 must divide", "2048"]),
    (["--total-timesteps", "500000"], ["--total-timesteps 500000 is less than one phase"]),
    (["--batch-size", "5"], ["--batch-size"]),  # computed: not a flag
]


@pytest.mark.parametrize("flags, fragments", BAD_INPUTS)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, flags, fragments):
    check_bad_input_in_process(SCRIPT, flags, fragments, tmp_path, monkeypatch, capsys)


# 2 envs x 16 steps = 32 steps an iteration, 2 iterations a phase: 128 steps are two phases, each with its auxiliary phase
TRAINING = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--n-iteration", "2"]
TRAINING += ["--num-aux-rollouts", "2", "--e-auxiliary", "2", "--total-timesteps", "128", "--seed", "1"]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One run with every flag at once; the resume test compares its weights with a run stopped mid-phase."""
    tmp_path = tmp_path_factory.mktemp("smoke")
    flags = [*TRAINING, "--capture-video", "--save-model", "--track", "--eval-interval", "64", "--eval-episodes", "1"]
    run_dir = run_with_every_flag(SCRIPT, [*flags, "--checkpoint-interval", "64"], tmp_path)
    return tmp_path, run_dir


@pytest.mark.e2e
def test_smoke_with_every_flag(smoke_run):
    tmp_path, run_dir = smoke_run
    assert set(PPO_TAGS + AUX_TAGS) <= scalar_tags(run_dir)
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == [32, 64, 96, 128]
    assert [step for step, _ in scalars(run_dir, "losses/aux/kl_loss")] == [64, 128]  # after each policy phase
    assert all(r == int(r) for _, r in scalars(run_dir, "charts/episodic_return"))  # starpilot's raw score, unscaled
    check_evaluations(run_dir, 64, 1, 128)
    assert "rl-video-episode-0.mp4" in {p.name for p in (tmp_path / "videos" / run_dir.name).glob("*.mp4")}
    assert json.loads((run_dir / "args.json").read_text())["args"]["env_id"] == "starpilot"
    saved = load_checkpoint(run_dir / "checkpoint.pt")
    assert saved["global_step"] == 128 and saved["finished"] and len(saved["state"]["aux_obs"]) == 0


@pytest.mark.e2e
def test_enjoy_replays_the_evaluation(smoke_run):
    tmp_path, run_dir = smoke_run
    check_enjoy_replays_the_evaluation(run_dir, tmp_path, games=1)


@pytest.mark.e2e
def test_sigterm_mid_phase_resumes_across_an_auxiliary_phase_to_the_same_weights(smoke_run, tmp_path):
    """SIGTERM as the first iteration runs: the checkpoint (step 32; 96 on a loaded machine) holds that rollout for its
    auxiliary phase, the Procgen games, the reward scaling and the RNGs; the resumed run ends with the weights of the
    uninterrupted smoke run (its evaluations and videos do not change its training)."""
    _, reference_dir = smoke_run
    run_dir, checkpoint = sigterm_mid_run(SCRIPT, TRAINING, tmp_path, delay=0.0)
    assert checkpoint["global_step"] in (32, 96), "the signal came at a phase's end: the machine is too slow"
    aux_obs = checkpoint["state"]["aux_obs"]
    assert aux_obs.shape == (1, 16, 2, 64, 64, 3) and aux_obs.any()
    result = run_script(SCRIPT, "--resume", str(run_dir), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [step for step, _ in scalars(run_dir, "losses/aux/kl_loss")] == [64, 128]
    for name, tensor in load_checkpoint(reference_dir / "checkpoint.pt")["state"]["agent"].items():
        assert torch.equal(tensor, load_checkpoint(run_dir / "checkpoint.pt")["state"]["agent"][name]), name


@pytest.mark.e2e
def test_an_atari_id_is_refused_with_the_list_of_games(tmp_path):
    result = run_script(SCRIPT, "--env-id", "BreakoutNoFrameskip-v4", cwd=tmp_path)
    games = "bigfish, bossfight, caveflyer, chaser, climber, coinrun, dodgeball, fruitbot, heist, jumper, leaper, maze"
    assert_clean_failure(result, "--env-id BreakoutNoFrameskip-v4 is not a Procgen game; use one of " + games)
    assert not (tmp_path / "runs").exists()
