"""Watch a trained model play: load it with its script's evaluator, play N episodes, print mean +- std.

    uv run python -m cleanrl_utils.enjoy --model-path runs/CartPole-v1__dqn__1__1764480000/dqn.cleanrl_model
    uv run python -m cleanrl_utils.enjoy --exp-name dqn --env-id CartPole-v1 --model-path dqn.cleanrl_model --capture-video
    uv run python -m cleanrl_utils.enjoy --hf-repo someone/CartPole-v1-dqn-seed1     # needs network

The network shape comes from the script that trained the model (`cleanrl/{exp_name}.py`: its `make_env` and network
class), the playing from `cleanrl_utils/evals/{...}_eval.py`, exactly as `--save-model` evaluates. When the model sits
in its run folder (or comes from the Hub), `args.json` beside it supplies --exp-name and --env-id.
"""

import importlib
import importlib.util
import json
import pathlib
import sys
import time
from dataclasses import dataclass

import numpy as np
import tyro

from cleanrl_utils.reproduce import CLEANRL_SCRIPTS

# every script evaluates its saved model on seed `args.seed + 100_000`: episodes its training never saw
EVAL_SEED_OFFSET = 100_000
# Procgen's scripts and models run in an environment of their own (docs/get-started.md)
PROCGEN_RUN = "UV_PROJECT_ENVIRONMENT=.venv-procgen uv run --no-dev --extra procgen"

# script -> (evaluator module, the script's network class, whether the evaluator runs torch on a device)
EVALUATORS = {
    "ppo": ("cleanrl_utils.evals.ppo_eval", "Agent", True),
    "ppo_atari": ("cleanrl_utils.evals.ppo_eval", "Agent", True),
    "ppo_atari_lstm": ("cleanrl_utils.evals.ppo_atari_lstm_eval", "Agent", True),
    "ppo_atari_multigpu": ("cleanrl_utils.evals.ppo_eval", "Agent", True),
    "ppo_trxl": ("cleanrl_utils.evals.ppo_trxl_eval", "Agent", True),
    "ppo_pettingzoo_ma_atari": ("cleanrl_utils.evals.ppo_pettingzoo_eval", "Agent", True),
    "ppo_procgen": ("cleanrl_utils.evals.ppo_procgen_eval", "Agent", True),
    "ppg_procgen": ("cleanrl_utils.evals.ppo_procgen_eval", "Agent", True),
    "ppo_atari_envpool": ("cleanrl_utils.evals.ppo_envpool_eval", "Agent", True),
    "ppo_rnd_envpool": ("cleanrl_utils.evals.ppo_envpool_eval", "Agent", True),
    "ppo_atari_envpool_xla_jax": ("cleanrl_utils.evals.ppo_envpool_jax_eval", "Agent", False),
    "ppo_atari_envpool_xla_jax_scan": ("cleanrl_utils.evals.ppo_envpool_jax_eval", "Agent", False),
    "pqn_atari_envpool": ("cleanrl_utils.evals.pqn_envpool_eval", "QNetwork", True),
    "pqn_atari_envpool_lstm": ("cleanrl_utils.evals.pqn_envpool_eval", "QNetwork", True),
    "dqn": ("cleanrl_utils.evals.dqn_eval", "QNetwork", True),
    "dqn_atari": ("cleanrl_utils.evals.dqn_eval", "QNetwork", True),
    "pqn": ("cleanrl_utils.evals.dqn_eval", "QNetwork", True),
    "c51": ("cleanrl_utils.evals.c51_eval", "QNetwork", True),
    "c51_atari": ("cleanrl_utils.evals.c51_eval", "QNetwork", True),
    "rainbow_atari": ("cleanrl_utils.evals.rainbow_eval", "QNetwork", True),
    "sac_atari": ("cleanrl_utils.evals.sac_atari_eval", "Actor", True),
    "qdagger_dqn_atari_impalacnn": ("cleanrl_utils.evals.dqn_eval", "QNetwork", True),
    "qdagger_dqn_atari_jax_impalacnn": ("cleanrl_utils.evals.dqn_jax_eval", "QNetwork", False),
    "dqn_jax": ("cleanrl_utils.evals.dqn_jax_eval", "QNetwork", False),
    "c51_jax": ("cleanrl_utils.evals.c51_jax_eval", "QNetwork", False),
    "dqn_atari_jax": ("cleanrl_utils.evals.dqn_jax_eval", "QNetwork", False),
    "c51_atari_jax": ("cleanrl_utils.evals.c51_jax_eval", "QNetwork", False),
    "ppo_continuous_action": ("cleanrl_utils.evals.ppo_continuous_action_eval", "Agent", True),
    "ppo_continuous_action_brax_jax": ("cleanrl_utils.evals.ppo_brax_eval", "Agent", False),
    "rpo_continuous_action": ("cleanrl_utils.evals.ppo_continuous_action_eval", "Agent", True),
    "ddpg_continuous_action": ("cleanrl_utils.evals.ddpg_eval", "Actor", True),
    "td3_continuous_action": ("cleanrl_utils.evals.ddpg_eval", "Actor", True),
    "sac_continuous_action": ("cleanrl_utils.evals.sac_eval", "Actor", True),
    "ddpg_continuous_action_jax": ("cleanrl_utils.evals.ddpg_jax_eval", "Actor", False),
    "td3_continuous_action_jax": ("cleanrl_utils.evals.ddpg_jax_eval", "Actor", False),
    "sac_continuous_action_jax": ("cleanrl_utils.evals.sac_jax_eval", "Actor", False),
}


