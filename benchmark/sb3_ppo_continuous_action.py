"""The peer of cleanrl/ppo_continuous_action.py in benchmark/speed_vs_sb3.py: Stable-Baselines3's PPO with the
script's default hyperparameters, observation and reward normalization (VecNormalize, clipped at 10 as the script)."""

import argparse
import json

import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

parser = argparse.ArgumentParser()
parser.add_argument("--env-id", default="HalfCheetah-v4")
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--total-timesteps", type=int, default=1000000)
args = parser.parse_args()

num_steps, num_minibatches = 2048, 32
# the episode returns SB3 reports come from the Monitor under VecNormalize: the real, unnormalized rewards
envs = VecNormalize(make_vec_env(args.env_id, n_envs=1, seed=args.seed), gamma=0.99, clip_obs=10.0, clip_reward=10.0)
model = PPO(
    "MlpPolicy",
    envs,
    learning_rate=lambda progress_remaining: 3e-4 * progress_remaining,  # --anneal-lr
    n_steps=num_steps,
    batch_size=num_steps // num_minibatches,
    n_epochs=10,
    gamma=0.99,
    gae_lambda=0.95,
    clip_range=0.2,
    clip_range_vf=0.2,  # --clip-vloss
    normalize_advantage=True,
    ent_coef=0.0,
    vf_coef=0.5,
    max_grad_norm=0.5,
    # separate 64x64 tanh actor and critic, state-independent log std from 0, orthogonal init: as the script
    policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]}, "activation_fn": torch.nn.Tanh},
    seed=args.seed,
    device="cpu",
    verbose=0,
)
model.learn(total_timesteps=args.total_timesteps)
returns = [info["r"] for info in model.ep_info_buffer]  # the last 100 episodes
print(json.dumps({"final_return": float(np.mean(returns)), "episodes": len(returns)}))
