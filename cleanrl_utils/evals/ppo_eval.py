"""Evaluate a model saved by `cleanrl/ppo.py` or `ppo_atari.py --save-model`: play episodes with the trained
policy, return their scores."""

from collections.abc import Callable

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
    """Returns the undiscounted return of each of `eval_episodes` full episodes, acting with the saved policy."""
    torch.manual_seed(seed)  # the policy samples its actions: the same seed replays the same episodes
    envs = make_eval_envs(make_env, env_id, capture_video, run_name)
    agent = Model(envs).to(device)
    agent.load_state_dict(torch.load(model_path, map_location=device))
    agent.eval()

    def act(obs):
        with torch.no_grad():
            return agent.get_action(torch.as_tensor(obs, dtype=torch.float32, device=device)).cpu().numpy()

    return play_episodes(envs, act, eval_episodes, seed)
