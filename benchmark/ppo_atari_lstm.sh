#!/usr/bin/env bash
# ppo_atari_lstm.py on the Atari games of the published benchmark, 3 seeds, 10,000,000 steps each (a GPU job: about
# 11 h for ppo_atari.py and 34 h for dqn_atari.py on a 2-core CPU, see benchmark/results/speed_atari.md).
#   benchmark/ppo_atari_lstm.sh --workers 0      # print the commands only
#   benchmark/ppo_atari_lstm.sh --workers 9 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template
#   benchmark/ppo_atari_lstm.sh --env-ids BreakoutNoFrameskip-v4 --num-seeds 1 --command "python cleanrl/ppo_atari_lstm.py --total-timesteps 500000"
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names ppo_atari_lstm --env-ids PongNoFrameskip-v4 BeamRiderNoFrameskip-v4 BreakoutNoFrameskip-v4 --output benchmark/results/ppo_atari_lstm
set -euo pipefail
cd "$(dirname "$0")/.."
uv run python -m cleanrl_utils.benchmark --env-ids PongNoFrameskip-v4 BeamRiderNoFrameskip-v4 BreakoutNoFrameskip-v4 --command "python cleanrl/ppo_atari_lstm.py --config benchmark/configs/ppo_atari_lstm.yaml" --num-seeds 3 --workers 1 "$@"
