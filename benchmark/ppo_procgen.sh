#!/usr/bin/env bash
# ppo_procgen.py (PPO with the IMPALA CNN) on three Procgen games (easy distribution, all levels), 3 seeds,
# 25,000,000 steps each (a GPU job; upstream CleanRL's budget). Procgen needs numpy < 2: the sweep runs in its own
# environment, .venv-procgen (docs/get-started.md).
#   benchmark/ppo_procgen.sh --workers 0      # print the commands only
#   benchmark/ppo_procgen.sh --workers 9 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template
#   benchmark/ppo_procgen.sh --env-ids starpilot --num-seeds 1 --command "python cleanrl/ppo_procgen.py --total-timesteps 1000000"
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names ppo_procgen --env-ids starpilot bigfish bossfight --output benchmark/results/ppo_procgen
set -euo pipefail
cd "$(dirname "$0")/.."
export UV_PROJECT_ENVIRONMENT=.venv-procgen
uv run --no-dev --extra procgen python -m cleanrl_utils.benchmark --env-ids starpilot bigfish bossfight --command "python cleanrl/ppo_procgen.py --config benchmark/configs/ppo_procgen.yaml" --num-seeds 3 --workers 1 "$@"
