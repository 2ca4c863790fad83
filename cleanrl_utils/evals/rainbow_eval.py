"""Evaluate a model saved by `cleanrl/rainbow_atari.py --save-model`: play episodes as the agent acts in training,
greedy on the expected returns under a fresh draw of the noisy layers' noise at every step; return their scores."""

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
    """Returns the undiscounted return of each of `eval_episodes` full games. The network stays in training mode on
    purpose: its noise is the policy's only randomness (Rainbow has no epsilon), so the games are those of the trained
    agent, and `seed` seeds torch for that noise: the same seed replays the same games (`Model.eval()` would play the
    mean weights instead, a deterministic policy that can loop forever in one state)."""
    envs = make_eval_envs(make_env, env_id, capture_video, run_name)
    saved = torch.load(model_path, map_location=device)
    support = {key: saved["args"][key] for key in ["n_atoms", "v_min", "v_max"]}  # the network's shape
    q_network = Model(envs, **support).to(device)
    q_network.load_state_dict(saved["model_weights"])
    torch.manual_seed(seed)

    def act(obs):
        with torch.no_grad():
            actions, _ = q_network.get_action(torch.as_tensor(obs, dtype=torch.float32, device=device))
        return actions.cpu().numpy()

    return play_episodes(envs, act, eval_episodes, seed)
