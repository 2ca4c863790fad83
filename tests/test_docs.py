"""The documentation site: it builds with --strict (a broken link, anchor or include fails), every script has its
page, and the README stays a front page."""

import pathlib

import yaml
from mkdocs.commands.build import build
from mkdocs.config import load_config

REPO = pathlib.Path(__file__).resolve().parent.parent


def test_the_site_builds_strict(tmp_path):
    build(load_config(str(REPO / "mkdocs.yml"), site_dir=str(tmp_path / "site"), strict=True))
    assert (tmp_path / "site" / "algorithms" / "ppo" / "index.html").exists()
    assert (tmp_path / "site" / "results").is_dir()  # benchmark/results, served by docs/hooks.py


def nav_pages(entries):
    for entry in entries:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            yield from nav_pages(value) if isinstance(value, list) else [value]


def test_every_script_has_its_page_in_the_nav():
    config = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    pages = set(nav_pages(config["nav"]))
    missing = [p.name for p in (REPO / "cleanrl").glob("*.py") if f"algorithms/{p.stem}.md" not in pages]
    assert not missing, f"scripts without a page in mkdocs.yml's nav: {missing}"
    # a script's first line points a reader who copied it alone to that page
    unlinked = [p.name for p in (REPO / "cleanrl").glob("*.py") if f"docs/algorithms/{p.stem}.md" not in p.open().readline()]
    assert not unlinked, f"scripts whose first line does not name their docs page: {unlinked}"


def test_the_readme_is_a_front_page():
    assert len((REPO / "README.md").read_text().splitlines()) <= 200
