"""Evaluate a model saved by `cleanrl/ppo_rnd_envpool.py --save-model`: whole games played with the trained policy on
the script's own EnvPool env (its sticky actions included), scored by the game's own rewards.

The model file holds the policy alone (`Agent.state_dict()`: the torso, the policy head and both value heads). Acting
needs neither the RND networks nor their normalizers: the policy sees the raw frames / 255, as upstream CleanRL's does,
and the observation normalizer and the intrinsic reward's scale only shape the exploration bonus during training. So
the evaluation is ppo_atari_envpool's, given this script's make_env and Agent (whose `get_action` samples)."""

from cleanrl_utils.evals.ppo_envpool_eval import evaluate

__all__ = ["evaluate"]
