#!/usr/bin/env bash
# ppo_trxl.py on MiniGrid's memory tasks and the built-in ProofOfMemory-v0, 3 seeds (MiniGrid: a GPU job; the
# transformer over 84x84 frames is slow on a CPU). MiniGrid needs the minigrid extra (in the dev group).
#   benchmark/ppo_trxl.sh --workers 0      # print the commands only
#   benchmark/ppo_trxl.sh --workers 6 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template
#   benchmark/ppo_trxl.sh --env-ids ProofOfMemory-v0 --num-seeds 1
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names ppo_trxl --env-ids ProofOfMemory-v0 MiniGrid-MemoryS9-v0 MiniGrid-MemoryS11-v0 MiniGrid-MemoryS13-v0 --output benchmark/results/ppo_trxl
set -euo pipefail
cd "$(dirname "$0")/.."
uv run python -m cleanrl_utils.benchmark --env-ids ProofOfMemory-v0 MiniGrid-MemoryS9-v0 MiniGrid-MemoryS11-v0 MiniGrid-MemoryS13-v0 --command "python cleanrl/ppo_trxl.py --config benchmark/configs/ppo_trxl.yaml" --num-seeds 3 --workers 1 "$@"
