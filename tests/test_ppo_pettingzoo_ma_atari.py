"""cleanrl/ppo_pettingzoo_ma_atari.py: what SuperSuit's vector env of PettingZoo's multi-agent Atari games returns (the
observation layout, a truncation, a game over, a player out before the end) on the real games, the per-player
statistics, the GAE over it, smoke with every flag, a resumed run that starts new games, bad inputs."""

import functools
import importlib
import json

import gymnasium as gym
import numpy as np
import pytest
import supersuit as ss
import torch
from helpers import (
    PPO_TAGS,
    check_bad_input_in_process,
    check_evaluations,
    load_checkpoint,
    load_script,
    only_run_dir,
    run_script,
    run_with_every_flag,
    scalar_tags,
    scalars,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

SCRIPT = "ppo_pettingzoo_ma_atari.py"
# the seven games upstream CleanRL's script names, with their players
GAMES = {
    "pong_v3": 2,
    "surround_v2": 2,
    "tennis_v3": 2,
    "space_invaders_v2": 2,
    "warlords_v3": 4,
    "combat_plane_v2": 2,
    "combat_tank_v2": 2,
}


def load_ppo_ma():
    return load_script("ppo_pettingzoo_ma_atari")


def make_envs(env_id, num_games, monkeypatch=None, max_cycles=None):
    """The script's vector env of `num_games` games; with `max_cycles`, PettingZoo truncates each game at that many
    frames (the script keeps PettingZoo's 100,000)."""
    if max_cycles is not None:
        game = importlib.import_module(f"pettingzoo.atari.{env_id}")
        monkeypatch.setattr(game, "parallel_env", functools.partial(game.parallel_env, max_cycles=max_cycles))
    ppo_ma = load_ppo_ma()
    return ss.vector.ConcatVecEnv([ppo_ma.make_env(env_id, i, False, "test") for i in range(num_games)])


def indicator_of(obs):
    """Per row, the player its indicator channels name (each channel all 255 or all 0)."""
    channels = obs[..., 4:]
    assert np.isin(channels, [0, 255]).all() and (channels == channels[:, :1, :1]).all()
    assert (channels[:, 0, 0] == 255).sum(axis=1).tolist() == [1] * len(obs)
    return channels[:, 0, 0].argmax(axis=1).tolist()


@pytest.mark.parametrize("env_id, players", GAMES.items())
def test_every_game_makes_its_env_and_steps(env_id, players):
    """Rows 0..players-1 are game 0's players in PettingZoo's order, then game 1's (two games of pong_v3, one of the
    others); 4 stacked gray frames, then one channel per player, 255 on the rows of the player it names."""
    games = 2 if env_id == "pong_v3" else 1
    envs = make_envs(env_id, games)
    obs, _ = envs.reset(seed=1)
    assert envs.num_envs == games * players and isinstance(envs.action_space, gym.spaces.Discrete)
    assert obs.shape == (games * players, 84, 84, 4 + players) and obs.dtype == np.uint8
    assert envs.vec_envs[0].par_env.possible_agents[0] == "first_0"
    rng = np.random.default_rng(0)
    for _ in range(3):
        obs, reward, terminated, truncated, infos = envs.step(rng.integers(envs.action_space.n, size=envs.num_envs))
        assert obs.shape == (games * players, 84, 84, 4 + players) and len(infos) == games * players
        assert indicator_of(obs) == list(range(players)) * games
        assert not (terminated.any() or truncated.any())
    envs.close()


def test_a_truncation_resets_every_player_and_keeps_the_real_last_observation(monkeypatch):
    """PettingZoo truncates a game at max_cycles frames (100,000 by default): every player of that game is truncated
    at once, the vector env returns the NEXT game's first observation (its older stacked frames still black), and the
    real last one is in each player's info["terminal_observation"], the script's bootstrap. The statistics carry each
    player's real (unclipped) score and its steps."""
    envs = make_envs("space_invaders_v2", 2, monkeypatch, max_cycles=800)  # 200 agent steps of 4 frames
    obs, _ = envs.reset(seed=0)
    rng = np.random.default_rng(0)
    rewards = np.zeros(4)
    for step in range(1, 201):
        previous = obs
        obs, reward, terminated, truncated, infos = envs.step(rng.integers(envs.action_space.n, size=4))
        rewards += reward
        assert not terminated.any() and truncated.all() == (step == 200) and truncated.any() == (step == 200)
        assert all(("episode" in info) == (step == 200) for info in infos)
    for i, info in enumerate(infos):
        last = info["terminal_observation"]
        np.testing.assert_array_equal(last[..., :3], previous[i][..., 1:4])  # one more frame on the stack
        assert not np.array_equal(last[..., 3], obs[i][..., 3])
        assert indicator_of(last[None]) == [i % 2]
        assert not obs[i][..., :3].any() and obs[i][..., 3].any()  # a new game: only its first frame
        assert info["episode"]["l"] == 200
    scores = np.array([info["episode"]["r"] for info in infos])
    np.testing.assert_array_equal(scores, rewards)  # the vector env gives the real rewards; the script clips them
    assert scores.max() > 30, "Space Invaders scores 5 to 30 an alien: no real score to tell from a clipped one"
    obs, _, terminated, truncated, _ = envs.step(np.zeros(4, dtype=int))
    assert not (terminated.any() or truncated.any())
    envs.close()


def test_a_game_over_terminates_every_player_at_once():
    """Pong with every player on FIRE ends 21-0 for first_0 (729 steps): the last step terminates both players (not
    truncates), their statistics are their scores, and the next game starts."""
    envs = make_envs("pong_v3", 1)
    envs.reset(seed=3)
    for step in range(1, 2000):
        obs, reward, terminated, truncated, infos = envs.step(np.ones(2, dtype=int))
        if terminated.any():
            break
    assert terminated.all() and not truncated.any()
    assert [info["episode"]["r"] for info in infos] == [21.0, -21.0]
    assert [info["episode"]["l"] for info in infos] == [step, step]
    assert not obs[:, :, :, :3].any()
    envs.close()


def test_a_player_out_before_the_game_ends_stays_as_a_black_screen():
    """In Warlords a lord whose castle falls is out while the others play on. PettingZoo drops it; the script's
    PlayerStatistics keeps it (supersuit's vector env needs every player): terminated at its fall, then at each step
    a black screen, reward 0 and `terminated`, until the game ends; the others play on."""
    envs = make_envs("warlords_v3", 1)
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(2000):
        obs, reward, terminated, truncated, _ = envs.step(rng.integers(envs.action_space.n, size=4))
        if terminated.any():
            break
    (out,) = np.flatnonzero(terminated)
    assert obs[out].any(), "its last screen is a real one"
    for _ in range(5):
        obs, reward, terminated, truncated, infos = envs.step(rng.integers(envs.action_space.n, size=4))
        assert terminated[out] and reward[out] == 0 and not obs[out].any() and not truncated.any()
        assert terminated.sum() == 1 and "episode" not in infos[out]
    envs.close()


class ScriptedGame:
    """A PettingZoo parallel env of two players that plays a fixed script: player b is out after frame 2, the game
    ends at frame 4."""

    possible_agents = ["a", "b"]
    rewards = [{"a": 1.0, "b": 5.0}, {"a": 0.0, "b": -3.0}, {"a": 2.0}, {"a": 7.0}]

    def observation_space(self, agent):
        return gym.spaces.Box(0, 255, (2,), np.uint8)

    def reset(self, seed=None, options=None):
        self.frame, self.agents = 0, ["a", "b"]
        return {agent: np.ones(2, np.uint8) for agent in self.agents}, {agent: {} for agent in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents), "a player out gets no action"
        rewards, self.frame = self.rewards[self.frame], self.frame + 1
        terminations = {agent: agent == "b" and self.frame == 2 or self.frame == 4 for agent in self.agents}
        obs = {agent: np.ones(2, np.uint8) for agent in self.agents}
        result = obs, rewards, terminations, dict.fromkeys(self.agents, False), {agent: {} for agent in self.agents}
        self.agents = [agent for agent in self.agents if not terminations[agent]]
        return result


def test_player_statistics_by_hand():
    env = load_ppo_ma().PlayerStatistics(ScriptedGame())
    env.reset()
    assert env.agents == ["a", "b"]
    steps = [env.step({"a": 0, "b": 0}) for _ in range(4)]
    for obs, rewards, terminations, truncations, infos in steps[2:]:  # b is out: black, 0, terminated
        assert not obs["b"].any() and rewards["b"] == 0 and terminations["b"] and not truncations["b"]
    assert [steps[t][2]["a"] for t in range(4)] == [False, False, False, True]
    assert all("episode" not in infos["a"] for *_, infos in steps[:3])
    infos = steps[3][4]
    assert infos["a"]["episode"] == {"r": 1.0 + 0.0 + 2.0 + 7.0, "l": 4}
    assert infos["b"]["episode"] == {"r": 5.0 - 3.0, "l": 2}
    assert env.agents == ["a", "b"]


def test_gae_by_hand():
    """Two players of one game, gamma 0.5, lambda 0.5. Player 0: truncated at row 1 (bootstraps from V(its real last
    observation) = 6), then a new game. Player 1: out at row 1 (terminated, no bootstrap), rows 2-3 its black-screen
    steps (terminated, reward 0: their own advantages are left out of the update, and they reach no real row)."""
    ppo_ma = load_ppo_ma()
    rewards = np.array([[1.0, 1.0], [1.0, -1.0], [0.0, 0.0], [1.0, 0.0]])
    values = np.array([[2.0, 1.0], [4.0, 2.0], [2.0, 3.0], [2.0, 1.0]])
    terminations = np.array([[0, 0], [0, 1], [0, 1], [0, 1]], dtype=np.float32)
    episode_ends = np.array([[0, 0], [1, 1], [0, 1], [0, 1]], dtype=np.float32)
    final_values = np.zeros((4, 2))
    final_values[1, 0] = 6.0
    last_value = np.array([4.0, 5.0])
    advantages, returns = ppo_ma.compute_gae(rewards, values, last_value, final_values, terminations, episode_ends, 0.5, 0.5)
    d3, d2 = 1 + 0.5 * 4 - 2, 0 + 0.5 * 2 - 2  # player 0's new game: 1.0, -1.0
    d1, d0 = 1 + 0.5 * 6 - 4, 1 + 0.5 * 4 - 2  # 0.0 (the truncation's bootstrap), 1.0
    np.testing.assert_allclose(advantages[:, 0], [d0 + 0.25 * d1, d1, d2 + 0.25 * d3, d3])
    e0, e1 = 1 + 0.5 * 2 - 1, -1 - 2  # player 1: 1.0, then its fall: -3.0 (no bootstrap)
    np.testing.assert_allclose(advantages[:, 1], [e0 + 0.25 * e1, e1, -3.0, -1.0])
    np.testing.assert_allclose(returns, advantages + values)


def test_cnn_reads_height_width_channels_and_scales_the_indicator():
    ppo_ma = load_ppo_ma()
    spaces = {"observation_space": gym.spaces.Box(0, 255, (84, 84, 6), np.uint8), "action_space": gym.spaces.Discrete(6)}
    agent = ppo_ma.Agent(type("Envs", (), spaces))
    assert agent.network[0].weight.shape == (32, 6, 8, 8) and agent.actor.out_features == 6
    frames = torch.randint(0, 256, (3, 84, 84, 6), dtype=torch.uint8)
    with torch.no_grad():
        expected = agent.critic(agent.network(frames.permute(0, 3, 1, 2).float() / 255.0)).flatten()
        _, _, values = agent.evaluate_actions(frames, torch.zeros(3, dtype=torch.int64))
    torch.testing.assert_close(values, expected)


def test_run_state_cannot_snapshot_supersuits_envs():
    """cleanrl_utils.run_state saves a Gymnasium SyncVectorEnv's games; SuperSuit's ConcatVecEnv has no sub-envs it can
    pickle, so the script's checkpoint holds no games and a resumed run starts new ones."""
    from cleanrl_utils.run_state import snapshot_envs

    envs = make_envs("pong_v3", 1)
    envs.reset(seed=0)
    assert isinstance(envs, gym.vector.VectorEnv) and snapshot_envs(envs) is None
    envs.close()


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One run with every flag at once; the resume test extends it. One game of pong_v3 (2 players) x 32 steps: 64
    player steps a rollout."""
    tmp_path = tmp_path_factory.mktemp("smoke")
    flags = ["--num-envs", "1", "--num-steps", "32", "--total-timesteps", "256", "--seed", "1"]
    flags += ["--capture-video", "--save-model", "--track", "--eval-interval", "128", "--eval-episodes", "1"]
    run_dir = run_with_every_flag(SCRIPT, [*flags, "--checkpoint-interval", "128"], tmp_path)
    return tmp_path, run_dir


@pytest.mark.e2e
def test_smoke_with_every_flag(smoke_run):
    tmp_path, run_dir = smoke_run
    # no game of pong ends in 128 steps: the statistics are checked on whole games above
    assert set(PPO_TAGS) - {"charts/episodic_return", "charts/episodic_length"} <= scalar_tags(run_dir)
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == list(range(64, 256 + 1, 64))
    check_evaluations(run_dir, 128, 1, 256)
    assert all(r == int(r) for _, r in scalars(run_dir, "eval/final_episodic_return"))  # first_0's score in points
    assert "rl-video-episode-0.mp4" in {p.name for p in (tmp_path / "videos" / run_dir.name).glob("*.mp4")}
    assert json.loads((run_dir / "args.json").read_text())["args"]["env_id"] == "pong_v3"


@pytest.mark.e2e
def test_a_resumed_run_continues_at_its_step_with_new_games(smoke_run):
    """A finished run extended with a larger budget: it continues from the checkpoint's weights and step, logs no step
    twice, and says its games start anew (SuperSuit's envs cannot be saved)."""
    tmp_path, run_dir = smoke_run
    saved = load_checkpoint(run_dir / "checkpoint.pt")
    assert saved["global_step"] == 256 and saved["finished"]
    assert sorted(saved["state"]) == ["agent", "global_step", "optimizer"]
    flags = ["--total-timesteps", "384", "--no-save-model", "--eval-interval", "0", "--no-capture-video", "--no-track"]
    result = run_script(SCRIPT, "--resume", str(run_dir), *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resumed at step 256: the games start anew" in result.stderr
    assert only_run_dir(tmp_path) == run_dir
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == list(range(64, 384 + 1, 64))
    assert load_checkpoint(run_dir / "checkpoint.pt")["global_step"] == 384


MULTI_AGENT_IDS = "one of basketball_pong_v3, boxing_v2, combat_plane_v2"
BAD_INPUTS = [
    (
        ["--env-id", "BreakoutNoFrameskip-v4"],
        ["--env-id BreakoutNoFrameskip-v4 is not a multi-agent Atari game", MULTI_AGENT_IDS],
    ),
    (["--env-id", "ALE/Pong-v5"], ["--env-id ALE/Pong-v5 is not a multi-agent Atari game", "pong_v3"]),
    (["--env-id", "pong_v9"], ["--env-id pong_v9 is not a multi-agent Atari game", "warlords_v3"]),
    (["--num-envs", "0"], ["--num-envs must be positive"]),
    (["--seed", str(2**31)], ["--seed must be in [0, 2**31)"]),
    (["--eval-interval", "-1"], ["--eval-interval must be >= 0"]),
    # 8 games x 2 players x 128 steps = 2048 player steps a rollout; warlords has 4 players: 4096
    (["--num-minibatches", "3"], ["--num-minibatches 3 must divide", "2048"]),
    (["--env-id", "warlords_v3", "--total-timesteps", "4000"], ["--total-timesteps 4000 is below one rollout: 4096"]),
    (["--batch-size", "5"], ["--batch-size"]),  # computed: not a flag
]


@pytest.mark.parametrize("flags, fragments", BAD_INPUTS)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, flags, fragments):
    check_bad_input_in_process(SCRIPT, flags, fragments, tmp_path, monkeypatch, capsys)
