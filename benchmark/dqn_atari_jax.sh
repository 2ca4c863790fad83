#!/usr/bin/env bash
# dqn_atari_jax.py on the Atari games of the published benchmark, 3 seeds, 10,000,000 steps each: a GPU job (dqn_atari.py
# takes about 34 h for 10M steps on a 2-core CPU, see benchmark/results/speed_atari.md).
#   benchmark/dqn_atari_jax.sh --workers 0      # print the commands only
#   benchmark/dqn_atari_jax.sh --workers 9 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template
#   benchmark/dqn_atari_jax.sh --env-ids BreakoutNoFrameskip-v4 --num-seeds 1 --command "python cleanrl/dqn_atari_jax.py --total-timesteps 500000"
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names dqn_atari_jax --env-ids PongNoFrameskip-v4 BeamRiderNoFrameskip-v4 BreakoutNoFrameskip-v4 --output benchmark/results/dqn_atari_jax
set -euo pipefail
cd "$(dirname "$0")/.."
uv run python -m cleanrl_utils.benchmark --env-ids PongNoFrameskip-v4 BeamRiderNoFrameskip-v4 BreakoutNoFrameskip-v4 --command "python cleanrl/dqn_atari_jax.py --config benchmark/configs/dqn_atari_jax.yaml" --num-seeds 3 --workers 1 "$@"
