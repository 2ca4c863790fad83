#!/usr/bin/env bash
# ppo_atari_envpool_xla_jax.py on the Atari games of the published benchmark (EnvPool's v5 ids: no sticky actions, as the v4 NoFrameskip
# ones), 3 seeds, 10,000,000 steps each: a GPU job (jax[cuda]; on a CPU XLA's update is slower than torch's, see
# docs/algorithms/ppo_atari_envpool_xla_jax.md).
#   benchmark/ppo_atari_envpool_xla_jax.sh --workers 0      # print the commands only
#   benchmark/ppo_atari_envpool_xla_jax.sh --workers 9 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template
#   benchmark/ppo_atari_envpool_xla_jax.sh --env-ids Breakout-v5 --num-seeds 1 --command "python cleanrl/ppo_atari_envpool_xla_jax.py --total-timesteps 500000"
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names ppo_atari_envpool_xla_jax --env-ids Pong-v5 BeamRider-v5 Breakout-v5 --output benchmark/results/ppo_atari_envpool_xla_jax
set -euo pipefail
cd "$(dirname "$0")/.."
uv run python -m cleanrl_utils.benchmark --env-ids Pong-v5 BeamRider-v5 Breakout-v5 --command "python cleanrl/ppo_atari_envpool_xla_jax.py --config benchmark/configs/ppo_atari_envpool_xla_jax.yaml" --num-seeds 3 --workers 1 "$@"
