"""Checks on the user documentation (README.md, CHANGELOG.md, docs/*.md): it describes the product as
it is, so it names no past issue or work period, and every command, flag, file and link it names exists."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest
from conftest import ROOT
from markdown_checks import code_spans, outside_code

DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]

# A past issue ("issue #12", "(#20)") or a work period ("in the session", "the second lease") is history:
# it belongs in git and CHANGELOG.md, not in a page that says what the product does.
HISTORY = re.compile(r"(?<![#\w&])#\d{2,}\b|\b(?:issues?|sessions?|leases?|sprints?|work periods?)\b", re.I)
# Top-level folders whose files a page may name; of results/ only the committed tables and configs
# (the rest is written by runs). kernels/ is the kernels' old place: a page that still names it is caught.
TRACKED_DIRS = ("xrt/", "kernels/", "benchmarks/", "scripts/", "tests/", "dashboard/", "docs/", "requirements/",
                ".github/", ".ci/", ".streamlit/", "results/gpu/", "results/tuned/")


def _name(p: Path) -> str:
    return str(p.relative_to(ROOT))


def history_words(text: str) -> list[str]:
    """The issue numbers and work-period words of a Markdown page, one line each, code spans left out."""
    return [f"{n}: {m.group(0)!r} in {line.strip()[:100]!r}" for n, line in enumerate(text.splitlines(), 1)
            for m in HISTORY.finditer(outside_code(line))]


def test_history_words_finds_issue_numbers_and_work_periods():
    found = history_words("Fixed in issue #20.\nThe second lease.\n`#define X` and `issue` in code.\n#### Heading\n")
    assert [f.split(":")[0] for f in found] == ["1", "1", "2"], found


@pytest.mark.parametrize("page", [*PAGES, ROOT / "CHANGELOG.md"], ids=_name)
def test_no_page_names_a_past_issue_or_work_period(page):
    assert history_words(page.read_text()) == []


def _code(text: str) -> list[str]:
    """Every code span (CommonMark's rule) and every line of an indented or fenced code block."""
    blocks, prose, fenced = [], [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced or line.startswith("    ") and not line.lstrip().startswith(("|", "-", "*")):
            blocks.append(line.strip())
        else:
            prose.append(line)
    return code_spans("\n".join(prose)) + blocks


def _paths(text: str) -> set[str]:
    out = set()
    for code in _code(text):
        for word in code.split():
            word = word.strip("`'\",;:()")
            if word.startswith(TRACKED_DIRS) and not re.search(r"[<>*{}$…]|\.\.\.|\bX\b|\bN\b", word):
                out.add(word.rstrip("/.").split("::")[0])
    return out


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_code_fence_is_closed(page):
    """An unclosed fence turns the prose after it into code (and hides its paths from the check below)."""
    fences = [n for n, line in enumerate(page.read_text().splitlines(), 1) if line.startswith("```")]
    assert len(fences) % 2 == 0, f"{_name(page)}: an odd number of code fences (lines {fences})"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_file_a_page_names_exists(page):
    missing = sorted(p for p in _paths(page.read_text()) if not (ROOT / p).exists())
    assert missing == [], f"{_name(page)} names files that are not in the repository: {missing}"


def _parsers() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    from xrt.cli import build_parser

    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(p: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        found[path] = p
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    walk(sp, (*path, name))

    walk(build_parser(), ())
    return found


def command_problems(text: str, parsers: dict[tuple[str, ...], argparse.ArgumentParser]) -> list[str]:
    """Each `xrt ...` command line in a page's code whose sub-command or flag the CLI does not have."""
    problems = []
    for code in _code(text):
        for m in re.finditer(r"(?:^(?:[A-Z_]+=\S*\s+)*|[(|;&]\s*)(?:\.venv/bin/)?xrt ([a-z][^|;&)]*)", code):
            if re.match(r"[\w -]*:", m.group(1)):
                continue  # a message the command prints ("xrt db ingest: FILE: ..."), not a command line
            try:
                words = shlex.split(m.group(1).replace("…", " "))
            except ValueError:
                words = m.group(1).split()
            path: tuple[str, ...] = ()
            while words and (*path, words[0]) in parsers:
                path, words = (*path, words[0]), words[1:]
            if not path:
                problems.append(f"`xrt {m.group(1).strip()}`: no sub-command {m.group(1).split()[0]!r}")
                continue
            known = {o for a in parsers[path]._actions for o in a.option_strings}
            problems += [f"`xrt {' '.join(path)}`: no flag {w.split('=')[0]}" for w in words
                         if w.startswith("--") and w.split("=")[0].rstrip(".,") not in known]
    return problems


def test_command_problems_finds_unknown_commands_and_flags():
    parsers = _parsers()
    text = "`xrt gate --base A --head B`, `xrt gate --frobnicate`, `xrt nosuch --db X`, `xrt db ingest DIR --db D`"
    assert command_problems(text, parsers) == ["`xrt gate`: no flag --frobnicate",
                                               "`xrt nosuch --db X`: no sub-command 'nosuch'"]


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_xrt_command_a_page_names_exists(page):
    assert command_problems(page.read_text(), _parsers()) == []


def test_readme_links_to_every_docs_page_and_each_link_resolves():
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)", text)
    assert sorted(t for t in targets if t.startswith("docs/")) == sorted(f"docs/{p.name}" for p in DOCS)
    assert [t for t in targets if "://" not in t and not (ROOT / t).exists()] == []


def test_code_spans_follow_commonmark():
    assert code_spans("a `b` c `` d ` e `` f ` g") == ["b", "d ` e"]
    assert code_spans("``no xrt tables (run `xrt db ingest`)``") == ["no xrt tables (run `xrt db ingest`)"]


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_gpu_run_step_a_page_names_exists(page):
    script = (ROOT / "scripts" / "gpu_run.sh").read_text()
    steps = {s for label in re.findall(r"^\s*([\w|]+)\)", script, re.M) for s in label.split("|")}
    named = set(re.findall(r"gpu_run\.sh (\w+)", "\n".join(_code(page.read_text()))))
    assert named - steps == set(), f"{_name(page)} names steps scripts/gpu_run.sh does not have"
