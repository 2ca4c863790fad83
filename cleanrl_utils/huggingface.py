"""Publish a trained model on the Hugging Face Hub, with what it takes to trust and reproduce it.

The scripts call this for `--save-model --upload-model`: `upload_repo_id` before training (so a missing token fails in
the first second, not after hours), `package_run` + `push` after the evaluation. The repository gets

    {exp_name}.cleanrl_model   the model file the script saved
    {script}.py                the script that trained it
    args.json                  the resolved Args (cleanrl_utils.reproduce re-runs it)
    events.out.tfevents.*      the TensorBoard logs (the Hub shows them in its metrics tab)
    videos/*.mp4, replay.mp4   the training videos and the last evaluation episode, when --capture-video was on
    README.md                  a model card: the license (MIT) and the evaluation as metadata, how to install the
                               project (clone, `uv sync` with the env family's extra) and play the model, the
                               command, the hyperparameters

An existing run can be published after the fact (or a failed upload retried):
`python -m cleanrl_utils.huggingface runs/<run> --hf-entity me`; add `--local-dir out/` to write the files without
uploading them (the card names the repository, so --hf-entity is needed there too).
"""

import json
import pathlib
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import huggingface_hub
import tyro
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from cleanrl_utils.reproduce import CLEANRL_SCRIPTS, reproducing_flags


