#!/usr/bin/env bash
# sac_atari.py on the Atari games of the published benchmark, 3 seeds, 5,000,000 steps each (the script's default): a GPU job (dqn_atari.py
# takes about 34 h for 10M steps on a 2-core CPU, see benchmark/results/speed_atari.md).
#   benchmark/sac_atari.sh --workers 0      # print the commands only
#   benchmark/sac_atari.sh --workers 9 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template
#   benchmark/sac_atari.sh --env-ids BreakoutNoFrameskip-v4 --num-seeds 1 --command "python cleanrl/sac_atari.py --total-timesteps 500000"
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names sac_atari --env-ids PongNoFrameskip-v4 BeamRiderNoFrameskip-v4 BreakoutNoFrameskip-v4 --output benchmark/results/sac_atari
set -euo pipefail
cd "$(dirname "$0")/.."
uv run python -m cleanrl_utils.benchmark --env-ids PongNoFrameskip-v4 BeamRiderNoFrameskip-v4 BreakoutNoFrameskip-v4 --command "python cleanrl/sac_atari.py --config benchmark/configs/sac_atari.yaml" --num-seeds 3 --workers 1 "$@"
