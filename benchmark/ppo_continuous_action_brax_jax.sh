#!/usr/bin/env bash
# ppo_continuous_action_brax_jax.py on Brax's locomotion envs (MuJoCo MJX physics), 3 seeds, 30,000,000 steps each at
# 4096 envs: a GPU job (jax[cuda]; on a CPU MJX steps a few hundred env steps a second, see
# docs/algorithms/ppo_continuous_action_brax_jax.md and benchmark/speed_brax.py).
#   benchmark/ppo_continuous_action_brax_jax.sh --workers 0      # print the commands only
#   benchmark/ppo_continuous_action_brax_jax.sh --workers 9 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template
#   benchmark/ppo_continuous_action_brax_jax.sh --env-ids inverted_pendulum --num-seeds 1 --command "python cleanrl/ppo_continuous_action_brax_jax.py --num-envs 64 --total-timesteps 100000"
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names ppo_continuous_action_brax_jax --env-ids ant halfcheetah hopper --output benchmark/results/ppo_continuous_action_brax_jax
set -euo pipefail
cd "$(dirname "$0")/.."
uv run python -m cleanrl_utils.benchmark --env-ids ant halfcheetah hopper --command "python cleanrl/ppo_continuous_action_brax_jax.py --config benchmark/configs/ppo_continuous_action_brax_jax.yaml" --num-seeds 3 --workers 1 "$@"