def project_clone_url() -> str | None:
    """Where this checkout of cleanrl came from (its git remote): a reader of the model card gets the same code there.
    None when the checkout has no remote (or is no git checkout)."""
    try:
        remote = subprocess.run(
            ["git", "-C", str(pathlib.Path(__file__).resolve().parent.parent), "config", "--get", "remote.origin.url"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return remote.stdout.strip() or None


def repo_name(env_id: str, exp_name: str, seed: int) -> str:
    """`CartPole-v1-ppo-seed1`; env ids such as `dm_control/cheetah-run-v0` or `module:Env-v0` hold characters a
    repository name cannot."""
    return f"{env_id}-{exp_name}-seed{seed}".replace("/", "-").replace(":", "-")


def upload_repo_id(args) -> str:
    """What a script's `--upload-model` checks before training (a missing token must not cost a whole run): the
    repository id the upload will use, or one line on stderr saying how to make it possible, and exit code 2."""
    if not args.save_model:
        print("error: --upload-model uploads the model that --save-model saves: add --save-model", file=sys.stderr)
        sys.exit(2)
    try:
        return check_upload(args.hf_entity, args.env_id, args.exp_name, args.seed)
    except ValueError as e:
        print(f"error: --upload-model: {e}", file=sys.stderr)
        sys.exit(2)


def check_upload(hf_entity: str | None, env_id: str, exp_name: str, seed: int) -> str:
    """The repository id the upload will use, or a ValueError saying how to make the upload possible."""
    token = huggingface_hub.get_token()
    if token is None:
        raise ValueError(
            "no Hugging Face token: run `hf auth login` or set HF_TOKEN (a token with write access), or drop --upload-model"
        )
    if hf_entity is None:  # the token's own user; asking the Hub who that is needs the network the user asked for
        try:
            hf_entity = huggingface_hub.whoami(token=token)["name"]
        except Exception as e:  # offline, or a revoked token: say which before any training happens
            raise ValueError(f"cannot ask the Hub who the token belongs to ({type(e).__name__}: {e}); pass --hf-entity") from e
    return f"{hf_entity}/{repo_name(env_id, exp_name, seed)}"


def extras_for(script: str, env_id: str) -> list[str]:
    """The project's extras (pyproject.toml's optional dependencies) that playing a model of `script` on `env_id`
    needs beyond the core install: its environment family's, and `jax` for a JAX script."""
    stem = script.removesuffix(".py")
    extras = []
    if "envpool" in stem:  # EnvPool brings its own games
        extras.append("envpool")
    elif "pettingzoo" in stem:  # multi-agent Atari, with the Atari extra
        extras.append("pettingzoo")
    elif "procgen" in stem:  # Procgen's games, in their own resolution (numpy < 2)
        extras.append("procgen")
    elif "brax" in stem:  # Brax brings its own environments, and JAX
        extras.append("brax")
    elif env_id.startswith("MiniGrid-"):
        extras.append("minigrid")
    elif "atari" in stem or env_id.startswith("ALE/") or "NoFrameskip" in env_id:
        extras.append("atari")
    elif env_id.startswith("dm_control/"):
        extras.append("dm_control")
    elif ":" not in env_id:  # Gymnasium registers its MuJoCo tasks whether mujoco is installed or not
        import gymnasium as gym

        try:
            if "mujoco" in str(gym.spec(env_id).entry_point):
                extras.append("mujoco")
        except gym.error.Error:  # an id Gymnasium does not know (a package registers it): nothing to add
            pass
    if "_jax" in stem and "brax" not in extras:
        extras.append("jax")
    return extras


def uv_flags(script: str, env_id: str) -> list[str]:
    """`--no-dev` and the model's extras: what `uv sync` installs, and what `uv run` must name again (a run without
    `--extra procgen` would resolve the other fork and replace Procgen's numpy 1)."""
    return ["--no-dev", *(token for extra in extras_for(script, env_id) for token in ("--extra", extra))]


def install_steps(script: str, env_id: str) -> str:
    """The model card's install section: clone the project, and sync the core with the extras the model needs."""
    sync = shlex.join(["uv", "sync", *uv_flags(script, env_id)])
    url = project_clone_url()
    clone = f"git clone {url} cleanrl" if url else "# get a clone of the cleanrl repository this model was trained with"
    steps = f"""```bash
{clone}
cd cleanrl
{sync}
```"""
    if ":" in env_id:  # `module:Env-v0`: the module registers the env, and it is not part of the project
        steps += (
            f"\n\nThe environment comes from the module `{env_id.split(':')[0]}`, which is not part of cleanrl: put it "
            "where Python finds it (e.g. on `PYTHONPATH`) before playing the model."
        )
    return steps


def model_card(saved: dict, episodic_returns: list[float], repo_id: str, command: str) -> ModelCard:
    args = saved["args"]
    mean, std = statistics.fmean(episodic_returns), statistics.pstdev(episodic_returns)
    card_data = ModelCardData(
        license="mit",
        library_name="cleanrl",
        tags=[args["env_id"], "deep-reinforcement-learning", "reinforcement-learning", "custom-implementation"],
        model_name=args["exp_name"],
        eval_results=[
            EvalResult(
                task_type="reinforcement-learning",
                task_name="reinforcement-learning",
                dataset_type=args["env_id"],
                dataset_name=args["env_id"],
                metric_type="mean_reward",
                metric_value=f"{mean:.2f} +/- {std:.2f}",
            )
        ],
    )
    full_command = shlex.join(["python", f"cleanrl/{saved['script']}", *reproducing_flags(args)])
    hyperparameters = json.dumps(args, indent=4)
    spelled_out = ""
    if command != full_command:
        spelled_out = (
            "\nEvery hyperparameter spelled out (what `python -m cleanrl_utils.reproduce` runs from `args.json`):\n\n"
            f"```\n{full_command}\n```\n"
        )
    body = f"""
# {args["exp_name"]} on {args["env_id"]}

A policy trained by cleanrl's `cleanrl/{saved["script"]}` on `{args["env_id"]}` for {args["total_timesteps"]:,}
environment steps (seed {args["seed"]}).

## Evaluation

Mean return over {len(episodic_returns)} evaluation episodes: **{mean:.2f} +/- {std:.2f}** (population std).

## Install

With Python >= 3.10 and [uv](https://docs.astral.sh/uv/): the project, and the core of its dependencies with what this
model needs (`--no-dev` leaves out the test tools):

{install_steps(saved["script"], args["env_id"])}

## Use it

From the repository's root: download this model and play it (10 episodes, by default with the seed of the evaluation
above, the run's `--seed` + 100000):

```bash
{shlex.join(["uv", "run", *uv_flags(saved["script"], args["env_id"])])} python -m cleanrl_utils.enjoy --exp-name {saved["script"][: -len(".py")]} --env-id {args["env_id"]} --hf-repo {repo_id}
```

## Command that trained it

```
{command}
```
{spelled_out}
## Hyperparameters

```json
{hyperparameters}
```
"""
    return ModelCard(f"---\n{card_data.to_yaml()}\n---\n{body}")


def package_run(run_dir: pathlib.Path, episodic_returns: list[float], repo_id: str, command: str, folder: pathlib.Path):
    """Write into `folder` every file the repository gets (see the module docstring)."""
    run_dir = pathlib.Path(run_dir)
    saved = json.loads((run_dir / "args.json").read_text())
    args, run_name = saved["args"], saved["run_name"]
    model_path = run_dir / f"{args['exp_name']}.cleanrl_model"
    if not model_path.is_file():
        raise ValueError(f"{model_path} does not exist: upload needs a model saved with --save-model")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(model_path, folder / model_path.name)
    shutil.copy2(CLEANRL_SCRIPTS / saved["script"], folder / saved["script"])
    shutil.copy2(run_dir / "args.json", folder / "args.json")
    for events in run_dir.glob("events.out.tfevents.*"):
        shutil.copy2(events, folder / events.name)
    # videos are written relative to the working directory, beside runs/: videos/{run_name} and videos/{run_name}-eval
    videos_root = run_dir.parents[len(pathlib.Path(run_name).parts)] / "videos"
    training_videos = sorted((videos_root / run_name).glob("*.mp4"))
    eval_videos = sorted((videos_root / f"{run_name}-eval").glob("*.mp4"))
    if training_videos:
        (folder / "videos").mkdir(exist_ok=True)
        for video in training_videos:
            shutil.copy2(video, folder / "videos" / video.name)
    if eval_videos:
        shutil.copy2(eval_videos[-1], folder / "replay.mp4")
    model_card(saved, episodic_returns, repo_id, command).save(folder / "README.md")


def push(run_dir: pathlib.Path, episodic_returns: list[float], repo_id: str, command: str | None = None):
    """Package the run and upload it as one commit (`command`, the one that trained it, defaults to this process's). A failed upload ends the process with exit code 1 and says how to
    retry: the model is safe in the run folder, and the hours of training behind it need not be repeated."""
    command = command or shlex.join(["python", *sys.argv])
    try:
        with tempfile.TemporaryDirectory() as folder:
            package_run(run_dir, episodic_returns, repo_id, command, pathlib.Path(folder))
            api = huggingface_hub.HfApi()
            repo_url = api.create_repo(repo_id, exist_ok=True)
            api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message=f"cleanrl: {repo_id.split('/')[-1]}")
    except Exception as e:  # network, permissions, quota: all end the same way, with the retry command
        print(
            f"error: upload to {repo_id} failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
            f"the model stays in {run_dir}; retry with `python -m cleanrl_utils.huggingface {run_dir} "
            f"--hf-entity {repo_id.split('/')[0]}`",
            file=sys.stderr,
        )
        sys.exit(1)
    print(f"model uploaded to {repo_url}")


@dataclass
class Cli:
    run_dir: tyro.conf.Positional[pathlib.Path]
    """a run folder written with --save-model (holds args.json and the .cleanrl_model)"""
    hf_entity: str | None = None
    """the user or organization that owns the repository (default: the token's user; needed with --local-dir)"""
    local_dir: pathlib.Path | None = None
    """write the repository's files (model card included) into this folder instead of uploading, to look first"""


def main():
    """Publish a finished run: its evaluation returns are read back from the run's TensorBoard logs."""
    cli = tyro.cli(Cli)
    try:
        saved = json.loads((cli.run_dir / "args.json").read_text())
        args = saved["args"]
        accumulator = EventAccumulator(str(cli.run_dir), size_guidance={"scalars": 0})
        accumulator.Reload()
        if "eval/final_episodic_return" not in accumulator.Tags()["scalars"]:
            raise ValueError(f"{cli.run_dir}: no eval/final_episodic_return logged (was it run with --save-model?)")
        episodic_returns = [event.value for event in accumulator.Scalars("eval/final_episodic_return")]
        if cli.local_dir is None:
            repo_id = check_upload(cli.hf_entity, args["env_id"], args["exp_name"], args["seed"])
        elif cli.hf_entity is None:  # nothing leaves the machine, so the Hub is not asked who the token's user is
            raise ValueError("--local-dir: pass --hf-entity too (the owner of the repository, whose id the model card names)")
        else:
            repo_id = f"{cli.hf_entity}/{repo_name(args['env_id'], args['exp_name'], args['seed'])}"
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    # the run's own command line is not recorded; every saved flag spelled out reproduces it
    command = shlex.join(["python", f"cleanrl/{saved['script']}", *reproducing_flags(args)])
    if cli.local_dir is None:
        push(cli.run_dir, episodic_returns, repo_id, command)
    else:
        package_run(cli.run_dir, episodic_returns, repo_id, command, cli.local_dir)
        print(f"wrote the files for {repo_id} into {cli.local_dir}")


if __name__ == "__main__":
    main()
