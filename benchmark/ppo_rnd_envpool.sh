#!/usr/bin/env bash
# ppo_rnd_envpool.py on hard-exploration Atari games of the RND paper (Burda et al. 2018), 3 seeds each, upstream
# CleanRL's budget of 2,000,000,000 agent steps (8 billion frames; upstream's own sweep, benchmark/rnd.sh, ran
# MontezumaRevenge-v5 alone, 1 seed): a multi-day job on a GPU with many CPU cores for EnvPool's 128 games.
#   benchmark/ppo_rnd_envpool.sh --workers 0      # print the commands only
#   benchmark/ppo_rnd_envpool.sh --workers 3 --slurm-template-path benchmark/cleanrl_1gpu.slurm_template
#   benchmark/ppo_rnd_envpool.sh --env-ids MontezumaRevenge-v5 --num-seeds 1 --command "python cleanrl/ppo_rnd_envpool.py --total-timesteps 50000000"
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names ppo_rnd_envpool --env-ids MontezumaRevenge-v5 Venture-v5 Pitfall-v5 --output benchmark/results/ppo_rnd_envpool
set -euo pipefail
cd "$(dirname "$0")/.."
uv run python -m cleanrl_utils.benchmark --env-ids MontezumaRevenge-v5 Venture-v5 Pitfall-v5 --command "python cleanrl/ppo_rnd_envpool.py --config benchmark/configs/ppo_rnd_envpool.yaml" --num-seeds 3 --workers 1 "$@"
