"""cleanrl/ppo_atari.py and ppo_atari_lstm.py: the Atari preprocessing on the real ALE, the networks, env state across
a checkpoint (cleanrl_utils.run_state's snapshot on these scripts' envs), the LSTM's resets and replay, smoke with
every flag, resume, SIGTERM, bad inputs (both scripts)."""

import json

import cv2
import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import (
    PPO_TAGS,
    assert_clean_failure,
    check_bad_input_in_process,
    check_evaluations,
    check_killed_run_resumes_to_the_same_weights,
    check_sigterm_checkpoints_and_resumes,
    load_script,
    only_run_dir,
    run_script,
    scalar_tags,
    scalars,
)

SCRIPTS = ["ppo_atari.py", "ppo_atari_lstm.py"]
# 2 envs x 32 steps; the LSTM script splits minibatches by env, so it takes 2 of them (one env each)
SHORT = {"ppo_atari.py": ["--num-envs", "2", "--num-steps", "32"]}
SHORT["ppo_atari_lstm.py"] = [*SHORT["ppo_atari.py"], "--num-minibatches", "2"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def load_ppo_atari():
    return load_script("ppo_atari")


def play_one_game(env_id, seed):
    """One whole game with random actions through ppo_atari's own make_env. Each agent step records the reward the
    agent sees, the real (unclipped) reward ClipRewardEnv was given, termination, lives left, whether a game's
    statistics came with it, and how many ALE frames it took."""
    ppo_atari = load_ppo_atari()
    raw_rewards = []

    class RecordingClipRewardEnv(ppo_atari.ClipRewardEnv):  # the real wrapper, observed: make_env looks the name up
        def reward(self, reward):
            raw_rewards.append(reward)
            return super().reward(reward)

    ppo_atari.ClipRewardEnv = RecordingClipRewardEnv
    env = ppo_atari.make_env(env_id, 0, False, "test")()
    obs, _ = env.reset(seed=seed)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8 and env.observation_space.shape == (4, 84, 84)
    ale = env.unwrapped.ale
    rng = np.random.default_rng(seed)
    steps = []
    while True:
        frame, lives = ale.getEpisodeFrameNumber(), ale.lives()
        obs, reward, terminated, truncated, info = env.step(rng.integers(env.action_space.n))
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        steps.append(
            {
                "reward": reward,
                "raw": raw_rewards[-1],
                "terminated": terminated,
                "truncated": truncated,
                "lives_before": lives,
                "lives": ale.lives(),
                "episode": info.get("episode"),
                "frames": ale.getEpisodeFrameNumber() - frame,
            }
        )
        if terminated or truncated:
            if "episode" in info:
                env.close()
                return steps, info["episode"], ale.getEpisodeFrameNumber()
            frame = ale.getEpisodeFrameNumber()
            env.reset()  # after a lost life: the game goes on, it is not reset
            assert ale.getEpisodeFrameNumber() > frame and ale.lives() == steps[-1]["lives"]


def test_a_lost_life_ends_the_training_episode_not_the_logged_game():
    steps, episode, game_frames = play_one_game("BreakoutNoFrameskip-v4", seed=5)
    ends = [i for i, s in enumerate(steps) if s["terminated"]]
    # Breakout has 5 lives: 5 training episodes, each ended exactly where a life was lost
    assert [steps[i]["lives"] for i in ends] == [4, 3, 2, 1, 0]
    assert all(s["terminated"] == (s["lives"] < s["lives_before"]) for s in steps)
    assert not any(s["truncated"] for s in steps)
    # no statistics at the first four ends: the logged episode is the whole game, with its real score and length
    assert [steps[i]["episode"] is not None for i in ends] == [False] * 4 + [True]
    assert float(episode["r"]) == sum(s["raw"] for s in steps) == 3.0
    assert int(episode["l"]) == game_frames  # in frames of the game, not agent steps
    # 4 frames per agent step (MaxAndSkipEnv; fewer only where the game ends inside the skip)
    assert all(s["frames"] == 4 for s in steps if not s["terminated"])


def test_rewards_are_clipped_for_the_loss_but_the_logged_score_is_real():
    steps, episode, game_frames = play_one_game("SpaceInvadersNoFrameskip-v4", seed=0)
    raw = np.array([s["raw"] for s in steps])
    assert raw.max() > 1  # Space Invaders scores 5 to 30 per alien
    np.testing.assert_array_equal([s["reward"] for s in steps], np.sign(raw))
    assert float(episode["r"]) == raw.sum() > np.sign(raw).sum()
    assert int(episode["l"]) == game_frames
    assert sum(s["terminated"] for s in steps) == 3  # one training episode per life


def test_v5_ids_skip_4_frames_not_16_and_keep_sticky_actions():
    ppo_atari = load_ppo_atari()
    for env_id, sticky in [("ALE/Breakout-v5", 0.25), ("BreakoutNoFrameskip-v4", 0.0)]:
        env = ppo_atari.make_env(env_id, 0, False, "test")()
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        ale = env.unwrapped.ale
        assert ale.getFloat("repeat_action_probability") == pytest.approx(sticky)
        frames = []
        for _ in range(10):  # Breakout's first life lasts longer than 10 steps
            frame = ale.getEpisodeFrameNumber()
            _, _, terminated, truncated, _ = env.step(0)
            assert not (terminated or truncated)
            frames.append(ale.getEpisodeFrameNumber() - frame)
        env.close()
        assert frames == [4] * 10, (env_id, frames)


def test_checkpointed_envs_continue_exactly():
    """The ALE pickles only its constructor's arguments: cleanrl_utils.run_state's env snapshot must carry each
    emulator's state and the env's RNG (the no-op starts of later games draw from it) through this script's wrappers
    (frame stack, lives), or a resumed run would play a fresh, unreset game."""
    from cleanrl_utils.run_state import restore_envs, snapshot_envs

    ppo_atari = load_ppo_atari()

    def vector_env():
        env_fns = [ppo_atari.make_env("BreakoutNoFrameskip-v4", i, False, "test") for i in range(2)]
        return gym.vector.SyncVectorEnv(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)

    envs, restored = vector_env(), vector_env()
    envs.reset(seed=1)
    restored.reset(seed=2)  # other games, replaced by the snapshot's as a resumed run does
    rng = np.random.default_rng(0)
    for _ in range(40):
        envs.step(rng.integers(4, size=2))
    restore_envs(restored, snapshot_envs(envs))
    np.testing.assert_array_equal(restored.envs[0].unwrapped.ale.getRAM(), envs.envs[0].unwrapped.ale.getRAM())
    ends = 0
    for _ in range(300):  # through lost lives and whole games
        actions = rng.integers(4, size=2)
        a, b = envs.step(actions), restored.step(actions)
        for x, y in zip(a[:4], b[:4]):
            np.testing.assert_array_equal(x, y)
        ends += int(a[2].sum())
    assert ends >= 5
    envs.close()
    restored.close()


def test_nature_cnn_shapes_init_and_uint8_input():
    ppo_atari = load_ppo_atari()
    spaces = {
        "single_observation_space": gym.spaces.Box(0, 255, (4, 84, 84), np.uint8),
        "single_action_space": gym.spaces.Discrete(6),
    }
    agent = ppo_atari.Agent(type("Envs", (), spaces))
    shapes = [tuple(p.shape) for name, p in agent.network.named_parameters() if name.endswith("weight")]
    assert shapes == [(32, 4, 8, 8), (64, 32, 4, 4), (64, 64, 3, 3), (512, 3136)]
    actor, critic = agent.actor.weight.detach(), agent.critic.weight.detach()
    torch.testing.assert_close(actor @ actor.T, 0.01**2 * torch.eye(6), atol=1e-7, rtol=0)  # orthogonal, std 0.01
    torch.testing.assert_close(critic.norm(), torch.tensor(1.0))  # std 1
    assert all(not b.any() for name, b in agent.named_parameters() if name.endswith("bias"))
    frames = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():  # uint8 frames are scaled to [0, 1] inside the network
        expected = agent.critic(agent.network(frames.float() / 255.0)).flatten()
        _, _, values = agent.evaluate_actions(frames, torch.zeros(3, dtype=torch.int64))
    torch.testing.assert_close(values, expected)


def test_gae_is_ppos():
    ppo, ppo_atari = load_script("ppo"), load_ppo_atari()  # ppo.py's compute_gae is checked by hand in test_ppo.py
    rng = np.random.default_rng(0)
    shape = (16, 3)
    terminations = (rng.random(shape) < 0.1).astype(np.float64)
    episode_ends = np.maximum(terminations, rng.random(shape) < 0.1)
    inputs = (rng.normal(size=shape), rng.normal(size=shape), rng.normal(size=3), rng.normal(size=shape))
    expected = ppo.compute_gae(*inputs, terminations, episode_ends, 0.99, 0.95)
    actual = ppo_atari.compute_gae(*inputs, terminations, episode_ends, 0.99, 0.95)
    for x, y in zip(expected, actual):
        np.testing.assert_array_equal(x, y)


def test_lstm_script_sees_one_frame_per_observation():
    env = load_script("ppo_atari_lstm").make_env("BreakoutNoFrameskip-v4", 0, False, "test")()
    obs, _ = env.reset(seed=0)
    assert obs.shape == (1, 84, 84) and obs.dtype == np.uint8 and env.observation_space.shape == (1, 84, 84)
    obs, *_ = env.step(1)
    assert obs.shape == (1, 84, 84) and obs.dtype == np.uint8
    env.close()


def lstm_agent(n_actions=4, seed=0):
    torch.manual_seed(seed)
    spaces = {"single_action_space": gym.spaces.Discrete(n_actions)}
    return load_script("ppo_atari_lstm").Agent(type("Envs", (), spaces))


def test_lstm_network_shapes_and_init():
    agent = lstm_agent(n_actions=6)
    shapes = [tuple(p.shape) for name, p in agent.network.named_parameters() if name.endswith("weight")]
    assert shapes == [(32, 1, 8, 8), (64, 32, 4, 4), (64, 64, 3, 3), (512, 3136)]
    assert (agent.lstm.input_size, agent.lstm.hidden_size, agent.lstm.num_layers) == (512, 128, 1)
    w_ih, w_hh = agent.lstm.weight_ih_l0.detach(), agent.lstm.weight_hh_l0.detach()  # (512, 512), (512, 128)
    torch.testing.assert_close(w_ih @ w_ih.T, torch.eye(512), atol=1e-5, rtol=0)  # orthogonal, gain 1
    torch.testing.assert_close(w_hh.T @ w_hh, torch.eye(128), atol=1e-5, rtol=0)
    actor, critic = agent.actor.weight.detach(), agent.critic.weight.detach()
    assert actor.shape == (6, 128) and critic.shape == (1, 128)
    torch.testing.assert_close(actor @ actor.T, 0.01**2 * torch.eye(6), atol=1e-7, rtol=0)  # orthogonal, std 0.01
    torch.testing.assert_close(critic.norm(), torch.tensor(1.0))  # std 1
    assert all(not b.any() for name, b in agent.named_parameters() if "bias" in name)


def test_get_states_zeroes_the_state_exactly_where_an_episode_ended():
    agent = lstm_agent()
    T, N = 6, 3
    frames = torch.randint(0, 256, (T * N, 1, 84, 84), dtype=torch.uint8)
    done = torch.zeros(T, N)
    done[2, 1] = 1  # env 1 starts a new episode at step 2; env 2 at steps 0 and 4; env 0 never
    done[0, 2] = done[4, 2] = 1
    state = (torch.randn(1, N, 128), torch.randn(1, N, 128))
    with torch.no_grad():
        outputs, last_state = agent.get_states(frames, state, done.flatten())
        outputs = outputs.reshape(T, N, 128)
        x = (agent.network(frames.float() / 255.0)).reshape(T, N, 512)

        def unrolled(env, start, stop, from_state):  # nn.LSTM over the steps in one call: no resets
            h, c = from_state
            return agent.lstm(x[start:stop, env : env + 1], (h[:, env : env + 1], c[:, env : env + 1]))

        zeros = agent.initial_state(N)
        # env 0 is an LSTM unrolled over the whole sequence from its state
        expected, (h0, c0) = unrolled(0, 0, T, state)
        torch.testing.assert_close(outputs[:, 0], expected[:, 0])
        torch.testing.assert_close(last_state[0][:, 0], h0[:, 0])
        torch.testing.assert_close(last_state[1][:, 0], c0[:, 0])
        # env 1 as unrolled up to its reset, then from zeros
        torch.testing.assert_close(outputs[:2, 1], unrolled(1, 0, 2, state)[0][:, 0])
        torch.testing.assert_close(outputs[2:, 1], unrolled(1, 2, T, zeros)[0][:, 0])
        # env 2 from zeros twice (its carried-in state never counts)
        torch.testing.assert_close(outputs[:4, 2], unrolled(2, 0, 4, zeros)[0][:, 0])
        torch.testing.assert_close(outputs[4:, 2], unrolled(2, 4, T, zeros)[0][:, 0])

        # exactly: another state before the reset changes nothing after it, bit for bit, and only that env
        other = (state[0].clone(), state[1].clone())
        other[0][:, 1:] += 1.0
        other[1][:, 1:] -= 1.0
        other_outputs = agent.get_states(frames, other, done.flatten())[0].reshape(T, N, 128)
        assert torch.equal(other_outputs[2:, 1], outputs[2:, 1]) and torch.equal(other_outputs[:, 2], outputs[:, 2])
        assert not torch.equal(other_outputs[:2, 1], outputs[:2, 1])
        assert torch.equal(other_outputs[:, 0], outputs[:, 0])


def test_the_rollout_start_state_replays_the_values_the_rollout_computed():
    """The script acts step by step, carrying (h, c) and resetting where an episode ended; its update replays the
    rollout (and each env's sequence alone, as a minibatch) from the state stored at the rollout's start."""
    ppo_atari_lstm = load_script("ppo_atari_lstm")
    envs = gym.vector.SyncVectorEnv(
        [ppo_atari_lstm.make_env("BreakoutNoFrameskip-v4", i, False, "test") for i in range(2)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    agent = lstm_agent(n_actions=4, seed=1)
    T, N = 96, 2
    next_obs, _ = envs.reset(seed=2)
    next_state, next_done = agent.initial_state(N), torch.zeros(N)
    with torch.no_grad():  # a first rollout, so the second starts from a state that is not zeros
        for _ in range(10):
            action, next_state = agent.get_action(torch.as_tensor(next_obs), next_state, next_done)
            next_obs, _, terminated, truncated, _ = envs.step(action.numpy())
            next_done = torch.as_tensor(terminated | truncated, dtype=torch.float32)
        initial_state = (next_state[0].clone(), next_state[1].clone())
        obs, dones, actions, values = [], [], [], []
        for _ in range(T):
            obs.append(next_obs)
            dones.append(next_done)
            hidden, next_state = agent.get_states(torch.as_tensor(next_obs), next_state, next_done)
            values.append(agent.critic(hidden).flatten())
            action = agent.actor(hidden).argmax(dim=-1)
            actions.append(action)
            next_obs, _, terminated, truncated, _ = envs.step(action.numpy())
            next_done = torch.as_tensor(terminated | truncated, dtype=torch.float32)
        envs.close()
        b_obs, b_dones = torch.as_tensor(np.concatenate(obs)), torch.stack(dones).flatten()
        b_actions, values = torch.stack(actions).flatten(), torch.stack(values)
        assert b_dones.sum() >= 2, "the rollout should hold lost lives"
        assert initial_state[0].abs().sum() > 0

        _, _, replayed = agent.evaluate_actions(b_obs, initial_state, b_dones, b_actions)
        torch.testing.assert_close(replayed.reshape(T, N), values)
        _, last_state = agent.get_states(b_obs, initial_state, b_dones)
        torch.testing.assert_close(last_state, next_state)
        # a minibatch of env 1 alone: its steps of the time-major batch, from its own start state
        mb_inds = torch.arange(T * N).reshape(T, N)[:, [1]].flatten()
        mb_state = (initial_state[0][:, [1]], initial_state[1][:, [1]])
        _, _, replayed = agent.evaluate_actions(b_obs[mb_inds], mb_state, b_dones[mb_inds], b_actions[mb_inds])
        torch.testing.assert_close(replayed, values[:, 1])
        # from zeros instead, the values before the first reset differ: the stored state matters
        _, _, from_zeros = agent.evaluate_actions(b_obs, agent.initial_state(N), b_dones, b_actions)
        assert not torch.allclose(from_zeros.reshape(T, N)[0], values[0])


@pytest.mark.e2e
@pytest.mark.parametrize("script", SCRIPTS)
def test_smoke_with_every_flag(tmp_path, script):
    name = script[: -len(".py")]
    result = run_script(
        script,
        *SHORT[script],
        "--total-timesteps",
        "512",
        "--capture-video",
        "--save-model",
        "--track",
        "--checkpoint-interval",
        "256",
        "--eval-interval",
        "192",
        "--eval-episodes",
        "2",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    videos = sorted((tmp_path / "videos" / run_dir.name).glob("*.mp4"))
    assert videos, "--capture-video wrote no mp4 of the training games"
    video = cv2.VideoCapture(str(videos[0]))
    assert (video.get(cv2.CAP_PROP_FRAME_HEIGHT), video.get(cv2.CAP_PROP_FRAME_WIDTH)) == (210, 160)  # the real frames
    assert video.get(cv2.CAP_PROP_FRAME_COUNT) > 200  # a whole game at every frame, not 84x84 agent views
    assert (run_dir / f"{name}.cleanrl_model").stat().st_size > 0
    assert (run_dir / "checkpoint.pt").exists()
    saved = json.loads((run_dir / "args.json").read_text())
    assert saved["script"] == script and saved["args"]["total_timesteps"] == 512
    assert saved["args"]["env_id"] == "BreakoutNoFrameskip-v4" and saved["args"]["clip_coef"] == 0.1
    assert list((tmp_path / "wandb").glob("offline-run-*")), "--track with WANDB_MODE=offline wrote no W&B run"
    assert set(PPO_TAGS) <= scalar_tags(run_dir), set(PPO_TAGS) - scalar_tags(run_dir)
    # whole games: Breakout's 5 lives take far more than 4 frames x the ~25 agent steps of one random life
    assert all(length > 400 for _, length in scalars(run_dir, "charts/episodic_length"))
    check_evaluations(run_dir, 192, 2, 512)  # at steps 192 and 384 (rollouts of 64 steps), then the final model's
    assert all(r >= 0 and r == int(r) for _, r in scalars(run_dir, "eval/final_episodic_return"))  # whole games' scores
    assert list((tmp_path / "videos").glob(f"{run_dir.name}-eval/*.mp4")), "the evaluation recorded no video"
    if script == "ppo_atari_lstm.py":  # the checkpoint carries the LSTM's memory of the games in progress
        next_obs, (h, c), next_done = torch.load(run_dir / "checkpoint.pt", weights_only=False)["state"]["memory"]
        assert h.shape == c.shape == (1, 2, 128) and h.abs().sum() > 0 and next_done.shape == (2,)
        assert next_obs.shape == (2, 1, 84, 84)


@pytest.mark.e2e
@pytest.mark.parametrize("script", ["ppo_atari_lstm.py"])  # ppo_atari.py resumes after SIGTERM below
def test_killed_run_resumes_to_the_same_weights(tmp_path, script):
    flags = [*SHORT[script], "--total-timesteps", "384", "--seed", "3", "--save-model", "--checkpoint-interval", "64"]
    run_dir = check_killed_run_resumes_to_the_same_weights(script, flags, tmp_path, "charts/SPS")
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == list(range(64, 384 + 1, 64))


@pytest.mark.e2e
def test_sigterm_checkpoints_and_exits_nonzero(tmp_path):
    # the default configuration (8 envs x 128 steps); the resumed run does one more rollout
    check_sigterm_checkpoints_and_resumes("ppo_atari.py", tmp_path, long_budget=10_000_000, more_steps=2048)


BAD_INPUTS = [
    (["--env-id", "CartPole-v1"], ["--env-id CartPole-v1 is not an Atari game", "use ppo.py"]),
    (["--env-id", "NoSuchEnv-v0"], ["--env-id NoSuchEnv-v0"]),
    (["--env-id", "ALE/NoSuchGame-v5"], ["--env-id ALE/NoSuchGame-v5"]),
    (["--num-envs", "0"], ["--num-envs must be positive"]),
    (["--seed", "-1"], ["--seed must be in [0, 2**32)"]),
    (["--eval-interval", "-1"], ["--eval-interval must be >= 0"]),
    (["--eval-episodes", "0"], ["--eval-episodes must be positive"]),
    (["--batch-size", "5"], ["--batch-size"]),  # computed from --num-envs * --num-steps: not a flag
    (["--resume", "runs/never-ran"], ["--resume runs/never-ran: no such folder"]),
]


@pytest.mark.parametrize(
    "script, flags, fragments",
    [(script, flags, fragments) for script in SCRIPTS for flags, fragments in BAD_INPUTS]
    + [
        ("ppo_atari.py", ["--num-minibatches", "3"], ["--num-minibatches 3 must divide", "1024"]),
        ("ppo_atari.py", ["--env-id", "pong_v3"], ["multi-agent Atari game", "use ppo_pettingzoo_ma_atari.py"]),
        # minibatches are split by env: 4 divides the batch of 2 x 128 steps, not the 2 envs
        ("ppo_atari_lstm.py", ["--num-envs", "2", "--num-minibatches", "4"], ["--num-minibatches 4 must divide --num-envs 2"]),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, script, flags, fragments):
    check_bad_input_in_process(script, flags, fragments, tmp_path, monkeypatch, capsys)


@pytest.mark.e2e
@pytest.mark.parametrize("script", SCRIPTS)
def test_a_bad_input_in_a_new_process_is_one_clear_line(tmp_path, script):
    """A bad input as a user meets it, in a new process (the cases above run in this one)."""
    flags, fragments = BAD_INPUTS[0]
    result = run_script(script, *flags, cwd=tmp_path)
    assert_clean_failure(result, *fragments)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "runs").exists(), f"a bad input started a run: {script}"
