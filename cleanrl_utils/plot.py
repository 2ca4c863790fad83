"""The benchmark report from local runs (no W&B): learning curves with bands over seeds, and a table of final returns.

    uv run python -m cleanrl_utils.plot --runs runs/ --env-ids CartPole-v1 Acrobot-v1    # writes plots/report*
    uv run python -m cleanrl_utils.plot --exp-names ppo --total-timesteps 500000 --output plots/ppo_500k

A run is a folder holding `events.out.tfevents.*` anywhere under a `--runs` folder (searched recursively: env ids
such as `ALE/Pong-v5` hold a `/`). Its script, exp_name, env id, seed and budget come from the `args.json` every
cleanrl script writes there; a run without one is refused rather than guessed from its folder name, which holds no
budget and no script. `--exp-names`, `--env-ids` and `--total-timesteps` select runs; the selected runs are grouped by
(exp_name, env id, budget), so `--exp-name` variants of one script, and runs of one script at different
`--total-timesteps`, are compared side by side. Each seed counts once: where a group holds a seed twice (a run
repeated), the most recent run of it (by the unix time that ends its folder's name) is kept, and one line says which
folders were left out. Runs that are not selected are never looked at beyond their args.json.

Writes, creating parent folders (default `--output plots/report`: under the current folder, nothing tracked in the
repository is overwritten unless its name is given, e.g. `--output benchmark/results/ppo`):
- `{output}_{env_id}.png` per env (`/` and other unsafe characters of the id become `_`): one line per exp_name
  (and budget, where an exp_name has several),
  against environment steps (left) and wall time since the run's first TensorBoard event (right). Each run's curve
  is the trailing mean of its last `--smooth` logged values, interpolated linearly onto 200 points spanning the
  range that every run of the line covers (never extrapolated). The line is the mean over runs. The band, named in
  the legend and the caption: with 3 seeds or more the mean's 95% Student-t confidence interval (sample std, n - 1
  degrees of freedom), clipped to the range the seeds' curves span (with 3-5 seeds t is 2.8-4.3 and the interval
  can reach far past every seed, squashing the curves); with 2 seeds, whose t interval is 6.4 times their distance
  on either side, the min-max of the two; a single seed gets none. The axes are named for people ("episodic
  return", "environment steps", "wall time (minutes)"); the caption names the TensorBoard tag.
- `{output}.md`: per group, the final return: each run's mean of its last `--last-n` logged values, then
  mean +- std over runs, where std is the population std (ddof=0, as in cleanrl's published tables); the number of
  seeds, the budget (`total_timesteps`) and, from `--reference-csv` (default: benchmark/reference_scores.csv in the
  current folder, when it exists), the published score, matched on the script's name without `.py` ("—" where there
  is none). The markdown also embeds the figures. The table is printed too.
"""

import csv
import json
import re
import shlex
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tyro
from matplotlib.figure import Figure
from scipy import stats
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

DEFAULT_REFERENCE_CSV = "benchmark/reference_scores.csv"
REFERENCE_COLUMNS = {"script", "env_id", "mean", "std", "total_timesteps", "source"}
GRID_POINTS = 200
CONFIDENCE = 0.95
# axis labels of the tags the scripts log whose last part alone would not read well
HUMAN_NAMES = {
    "charts/episodic_length": "episode length",
    "charts/SPS": "steps per second",
    "eval/episodic_return": "evaluation episodic return",
}


@dataclass
class Args:
    output: str = "plots/report"
    """where to write: `{output}.md` and `{output}_{env_id}.png` (a file prefix, relative to the current folder)"""
    runs: list[str] = field(default_factory=lambda: ["runs"])
    """folders holding the run folders (searched recursively)"""
    env_ids: list[str] | None = None
    """only these environments (default: every one found)"""
    exp_names: list[str] | None = None
    """only these experiments, by exp_name (default: every one found)"""
    total_timesteps: list[int] | None = None
    """only runs of these budgets, by their --total-timesteps (default: every one found)"""
    metric: str = "charts/episodic_return"
    """the TensorBoard scalar tag to plot and tabulate"""
    last_n: int = 100
    """a run's final return is the mean of its last N logged values of --metric"""
    smooth: int = 10
    """the curves plot each run's trailing mean over this many logged values (1: raw)"""
    reference_csv: str | None = None
    """published scores (columns script,env_id,mean,std,total_timesteps,source); default
    benchmark/reference_scores.csv when it exists in the current folder"""


