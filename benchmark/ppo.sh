#!/usr/bin/env bash
# ppo.py on the classic-control envs of the published benchmark (tag pr-424), 3 seeds, 500,000 steps each.
#   benchmark/ppo.sh                  # locally, 2 runs at a time (finished runs are skipped, interrupted ones resumed)
#   benchmark/ppo.sh --workers 0      # print the commands only
#   benchmark/ppo.sh --workers 6 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template --slurm-gpus-per-task 0
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names ppo --env-ids CartPole-v1 Acrobot-v1 MountainCar-v0 --output benchmark/results/ppo
set -euo pipefail
cd "$(dirname "$0")/.."
uv run python -m cleanrl_utils.benchmark --env-ids CartPole-v1 Acrobot-v1 MountainCar-v0 --command "python cleanrl/ppo.py --config benchmark/configs/ppo.yaml" --num-seeds 3 --workers 2 "$@"
