"""cleanrl_utils.enjoy: a saved model is loaded with its script's evaluator and played; bad inputs end cleanly."""

import re

import numpy as np
import pytest
from helpers import assert_clean_failure, only_run_dir, run_script, run_utility, scalars

# every test here starts a script or a utility in a new process
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory) -> dict:
    """A PPO and a DQN model, each saved (and evaluated) by its script, in folders of their own. The DQN run's seed is
    not the default, so a replay that matches its evaluation found the seed in its args.json."""
    models = {}
    for script, flags in {
        "ppo.py": ["--total-timesteps", "2048"],
        "dqn.py": ["--total-timesteps", "2000", "--learning-starts", "500", "--seed", "7"],
    }.items():
        cwd = tmp_path_factory.mktemp(script[: -len(".py")])
        result = run_script(script, *flags, "--save-model", cwd=cwd)
        assert result.returncode == 0, result.stderr[-3000:]
        run_dir = only_run_dir(cwd)
        models[script[: -len(".py")]] = run_dir / f"{script[: -len('.py')]}.cleanrl_model"
    return models


def played_returns(stdout: str) -> list[float]:
    return [float(value) for value in re.findall(r"^episode \d+: return (\S+)$", stdout, flags=re.MULTILINE)]


def test_dqn_model_plays_the_episodes_its_script_evaluated(saved_models, tmp_path):
    """dqn.py evaluates with seed = --seed + 100000 and a seeded epsilon: enjoy, given only the model's path, must take
    that seed from the run's args.json and replay exactly the returns the run logged, which only happens if it loaded
    the very weights the run saved."""
    model = saved_models["dqn"]
    result = run_utility("enjoy", "--model-path", str(model), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "with seed 100007 (the run's own evaluation seed: its --seed 7 + 100000)" in result.stdout
    logged = [value for _, value in scalars(model.parent, "eval/final_episodic_return")]
    assert len(logged) == 10
    assert played_returns(result.stdout) == logged
    assert f"dqn on CartPole-v1: {np.mean(logged):.2f} +- {np.std(logged):.2f} over 10 episodes" in result.stdout

    # an explicit --seed wins: other episodes, the same ones each time
    flags = ["--model-path", str(model), "--seed", "5", "--eval-episodes", "10"]
    first, second = (run_utility("enjoy", *flags, cwd=tmp_path) for _ in range(2))
    assert first.returncode == 0, first.stderr[-3000:]
    assert "with seed 5 (--seed)" in first.stdout
    assert played_returns(first.stdout) == played_returns(second.stdout) != logged


def test_ppo_model_plays_the_same_episodes_for_the_same_seed(saved_models, tmp_path):
    flags = ["--exp-name", "ppo", "--env-id", "CartPole-v1", "--model-path", str(saved_models["ppo"]), "--eval-episodes", "3"]
    first = run_utility("enjoy", *flags, "--seed", "3", "--capture-video", cwd=tmp_path)
    second = run_utility("enjoy", *flags, "--seed", "3", cwd=tmp_path)
    assert first.returncode == 0 and second.returncode == 0, (first.stderr[-3000:], second.stderr[-3000:])
    returns = played_returns(first.stdout)
    assert len(returns) == 3 and all(value > 0 for value in returns)
    assert played_returns(second.stdout) == returns
    assert f"ppo on CartPole-v1: {np.mean(returns):.2f} +- {np.std(returns):.2f} over 3 episodes" in first.stdout
    assert list((tmp_path / "videos").glob("CartPole-v1__ppo__enjoy__*/*.mp4")), "--capture-video recorded nothing"


@pytest.mark.parametrize(
    "flags, fragments",
    [
        (["--model-path", "missing/dqn.cleanrl_model"], ["--model-path", "no such file"]),
        ([], ["exactly one of --model-path", "--hf-repo"]),
        (["--model-path", "{dqn}", "--exp-name", "sac"], ["--exp-name sac", "no evaluator", "dqn"]),
        (["--model-path", "{ppo}", "--exp-name", "dqn"], ["as a dqn model on CartPole-v1"]),
        (["--model-path", "{ppo}", "--env-id", "Acrobot-v1"], ["as a ppo model on Acrobot-v1"]),
        (["--model-path", "{ppo}", "--env-id", "NoSuchEnv-v0"], ["--env-id NoSuchEnv-v0"]),
        (["--model-path", "{ppo}", "--eval-episodes", "0"], ["--eval-episodes must be positive"]),
    ],
)
def test_bad_inputs_end_with_one_clear_line(saved_models, tmp_path, flags, fragments):
    flags = [flag.format(**{name: str(path) for name, path in saved_models.items()}) for flag in flags]
    assert_clean_failure(run_utility("enjoy", *flags, cwd=tmp_path), *fragments)


def test_a_model_without_its_args_json_needs_exp_name_and_env_id(saved_models, tmp_path):
    lone_model = tmp_path / "dqn.cleanrl_model"
    lone_model.write_bytes(saved_models["dqn"].read_bytes())
    assert_clean_failure(run_utility("enjoy", "--model-path", str(lone_model), cwd=tmp_path), "--exp-name", "--env-id")
    result = run_utility(
        "enjoy",
        "--model-path",
        str(lone_model),
        "--exp-name",
        "dqn",
        "--env-id",
        "CartPole-v1",
        "--eval-episodes",
        "2",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "with seed 1 (the default without args.json)" in result.stdout
    assert len(played_returns(result.stdout)) == 2


def test_hub_repository_offline_is_a_clear_failure(tmp_path):
    result = run_utility(
        "enjoy", "--hf-repo", "someone/CartPole-v1-dqn-seed1", cwd=tmp_path, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path)
    )
    assert_clean_failure(result, "--hf-repo someone/CartPole-v1-dqn-seed1", "cannot download")


def test_continuous_model_plays_the_episodes_its_script_evaluated(tmp_path):
    """ppo_continuous_action.py's evaluation acts with the Gaussian's mean on observations normalized with the saved
    statistics: replaying it, by default with the run's eval seed, must give the returns the run logged."""
    result = run_script(
        "ppo_continuous_action.py", "--env-id", "InvertedPendulum-v4", "--total-timesteps", "2048", "--num-steps", "512",
        "--seed", "3", "--save-model", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    model = only_run_dir(tmp_path) / "ppo_continuous_action.cleanrl_model"
    result = run_utility("enjoy", "--model-path", str(model), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "with seed 100003 (the run's own evaluation seed" in result.stdout
    logged = [value for _, value in scalars(model.parent, "eval/final_episodic_return")]
    assert len(logged) == 10
    assert played_returns(result.stdout) == pytest.approx(logged, abs=0.05)  # printed with one decimal
