"""EnvPool's own autoreset, as the EnvPool scripts rely on it (cleanrl_utils/envpool_atari.py states it), and
cleanrl/ppo_atari_envpool.py: its GAE across EnvPool's late reset, smoke with every flag, a resumed run that starts
new games, bad inputs."""

import json

import envpool
import numpy as np
import pytest
from helpers import (
    PPO_TAGS,
    assert_clean_failure,
    check_bad_input_in_process,
    check_enjoy_replays_the_evaluation,
    check_evaluations,
    load_checkpoint,
    load_script,
    only_run_dir,
    run_script,
    run_with_every_flag,
    scalar_tags,
    scalars,
)

from cleanrl_utils.envpool_atari import game_over

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

SCRIPT = "ppo_atari_envpool.py"


def load_ppo_atari_envpool():
    return load_script("ppo_atari_envpool")


def step_until(envs, rng, condition, limit=5000):
    """Random actions until `condition(reward, terminated, truncated, info)` holds for env 0; every step on the way
    and that one, as (obs, reward, terminated, truncated, info) tuples."""
    steps = []
    for _ in range(limit):
        steps.append(envs.step(rng.integers(envs.action_space.n, size=envs.config["num_envs"])))
        if condition(*steps[-1][1:]):
            return steps
    raise AssertionError("the condition never held")


def test_a_lost_life_ends_the_training_episode_then_a_reset_step_continues_the_game():
    """A lost life: `terminated` (not `info["terminated"]`, the game's own end), then EnvPool's reset step, which
    continues the same game: reward 0, no flag, the lives left unchanged and the game's step count not advanced."""
    envs = load_ppo_atari_envpool().make_env("Breakout-v5", 1, 7)
    envs.reset()
    rng = np.random.default_rng(0)
    steps = step_until(envs, rng, lambda r, term, trunc, info: term[0])
    _, _, _, truncated, info = steps[-1]
    assert info["lives"][0] == 4 and info["terminated"][0] == 0 and not game_over(info, truncated)[0]
    _, reward, terminated, truncated, reset_info = envs.step(np.array([1]))
    assert reward[0] == 0 and not terminated[0] and not truncated[0]
    assert reset_info["lives"][0] == 4 and reset_info["elapsed_step"][0] == info["elapsed_step"][0]
    _, _, _, _, next_info = envs.step(np.array([1]))
    assert next_info["elapsed_step"][0] == info["elapsed_step"][0] + 1  # the same game goes on


def test_after_a_game_over_the_next_step_is_a_reset_step():
    """The last life lost: the real last frame, then a reset step that starts a new game (reward 0, no flag, 5 lives,
    elapsed_step 0): a step the scripts leave out of every loss and statistic."""
    envs = load_ppo_atari_envpool().make_env("Breakout-v5", 1, 3)
    envs.reset()
    rng = np.random.default_rng(1)
    steps = step_until(envs, rng, lambda r, term, trunc, info: info["terminated"][0] == 1)
    last_obs, reward, terminated, truncated, info = steps[-1]
    assert terminated[0] and not truncated[0] and info["lives"][0] == 0 and game_over(info, truncated)[0]
    assert sum(int(s[2][0]) for s in steps) == 5, "one termination per life"
    first_obs, reward, terminated, truncated, info = envs.step(np.array([3]))
    assert reward[0] == 0 and not terminated[0] and not truncated[0]
    assert info["elapsed_step"][0] == 0 and info["lives"][0] == 5
    assert not np.array_equal(first_obs, last_obs)
    _, _, _, _, info = envs.step(np.array([1]))
    assert info["elapsed_step"][0] == 1  # the new game's first real step


def test_a_truncated_game_returns_its_real_last_observation_then_resets():
    """At max_episode_steps EnvPool truncates: `truncated` without `terminated`, the real last observation (the
    scripts bootstrap from it), then the reset step. The agent sees clipped rewards, `info["reward"]` the game's own."""
    envs = envpool.make("SpaceInvaders-v5", env_type="gymnasium", num_envs=2, seed=1, reward_clip=True, max_episode_steps=150)
    envs.reset()
    rng = np.random.default_rng(2)
    steps = step_until(envs, rng, lambda r, term, trunc, info: trunc[0])
    last_obs, _, terminated, truncated, info = steps[-1]
    assert len(steps) == 150 and not terminated[0] and info["elapsed_step"][0] == 150 and game_over(info, truncated)[0]
    game_rewards = np.array([s[4]["reward"][0] for s in steps])
    assert game_rewards.max() > 1, "no reward above 1 in 150 steps: the check below would prove nothing"
    np.testing.assert_array_equal([s[1][0] for s in steps], np.sign(game_rewards))
    first_obs, reward, terminated, truncated, info = envs.step(np.zeros(2, dtype=int))
    assert reward[0] == 0 and not (terminated[0] or truncated[0]) and info["elapsed_step"][0] == 0
    assert not np.array_equal(first_obs[0], last_obs[0])


