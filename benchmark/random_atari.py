"""The score of uniformly random play through the Atari scripts' own preprocessing (ppo_atari.py's make_env): the
baseline a learning curve must rise above. The score is the whole game's, over all lives, unclipped.

    uv run python benchmark/random_atari.py --env-id BreakoutNoFrameskip-v4 --games 30
"""

import argparse
import importlib.util
import pathlib

import gymnasium as gym
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--env-id", default="BreakoutNoFrameskip-v4")
parser.add_argument("--games", type=int, default=30)
parser.add_argument("--num-envs", type=int, default=8)
parser.add_argument("--seed", type=int, default=1)
args = parser.parse_args()

script = pathlib.Path(__file__).resolve().parents[1] / "cleanrl" / "ppo_atari.py"
spec = importlib.util.spec_from_file_location("ppo_atari", script)
ppo_atari = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ppo_atari)

envs = gym.vector.SyncVectorEnv(
    [ppo_atari.make_env(args.env_id, i, False, "random") for i in range(args.num_envs)],
    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
)
envs.reset(seed=args.seed)
envs.action_space.seed(args.seed)
scores, lengths = [], []
while len(scores) < args.games:
    _, _, _, _, infos = envs.step(envs.action_space.sample())
    if "final_info" in infos:
        finished = infos["final_info"].get("_episode", [])
        for i in np.flatnonzero(finished):
            scores.append(float(infos["final_info"]["episode"]["r"][i]))
            lengths.append(int(infos["final_info"]["episode"]["l"][i]))
envs.close()
scores = np.array(scores[: args.games])
print(
    f"{args.env_id}: random play, {len(scores)} games, score {scores.mean():.2f} +- {scores.std():.2f} "
    f"(min {scores.min():.0f}, max {scores.max():.0f}), {np.mean(lengths[: args.games]):.0f} frames per game"
)
