#!/usr/bin/env bash
# ppg_procgen.py (Phasic Policy Gradient, IMPALA CNN) on three of Procgen's games, 3 seeds, 25,000,000 steps each (the
# easy distribution, all levels; a GPU job with about 7 GB of host memory for a phase's frames; upstream CleanRL's
# budget). It runs in Procgen's own environment (numpy < 2: docs/get-started.md), made from the lock file.
#   benchmark/ppg_procgen.sh --workers 0      # print the commands only
#   benchmark/ppg_procgen.sh --workers 9 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template
#   benchmark/ppg_procgen.sh --env-ids starpilot --num-seeds 1 --command "python cleanrl/ppg_procgen.py --total-timesteps 1048576"
# Checkpoints every phase (64 x 256 x 32 steps), after its auxiliary phase: one taken mid-phase holds the phase's frames
# so far (up to 6.4 GB). Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names ppg_procgen --env-ids starpilot bigfish bossfight --output benchmark/results/ppg_procgen
set -euo pipefail
cd "$(dirname "$0")/.."
export UV_PROJECT_ENVIRONMENT=.venv-procgen
uv run --no-dev --extra procgen python -m cleanrl_utils.benchmark --env-ids starpilot bigfish bossfight --command "python cleanrl/ppg_procgen.py --config benchmark/configs/ppg_procgen.yaml" --num-seeds 3 --workers 1 --checkpoint-interval 524288 "$@"
