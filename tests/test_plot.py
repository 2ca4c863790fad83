"""cleanrl_utils/plot.py: the report from real ppo.py runs (table recomputed from the events, valid PNGs), a table of
hand-made runs worked out by hand, the reference column, bad inputs, and the pure curve pieces by hand."""

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import REPO, assert_clean_failure, run_dirs, run_script, scalars, script_env
from matplotlib.image import imread
from torch.utils.tensorboard import SummaryWriter

from cleanrl_utils import plot

SHORT = ["--total-timesteps", "4096", "--num-envs", "4", "--num-steps", "128"]
LAST_N = 50  # each of these runs logs about 150 episodes: the report must pick the last 50, not all of them


def run_report(*flags: str, cwd) -> subprocess.CompletedProcess:
    """`python -m cleanrl_utils.plot <flags>` from `cwd`, with the repository importable."""
    env = script_env()
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env["PYTHONPATH"]])
    return subprocess.run(
        [sys.executable, "-m", "cleanrl_utils.plot", *flags],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def table_row(result: subprocess.CompletedProcess, md_text: str, start: str) -> str:
    """The one table row starting with `start`, the same on stdout and in the markdown file."""
    rows = [line for line in md_text.splitlines() if line.startswith(start)]
    assert len(rows) == 1, md_text
    assert rows[0] in result.stdout.splitlines()
    return rows[0]


@pytest.fixture(scope="module")
def ppo_runs(tmp_path_factory):
    """Two seeds of ppo.py on CartPole-v1, trained once for the whole module; returns their cwd. One after the other:
    side by side on a loaded machine, one run could finish before the other's first episode, and two runs that share no
    range of seconds have no wall-time curve."""
    cwd = tmp_path_factory.mktemp("ppo_runs")
    for seed in (1, 2):
        result = run_script("ppo.py", "--seed", str(seed), *SHORT, cwd=cwd)
        assert result.returncode == 0, result.stderr[-3000:]
    assert len(run_dirs(cwd)) == 2
    return cwd


def write_run(root, env_id, exp_name, seed, points, script=None, with_args=True, total_timesteps=5000, started=1700000000):
    """A run folder as a cleanrl script leaves it: `charts/episodic_return` at the given (step, value) points, one
    step a millisecond after the writer starts (so the runs' wall-time ranges overlap), and args.json (unless
    with_args is False)."""
    run_dir = root / f"{env_id}__{exp_name}__{seed}__{started}"
    writer = SummaryWriter(str(run_dir))
    start = time.time()
    for step, value in points:
        writer.add_scalar("charts/episodic_return", value, step, walltime=start + step / 1000)
    writer.close()
    if with_args:
        args = {"exp_name": exp_name, "seed": seed, "env_id": env_id, "total_timesteps": total_timesteps}
        info = {"script": f"{script or exp_name}.py", "run_name": run_dir.name, "args": args}
        (run_dir / "args.json").write_text(json.dumps(info))
    return run_dir


@pytest.mark.e2e
def test_report_of_real_runs_matches_their_events(ppo_runs, tmp_path):
    result = run_report("--runs", str(ppo_runs / "runs"), "--output", "results/ppo", "--last-n", str(LAST_N), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]

    # the table's numbers, recomputed independently from the logged events with the same last-N rule
    finals = [
        np.mean([value for _, value in scalars(run_dir, "charts/episodic_return")][-LAST_N:]) for run_dir in run_dirs(ppo_runs)
    ]
    assert all(len(scalars(run_dir, "charts/episodic_return")) > LAST_N for run_dir in run_dirs(ppo_runs))
    md_text = (tmp_path / "results" / "ppo.md").read_text()
    row = table_row(result, md_text, "| ppo |")
    assert row == f"| ppo | CartPole-v1 | 2 | 4096 | {np.mean(finals):.1f} +- {np.std(finals):.1f} |"
    assert "reference" not in md_text  # no CSV given, and none at the default place under this cwd
    # the report says what the band of these 2 seeds is
    assert "Band: with 3 seeds or more the mean's 95% Student-t confidence interval" in md_text
    assert "with 2 seeds their min-max" in md_text

    png = tmp_path / "results" / "ppo_CartPole-v1.png"
    image = imread(png)
    assert image.shape[:2] == (480, 1200)  # 12 x 4.8 inches at 100 dpi: both subplots
    assert image[..., :3].std() > 0.05  # something was drawn
    assert "![CartPole-v1](ppo_CartPole-v1.png)" in md_text
    assert f"wrote {os.path.join('results', 'ppo.md')}" in result.stdout
    assert f"wrote {os.path.join('results', 'ppo_CartPole-v1.png')}" in result.stdout

    # the default reference CSV, benchmark/reference_scores.csv under the cwd, is used when it exists
    (tmp_path / "benchmark").mkdir()
    shutil.copy(REPO / "benchmark" / "reference_scores.csv", tmp_path / "benchmark")
    result = run_report("--runs", str(ppo_runs / "runs"), "--output", "with_reference", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    row = table_row(result, (tmp_path / "with_reference.md").read_text(), "| ppo |")
    assert row.endswith("| 490.0 +- 6.1 | 500000 | CleanRL published benchmark (tag pr-424) |")


@pytest.mark.e2e
def test_table_of_hand_made_runs(tmp_path):
    # env ids may hold a `/`: the runs sit one folder deeper, and the figure's file name replaces it
    main_runs, other_runs = tmp_path / "runs", tmp_path / "more_runs"
    write_run(main_runs, "ALE/Toy-v0", "ppo", 1, [(10, 0.0), (20, 10.0), (30, 20.0), (40, 30.0)])
    write_run(main_runs, "ALE/Toy-v0", "ppo", 2, [(15, 10.0), (25, 20.0), (35, 30.0), (45, 40.0)])
    write_run(other_runs, "ALE/Toy-v0", "ppo_lr", 1, [(10, 1.0), (20, 2.0), (30, 3.0)], script="ppo")
    write_run(other_runs, "ALE/Toy-v0", "sac", 1, [(10, 5.0), (20, 6.0), (30, 7.0)])
    (tmp_path / "ref.csv").write_text(
        "script,env_id,mean,std,total_timesteps,source\nppo,ALE/Toy-v0,100,2.5,9000,a paper\nppo,Other-v0,1,1,1,x\n"
    )
    result = run_report(
        "--runs", "runs", "more_runs", "--last-n", "2", "--reference-csv", "ref.csv", "--output", "out/toy", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    md_text = (tmp_path / "out" / "toy.md").read_text()
    # seed 1: mean(20, 30) = 25; seed 2: mean(30, 40) = 35; 30 +- 5 with the population std (the sample std is 7.1)
    assert (
        table_row(result, md_text, "| ppo |")
        == "| ppo | ALE/Toy-v0 | 2 | 5000 | 30.0 +- 5.0 | 100.0 +- 2.5 | 9000 | a paper |"
    )
    # an --exp-name variant is its own line, compared with its script's reference
    assert (
        table_row(result, md_text, "| ppo_lr |")
        == "| ppo_lr | ALE/Toy-v0 | 1 | 5000 | 2.5 +- 0.0 | 100.0 +- 2.5 | 9000 | a paper |"
    )
    assert table_row(result, md_text, "| sac |") == "| sac | ALE/Toy-v0 | 1 | 5000 | 6.5 +- 0.0 | — | — | — |"
    assert imread(tmp_path / "out" / "toy_ALE_Toy-v0.png").shape[:2] == (480, 1200)

    # --exp-names selects lines; a run with fewer than --last-n values is averaged whole, and the table says so
    result = run_report("--runs", "more_runs", "--exp-names", "sac", "--last-n", "5", "--output", "sac", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    md_text = (tmp_path / "sac.md").read_text()
    assert table_row(result, md_text, "| sac |") == "| sac | ALE/Toy-v0 | 1 | 5000 | 6.0 +- 0.0 |"
    assert "| ppo_lr |" not in md_text
    assert "fewer values, averaged over all of them: sac on ALE/Toy-v0 seed 1 (3)" in md_text


@pytest.mark.e2e
def test_runs_of_other_budgets_are_their_own_line_and_a_repeated_seed_keeps_its_latest_run(tmp_path):
    write_run(tmp_path / "runs", "CartPole-v1", "ppo", 1, [(10, 1.0), (20, 3.0)])
    write_run(tmp_path / "runs", "CartPole-v1", "ppo", 2, [(10, 3.0), (20, 5.0)])
    write_run(tmp_path / "runs", "CartPole-v1", "ppo", 1, [(10, 100.0), (20, 200.0)], total_timesteps=20, started=1)
    result = run_report("--runs", "runs", "--last-n", "1", "--output", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    md_text = (tmp_path / "out.md").read_text()
    rows = [line for line in md_text.splitlines() if line.startswith("| ppo |")]
    assert rows == ["| ppo | CartPole-v1 | 1 | 20 | 200.0 +- 0.0 |", "| ppo | CartPole-v1 | 2 | 5000 | 4.0 +- 1.0 |"]
    assert "Left out" not in result.stdout + md_text

    # seed 2 run again, later: the later run counts (final 0, not 5), the earlier one is left out, and one line says so
    again = write_run(tmp_path / "runs", "CartPole-v1", "ppo", 2, [(10, 0.0), (20, 0.0)], started=1700000001)
    result = run_report("--runs", "runs", "--last-n", "1", "--output", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    md_text = (tmp_path / "out.md").read_text()
    assert table_row(result, md_text, "| ppo | CartPole-v1 | 2 | 5000 |") == "| ppo | CartPole-v1 | 2 | 5000 | 1.5 +- 1.5 |"
    note = (
        "Left out 1 older run(s) of a repeated seed (a seed counts once): "
        "runs/CartPole-v1__ppo__2__1700000000 (ppo on CartPole-v1, 5000 steps, seed 2: older than "
        f"runs/{again.name})."
    )
    assert result.stdout.splitlines()[0] == note
    assert note in md_text.splitlines()

    # --total-timesteps selects by budget; a repeated seed of a budget not plotted is not mentioned
    result = run_report("--runs", "runs", "--total-timesteps", "20", "--last-n", "1", "--output", "short", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    md_text = (tmp_path / "short.md").read_text()
    assert [line for line in md_text.splitlines() if line.startswith("| ppo |")] == [
        "| ppo | CartPole-v1 | 1 | 20 | 200.0 +- 0.0 |"
    ]
    assert "Left out" not in result.stdout + md_text
    result = run_report("--runs", "runs", "--total-timesteps", "20", "999", "--output", "short", cwd=tmp_path)
    assert_clean_failure(result, "--total-timesteps 999: no runs of it under runs; found: 20, 5000")


@pytest.mark.e2e
def test_by_default_the_report_goes_to_plots_in_the_current_folder(tmp_path):
    write_run(tmp_path / "runs", "CartPole-v1", "ppo", 1, [(10, 1.0), (20, 3.0)])
    result = run_report(cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(path.name for path in (tmp_path / "plots").iterdir()) == ["report.md", "report_CartPole-v1.png"]
    assert f"wrote {os.path.join('plots', 'report.md')}" in result.stdout


@pytest.mark.parametrize(
    "setup, flags, fragment",
    [
        (None, ["--runs", "missing"], "--runs missing: no such folder"),
        ("empty", ["--runs", "runs"], "--runs runs: no TensorBoard event files"),
        ("run", ["--env-ids", "Acrobot-v1"], "--env-ids Acrobot-v1: no runs of it under runs; found: CartPole-v1"),
        ("run", ["--exp-names", "dqn"], "--exp-names dqn: no runs of it"),
        (
            "run",
            ["--exp-names", "ppo", "--total-timesteps", "7"],
            "--total-timesteps 7: no runs of it under runs (of the selected --exp-names); found: 5000",
        ),
        ("run", ["--metric", "charts/nope"], "no charts/nope logged"),
        ("no_args_json", [], "no args.json"),
        ("run", ["--last-n", "0"], "--last-n must be at least 1"),
        ("run", ["--reference-csv", "nope.csv"], "--reference-csv nope.csv: no such file"),
        ("one_value", [], "ppo on CartPole-v1: its runs share no range of steps to plot over"),
    ],
)
@pytest.mark.e2e
def test_bad_input_fails_cleanly(tmp_path, setup, flags, fragment):
    if setup == "empty":
        (tmp_path / "runs" / "some_folder").mkdir(parents=True)
        (tmp_path / "runs" / "some_folder" / "notes.txt").write_text("no events here")
    elif setup is not None:
        points = [(10, 1.0)] if setup == "one_value" else [(10, 1.0), (20, 2.0)]
        write_run(tmp_path / "runs", "CartPole-v1", "ppo", 1, points, with_args=setup != "no_args_json")
    result = run_report("--output", "out/report", *flags, cwd=tmp_path)
    assert_clean_failure(result, fragment)
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert not (tmp_path / "out").exists()


def test_trailing_mean_by_hand():
    values = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    np.testing.assert_allclose(plot.trailing_mean(values, 2), [1.0, 1.5, 2.5, 3.5, 4.5])
    np.testing.assert_allclose(plot.trailing_mean(values, 3), [1.0, 1.5, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(plot.trailing_mean(values, 1), values)


def test_common_grid_covers_only_the_shared_range():
    grid = plot.common_grid([np.array([0.0, 10.0, 20.0]), np.array([5.0, 30.0])], num_points=4)
    np.testing.assert_allclose(grid, [5.0, 10.0, 15.0, 20.0])
    assert plot.common_grid([np.array([0.0, 4.0]), np.array([5.0, 30.0])]) is None


def test_interpolate_averages_values_logged_at_the_same_step():
    # two episodes ended on step 0 (2 and 4: mean 3), one on step 10 (13)
    result = plot.interpolate(np.array([0.0, 2.5, 5.0, 10.0]), np.array([0.0, 0.0, 10.0]), np.array([2.0, 4.0, 13.0]))
    np.testing.assert_allclose(result, [3.0, 5.5, 8.0, 13.0])


def test_confidence_interval_by_hand():
    # two seeds: sample std [sqrt 2, sqrt 8], t(0.975, df=1) = 12.7062; half-width t * s / sqrt 2 = [12.7062, 25.4124]
    mean, half = plot.mean_and_confidence(np.array([[1.0, 2.0], [3.0, 6.0]]))
    np.testing.assert_allclose(mean, [2.0, 4.0])
    np.testing.assert_allclose(half, [12.7062047, 25.4124094], rtol=1e-7)
    # three seeds 0, 3, 6: s = 3, t(0.975, df=2) = 4.3026527; half-width 4.3026527 * 3 / sqrt 3 = 7.4524
    mean, half = plot.mean_and_confidence(np.array([[0.0], [3.0], [6.0]]))
    np.testing.assert_allclose(mean, [3.0])
    np.testing.assert_allclose(half, [4.3026527 * np.sqrt(3)], rtol=1e-7)
    # one seed: no spread to estimate, so no band
    mean, half = plot.mean_and_confidence(np.array([[1.0, 2.0]]))
    np.testing.assert_allclose(mean, [1.0, 2.0])
    assert half is None


def test_band_of_few_seeds_stays_within_the_seeds():
    # two seeds: their min-max, not a t interval of +-6.4 times their distance
    mean, low, high, kind = plot.spread(np.array([[0.0, 500.0, 100.0], [400.0, 300.0, 100.0]]))
    np.testing.assert_allclose(mean, [200.0, 400.0, 100.0])
    np.testing.assert_allclose(low, [0.0, 300.0, 100.0])
    np.testing.assert_allclose(high, [400.0, 500.0, 100.0])
    assert kind == "band: min-max"
    # three seeds 0, 3, 6: the t half-width 7.45 (see above) reaches past both ends, so the band is clipped to 0..6;
    # seeds 0, 0, 30 (mean 10, s 17.32, half-width 43.03): clipped to 0 below, 30 above
    curves = np.array([[0.0, 0.0, 100.0], [3.0, 0.0, 101.0], [6.0, 30.0, 102.0]])
    mean, low, high, kind = plot.spread(curves)
    np.testing.assert_allclose(mean, [3.0, 10.0, 101.0])
    np.testing.assert_allclose(low, [0.0, 0.0, 100.0])
    np.testing.assert_allclose(high, [6.0, 30.0, 102.0])
    assert kind == "band: 95% CI"
    # ten seeds spread evenly: the interval is narrower than the seeds' range, and left as it is
    curves = np.arange(10.0).reshape(10, 1)
    mean, low, high, _ = plot.spread(curves)
    half = plot.stats.t.ppf(0.975, df=9) * curves.std(ddof=1) / np.sqrt(10)
    np.testing.assert_allclose([low[0], high[0]], [4.5 - half, 4.5 + half])
    assert 0 < low[0] < high[0] < 9
    # one seed: no band
    assert plot.spread(np.array([[1.0, 2.0]]))[1:] == (None, None, "no band")


def test_axes_are_labelled_for_people(tmp_path):
    grid = np.linspace(0.0, 200.0, 5)
    lines = {
        "ppo": {axis: plot.Band(2, grid, grid, grid - 1, grid + 1, "band: min-max") for axis in ("steps", "seconds")},
        "dqn": {axis: plot.Band(1, grid, grid, None, None, "no band") for axis in ("steps", "seconds")},
    }
    fig = plot.plot_env("CartPole-v1", lines, "charts/episodic_return", 10, tmp_path / "figure.png")
    ax_steps, ax_time = fig.axes
    assert (ax_steps.get_xlabel(), ax_steps.get_ylabel()) == ("environment steps", "episodic return")
    assert ax_time.get_xlabel() == "wall time (minutes)"  # 200 seconds
    legend = [text.get_text() for text in ax_steps.get_legend().get_texts()]
    assert legend == ["ppo (2 seeds; band: min-max)", "dqn (1 seed; no band)"]
    caption = fig.get_supxlabel()
    assert "values of charts/episodic_return." in caption and "with 2 seeds their min-max" in caption
    assert (tmp_path / "figure.png").stat().st_size > 0
    assert plot.human_name("losses/value_loss") == "value loss"
    assert plot.human_name("charts/SPS") == "steps per second"


def test_time_unit_keeps_the_axis_readable():
    assert plot.time_unit(30) == ("seconds", 1.0)
    assert plot.time_unit(600) == ("minutes", 60.0)
    assert plot.time_unit(5 * 3600) == ("hours", 3600.0)