@dataclass
class Args:
    model_path: pathlib.Path | None = None
    """a `.cleanrl_model` file saved by a script's --save-model"""
    hf_repo: str | None = None
    """a Hugging Face Hub repository made by --upload-model, instead of --model-path (downloads it)"""
    exp_name: str | None = None
    """the script that trained the model (`dqn` for cleanrl/dqn.py); default: from args.json beside the model"""
    env_id: str | None = None
    """the environment to play; default: the one the model was trained on (args.json beside the model)"""
    eval_episodes: int = 10
    """how many full episodes to play"""
    seed: int | None = None
    """seed of the evaluation episodes (and the exploration epsilon of value-based evaluators); default: the run's own
    evaluation seed (its --seed + 100000, from args.json beside the model), or 1 without args.json"""
    capture_video: bool = False
    """record the episodes into `videos/{env_id}__{exp_name}__enjoy__{time}`"""
    cuda: bool = True
    """if toggled, cuda will be used when available (PyTorch models)"""


def fail(message: str):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def download(repo_id: str) -> pathlib.Path:
    """The model file of a Hub repository made by --upload-model (with its args.json beside it)."""
    import huggingface_hub

    try:
        folder = pathlib.Path(huggingface_hub.snapshot_download(repo_id, allow_patterns=["*.cleanrl_model", "args.json"]))
    except Exception as e:  # offline, unknown or private repository: one line naming it
        fail(f"--hf-repo {repo_id}: cannot download it ({type(e).__name__}: {e})")
    models = sorted(folder.glob("*.cleanrl_model"))
    if len(models) != 1:
        fail(f"--hf-repo {repo_id}: expected one .cleanrl_model file in the repository, found {len(models)}")
    return models[0]


