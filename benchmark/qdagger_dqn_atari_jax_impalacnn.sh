#!/usr/bin/env bash
# qdagger_dqn_atari_jax_impalacnn.py on the Atari games of the published benchmark, 3 seeds, 10,000,000 online steps each
# (after 500,000 teacher steps and 500,000 offline updates): a GPU job (the IMPALA CNN's updates are slow on a CPU). Each
# game's teacher is the dqn_atari_jax.py model its section of the config names (upstream CleanRL's, from the Hub).
#   benchmark/qdagger_dqn_atari_jax_impalacnn.sh --workers 0      # print the commands only
#   benchmark/qdagger_dqn_atari_jax_impalacnn.sh --workers 9 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template
#   benchmark/qdagger_dqn_atari_jax_impalacnn.sh --env-ids BreakoutNoFrameskip-v4 --num-seeds 1 --command "python cleanrl/qdagger_dqn_atari_jax_impalacnn.py --total-timesteps 500000"
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names qdagger_dqn_atari_jax_impalacnn --env-ids PongNoFrameskip-v4 BeamRiderNoFrameskip-v4 BreakoutNoFrameskip-v4 --output benchmark/results/qdagger_dqn_atari_jax_impalacnn
set -euo pipefail
cd "$(dirname "$0")/.."
uv run python -m cleanrl_utils.benchmark --env-ids PongNoFrameskip-v4 BeamRiderNoFrameskip-v4 BreakoutNoFrameskip-v4 --command "python cleanrl/qdagger_dqn_atari_jax_impalacnn.py --config benchmark/configs/qdagger_dqn_atari_jax_impalacnn.yaml" --num-seeds 3 --workers 1 "$@"
