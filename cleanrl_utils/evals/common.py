"""What every evaluation shares: one environment built with the script's own make_env, played for N episodes."""

from collections.abc import Callable

import gymnasium as gym
import numpy as np


def make_eval_envs(make_env: Callable, env_id: str, capture_video: bool, run_name: str) -> gym.vector.VectorEnv:
    return gym.vector.SyncVectorEnv(
        [make_env(env_id, 0, capture_video, run_name)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )


def play_episodes(
    envs: gym.vector.VectorEnv,
    act: Callable,
    eval_episodes: int,
    seed: int,
    episode_ended: Callable | None = None,
) -> list[float]:
    """Step `envs` with `act(obs) -> actions` until RecordEpisodeStatistics has reported `eval_episodes` episodes;
    their undiscounted returns. An episode end it does not report does not count: a wrapper above it may end episodes
    early (the Atari scripts' EpisodicLifeEnv ends one at each lost life; the statistics cover the whole game).
    `episode_ended(mask)`, if given, hears after each step which envs' episodes ended (a recurrent policy resets its
    state there)."""
    obs, _ = envs.reset(seed=seed)
    episodic_returns = []
    while len(episodic_returns) < eval_episodes:
        obs, _, terminations, truncations, infos = envs.step(act(obs))
        if episode_ended is not None:
            episode_ended(terminations | truncations)
        if "final_info" in infos:
            for i in np.flatnonzero(infos["final_info"].get("_episode", [])):
                episodic_returns.append(float(infos["final_info"]["episode"]["r"][i]))
    envs.close()
    return episodic_returns[:eval_episodes]


def epsilon_greedy(greedy: Callable, epsilon: float, n_actions: int, seed: int) -> Callable:
    """An `act` that plays `greedy(obs)` but a uniformly random action with probability epsilon, as the DQN papers
    evaluate (a deterministic greedy policy can loop forever in one state)."""
    rng = np.random.default_rng(seed)

    def act(obs):
        if rng.random() < epsilon:
            return rng.integers(n_actions, size=len(obs))
        return greedy(obs)

    return act
