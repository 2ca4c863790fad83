#!/usr/bin/env bash
# dqn.py against Stable-Baselines3's DQN, side by side, identical hyperparameters (see speed_vs_sb3.py).
#   benchmark/speed_dqn.sh                       # 3 seeds x 500,000 steps each
#   benchmark/speed_dqn.sh --seeds 1 --total-timesteps 100000 --output benchmark/results/speed_dqn.md
set -euo pipefail
cd "$(dirname "$0")/.."
exec uv run --group benchmark python benchmark/speed_vs_sb3.py --algo dqn "$@"
