#!/usr/bin/env bash
# pqn_atari_envpool_lstm.py on the Atari games of the published benchmark (EnvPool's ids), 3 seeds, 10,000,000 steps
# each (a GPU job: about 12 h a run on the 2-core CPU machine at 235 steps/s; docs/algorithms/pqn_atari_envpool_lstm.md).
#   benchmark/pqn_atari_envpool_lstm.sh --workers 0      # print the commands only
#   benchmark/pqn_atari_envpool_lstm.sh --workers 9 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template
#   benchmark/pqn_atari_envpool_lstm.sh --env-ids Breakout-v5 --num-seeds 1 --command "python cleanrl/pqn_atari_envpool_lstm.py --total-timesteps 500000"
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names pqn_atari_envpool_lstm --env-ids Pong-v5 BeamRider-v5 Breakout-v5 --output benchmark/results/pqn_atari_envpool_lstm
set -euo pipefail
cd "$(dirname "$0")/.."
uv run python -m cleanrl_utils.benchmark --env-ids Pong-v5 BeamRider-v5 Breakout-v5 --command "python cleanrl/pqn_atari_envpool_lstm.py --config benchmark/configs/pqn_atari_envpool_lstm.yaml" --num-seeds 3 --workers 1 "$@"
