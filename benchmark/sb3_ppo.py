"""The peer of cleanrl/ppo.py in benchmark/speed_vs_sb3.py: Stable-Baselines3's PPO with ppo.py's default hyperparameters."""

import argparse
import json

import numpy as np
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

parser = argparse.ArgumentParser()
parser.add_argument("--env-id", default="CartPole-v1")
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--total-timesteps", type=int, default=500000)
args = parser.parse_args()

num_envs, num_steps, num_minibatches = 4, 128, 4
envs = make_vec_env(args.env_id, n_envs=num_envs, seed=args.seed)  # DummyVecEnv: sequential, like ppo.py's SyncVectorEnv
model = PPO(
    "MlpPolicy",  # separate 64x64 tanh actor and critic, orthogonal init, Adam eps 1e-5: as ppo.py
    envs,
    learning_rate=lambda progress_remaining: 2.5e-4 * progress_remaining,  # --anneal-lr
    n_steps=num_steps,
    batch_size=num_envs * num_steps // num_minibatches,
    n_epochs=4,
    gamma=0.99,
    gae_lambda=0.95,
    clip_range=0.2,
    clip_range_vf=0.2,  # --clip-vloss
    normalize_advantage=True,
    ent_coef=0.01,
    vf_coef=0.5,
    max_grad_norm=0.5,
    seed=args.seed,
    device="cpu",
    verbose=0,
)
model.learn(total_timesteps=args.total_timesteps)
returns = [info["r"] for info in model.ep_info_buffer]  # the last 100 episodes
print(json.dumps({"final_return": float(np.mean(returns)), "episodes": len(returns)}))
