"""A user's own environment, reached by ppo.py through the id `custom_env:Corridor-v0`."""

import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    """Walk right to the exit (reward 1, termination) within 20 steps, or the time limit truncates the episode."""

    def __init__(self, length: int = 5):
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0
        return self._obs(), {}

    def step(self, action):
        self.position = max(0, self.position + (1 if action == 1 else -1))
        terminated = self.position == self.length
        return self._obs(), float(terminated), terminated, False, {}

    def _obs(self):
        return np.array([self.position / self.length], dtype=np.float32)


gym.register("Corridor-v0", entry_point=Corridor, max_episode_steps=20)
