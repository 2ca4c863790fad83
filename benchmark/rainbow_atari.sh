#!/usr/bin/env bash
# rainbow_atari.py on the Atari games of the published benchmark, 3 seeds, 10,000,000 steps each: a GPU job (dqn_atari.py
# takes about 34 h for 10M steps on a 2-core CPU, see benchmark/results/speed_atari.md).
#   benchmark/rainbow_atari.sh --workers 0      # print the commands only
#   benchmark/rainbow_atari.sh --workers 9 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template
#   benchmark/rainbow_atari.sh --env-ids BreakoutNoFrameskip-v4 --num-seeds 1 --command "python cleanrl/rainbow_atari.py --total-timesteps 500000"
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names rainbow_atari --env-ids PongNoFrameskip-v4 BeamRiderNoFrameskip-v4 BreakoutNoFrameskip-v4 --output benchmark/results/rainbow_atari
set -euo pipefail
cd "$(dirname "$0")/.."
uv run python -m cleanrl_utils.benchmark --env-ids PongNoFrameskip-v4 BeamRiderNoFrameskip-v4 BreakoutNoFrameskip-v4 --command "python cleanrl/rainbow_atari.py --config benchmark/configs/rainbow_atari.yaml" --num-seeds 3 --workers 1 "$@"
