"""The repository stands alone: no file sends a reader outside it, every link in the docs
resolves, and docs/architecture.md draws the whole data flow."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What pointed outside before: the design brief and data beside the checkout
OUTSIDE = re.compile(r"\.\./shared|\bshared/(?:DESIGN|STYLE|data)\b|(?<![\w/])(?:DESIGN|STYLE)\.md")
LINK = re.compile(r"\]\(([^)\s]+)\)")
FLOW = ("input", "state machine", "handlers", "rig", "harness", "analysis", "rows", "report")


def tracked_text() -> dict[str, str]:
    names = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    found = {}
    for name in names:
        path = ROOT / name
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if b"\0" not in data[:8192]:
                found[name] = data.decode("utf-8", errors="replace")
    return found


def test_the_check_finds_a_reference_outside() -> None:
    for text in ("see ../shared/DESIGN.md", "(DESIGN.md)", "shared/data/config.json"):
        assert OUTSIDE.search(text), text
    assert not OUTSIDE.search("see docs/design.md and rigs/configs/e2b.json")


@pytest.mark.slow  # lists the tracked files with git
def test_no_file_refers_outside_the_repository() -> None:
    this = Path(__file__).relative_to(ROOT).as_posix()
    offending = [
        f"{name}:{text[: m.start()].count(chr(10)) + 1}: {m.group(0)}"
        for name, text in tracked_text().items()
        if name != this
        for m in OUTSIDE.finditer(text)
    ]
    assert offending == []


def test_every_relative_link_in_the_docs_resolves() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:", "#")):
                continue
            if not (page.parent / target.split("#")[0]).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


def test_the_architecture_page_draws_the_data_flow_and_where_new_things_go() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    flow = text[text.index("## The data flow") :]
    # each stage opens a line of the drawing, in the order the data takes
    starts = [m.group(1) for m in re.finditer(r"^ ([a-z][a-z ]*?)\b(?: on| \(|:|$)", flow, re.M)]
    assert [s for s in starts if s in FLOW] == list(FLOW)
    for thing in ("**A rig.**", "**A metric.**", "**A Lambda step.**", "**A CLI command.**"):
        assert thing in text
