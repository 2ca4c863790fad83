# Tune ppo.py on CartPole-v1 and Acrobot-v1 with Optuna: `uv run python tuner_example.py`. Start the same command in
# more terminals (or on more machines, with a storage they all reach) to add workers to the same study.
import optuna

from cleanrl_utils.tuner import Tuner

tuner = Tuner(
    script="cleanrl/ppo.py",
    metric="charts/episodic_return",
    metric_last_n_average_window=50,
    direction="maximize",
    aggregation_type="average",
    target_scores={
        "CartPole-v1": [0, 500],
        "Acrobot-v1": [-500, 0],
    },
    params_fn=lambda trial: {
        "learning_rate": trial.suggest_float("learning_rate", 0.0003, 0.003, log=True),
        "num_minibatches": trial.suggest_categorical("num_minibatches", [1, 2, 4]),
        "update_epochs": trial.suggest_categorical("update_epochs", [1, 2, 4, 8]),
        # every choice times --num-envs 4 is divisible by every num_minibatches above
        "num_steps": trial.suggest_categorical("num_steps", [5, 16, 32, 64, 128, 256, 512, 1024, 2048]),
        "vf_coef": trial.suggest_float("vf_coef", 0, 5),
        "max_grad_norm": trial.suggest_float("max_grad_norm", 0, 5),
        "total_timesteps": 100000,
        "num_envs": 4,
    },
    # prune a trial whose running value after a seed is below the median of the other trials' at that seed
    pruner=optuna.pruners.MedianPruner(n_startup_trials=5),
    sampler=optuna.samplers.TPESampler(),
    storage="sqlite:///cleanrl_tuner.db",
    study_name="ppo-classic-control",
)

if __name__ == "__main__":
    tuner.tune(num_trials=100, num_seeds=3)
