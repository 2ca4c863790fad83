"""The peer of cleanrl/dqn.py in benchmark/speed_vs_sb3.py: Stable-Baselines3's DQN with dqn.py's default hyperparameters.

SB3's DQN.train hard-codes the Huber (smooth L1) TD loss; dqn.py, like the published CleanRL DQN, uses the squared
error. With the Huber loss and these hyperparameters SB3's Q-values diverge (measured on seed 1: about 3e3 at step
40,000 and 1e6 at step 200,000, the greedy policy then pushes one way and scores 9.5), so the pair would compare two
algorithms. The loss is swapped below, at the one name SB3's dqn module calls it by; the rest is SB3's own code.
SB3 also always calls gradient clipping: here with an infinite norm, so nothing is clipped, as in dqn.py.
"""

import argparse
import json
import types

import numpy as np
import stable_baselines3.dqn.dqn
import torch.nn.functional
from stable_baselines3 import DQN
from stable_baselines3.common.env_util import make_vec_env

stable_baselines3.dqn.dqn.F = types.SimpleNamespace(smooth_l1_loss=torch.nn.functional.mse_loss)  # see the docstring

parser = argparse.ArgumentParser()
parser.add_argument("--env-id", default="CartPole-v1")
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--total-timesteps", type=int, default=500000)
args = parser.parse_args()

envs = make_vec_env(args.env_id, n_envs=1, seed=args.seed)
model = DQN(
    "MlpPolicy",
    envs,
    learning_rate=2.5e-4,
    buffer_size=10000,
    learning_starts=10000,
    batch_size=128,
    tau=1.0,
    gamma=0.99,
    train_freq=10,
    gradient_steps=1,
    target_update_interval=500,
    exploration_fraction=0.5,
    exploration_initial_eps=1.0,
    exploration_final_eps=0.05,
    max_grad_norm=float("inf"),
    policy_kwargs={"net_arch": [120, 84]},  # dqn.py's Q-network
    seed=args.seed,
    device="cpu",
    verbose=0,
)
model.learn(total_timesteps=args.total_timesteps)
returns = [info["r"] for info in model.ep_info_buffer]  # the last 100 episodes
print(json.dumps({"final_return": float(np.mean(returns)), "episodes": len(returns)}))
