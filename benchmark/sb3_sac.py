"""The peer of cleanrl/sac_continuous_action.py in benchmark/speed_vs_sb3.py: Stable-Baselines3's SAC with the script's
default hyperparameters.

SB3 has one learning rate for the actor, the critics and the temperature, and updates the actor at every step; the
benchmark runs sac_continuous_action.py with `--q-lr 3e-4 --policy-frequency 1` to match (speed_vs_sb3.py says so).
"""

import argparse
import json

import numpy as np
from stable_baselines3 import SAC
from stable_baselines3.common.env_util import make_vec_env

parser = argparse.ArgumentParser()
parser.add_argument("--env-id", default="HalfCheetah-v4")
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--total-timesteps", type=int, default=1000000)
parser.add_argument("--batch-size", type=int, default=256)
args = parser.parse_args()

envs = make_vec_env(args.env_id, n_envs=1, seed=args.seed)
model = SAC(
    "MlpPolicy",
    envs,
    learning_rate=3e-4,
    buffer_size=1000000,
    learning_starts=5000,
    batch_size=args.batch_size,
    tau=0.005,
    gamma=0.99,
    train_freq=1,
    gradient_steps=1,
    ent_coef="auto",  # --autotune, from alpha 1 (log alpha 0) as the script, towards entropy -dim(A)
    target_update_interval=1,
    policy_kwargs={"net_arch": [256, 256]},
    seed=args.seed,
    device="cpu",
    verbose=0,
)
model.learn(total_timesteps=args.total_timesteps)
returns = [info["r"] for info in model.ep_info_buffer]  # the last 100 episodes
print(json.dumps({"final_return": float(np.mean(returns)), "episodes": len(returns)}))
