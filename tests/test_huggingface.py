"""--upload-model and cleanrl_utils.huggingface, offline: the repository's files and model card are checked, the
token check happens before training, a failed upload keeps the model and says how to retry. No test reaches the Hub."""

import json

import numpy as np
import pytest
from helpers import REPO, assert_clean_failure, only_run_dir, run_script, run_utility, scalars
from huggingface_hub import ModelCard

from cleanrl_utils.huggingface import extras_for, model_card, package_run, repo_name

SCRIPTS = sorted(path.name for path in (REPO / "cleanrl").glob("*.py"))
# no token anywhere: HF_TOKEN empty and a fresh HF_HOME without a stored one
NO_TOKEN = {"HF_TOKEN": "", "HF_HUB_OFFLINE": "1"}
# flags a script cannot start without; the token is checked before the teacher's file is read, so it need not exist
REQUIRED_FLAGS = {
    "qdagger_dqn_atari_impalacnn.py": ["--teacher-model-path", "teacher.cleanrl_model"],
    "qdagger_dqn_atari_jax_impalacnn.py": ["--teacher-model-path", "teacher.cleanrl_model"],
}


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("ppo")
    result = run_script("ppo.py", "--total-timesteps", "2048", "--save-model", "--capture-video", cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    return only_run_dir(cwd)


@pytest.mark.e2e
def test_repository_files_and_model_card(saved_run, tmp_path):
    returns = [value for _, value in scalars(saved_run, "eval/final_episodic_return")]
    assert len(returns) == 10
    command = "python cleanrl/ppo.py --total-timesteps 2048 --save-model --capture-video --upload-model"
    folder = tmp_path / "repo"
    package_run(saved_run, returns, "me/CartPole-v1-ppo-seed1", command, folder)

    assert (folder / "ppo.cleanrl_model").read_bytes() == (saved_run / "ppo.cleanrl_model").read_bytes()
    assert (folder / "ppo.py").read_text() == (REPO / "cleanrl" / "ppo.py").read_text()
    assert json.loads((folder / "args.json").read_text()) == json.loads((saved_run / "args.json").read_text())
    assert list(folder.glob("events.out.tfevents.*")), "the TensorBoard logs are missing"
    assert (folder / "replay.mp4").stat().st_size > 0, "the last evaluation episode is missing"
    assert list((folder / "videos").glob("*.mp4")), "the training videos are missing"

    card = ModelCard.load(folder / "README.md")
    assert card.data.library_name == "cleanrl"
    assert card.data.license == "mit"
    # CartPole needs no extra: the core install plays it
    assert "\ncd cleanrl\nuv sync --no-dev\n" in card.text
    assert "CartPole-v1" in card.data.tags
    [result] = card.data.eval_results
    assert (result.task_type, result.dataset_name, result.metric_type) == (
        "reinforcement-learning",
        "CartPole-v1",
        "mean_reward",
    )
    assert result.metric_value == f"{np.mean(returns):.2f} +/- {np.std(returns):.2f}"
    assert command in card.text
    assert "--hf-repo me/CartPole-v1-ppo-seed1" in card.text
    # the spelled-out command has every flag, so a reader can re-run it without our defaults; but none set to None,
    # the default of every field that can be None (ppo.py saves --wandb-entity, --hf-entity, --target-kl as None)
    assert "--learning-rate 0.00025" in card.text and "--num-steps 128" in card.text
    saved_nones = [name for name, value in json.loads((saved_run / "args.json").read_text())["args"].items() if value is None]
    assert "wandb_entity" in saved_nones and "hf_entity" in saved_nones
    commands = [line for line in card.text.splitlines() if line.startswith("python cleanrl/ppo.py ")]
    assert len(commands) == 2 and not any("None" in command for command in commands), commands


@pytest.mark.e2e
def test_publishing_a_finished_run_can_be_previewed_offline(saved_run, tmp_path):
    result = run_utility(
        "huggingface", str(saved_run), "--hf-entity", "me", "--local-dir", str(tmp_path / "out"), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    card = ModelCard.load(tmp_path / "out" / "README.md")
    returns = [value for _, value in scalars(saved_run, "eval/final_episodic_return")]
    assert card.data.eval_results[0].metric_value == f"{np.mean(returns):.2f} +/- {np.std(returns):.2f}"
    command = next(line for line in card.text.splitlines() if line.startswith("python cleanrl/ppo.py "))
    assert "--exp-name ppo" in command and "--seed 1" in command and "--env-id CartPole-v1" in command
    assert "None" not in command
    # the card names the real repository, not a placeholder
    assert "--hf-repo me/CartPole-v1-ppo-seed1" in card.text and "<" not in card.text.split("## Use it")[1]


@pytest.mark.e2e
def test_a_preview_needs_the_owner_the_card_names(saved_run, tmp_path):
    result = run_utility("huggingface", str(saved_run), "--local-dir", str(tmp_path / "out"), cwd=tmp_path)
    assert_clean_failure(result, "--local-dir", "--hf-entity")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.e2e
def test_upload_without_a_token_fails_before_training(script, tmp_path):
    flags = ["--save-model", "--upload-model", *REQUIRED_FLAGS.get(script, [])]
    result = run_script(script, *flags, cwd=tmp_path, HF_HOME=str(tmp_path / "hf"), **NO_TOKEN)
    assert_clean_failure(result, "--upload-model", "no Hugging Face token", "hf auth login")
    assert not (tmp_path / "runs").exists(), "training started before the token was checked"


@pytest.mark.e2e
def test_upload_needs_save_model(tmp_path):
    assert_clean_failure(run_script("ppo.py", "--upload-model", cwd=tmp_path), "--upload-model", "--save-model")


@pytest.mark.e2e
def test_unknown_owner_offline_fails_before_training(tmp_path):
    """With a token but no --hf-entity, the owner is asked of the Hub at start; offline that fails at once."""
    result = run_script("dqn.py", "--save-model", "--upload-model", cwd=tmp_path, HF_TOKEN="hf_test", HF_HUB_OFFLINE="1")
    assert_clean_failure(result, "--upload-model", "pass --hf-entity")
    assert not (tmp_path / "runs").exists()


@pytest.mark.e2e
def test_a_failed_upload_keeps_the_evaluated_model_and_says_how_to_retry(tmp_path):
    result = run_script(
        "ppo.py",
        "--total-timesteps",
        "1024",
        "--save-model",
        "--upload-model",
        "--hf-entity",
        "me",
        cwd=tmp_path,
        HF_TOKEN="hf_test",
        HF_HUB_OFFLINE="1",
    )
    assert result.returncode == 1, result.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    assert (run_dir / "ppo.cleanrl_model").is_file()
    assert len(scalars(run_dir, "eval/final_episodic_return")) == 10, "the upload must come after the evaluation"
    assert "upload to me/CartPole-v1-ppo-seed1 failed" in result.stderr
    assert f"python -m cleanrl_utils.huggingface {run_dir.relative_to(tmp_path)} --hf-entity me" in result.stderr
    assert "Traceback" not in result.stderr


def test_model_card_has_license_install_step_and_no_none_flags():
    saved = {
        "script": "dqn_atari_jax.py",
        "run_name": "ALE/Pong-v5__dqn_atari_jax__3__1700000000",
        "args": {
            "exp_name": "dqn_atari_jax",
            "seed": 3,
            "env_id": "ALE/Pong-v5",
            "total_timesteps": 10000,
            "wandb_entity": None,
            "hf_entity": None,
            "resume": None,
            "upload_model": True,
        },
    }
    card = model_card(saved, [1.0, 3.0], "me/ALE-Pong-v5-dqn_atari_jax-seed3", "python cleanrl/dqn_atari_jax.py --seed 3")
    card = ModelCard(str(card))  # as the Hub reads it back
    assert card.data.license == "mit"
    install = card.text.split("## Install")[1].split("## Use it")[0]
    assert "\ncd cleanrl\nuv sync --no-dev --extra atari --extra jax\n" in install
    use = card.text.split("## Use it")[1].split("##")[0]
    enjoy = "python -m cleanrl_utils.enjoy --exp-name dqn_atari_jax --env-id ALE/Pong-v5 "
    assert f"uv run --no-dev --extra atari --extra jax {enjoy}" in use  # the extras again: uv run syncs by them
    assert "--hf-repo me/ALE-Pong-v5-dqn_atari_jax-seed3" in use
    spelled_out = [line for line in card.text.splitlines() if line.startswith("python cleanrl/dqn_atari_jax.py --exp-name")]
    assert spelled_out == [
        "python cleanrl/dqn_atari_jax.py --exp-name dqn_atari_jax --seed 3 --env-id ALE/Pong-v5 --total-timesteps 10000"
    ]
    # a `module:Env` id: the card says the module must be importable, as no extra brings it
    saved["args"]["env_id"] = "custom_env:Corridor-v0"
    assert "The environment comes from the module `custom_env`" in model_card(saved, [1.0], "me/x", "python x").text


@pytest.mark.parametrize(
    "script, env_id, extras",
    [
        ("ppo.py", "CartPole-v1", []),
        ("ppo_atari.py", "BreakoutNoFrameskip-v4", ["atari"]),
        ("sac_continuous_action.py", "HalfCheetah-v4", ["mujoco"]),
        ("td3_continuous_action_jax.py", "Hopper-v4", ["mujoco", "jax"]),
        ("ddpg_continuous_action.py", "dm_control/cheetah-run-v0", ["dm_control"]),
        ("c51_jax.py", "CartPole-v1", ["jax"]),
        ("dqn.py", "custom_env:Corridor-v0", []),
        ("ppo_pettingzoo_ma_atari.py", "pong_v3", ["pettingzoo"]),
        ("ppo_continuous_action_brax_jax.py", "ant", ["brax"]),
        ("ppo_trxl.py", "MiniGrid-MemoryS9-v0", ["minigrid"]),
        ("ppo_trxl.py", "ProofOfMemory-v0", []),
        ("ppo_procgen.py", "starpilot", ["procgen"]),
        ("ppg_procgen.py", "bigfish", ["procgen"]),
    ],
)
def test_the_extras_a_model_needs(script, env_id, extras):
    assert extras_for(script, env_id) == extras


def test_repository_names_hold_no_path_characters():
    assert repo_name("CartPole-v1", "ppo", 1) == "CartPole-v1-ppo-seed1"
    assert repo_name("dm_control/cheetah-run-v0", "sac", 2) == "dm_control-cheetah-run-v0-sac-seed2"
    assert repo_name("custom_env:Corridor-v0", "dqn", 3) == "custom_env-Corridor-v0-dqn-seed3"


def test_the_install_step_clones_from_where_this_checkout_came_from(monkeypatch):
    from cleanrl_utils import huggingface

    monkeypatch.setattr(huggingface, "project_clone_url", lambda: "https://example.org/lab/cleanrl.git")
    assert huggingface.install_steps("dqn.py", "CartPole-v1").startswith(
        "```bash\ngit clone https://example.org/lab/cleanrl.git cleanrl\ncd cleanrl\nuv sync --no-dev\n"
    )
    monkeypatch.setattr(huggingface, "project_clone_url", lambda: None)  # no remote: no made-up URL either
    assert "git clone" not in huggingface.install_steps("dqn.py", "CartPole-v1")
