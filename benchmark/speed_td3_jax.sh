#!/usr/bin/env bash
# cleanrl's td3_jax script against its Stable-Baselines3 twin, side by side, identical hyperparameters (see speed_vs_sb3.py).
#   benchmark/speed_td3_jax.sh                       # 3 seeds, the budget in speed_vs_sb3.py's ALGOS
#   benchmark/speed_td3_jax.sh --seeds 1 --total-timesteps 100000 --output benchmark/results/speed_td3_jax.md
set -euo pipefail
cd "$(dirname "$0")/.."
exec uv run --group benchmark python benchmark/speed_vs_sb3.py --algo td3_jax "$@"
