"""Evaluate a model saved by `cleanrl/ddpg_continuous_action.py` or `cleanrl/td3_continuous_action.py --save-model`:
play episodes with the deterministic actor (no exploration noise), return their scores."""

from collections.abc import Callable

import torch

from cleanrl_utils.evals.common import make_eval_envs, play_episodes


def actor_weights(weights: dict) -> dict:
    """The actor's tensors of a saved model ("actor.fc1.weight" -> "fc1.weight"); a bare actor state dict as is."""
    prefixed = {key.removeprefix("actor."): tensor for key, tensor in weights.items() if key.startswith("actor.")}
    return prefixed or weights


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
    """Returns the undiscounted return of each of `eval_episodes` full episodes, acting with the saved actor's action
    (already rescaled to the env's bounds)."""
    envs = make_eval_envs(make_env, env_id, capture_video, run_name)
    actor = Model(envs).to(device)
    actor.load_state_dict(actor_weights(torch.load(model_path, map_location=device)))
    actor.eval()

    def act(obs):
        with torch.no_grad():
            actions = actor(torch.as_tensor(obs, dtype=torch.float32, device=device))
        return actions.cpu().numpy().reshape(envs.action_space.shape)

    return play_episodes(envs, act, eval_episodes, seed)
