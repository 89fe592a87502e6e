"""The README and docs/ guide a newcomer: short, self-contained, and naming real commands.

Checks the written files themselves (no Spark, no MLflow): README.md stays short, no page links
outside the repository, every relative link resolves to a file, and the README's command table
names only subcommands the ``lakescore`` parser has.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from lakescore.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
DOCUMENTS = [README, *PAGES]

# An http(s) URL, except the placeholder forms of commands: `https://<workspace>`.
EXTERNAL_URL = re.compile(r"https?://(?!<)[^\s)`>\]]+")
# A Markdown link or image target: [text](target) / ![alt](target).
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# A row of the README's command table: | `lakescore <command>` | ... |
COMMAND_ROW = re.compile(r"^\|\s*`lakescore ([a-z][a-z_-]*)`\s*\|", re.MULTILINE)


def _subcommands() -> set[str]:
    """The subcommands ``lakescore --help`` lists: its usage line's ``{train,score,...}``."""
    usage = build_parser().format_usage()
    choices = re.search(r"\{([a-z_,-]+)\}", usage)
    assert choices is not None, usage
    return set(choices.group(1).split(","))


def test_docs_pages_exist() -> None:
    assert len(PAGES) >= 12, [p.name for p in PAGES]


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 220, f"README.md has {len(lines)} lines; move detail into docs/"


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_link_points_outside_the_repository(path: Path) -> None:
    found = EXTERNAL_URL.findall(path.read_text(encoding="utf-8"))
    assert found == [], f"{path.relative_to(ROOT)} points outside the repository: {found}"


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path: Path) -> None:
    missing = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if target.startswith("#") or re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # an anchor on the same page, or a scheme (caught by the URL test)
        file_part = target.split("#", 1)[0]
        if not (path.parent / file_part).exists():
            missing.append(target)
    assert missing == [], f"{path.relative_to(ROOT)} links to files that do not exist: {missing}"


def test_readme_commands_exist() -> None:
    named = COMMAND_ROW.findall(README.read_text(encoding="utf-8"))
    assert named, "README.md has no table of `lakescore <command>` rows"
    unknown = sorted(set(named) - _subcommands())
    assert unknown == [], f"README.md names commands that `lakescore --help` lacks: {unknown}"
