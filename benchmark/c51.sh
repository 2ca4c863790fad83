#!/usr/bin/env bash
# c51.py on the classic-control envs of the published benchmark, 3 seeds, 500,000 steps each.
#   benchmark/c51.sh                  # locally, 2 runs at a time (finished runs are skipped, interrupted ones resumed)
#   benchmark/c51.sh --workers 0      # print the commands only
#   benchmark/c51.sh --workers 6 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template --slurm-gpus-per-task 0
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names c51 --env-ids CartPole-v1 Acrobot-v1 --output benchmark/results/c51
set -euo pipefail
cd "$(dirname "$0")/.."
uv run python -m cleanrl_utils.benchmark --env-ids CartPole-v1 Acrobot-v1 --command "python cleanrl/c51.py --config benchmark/configs/c51.yaml" --num-seeds 3 --workers 2 "$@"
