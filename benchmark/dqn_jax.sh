#!/usr/bin/env bash
# dqn_jax.py on the envs of dqn.py's published benchmark, 3 seeds, 500,000 steps each.
#   benchmark/dqn_jax.sh                  # locally, 2 runs at a time (finished runs are skipped, interrupted ones resumed)
#   benchmark/dqn_jax.sh --workers 0      # print the commands only
#   benchmark/dqn_jax.sh --workers 6 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template --slurm-gpus-per-task 0
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names dqn_jax --env-ids CartPole-v1 Acrobot-v1 --output benchmark/results/dqn_jax
set -euo pipefail
cd "$(dirname "$0")/.."
uv run python -m cleanrl_utils.benchmark --env-ids CartPole-v1 Acrobot-v1 --command "python cleanrl/dqn_jax.py --config benchmark/configs/dqn_jax.yaml" --num-seeds 3 --workers 2 "$@"
