"""--upload-model and cleanrl_utils.huggingface, offline: the repository's files and model card are checked, the
token check happens before training, a failed upload keeps the model and says how to retry. No test reaches the Hub."""

import json

import numpy as np
import pytest
from helpers import REPO, assert_clean_failure, only_run_dir, run_script, run_utility, scalars
from huggingface_hub import ModelCard

from cleanrl_utils.huggingface import package_run, repo_name

SCRIPTS = sorted(path.name for path in (REPO / "cleanrl").glob("*.py"))
# no token anywhere: HF_TOKEN empty and a fresh HF_HOME without a stored one
NO_TOKEN = {"HF_TOKEN": "", "HF_HUB_OFFLINE": "1"}
# flags a script cannot start without; the token is checked before the teacher's file is read, so it need not exist
REQUIRED_FLAGS = {"qdagger_dqn_atari_impalacnn.py": ["--teacher-model-path", "teacher.cleanrl_model"]}


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("ppo")
    result = run_script("ppo.py", "--total-timesteps", "2048", "--save-model", "--capture-video", cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    return only_run_dir(cwd)


@pytest.mark.e2e
def test_repository_files_and_model_card(saved_run, tmp_path):
    returns = [value for _, value in scalars(saved_run, "eval/episodic_return")]
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
    # the spelled-out command has every flag, so a reader can re-run it without our defaults
    assert "--learning-rate 0.00025" in card.text and "--num-steps 128" in card.text


@pytest.mark.e2e
def test_publishing_a_finished_run_can_be_previewed_offline(saved_run, tmp_path):
    result = run_utility(
        "huggingface", str(saved_run), "--hf-entity", "me", "--local-dir", str(tmp_path / "out"), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    card = ModelCard.load(tmp_path / "out" / "README.md")
    returns = [value for _, value in scalars(saved_run, "eval/episodic_return")]
    assert card.data.eval_results[0].metric_value == f"{np.mean(returns):.2f} +/- {np.std(returns):.2f}"
    command = next(line for line in card.text.splitlines() if line.startswith("python cleanrl/ppo.py "))
    assert "--exp-name ppo" in command and "--seed 1" in command and "--env-id CartPole-v1" in command


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
    assert len(scalars(run_dir, "eval/episodic_return")) == 10, "the upload must come after the evaluation"
    assert "upload to me/CartPole-v1-ppo-seed1 failed" in result.stderr
    assert f"python -m cleanrl_utils.huggingface {run_dir.relative_to(tmp_path)} --hf-entity me" in result.stderr
    assert "Traceback" not in result.stderr


def test_repository_names_hold_no_path_characters():
    assert repo_name("CartPole-v1", "ppo", 1) == "CartPole-v1-ppo-seed1"
    assert repo_name("dm_control/cheetah-run-v0", "sac", 2) == "dm_control-cheetah-run-v0-sac-seed2"
    assert repo_name("custom_env:Corridor-v0", "dqn", 3) == "custom_env-Corridor-v0-dqn-seed3"
