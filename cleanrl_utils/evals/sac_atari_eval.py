"""Evaluate a model saved by `cleanrl/sac_atari.py --save-model`: play whole games with actions sampled from the saved
categorical policy, return their scores.

Sampled, not greedy: SAC trains a stochastic maximum-entropy policy and this is the policy it learned (the argmax of a
policy that is still spread over actions can loop forever, e.g. never serve in Breakout). The samples come from a
torch generator seeded with `seed`, so the same seed replays the same games."""

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
    """Returns the undiscounted score of each of `eval_episodes` whole games (all lives), each action drawn from the
    saved actor's softmax over its logits."""
    envs = make_eval_envs(make_env, env_id, capture_video, run_name)
    actor = Model(envs).to(device)
    actor.load_state_dict(actor_weights(torch.load(model_path, map_location=device)))
    actor.eval()
    generator = torch.Generator(device=device).manual_seed(seed)

    def act(obs):
        with torch.no_grad():
            logits = actor(torch.as_tensor(obs, dtype=torch.float32, device=device))
            actions = torch.multinomial(torch.softmax(logits, dim=1), 1, generator=generator).squeeze(1)
        return actions.cpu().numpy()

    return play_episodes(envs, act, eval_episodes, seed)