def test_gae_bootstraps_across_envpools_late_reset():
    """One env, gamma 0.5, lambda 0.5, by hand: rows 0-1 a life ending in a lost life (terminated, no bootstrap), rows
    2-3 a game truncated at row 3 (bootstraps from row 4, its real last observation), row 4 the reset step (its own
    advantage is never used), row 5 a new game bootstrapping from the last value. (The reset step after the lost life
    is left out of this rollout: its row would not change rows 0-1, the end at row 1 cuts the chain.)"""
    ppo = load_ppo_atari_envpool()
    rewards = np.array([1.0, 1.0, 0.0, 1.0, 0.0, 1.0]).reshape(-1, 1)
    values = np.array([1.0, 2.0, 4.0, 2.0, 8.0, 2.0]).reshape(-1, 1)
    terminations = np.array([0, 1, 0, 0, 0, 0], dtype=np.float32).reshape(-1, 1)
    episode_ends = np.array([0, 1, 0, 1, 0, 0], dtype=np.float32).reshape(-1, 1)
    advantages, returns = ppo.compute_gae(rewards, values, np.array([4.0]), terminations, episode_ends, 0.5, 0.5)
    delta5 = 1 + 0.5 * 4 - 2  # 1.0
    delta4 = 0 + 0.5 * 2 - 8  # -7 (the reset step's: left out of the update)
    delta3 = 1 + 0.5 * 8 - 2  # 3.0: the truncated game bootstraps from V(its last observation) = 8
    delta2 = 0 + 0.5 * 2 - 4  # -3.0
    delta1 = 1 - 2  # -1.0: a lost life, no bootstrap
    delta0 = 1 + 0.5 * 2 - 1  # 1.0
    expected = [delta0 + 0.25 * delta1, delta1, delta2 + 0.25 * delta3, delta3, delta4 + 0.25 * delta5, delta5]
    np.testing.assert_allclose(advantages.ravel(), expected)
    np.testing.assert_allclose(returns, advantages + values)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One run with every flag at once; the resume test extends it."""
    tmp_path = tmp_path_factory.mktemp("smoke")
    flags = ["--env-id", "Breakout-v5", "--num-envs", "4", "--num-steps", "32", "--total-timesteps", "1024", "--seed", "1"]
    flags += ["--capture-video", "--save-model", "--track", "--eval-interval", "512", "--eval-episodes", "1"]
    run_dir = run_with_every_flag(SCRIPT, [*flags, "--checkpoint-interval", "512"], tmp_path)
    return tmp_path, run_dir


@pytest.mark.e2e
def test_smoke_with_every_flag(smoke_run):
    tmp_path, run_dir = smoke_run
    assert set(PPO_TAGS) - {"charts/episodic_return", "charts/episodic_length"} <= scalar_tags(run_dir)
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == list(range(128, 1024 + 1, 128))
    check_evaluations(run_dir, 512, 1, 1024)
    # whole games (all five lives) of a random-like policy: a random Breakout game lasts more than 100 steps
    lengths = [length for _, length in scalars(run_dir, "charts/episodic_length")]
    assert lengths and min(lengths) > 100, lengths
    assert "rl-video-episode-0.mp4" in {p.name for p in (tmp_path / "videos" / run_dir.name).glob("*.mp4")}
    check_enjoy_replays_the_evaluation(run_dir, tmp_path, games=1)


@pytest.mark.e2e
def test_a_resumed_run_continues_at_its_step_with_new_games(smoke_run):
    """A finished run extended with a larger budget: it continues from the checkpoint's weights and step, logs no step
    twice, and says its games start anew (EnvPool cannot save them)."""
    tmp_path, run_dir = smoke_run
    saved = load_checkpoint(run_dir / "checkpoint.pt")
    assert (
        saved["global_step"] == 1024 and saved["finished"] and sorted(saved["state"]) == ["agent", "global_step", "optimizer"]
    )
    result = run_script(SCRIPT, "--resume", str(run_dir), "--total-timesteps", "1536", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resumed at step 1024: the games start anew" in result.stderr
    assert only_run_dir(tmp_path) == run_dir
    assert [step for step, _ in scalars(run_dir, "charts/SPS")] == list(range(128, 1536 + 1, 128))
    assert load_checkpoint(run_dir / "checkpoint.pt")["global_step"] == 1536
    assert json.loads((run_dir / "args.json").read_text())["args"]["total_timesteps"] == 1536


BAD_INPUTS = [
    (["--env-id", "BreakoutNoFrameskip-v4"], ["--env-id BreakoutNoFrameskip-v4: EnvPool names this game Breakout-v5"]),
    (["--env-id", "ALE/Pong-v5"], ["EnvPool names this game Pong-v5"]),
    (["--env-id", "CartPole-v1"], ["--env-id CartPole-v1 is not an Atari game", "use ppo.py"]),
    (["--env-id", "NoSuchGame-v5"], ["--env-id NoSuchGame-v5 is not an EnvPool environment"]),
    (["--seed", str(2**31)], ["--seed must be in [0, 2**31)"]),
    (["--num-minibatches", "3"], ["--num-minibatches 3 must divide", "1024"]),
]


@pytest.mark.parametrize("flags, fragments", BAD_INPUTS)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, flags, fragments):
    check_bad_input_in_process(SCRIPT, flags, fragments, tmp_path, monkeypatch, capsys)


@pytest.mark.e2e
def test_a_bad_input_in_a_new_process_is_one_clear_line(tmp_path):
    result = run_script(SCRIPT, *BAD_INPUTS[0][0], cwd=tmp_path)
    assert_clean_failure(result, *BAD_INPUTS[0][1])
    assert not (tmp_path / "runs").exists()