@dataclass
class Run:
    path: Path
    script: str
    """the script's name without .py, as the reference CSV names it"""
    exp_name: str
    env_id: str
    seed: int
    total_timesteps: int


@dataclass
class Curve:
    """One run's logged values of the metric, with the step and the wall time (seconds since its start) of each."""

    steps: np.ndarray
    seconds: np.ndarray
    values: np.ndarray


@dataclass
class Band:
    """What one experiment's line in a figure shows: the mean over its seeds on a grid, and the band around it
    (`low`..`high`, None for a single seed), which `kind` names for the legend."""

    seeds: int
    grid: np.ndarray
    mean: np.ndarray
    low: np.ndarray | None
    high: np.ndarray | None
    kind: str


def fail(message: str):
    """Bad input ends with one line on stderr and exit code 2, no traceback."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Each value averaged with the window - 1 before it (fewer at the start, where there are fewer)."""
    sums = np.concatenate([[0.0], np.cumsum(values, dtype=np.float64)])
    ends = np.arange(1, len(values) + 1)
    counts = np.minimum(ends, window)
    return (sums[ends] - sums[ends - counts]) / counts


def common_grid(xs_per_run: list[np.ndarray], num_points: int = GRID_POINTS) -> np.ndarray | None:
    """Evenly spaced points over the range every run covers, so no curve is extrapolated; None if they share none."""
    low, high = max(xs.min() for xs in xs_per_run), min(xs.max() for xs in xs_per_run)
    return np.linspace(low, high, num_points) if low < high else None


