#!/usr/bin/env bash
# td3_continuous_action_jax.py on the MuJoCo envs of the published benchmark (tag pr-424), 3 seeds, 1,000,000 steps each.
#   benchmark/td3_continuous_action_jax.sh                  # locally, 2 runs at a time (finished runs are skipped, interrupted ones resumed)
#   benchmark/td3_continuous_action_jax.sh --workers 0      # print the commands only
#   benchmark/td3_continuous_action_jax.sh --env-ids HalfCheetah-v4 Hopper-v4 --command "python cleanrl/td3_continuous_action_jax.py --total-timesteps 300000"
#   benchmark/td3_continuous_action_jax.sh --workers 18 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names td3_continuous_action_jax --env-ids HalfCheetah-v4 Walker2d-v4 Hopper-v4 InvertedPendulum-v4 Humanoid-v4 Pusher-v4 --output benchmark/results/td3_continuous_action_jax
set -euo pipefail
cd "$(dirname "$0")/.."
uv run python -m cleanrl_utils.benchmark --env-ids HalfCheetah-v4 Walker2d-v4 Hopper-v4 InvertedPendulum-v4 Humanoid-v4 Pusher-v4 --command "python cleanrl/td3_continuous_action_jax.py --config benchmark/configs/td3_continuous_action_jax.yaml" --num-seeds 3 --workers 2 "$@"
