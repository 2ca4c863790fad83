"""Evaluate a model saved by `cleanrl/ppo_atari_envpool.py` or `ppo_rnd_envpool.py --save-model`: play whole games
with the trained policy on the script's own EnvPool env, return their scores. (RND's model is its policy alone: acting
needs neither the RND networks nor their normalizers, the policy sees the raw frames / 255.)"""

from collections.abc import Callable

import torch

from cleanrl_utils.evals.envpool_common import play_games


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
    """Returns the score of each of `eval_episodes` whole games, acting with the saved (sampling) policy."""
    torch.manual_seed(seed)  # the policy samples its actions: the same seed replays the same games
    envs = make_env(env_id, 1, seed % 2**31, capture_video)
    agent = Model(envs).to(device)
    agent.load_state_dict(torch.load(model_path, map_location=device))
    agent.eval()

    def act(obs):
        with torch.no_grad():
            return agent.get_action(torch.as_tensor(obs, device=device)).cpu().numpy()

    return play_games(envs, act, eval_episodes, f"videos/{run_name}" if capture_video else None)
