#!/usr/bin/env bash
# ppo.py against Stable-Baselines3's PPO, side by side, identical hyperparameters (see speed_vs_sb3.py).
#   benchmark/speed_ppo.sh                       # 3 seeds x 500,000 steps each, about 7 minutes on 2 cores
#   benchmark/speed_ppo.sh --seeds 1 --total-timesteps 100000 --output benchmark/results/speed_ppo.md
set -euo pipefail
cd "$(dirname "$0")/.."
exec uv run --group benchmark python benchmark/speed_vs_sb3.py --algo ppo "$@"
