"""Evaluate a model saved by `cleanrl/ppo_procgen.py` or `ppg_procgen.py --save-model`: play whole Procgen games with
the trained (sampling) policy on one env made by the script's own `make_env` (its `ProcgenVecEnv`), return their raw
scores (the game's own rewards summed, before the training's reward scaling), as `charts/episodic_return` logs them.
Runs in the Procgen environment (`.venv-procgen`), as the scripts do."""

from collections.abc import Callable

import numpy as np
import torch


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
    """Returns the score of each of `eval_episodes` whole games, acting with the saved (sampling) policy. `seed` seeds
    both the policy's sampling and Procgen's levels, so the same seed replays the same games."""
    torch.manual_seed(seed)
    envs = make_env(env_id, 1, seed % 2**31, f"videos/{run_name}" if capture_video else None)
    agent = Model(envs).to(device)
    agent.load_state_dict(torch.load(model_path, map_location=device))
    agent.eval()
    obs, scores = envs.reset(), []
    while len(scores) < eval_episodes:
        with torch.no_grad():
            action = agent.get_action(torch.as_tensor(np.asarray(obs), device=device)).cpu().numpy()
        obs, _, _, ended = envs.step(action)
        scores += [episodic_return for episodic_return, _ in ended]
    envs.close()
    return scores[:eval_episodes]
