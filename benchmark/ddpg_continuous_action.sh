#!/usr/bin/env bash
# ddpg_continuous_action.py on the MuJoCo envs of the published benchmark (tag pr-424), 3 seeds, 1,000,000 steps each.
#   benchmark/ddpg_continuous_action.sh                  # locally, 2 runs at a time (finished runs are skipped, interrupted ones resumed)
#   benchmark/ddpg_continuous_action.sh --workers 0      # print the commands only
#   benchmark/ddpg_continuous_action.sh --env-ids HalfCheetah-v4 Hopper-v4 --command "python cleanrl/ddpg_continuous_action.py --total-timesteps 300000"
#   benchmark/ddpg_continuous_action.sh --workers 18 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names ddpg_continuous_action --env-ids HalfCheetah-v4 Walker2d-v4 Hopper-v4 InvertedPendulum-v4 Humanoid-v4 Pusher-v4 --output benchmark/results/ddpg_continuous_action
set -euo pipefail
cd "$(dirname "$0")/.."
uv run python -m cleanrl_utils.benchmark --env-ids HalfCheetah-v4 Walker2d-v4 Hopper-v4 InvertedPendulum-v4 Humanoid-v4 Pusher-v4 --command "python cleanrl/ddpg_continuous_action.py --config benchmark/configs/ddpg_continuous_action.yaml" --num-seeds 3 --workers 2 "$@"