def interpolate(grid: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """One run's curve, linearly interpolated onto the grid. Values logged at the same x (episodes of parallel envs
    ending on the same step) are averaged first: np.interp needs increasing xs."""
    unique_xs, which = np.unique(xs, return_inverse=True)
    means = np.bincount(which, weights=ys) / np.bincount(which)
    return np.interp(grid, unique_xs, means)


def mean_and_confidence(curves: np.ndarray, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray | None]:
    """Mean over runs (the rows) at each point, and the half-width of its Student-t confidence interval,
    t * s / sqrt(n) with the sample std s: with 3-5 seeds the normal approximation would be far too narrow.
    None for a single run, whose spread cannot be estimated."""
    n = len(curves)
    mean = curves.mean(axis=0)
    if n < 2:
        return mean, None
    t = stats.t.ppf((1 + confidence) / 2, df=n - 1)
    return mean, t * curves.std(axis=0, ddof=1) / np.sqrt(n)


def spread(curves: np.ndarray, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, str]:
    """Mean over runs (the rows), and the band to draw around it, with its name for the legend: from 3 runs the
    Student-t confidence interval, clipped to the range the runs span (a t interval of 3 seeds is +-2.5 sample
    stds: it can reach far past every seed, and a 2-seed one past 6 times their distance); for 2 runs their min-max;
    for 1 none."""
    mean, half_width = mean_and_confidence(curves, confidence)
    if half_width is None:
        return mean, None, None, "no band"
    low, high = curves.min(axis=0), curves.max(axis=0)
    if len(curves) == 2:
        return mean, low, high, "band: min-max"
    return mean, np.maximum(mean - half_width, low), np.minimum(mean + half_width, high), f"band: {confidence:.0%} CI"


def human_name(tag: str) -> str:
    """An axis label for people: `charts/episodic_return` -> `episodic return`, `losses/value_loss` -> `value loss`."""
    return HUMAN_NAMES.get(tag, tag.rsplit("/", 1)[-1].replace("_", " "))


def find_run_dirs(roots: list[str]) -> list[Path]:
    found = {}  # resolved path -> path as given, so overlapping --runs folders count each run once
    for root in roots:
        if not Path(root).is_dir():
            fail(f"--runs {root}: no such folder")
        event_files = list(Path(root).rglob("events.out.tfevents.*"))
        if not event_files:
            fail(f"--runs {root}: no TensorBoard event files (events.out.tfevents.*) under it")
        for event_file in event_files:
            found.setdefault(event_file.parent.resolve(), event_file.parent)
    return sorted(found.values())


def read_run(path: Path) -> Run:
    args_path = path / "args.json"
    if not args_path.is_file():
        fail(f"{path}: no args.json, so its script, env id and seed are unknown (runs of older cleanrl versions lack it)")
    try:
        with open(args_path) as f:
            saved = json.load(f)
        args = saved["args"]
        return Run(
            path, saved["script"].removesuffix(".py"), args["exp_name"], args["env_id"], args["seed"], args["total_timesteps"]
        )
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        fail(f"{args_path}: not a cleanrl args.json ({type(e).__name__}: {e})")


def select(
    runs: list[Run],
    exp_names: list[str] | None,
    env_ids: list[str] | None,
    roots: list[str],
    budgets: list[int] | None = None,
) -> list[Run]:
    # experiments first, so that an env asked for but holding none of the asked experiments is an error too
    selected_by = []
    for flag, wanted, key in (
        ("--exp-names", exp_names, "exp_name"),
        ("--env-ids", env_ids, "env_id"),
        ("--total-timesteps", budgets, "total_timesteps"),
    ):
        if wanted is None:
            continue
        found = {getattr(run, key) for run in runs}
        missing = [str(name) for name in wanted if name not in found]
        if missing:
            of_selected = f" (of the selected {' and '.join(selected_by)})" if selected_by else ""
            fail(
                f"{flag} {' '.join(missing)}: no runs of it under {' '.join(roots)}{of_selected}; "
                f"found: {', '.join(map(str, sorted(found)))}"
            )
        runs = [run for run in runs if getattr(run, key) in wanted]
        selected_by.append(flag)
    return runs


def run_time(path: Path) -> float:
    """When a run started: the unix time that ends its folder's name ({env_id}__{exp_name}__{seed}__{unix_time}), or,
    for a folder renamed by hand, the time it was last changed."""
    try:
        return int(path.name.rsplit("__", 1)[-1])
    except ValueError:
        return path.stat().st_mtime


def keep_latest_seeds(runs: list[Run]) -> tuple[list[Run], str | None]:
    """Each seed counts once in its (exp_name, env id, budget): of a seed run twice, the most recent run is kept.
    Returns the runs kept, and one line naming the folders left out and why (None if none were)."""

    def seed_of(run: Run) -> tuple:
        return run.exp_name, run.env_id, run.total_timesteps, run.seed

    latest = {seed_of(run): run for run in sorted(runs, key=lambda run: (run_time(run.path), str(run.path)))}
    left_out = [
        f"{run.path} ({run.exp_name} on {run.env_id}, {run.total_timesteps} steps, seed {run.seed}: older than "
        f"{latest[seed_of(run)].path})"
        for run in runs
        if latest[seed_of(run)] is not run
    ]
    kept = [run for run in runs if latest[seed_of(run)] is run]
    if not left_out:
        return kept, None
    return kept, f"Left out {len(left_out)} older run(s) of a repeated seed (a seed counts once): {'; '.join(left_out)}."


def load_curve(run: Run, metric: str) -> Curve:
    # TensorBoard's own reader; scalars=0 keeps every event (its default down-samples to 10,000)
    accumulator = EventAccumulator(str(run.path), size_guidance={"scalars": 0})
    accumulator.Reload()
    if metric not in accumulator.Tags()["scalars"]:
        fail(f"{run.path}: no {metric} logged (a run too short to finish an episode logs no return; or pick --metric)")
    events = accumulator.Scalars(metric)
    start = accumulator.FirstEventTimestamp()
    return Curve(
        steps=np.array([event.step for event in events], dtype=np.float64),
        seconds=np.array([event.wall_time - start for event in events]),
        values=np.array([event.value for event in events], dtype=np.float64),
    )


def read_references(path: str | None) -> dict[tuple[str, str], dict] | None:
    """(script, env_id) -> its CSV row; None when there is no reference to show."""
    if path is None:
        if not Path(DEFAULT_REFERENCE_CSV).is_file():
            return None
        path = DEFAULT_REFERENCE_CSV
    elif not Path(path).is_file():
        fail(f"--reference-csv {path}: no such file")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = REFERENCE_COLUMNS - set(reader.fieldnames or [])
        if missing:
            fail(f"--reference-csv {path}: missing the column(s) {', '.join(sorted(missing))}")
        references = {}
        for row in reader:
            try:
                row["score"] = f"{float(row['mean']):.1f} +- {float(row['std']):.1f}"
            except ValueError as e:
                fail(f"--reference-csv {path}, line {reader.line_num}: {e}")
            references[(row["script"], row["env_id"])] = row
        return references


def file_safe(env_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", env_id)


def time_unit(max_seconds: float) -> tuple[str, float]:
    """The unit that keeps the wall-time axis readable: a 30-second run in seconds, a 5-hour one in hours."""
    for name, seconds in (("seconds", 1.0), ("minutes", 60.0)):
        if max_seconds < 120 * seconds:
            return name, seconds
    return "hours", 3600.0


def seed_band(curves: list[Curve], axis: str, smooth: int, name: str) -> Band:
    """The line and band of one experiment's seeds against `axis` ("steps" or "seconds")."""
    xs = [getattr(curve, axis) for curve in curves]
    grid = common_grid(xs)
    if grid is None:
        fail(f"{name}: its runs share no range of {axis} to plot over (a run logged one value?)")
    smoothed = [trailing_mean(curve.values, smooth) for curve in curves]
    return Band(len(curves), grid, *spread(np.array([interpolate(grid, x, y) for x, y in zip(xs, smoothed)])))


def band_caption(smooth: int, metric: str, quote: str = "`") -> str:
    """What a figure's line and band are, and the tag behind them: the figure's caption (quote="") and the report's."""
    return (
        f"Line: the mean over seeds of each seed's trailing mean of {smooth} logged values of {quote}{metric}{quote}. "
        f"Band: with 3 seeds or more the mean's {CONFIDENCE:.0%} Student-t confidence interval, clipped to the range of "
        "the seeds' curves; with 2 seeds their min-max; none for 1 seed."
    )


def plot_env(env_id: str, lines: dict[str, dict[str, Band]], metric: str, smooth: int, path: Path) -> Figure:
    # the object-oriented Figure needs no pyplot and no backend choice: it renders with Agg, display or not
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    ax_steps, ax_time = fig.subplots(1, 2, sharey=True)
    unit, unit_seconds = time_unit(max(bands["seconds"].grid[-1] for bands in lines.values()))
    for exp_name, bands in lines.items():
        seeds = bands["steps"].seeds
        label = f"{exp_name} ({seeds} seed{'s' if seeds > 1 else ''}; {bands['steps'].kind})"
        for ax, band, scale in ((ax_steps, bands["steps"], 1.0), (ax_time, bands["seconds"], unit_seconds)):
            (line,) = ax.plot(band.grid / scale, band.mean, label=label)
            if band.low is not None:
                ax.fill_between(band.grid / scale, band.low, band.high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax_steps.set(xlabel="environment steps", ylabel=human_name(metric))
    ax_time.set(xlabel=f"wall time ({unit})")
    ax_steps.legend()
    for ax in (ax_steps, ax_time):
        ax.grid(alpha=0.3)
    fig.suptitle(env_id)
    # the caption says what the line and the band are, and the exact tag behind the y axis
    fig.supxlabel(textwrap.fill(band_caption(smooth, metric, quote=""), 150), fontsize="small")
    fig.savefig(path, dpi=100)
    return fig


def mean_pm_std(values) -> str:
    return f"{np.mean(values):.1f} +- {np.std(values):.1f}"


def main():
    args = tyro.cli(Args)
    for flag in ("last_n", "smooth"):
        if getattr(args, flag) < 1:
            fail(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
    if args.output.endswith(("/", "\\")):
        fail(f"--output {args.output}: give a file prefix, e.g. {args.output.rstrip('/')}/ppo")
    references = read_references(args.reference_csv)
    runs = select(
        [read_run(path) for path in find_run_dirs(args.runs)], args.exp_names, args.env_ids, args.runs, args.total_timesteps
    )
    runs, left_out = keep_latest_seeds(runs)
    if left_out:
        print(left_out, flush=True)

    # (exp_name, env_id, budget) -> its runs, in the order --env-ids gave the envs
    env_order = list(dict.fromkeys(args.env_ids)) if args.env_ids else sorted({run.env_id for run in runs})
    groups: dict[tuple[str, str, int], list[Run]] = {}
    for run in sorted(runs, key=lambda run: (run.exp_name, env_order.index(run.env_id), run.total_timesteps, run.seed)):
        groups.setdefault((run.exp_name, run.env_id, run.total_timesteps), []).append(run)
    for (exp_name, env_id, budget), group in groups.items():
        scripts = sorted({run.script for run in group})
        if len(scripts) > 1:
            fail(f"the runs named {exp_name} on {env_id} come from different scripts ({', '.join(scripts)}); use --exp-names")
    budgets_per_line = {(exp_name, env_id): set() for exp_name, env_id, _ in groups}
    for exp_name, env_id, budget in groups:
        budgets_per_line[exp_name, env_id].add(budget)

    def label(exp_name, env_id, budget):
        return exp_name if len(budgets_per_line[exp_name, env_id]) == 1 else f"{exp_name} ({budget} steps)"

    curves = {run.path: load_curve(run, args.metric) for run in runs}

    header = ["experiment", "env", "seeds", "budget (steps)", f"final return (last {args.last_n})"]
    if references is not None:
        header += ["reference", "reference budget", "reference source"]
    rows, short_runs = [], []
    for (exp_name, env_id, budget), group in groups.items():
        finals = []
        for run in group:
            values = curves[run.path].values
            finals.append(values[-args.last_n :].mean())
            if len(values) < args.last_n:
                short_runs.append(f"{label(exp_name, env_id, budget)} on {env_id} seed {run.seed} ({len(values)})")
        row = [exp_name, env_id, str(len(group)), str(budget), mean_pm_std(finals)]
        if references is not None:
            reference = references.get((group[0].script, env_id))
            if reference is None:
                row += ["—", "—", "—"]
            else:
                row += [reference["score"], reference["total_timesteps"], reference["source"]]
        rows.append(row)
    table = [f"| {' | '.join(header)} |", f"|{'-|' * len(header)}", *(f"| {' | '.join(row)} |" for row in rows)]
    explanation = (
        f"Final return: each seed's mean of its last {args.last_n} logged `{args.metric}` values, then mean +- std over "
        "seeds (population std, ddof=0)."
    )
    if short_runs:
        explanation += f" Runs with fewer values, averaged over all of them: {'; '.join(short_runs)}."

    # every band before any file, so a run that cannot be plotted leaves no half-written report
    bands = {
        (label(exp_name, env_id, budget), env_id): {
            axis: seed_band([curves[run.path] for run in group], axis, args.smooth, f"{exp_name} on {env_id}")
            for axis in ("steps", "seconds")
        }
        for (exp_name, env_id, budget), group in groups.items()
    }

    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for env_id in env_order:
        lines = {line: env_bands for (line, env), env_bands in bands.items() if env == env_id}
        png_path = output.parent / f"{output.name}_{file_safe(env_id)}.png"
        plot_env(env_id, lines, args.metric, args.smooth, png_path)
        written.append(png_path)
    md_path = output.parent / f"{output.name}.md"
    figures = [f"![{env_id}]({png_path.name})" for env_id, png_path in zip(env_order, written)]
    # the report says how to remake it
    made_with = f"Made with `{shlex.join(['python', '-m', 'cleanrl_utils.plot', *sys.argv[1:]])}`."
    paragraphs = [made_with, *([left_out] if left_out else []), explanation, "\n".join(table)]
    paragraphs += [band_caption(args.smooth, args.metric), "\n".join(figures)]
    md_path.write_text("\n\n".join(paragraphs) + "\n")

    print(explanation, "", *table, "", sep="\n")
    for path in [md_path, *written]:
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
