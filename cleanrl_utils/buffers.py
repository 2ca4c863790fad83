"""The frame-once replay buffer of the Atari scripts (dqn_atari.py, c51_atari.py, qdagger_dqn_atari_impalacnn.py,
sac_atari.py and the JAX twins, rainbow_atari.py's prioritized buffer on top) and the sum tree that prioritized replay
samples with, imported as upstream CleanRL imports its buffers: they are storage, not algorithm."""

import copy

import numpy as np
import torch


class FrameReplayBuffer:
    """A replay memory that stores each 84x84 frame once, not 8 times (4 stacked in obs, 4 in next obs): per env a
    ring of frame slots, each with its frame's position in that env's stream and its episode's first position. The
    transition stored with frame p has the observation stacked from frames p-4..p-1 and the next one from p-3..p,
    both rebuilt at sampling time; positions before the episode's first frame are clamped to it, which is how
    FrameStackObservation pads a new episode (every life is one). A transition is sampled only while all its frames
    are live (not overwritten), so stacks never mix episodes or overwritten frames.
    Memory: 7,056 bytes a frame plus 33 for the rest; at the default 1,000,000 frames 7.1 GB, and filling one took
    the process to 7.7 GB peak RSS (see README), where a buffer of whole observations would take 56 GB."""

    def __init__(self, buffer_size, num_envs, observation_space):
        self.stack = observation_space.shape[0]
        self.capacity = -(-buffer_size // num_envs)  # frame slots per env
        shape = (num_envs, self.capacity)
        self.frames = np.zeros(shape + observation_space.shape[1:], dtype=observation_space.dtype)
        self.positions = np.full(shape, -1, dtype=np.int64)  # the position of the slot's frame in its env's stream
        self.episode_starts = np.zeros(shape, dtype=np.int64)  # the position of its episode's first frame here
        self.ends_transition = np.zeros(shape, dtype=bool)  # False for the frames that only start an episode
        self.actions = np.zeros(shape, dtype=np.int64)
        self.rewards = np.zeros(shape, dtype=np.float32)
        self.terminations = np.zeros(shape, dtype=np.float32)
        self.counts = np.zeros(num_envs, dtype=np.int64)  # frames written per env
        self.open = np.zeros(num_envs, dtype=bool)  # whether the env's current episode already has frames here
        self.current_starts = np.zeros(num_envs, dtype=np.int64)

    def _write(self, i, frame, ends_transition, action=0, reward=0.0, termination=0.0):
        slot = self.counts[i] % self.capacity
        self.frames[i, slot], self.positions[i, slot] = frame, self.counts[i]
        self.episode_starts[i, slot], self.ends_transition[i, slot] = self.current_starts[i], ends_transition
        self.actions[i, slot], self.rewards[i, slot], self.terminations[i, slot] = action, reward, termination
        self.counts[i] += 1
        return i * self.capacity + slot

    def add(self, obs, next_obs, actions, rewards, terminations, truncations):
        """One vector step: obs, the real next obs (final_obs where an episode ended), and what the envs returned.
        Returns the slots written, as env * capacity + slot: an episode's first frames, then each step's frame."""
        written = []
        for i in range(len(obs)):
            if not self.open[i]:
                # a new run of frames: the observation's own, less the leading copies that clamping will rebuild
                first = 0
                while first + 1 < self.stack and np.array_equal(obs[i, first + 1], obs[i, 0]):
                    first += 1
                self.current_starts[i], self.open[i] = self.counts[i], True
                for frame in obs[i, first:]:
                    written.append(self._write(i, frame, False))
            written.append(self._write(i, next_obs[i, -1], True, actions[i], rewards[i], terminations[i]))
            if terminations[i] or truncations[i]:
                self.open[i] = False  # the next episode starts a new run of frames
        return np.array(written)

    def cut_episodes(self):
        """The envs start new games without ending the current ones (a resumed run whose games could not be saved):
        those episodes end here, where they were cut, and the new ones start new runs of frames."""
        self.open[:] = False

    def __len__(self):
        """The frames held (transitions: one fewer per episode start)."""
        return int(np.minimum(self.counts, self.capacity).sum())

    def is_valid(self, envs, slots):
        positions = self.positions[envs, slots]
        oldest_needed = np.maximum(positions - self.stack, self.episode_starts[envs, slots])
        live = oldest_needed >= self.counts[envs] - self.capacity
        return (positions >= 0) & self.ends_transition[envs, slots] & live

    def valid_indices(self):
        """Every transition the buffer can return, as (envs, slots)."""
        envs, slots = np.indices(self.positions.shape).reshape(2, -1)
        valid = self.is_valid(envs, slots)
        return envs[valid], slots[valid]

    def _frames(self, envs, slots):
        """Frames p-4..p of each transition: its obs are the first four, its next obs the last four."""
        positions, starts = self.positions[envs, slots], self.episode_starts[envs, slots]
        stream = np.maximum(positions[:, None] + np.arange(-self.stack, 1), starts[:, None])
        return self.frames[envs[:, None], stream % self.capacity]

    def get(self, envs, slots):
        """obs, actions, rewards, next_obs, terminations of the given transitions, as numpy arrays."""
        frames = self._frames(envs, slots)
        return (
            frames[:, :-1],
            self.actions[envs, slots],
            self.rewards[envs, slots],
            frames[:, 1:],
            self.terminations[envs, slots],
        )

    def sample(self, batch_size, device):
        """Uniform over the transitions held: uniform over the filled slots, redrawing the few that are not valid."""
        filled = np.minimum(self.counts, self.capacity)
        ends = np.cumsum(filled)
        envs, slots = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        for _ in range(1000):
            draws = np.random.randint(0, ends[-1], size=batch_size)
            draw_envs = np.searchsorted(ends, draws, side="right")
            draw_slots = draws - (ends[draw_envs] - filled[draw_envs])
            valid = self.is_valid(draw_envs, draw_slots)
            envs, slots = np.concatenate([envs, draw_envs[valid]]), np.concatenate([slots, draw_slots[valid]])
            if len(envs) >= batch_size:
                break
        else:
            raise RuntimeError("the replay buffer holds no whole transition yet")
        envs, slots = envs[:batch_size], slots[:batch_size]
        frames = torch.from_numpy(self._frames(envs, slots)).to(device)  # one copy to the device for obs and next obs
        fields = (self.actions, self.rewards, self.terminations)
        actions, rewards, terminations = (torch.from_numpy(field[envs, slots]).to(device) for field in fields)
        return frames[:, :-1], actions, frames[:, 1:], rewards, terminations

    def state_dict(self):
        """All the buffer holds, a subclass's own state too (rainbow_atari.py's priorities); of the per-slot arrays only
        the slots written so far."""
        used = int(min(self.counts.max(), self.capacity))  # slots past this were never written
        return {name: value[:, :used] if self._per_slot(value) else value for name, value in vars(self).items()}

    def load_state_dict(self, state):
        for name, value in state.items():
            if self._per_slot(getattr(self, name)):
                getattr(self, name)[:, : value.shape[1]] = value
            else:
                setattr(self, name, copy.deepcopy(value))  # never shared with the state it came from

    def _per_slot(self, value):
        return isinstance(value, np.ndarray) and value.shape[:2] == self.positions.shape


class SumTree:
    """Sampling in proportion to a weight per index in O(log N), as proportional prioritized replay does (Schaul et al.
    2016): a binary tree whose leaves hold the weights and whose every inner node holds the sum of its two children,
    the root (node 1) the total."""

    def __init__(self, size):
        self.leaves = 1 << max(0, size - 1).bit_length()  # a power of two: index i is leaf node leaves + i
        self.nodes = np.zeros(2 * self.leaves, dtype=np.float64)

    def set(self, indices, values):
        nodes = self.leaves + np.asarray(indices, dtype=np.int64)
        self.nodes[nodes] = values
        while nodes[0] > 1:  # up to the root, each parent recomputed from its children (duplicates agree)
            nodes = nodes // 2
            self.nodes[nodes] = self.nodes[2 * nodes] + self.nodes[2 * nodes + 1]

    def find(self, masses):
        """The index where each cumulative mass in [0, total) falls: descend left or right by the left child's sum."""
        nodes, masses = np.ones(len(masses), dtype=np.int64), np.array(masses, dtype=np.float64)
        while nodes[0] < self.leaves:
            right = masses >= self.nodes[2 * nodes]  # descend right, past the left subtree's mass
            masses -= self.nodes[2 * nodes] * right
            nodes = 2 * nodes + right
        return nodes - self.leaves

    def sample(self, batch_size, accept):
        """`batch_size` indices, each drawn (numpy's global RNG) with probability its weight / the total among those that
        `accept(indices)` (a boolean mask) takes: a replay buffer's redraw of a transition not whole yet (or any more)."""
        indices = np.empty(0, dtype=np.int64)
        for _ in range(1000):
            draws = self.find(np.random.random(batch_size) * self.nodes[1])
            draws = draws[self.nodes[self.leaves + draws] > 0]  # floating-point rounding may land on an empty leaf
            indices = np.concatenate([indices, draws[accept(draws)]])
            if len(indices) >= batch_size:
                return indices[:batch_size]
        raise RuntimeError("the replay buffer holds no whole transition yet")
