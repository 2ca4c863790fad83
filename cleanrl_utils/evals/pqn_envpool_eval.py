"""Evaluate a model saved by `cleanrl/pqn_atari_envpool.py` or `pqn_atari_envpool_lstm.py --save-model`: play whole
games epsilon-greedily on the script's own EnvPool env, return their scores."""

from collections.abc import Callable

import torch

from cleanrl_utils.evals.common import epsilon_greedy
from cleanrl_utils.evals.envpool_common import play_games


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
    """Returns the score of each of `eval_episodes` whole games, acting greedily on the saved Q-network with
    probability 1 - epsilon. A recurrent one (with `initial_state`, as pqn_atari_envpool_lstm.py's) carries its LSTM
    state from step to step and zeroes it where training does: at the first observation of each new life or game (the
    one EnvPool's reset step returns)."""
    envs = make_env(env_id, 1, seed % 2**31, capture_video)
    q_network = Model(envs).to(device)
    q_network.load_state_dict(torch.load(model_path, map_location=device))
    q_network.eval()
    video_folder = f"videos/{run_name}" if capture_video else None

    if not hasattr(q_network, "initial_state"):

        def greedy(obs):
            with torch.no_grad():
                return q_network(torch.as_tensor(obs, device=device)).argmax(dim=1).cpu().numpy()

        return play_games(envs, epsilon_greedy(greedy, epsilon, envs.action_space.n, seed), eval_episodes, video_folder)

    memory = {"state": q_network.initial_state(1, device), "done": torch.zeros(1, device=device), "ended": [False]}
    explore = epsilon_greedy(lambda obs: memory["greedy"], epsilon, envs.action_space.n, seed)

    def act(obs):  # the LSTM sees every observation, also where epsilon picks a random action
        with torch.no_grad():
            q_values, memory["state"] = q_network(torch.as_tensor(obs, device=device), memory["state"], memory["done"])
        memory["greedy"] = q_values.argmax(dim=1).cpu().numpy()
        return explore(obs)

    def episode_ended(mask):  # EnvPool's reset step follows an episode's end: the observation after it starts anew
        memory["done"], memory["ended"] = torch.as_tensor(memory["ended"], dtype=torch.float32, device=device), mask

    return play_games(envs, act, eval_episodes, video_folder, episode_ended)
