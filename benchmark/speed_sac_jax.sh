#!/usr/bin/env bash
# cleanrl's sac_jax script against its Stable-Baselines3 twin, side by side, identical hyperparameters (see speed_vs_sb3.py).
#   benchmark/speed_sac_jax.sh                       # 3 seeds, the budget in speed_vs_sb3.py's ALGOS
#   benchmark/speed_sac_jax.sh --seeds 1 --total-timesteps 100000 --output benchmark/results/speed_sac_jax.md
set -euo pipefail
cd "$(dirname "$0")/.."
exec uv run --group benchmark python benchmark/speed_vs_sb3.py --algo sac_jax "$@"
