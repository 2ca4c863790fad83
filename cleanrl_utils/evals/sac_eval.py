"""Evaluate a model saved by `cleanrl/sac_continuous_action.py --save-model`: play episodes with the policy's
deterministic action, tanh of the Gaussian's mean rescaled to the env's bounds; return their scores."""

from collections.abc import Callable

import torch

from cleanrl_utils.evals.common import make_eval_envs, play_episodes
from cleanrl_utils.evals.ddpg_eval import actor_weights


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
    """Returns the undiscounted return of each of `eval_episodes` full episodes, acting with the saved actor's mean
    action (no sampling: the evaluation is deterministic, as in the SAC paper's evaluation)."""
    envs = make_eval_envs(make_env, env_id, capture_video, run_name)
    actor = Model(envs).to(device)
    actor.load_state_dict(actor_weights(torch.load(model_path, map_location=device)))
    actor.eval()

    def act(obs):
        with torch.no_grad():
            mean, _ = actor(torch.as_tensor(obs, dtype=torch.float32, device=device))
            actions = torch.tanh(mean) * actor.action_scale + actor.action_bias
        return actions.cpu().numpy().reshape(envs.action_space.shape)

    return play_episodes(envs, act, eval_episodes, seed)
