"""Evaluate a model saved by `cleanrl/ppo_continuous_action.py` or `cleanrl/rpo_continuous_action.py --save-model`:
play episodes with the trained policy's mean action, return their scores."""

from collections.abc import Callable

import numpy as np
import torch

from cleanrl_utils.evals.common import make_eval_envs, play_episodes


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
    """Returns the undiscounted return of each of `eval_episodes` full episodes. The policy acts with the mean of its
    Gaussian (the usual evaluation of a Gaussian policy), on observations normalized with the statistics saved with
    the model, frozen: playing must not move them, and a fresh normalizer would feed the policy inputs it never saw."""
    envs = make_eval_envs(make_env, env_id, capture_video, run_name)
    saved = torch.load(model_path, map_location=device)
    agent = Model(envs).to(device)
    agent.load_state_dict(saved["model_weights"])
    agent.eval()
    stats = saved["obs_normalization"]
    mean, std = stats["mean"].cpu().numpy(), np.sqrt(stats["var"].cpu().numpy() + stats["epsilon"])
    clip = stats["clip"]

    def act(obs):
        normalized = np.clip((obs - mean) / std, -clip, clip).astype(np.float32)
        with torch.no_grad():
            action = agent.actor_mean(torch.as_tensor(normalized, device=device)).cpu().numpy()
        return agent.env_action(action)  # rescaled to the env's bounds and clipped, as in training

    return play_episodes(envs, act, eval_episodes, seed)
