#!/usr/bin/env bash
# ppo_pettingzoo_ma_atari.py (one policy for every player) on three of PettingZoo's multi-agent Atari games, 3 seeds,
# 20,000,000 player steps each (a GPU job; upstream CleanRL's budget).
#   benchmark/ppo_pettingzoo_ma_atari.sh --workers 0      # print the commands only
#   benchmark/ppo_pettingzoo_ma_atari.sh --workers 9 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template
#   benchmark/ppo_pettingzoo_ma_atari.sh --env-ids pong_v3 --num-seeds 1 --command "python cleanrl/ppo_pettingzoo_ma_atari.py --total-timesteps 500000"
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names ppo_pettingzoo_ma_atari --env-ids pong_v3 surround_v2 tennis_v3 --output benchmark/results/ppo_pettingzoo_ma_atari
set -euo pipefail
cd "$(dirname "$0")/.."
uv run python -m cleanrl_utils.benchmark --env-ids pong_v3 surround_v2 tennis_v3 --command "python cleanrl/ppo_pettingzoo_ma_atari.py --config benchmark/configs/ppo_pettingzoo_ma_atari.yaml" --num-seeds 3 --workers 1 "$@"
