#!/usr/bin/env bash
# ppo_atari_multigpu.py on the Atari games of the published benchmark, 3 seeds, 10,000,000 steps each (all ranks
# together), with ppo_atari.py's hyperparameters per rank: 8 envs x 128 steps on each rank.
#   benchmark/ppo_atari_multigpu.sh --workers 0      # print the commands only
# One rank per run as printed (the same learning as ppo_atari.py); 2 GPUs of one machine per run:
#   benchmark/ppo_atari_multigpu.sh --workers 1 --command "torchrun --standalone --nproc-per-node 2 cleanrl/ppo_atari_multigpu.py --config benchmark/configs/ppo_atari_multigpu.yaml"
# On Slurm, 2 nodes x 4 GPUs per run (8 ranks; torchrun on each node, see the template's header):
#   benchmark/ppo_atari_multigpu.sh --workers 3 --slurm-template-path benchmark/ppo_atari_multigpu.slurm_template --slurm-nodes 2 --slurm-ntasks 2 --slurm-gpus-per-task 4 --slurm-total-cpus 64
# Flags given here are added to (and override) the benchmark's. Then the report:
#   uv run python -m cleanrl_utils.plot --runs runs --exp-names ppo_atari_multigpu --env-ids PongNoFrameskip-v4 BeamRiderNoFrameskip-v4 BreakoutNoFrameskip-v4 --output benchmark/results/ppo_atari_multigpu
set -euo pipefail
cd "$(dirname "$0")/.."
uv run python -m cleanrl_utils.benchmark --env-ids PongNoFrameskip-v4 BeamRiderNoFrameskip-v4 BreakoutNoFrameskip-v4 --command "python cleanrl/ppo_atari_multigpu.py --config benchmark/configs/ppo_atari_multigpu.yaml" --num-seeds 3 --workers 1 "$@"
