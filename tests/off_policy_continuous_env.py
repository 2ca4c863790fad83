"""Tiny continuous-action envs for tests/test_off_policy_continuous.py, reached by the scripts through ids such as
`off_policy_continuous_env:ContinuousCorridor-v0`."""

import gymnasium as gym
import numpy as np


class ContinuousCorridor(gym.Env):
    """Step right to the exit at position 10 (termination) before the time limit (8 steps) truncates the episode.

    The action bounds are asymmetric on purpose, [-1, 3] for the step and [0, 0.5] for an unused second dimension,
    and an action outside them raises: a script that does not rescale its actions to the env's bounds fails here.
    The observation is [position, steps taken] and the reward is the step taken, so every transition can be checked."""

    length = 10.0

    def __init__(self):
        self.observation_space = gym.spaces.Box(0.0, np.inf, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position, self.steps = 0.0, 0
        return self._obs(), {}

    def step(self, action):
        action = np.asarray(action)
        if not (np.all(action >= self.action_space.low) and np.all(action <= self.action_space.high)):
            raise ValueError(f"action {action} outside the bounds [{self.action_space.low}, {self.action_space.high}]")
        self.position = max(0.0, self.position + float(action[0]))
        self.steps += 1
        terminated = self.position >= self.length
        return self._obs(), float(action[0]), terminated, False, {}

    def _obs(self):
        return np.array([self.position, self.steps], dtype=np.float32)


class UnboundedActions(ContinuousCorridor):
    """The same corridor with an action space that has no bounds: no tanh can be rescaled onto it."""

    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)


gym.register("ContinuousCorridor-v0", entry_point=ContinuousCorridor, max_episode_steps=8)
gym.register("UnboundedActions-v0", entry_point=UnboundedActions, max_episode_steps=8)