def load_script(exp_name: str):
    """Import cleanrl/{exp_name}.py as a module (its training lives under `__main__`, so nothing trains)."""
    spec = importlib.util.spec_from_file_location(exp_name, CLEANRL_SCRIPTS / f"{exp_name}.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def main():
    args = tyro.cli(Args)
    if (args.model_path is None) == (args.hf_repo is None):
        fail("give exactly one of --model-path (a local .cleanrl_model file) and --hf-repo (a Hub repository)")
    if args.eval_episodes <= 0:
        fail(f"--eval-episodes must be positive, got {args.eval_episodes}")
    model_path = download(args.hf_repo) if args.hf_repo is not None else args.model_path
    if not model_path.is_file():
        fail(f"--model-path {model_path}: no such file")

    saved_args_path = model_path.parent / "args.json"
    saved = json.loads(saved_args_path.read_text()) if saved_args_path.is_file() else None
    exp_name = args.exp_name or (saved["script"][: -len(".py")] if saved else None)
    env_id = args.env_id or (saved["args"]["env_id"] if saved else None)
    if exp_name is None or env_id is None:
        fail(f"no args.json beside {model_path}: pass --exp-name (the script that trained it) and --env-id")
    if exp_name not in EVALUATORS:
        fail(f"--exp-name {exp_name}: no evaluator for it; one of {', '.join(EVALUATORS)}")
    if args.seed is not None:
        seed, seed_origin = args.seed, "--seed"
    elif saved is not None:
        seed = saved["args"]["seed"] + EVAL_SEED_OFFSET
        seed_origin = f"the run's own evaluation seed: its --seed {saved['args']['seed']} + {EVAL_SEED_OFFSET}"
    else:
        seed, seed_origin = 1, "the default without args.json"

    import gymnasium as gym

    if args.capture_video:  # before the first env is made: MuJoCo chooses how to render when it is first imported
        from cleanrl_utils.rendering import render_offscreen

        render_offscreen(env_id, mujoco="brax" in exp_name)  # Brax draws its environments with MuJoCo's renderer
    evaluator_module, model_class, uses_torch = EVALUATORS[exp_name]
    script = load_script(exp_name)
    try:  # the script's own make_env registers what its ids need (a user's `module:` env, dm_control through Shimmy)
        if "envpool" in exp_name:  # an EnvPool script's make_env makes a pool of games at once
            script.make_env(env_id, 1, 0).close()
        elif "brax" in exp_name:  # one functional Brax env serves every copy: nothing to close
            script.make_env(env_id)
        elif "procgen" in exp_name:  # Procgen aborts the whole process on a game it does not know: check its list first
            if importlib.util.find_spec("procgen") is None:  # it needs numpy < 2: an environment of its own
                fail(f"{exp_name} models play in Procgen's environment: {PROCGEN_RUN} python -m cleanrl_utils.enjoy ...")
            from procgen.env import ENV_NAMES

            if env_id not in ENV_NAMES:
                raise gym.error.Error(f"not a Procgen game; one of {', '.join(ENV_NAMES)}")
        else:
            script.make_env(env_id, 0, False, "enjoy")().close()
    # EnvPool asserts on an id it does not know, Brax raises KeyError
    except (gym.error.Error, ModuleNotFoundError, AssertionError, KeyError) as e:
        fail(f"--env-id {env_id}: {e}")

    device_kwargs = {}
    if uses_torch:
        import torch

        torch.manual_seed(seed)  # a stochastic policy samples from torch's generator: same seed, same episodes
        device_kwargs["device"] = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    print(f"playing {args.eval_episodes} episodes of {env_id} with seed {seed} ({seed_origin})", flush=True)
    try:
        episodic_returns = importlib.import_module(evaluator_module).evaluate(
            str(model_path),
            script.make_env,
            env_id,
            eval_episodes=args.eval_episodes,
            run_name=f"{env_id}__{exp_name}__enjoy__{int(time.time())}",
            Model=getattr(script, model_class),
            capture_video=args.capture_video,
            seed=seed,
            **device_kwargs,
        )
    except (RuntimeError, ValueError, KeyError) as e:  # the weights do not fit this script's network on this env
        fail(
            f"cannot play {model_path} as a {exp_name} model on {env_id} (trained by another script, or on another env?): "
            f"{str(e).splitlines()[0]}"
        )
    for episode, episodic_return in enumerate(episodic_returns):
        print(f"episode {episode}: return {episodic_return:.1f}")
    print(
        f"{exp_name} on {env_id}: {np.mean(episodic_returns):.2f} +- {np.std(episodic_returns):.2f} over {len(episodic_returns)} episodes"
    )


if __name__ == "__main__":
    main()
