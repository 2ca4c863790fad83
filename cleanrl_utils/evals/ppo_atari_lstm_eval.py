"""Evaluate a model saved by `cleanrl/ppo_atari_lstm.py --save-model`: play whole games with the trained recurrent
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
    """Returns the undiscounted return of each of `eval_episodes` whole games, acting with the saved policy. The LSTM
    state is carried from step to step and zeroed where an episode (a life) ended, as in training."""
    torch.manual_seed(seed)  # the policy samples its actions: the same seed replays the same episodes
    envs = make_eval_envs(make_env, env_id, capture_video, run_name)
    agent = Model(envs).to(device)
    agent.load_state_dict(torch.load(model_path, map_location=device))
    agent.eval()

    recurrent = {"state": agent.initial_state(envs.num_envs, device), "done": torch.zeros(envs.num_envs, device=device)}

    def act(obs):
        with torch.no_grad():
            action, recurrent["state"] = agent.get_action(
                torch.as_tensor(obs, device=device), recurrent["state"], recurrent["done"]
            )
        return action.cpu().numpy()

    def episode_ended(mask):  # where a life ended, the next step starts from a zero state, as in training
        recurrent["done"] = torch.as_tensor(mask, dtype=torch.float32, device=device)

    return play_episodes(envs, act, eval_episodes, seed, episode_ended)
