"""mkdocs hook: the measured results live in benchmark/results/ beside the sweeps that made them; the site serves
them as results/<file> (plots and tables), so a page links them without a copy in docs/."""

import pathlib

from mkdocs.structure.files import File

RESULTS = pathlib.Path(__file__).resolve().parent.parent / "benchmark" / "results"


def on_files(files, config):
    for path in sorted(RESULTS.iterdir()):
        if path.suffix in {".png", ".svg", ".csv"}:
            files.append(File.generated(config, f"results/{path.name}", abs_src_path=str(path)))
    return files
