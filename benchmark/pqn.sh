#!/usr/bin/env bash
# pqn.py on the classic-control envs dqn.py and c51.py are benchmarked on, 3 seeds, 500,000 steps each.
#   benchmark/pqn.sh                  # locally, 2 runs at a time (finished runs are skipped, interrupted ones resumed)
#   benchmark/pqn.sh --workers 0      # print the commands only
#   benchmark/pqn.sh --workers 6 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template --slurm-gpus-per-task 0
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names pqn --env-ids CartPole-v1 Acrobot-v1 --output benchmark/results/pqn
set -euo pipefail
cd "$(dirname "$0")/.."
uv run python -m cleanrl_utils.benchmark --env-ids CartPole-v1 Acrobot-v1 --command "python cleanrl/pqn.py --config benchmark/configs/pqn.yaml" --num-seeds 3 --workers 2 "$@"
