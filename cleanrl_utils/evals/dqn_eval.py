"""Evaluate a model saved by `cleanrl/dqn.py --save-model`: play episodes epsilon-greedily, return their scores."""

from collections.abc import Callable

import gymnasium as gym
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
    epsilon: float = 0.05,
    capture_video: bool = True,
    seed: int = 0,
) -> list[float]:
    """Returns the undiscounted return of each of `eval_episodes` full episodes. A small epsilon (0.05, as the
    DQN papers evaluate) keeps a deterministic greedy policy from looping forever in one state."""
    envs = gym.vector.SyncVectorEnv(
        [make_env(env_id, 0, capture_video, run_name)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    model = Model(envs).to(device)
    model.load_state_dict(torch.load(model_path, map_location=device))
    model.eval()
    rng = np.random.default_rng(seed)

    obs, _ = envs.reset(seed=seed)
    episodic_returns = []
    while len(episodic_returns) < eval_episodes:
        if rng.random() < epsilon:
            actions = rng.integers(envs.single_action_space.n, size=envs.num_envs)
        else:
            with torch.no_grad():
                q_values = model(torch.as_tensor(obs, dtype=torch.float32, device=device))
            actions = q_values.argmax(dim=1).cpu().numpy()
        obs, _, _, _, infos = envs.step(actions)
        if "final_info" in infos:
            for i in np.flatnonzero(infos["final_info"]["_episode"]):
                episodic_returns.append(float(infos["final_info"]["episode"]["r"][i]))
    envs.close()
    return episodic_returns
