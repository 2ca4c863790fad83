"""The peer of cleanrl/td3_continuous_action.py in benchmark/speed_vs_sb3.py: Stable-Baselines3's TD3 with the script's
default hyperparameters (its 256x256 networks instead of SB3's default 400x300)."""

import argparse
import json

import numpy as np
from stable_baselines3 import TD3
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.noise import NormalActionNoise

parser = argparse.ArgumentParser()
parser.add_argument("--env-id", default="HalfCheetah-v4")
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--total-timesteps", type=int, default=1000000)
parser.add_argument("--batch-size", type=int, default=256)
args = parser.parse_args()

envs = make_vec_env(args.env_id, n_envs=1, seed=args.seed)
action_dim = envs.action_space.shape[0]
# SB3 acts in [-1, 1] and rescales to the bounds: noise 0.1 there is the script's 0.1 * action_scale
action_noise = NormalActionNoise(mean=np.zeros(action_dim), sigma=0.1 * np.ones(action_dim))
model = TD3(
    "MlpPolicy",
    envs,
    learning_rate=3e-4,
    buffer_size=1000000,
    learning_starts=25000,
    batch_size=args.batch_size,
    tau=0.005,
    gamma=0.99,
    train_freq=1,
    gradient_steps=1,
    action_noise=action_noise,
    policy_delay=2,
    target_policy_noise=0.2,
    target_noise_clip=0.5,
    policy_kwargs={"net_arch": [256, 256]},
    seed=args.seed,
    device="cpu",
    verbose=0,
)
model.learn(total_timesteps=args.total_timesteps)
returns = [info["r"] for info in model.ep_info_buffer]  # the last 100 episodes
print(json.dumps({"final_return": float(np.mean(returns)), "episodes": len(returns)}))
