"""Evaluate a model saved by `cleanrl/c51.py` or `c51_atari.py --save-model`: play episodes epsilon-greedily,
return their scores."""

from collections.abc import Callable

import torch

from cleanrl_utils.evals.common import epsilon_greedy, make_eval_envs, play_episodes


def evaluate(
    model_path: str,
    make_env: Callable,
    env_id: str,
    eval_episodes: int,
    run_name: str,
    Model: type,
    device: torch.device | str = "cpu",
    epsilon: float = 0.05,
    capture_video: bool = True,
    seed: int = 0,
) -> list[float]:
    """Returns the undiscounted return of each of `eval_episodes` full episodes, acting greedily on the expected
    return of each action's distribution with probability 1 - epsilon."""
    envs = make_eval_envs(make_env, env_id, capture_video, run_name)
    saved = torch.load(model_path, map_location=device)
    support = {key: saved["args"][key] for key in ["n_atoms", "v_min", "v_max"]}  # the network's shape and range
    q_network = Model(envs, **support).to(device)
    q_network.load_state_dict(saved["model_weights"])
    q_network.eval()

    def greedy(obs):
        with torch.no_grad():
            actions, _ = q_network.get_action(torch.as_tensor(obs, dtype=torch.float32, device=device))
        return actions.cpu().numpy()

    return play_episodes(envs, epsilon_greedy(greedy, epsilon, envs.single_action_space.n, seed), eval_episodes, seed)
