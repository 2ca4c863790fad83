"""Evaluate a model saved by `cleanrl/ppo_trxl.py --save-model`: play episodes with the trained policy's most
probable action, its Transformer-XL memory carried from step to step as in training; return their scores."""

from collections.abc import Callable
from types import SimpleNamespace

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
    """Returns the undiscounted return of each of `eval_episodes` full episodes, acting greedily. The memory is the
    layer inputs of the last `--trxl-memory-length` steps and the step's index in its episode; where an episode ends,
    the index goes back to 0 and the attention mask hides everything before, as in training."""
    envs = make_eval_envs(make_env, env_id, capture_video, run_name)
    saved = torch.load(model_path, map_location=device)
    args = SimpleNamespace(**saved["args"])  # the sizes of the network the model was trained with
    agent = Model(envs, args).to(device)
    agent.load_state_dict(saved["model_weights"])
    agent.eval()
    shape = (envs.num_envs, args.trxl_memory_length, args.trxl_num_layers, args.trxl_dim)
    memory = {"window": torch.zeros(shape, device=device), "episode_step": torch.zeros(envs.num_envs, dtype=torch.long)}

    def act(obs):
        episode_step = memory["episode_step"].to(device)
        with torch.no_grad():
            hidden, layer_inputs = agent.get_hidden(torch.as_tensor(obs, device=device), memory["window"], episode_step)
        memory["window"] = torch.cat([memory["window"][:, 1:], layer_inputs.unsqueeze(1)], dim=1)  # this step joins
        memory["episode_step"] += 1
        return agent.actor(hidden).argmax(dim=-1).cpu().numpy()

    def episode_ended(mask):
        memory["episode_step"][torch.as_tensor(mask)] = 0

    return play_episodes(envs, act, eval_episodes, seed, episode_ended)
