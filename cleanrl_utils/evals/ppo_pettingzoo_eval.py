"""Evaluate a model saved by `cleanrl/ppo_pettingzoo_ma_atari.py --save-model`: the shared policy plays every player
of whole games, and a game's score is its first player's (`first_0`): the game's own unclipped score. Also the
script's `--capture-video` recorder, `RecordGames`.

The policy samples its actions, as ppo_eval.py's does: greedy self-play can stall a game for good (measured on
pong_v3: both players' NOOP never serves, and the game runs to PettingZoo's 100,000-frame truncation, 25,000 steps)."""

from collections.abc import Callable

import supersuit as ss
import torch
from pettingzoo.utils.wrappers import BaseParallelWrapper

from cleanrl_utils.rendering import EpisodeVideos

FPS = 15  # one frame per agent step: the ALE's 60 frames a second, 4 frames a step


class RecordGames(BaseParallelWrapper):
    """The screen (the game's RGB render, 210 x 160) after each agent step of a PettingZoo parallel env made with
    `render_mode="rgb_array"`, whole games, written by `cleanrl_utils.rendering.EpisodeVideos` (RecordVideo's schedule
    and file names). It wraps the game above the frame skip, where a step is an agent's, and sees a game's last screen
    before supersuit's vector env resets it: a game is written when the next one starts, or when the env closes."""

    def __init__(self, env, folder: str):
        super().__init__(env)
        self.folder, self.videos = folder, None

    def reset(self, seed=None, options=None):
        result = self.env.reset(seed=seed, options=options)
        if self.videos is None:
            self.videos = EpisodeVideos(self.folder, self.env.render(), fps=FPS)
        else:
            self.videos.add(self.env.render(), new_episode=True)
        return result

    def step(self, actions):
        result = self.env.step(actions)
        self.videos.add(self.env.render(), new_episode=False)
        return result

    def close(self):
        if self.videos is not None:
            self.videos.close()
        return self.env.close()


def evaluate(
    model_path: str,
    make_env: Callable,
    env_id: str,
    eval_episodes: int,
    run_name: str,
    Model: type,
    device: torch.device | str = "cpu",
    capture_video: bool = True,
    seed: int = 0,
) -> list[float]:
    """Returns the first player's score in each of `eval_episodes` whole games, every player acting with the saved
    (sampling) policy."""
    torch.manual_seed(seed)  # the policy samples its actions: the same seed replays the same games
    envs = ss.vector.ConcatVecEnv([make_env(env_id, 0, capture_video, run_name)])
    agent = Model(envs).to(device)
    agent.load_state_dict(torch.load(model_path, map_location=device))
    agent.eval()
    obs, _ = envs.reset(seed=seed % 2**31)
    scores = []
    while len(scores) < eval_episodes:
        with torch.no_grad():
            obs, _, _, _, infos = envs.step(agent.get_action(torch.as_tensor(obs, device=device)).cpu().numpy())
        if "episode" in infos[0]:  # PlayerStatistics' at the game's end
            scores.append(float(infos[0]["episode"]["r"]))
    envs.close()
    return scores
