"""The command line a new user meets: every argument explains itself, every database command
defaults to results/xrt.duckdb, and the package metadata uses the SPDX license string."""

from __future__ import annotations

import argparse

import pytest
from conftest import ROOT

from xrt.cli import build_parser, main


def _undocumented(p: argparse.ArgumentParser, path: list[str]) -> list[str]:
    out = []
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sp in a.choices.items():
                out += _undocumented(sp, path + [name])
        elif not isinstance(a, argparse._HelpAction) and not a.help:
            out.append(" ".join(path + [a.option_strings[0] if a.option_strings else a.dest]))
    return out


def test_every_argument_has_help_text():
    assert _undocumented(build_parser(), ["xrt"]) == []


@pytest.mark.parametrize("cmd", [["db", "query", "SELECT count(*) AS n FROM results"], ["db", "stats", "--json"]])
def test_db_query_and_stats_default_to_results_xrt_duckdb(tmp_path, monkeypatch, capsys, cmd):
    pytest.importorskip("duckdb")
    from xrt.db import store

    (tmp_path / "results").mkdir()
    store.write(tmp_path / "results" / "xrt.duckdb", lambda con: None)
    monkeypatch.chdir(tmp_path)
    assert main(cmd) == 0
    out = capsys.readouterr().out
    if cmd[1] == "query":
        assert out.split()[:3] == ["n", "-", "0"]
    else:
        import json

        assert json.loads(out)["values"] == 0 and json.loads(out)["schema_version"] >= 6


def test_pyproject_license_is_an_spdx_string_with_its_file():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "MIT"
    assert all((ROOT / f).is_file() for f in meta["project"]["license-files"])
    assert "setuptools>=77" in meta["build-system"]["requires"]  # PEP 639 fields need setuptools 77


def test_readme_installs_from_a_checkout():
    text = (ROOT / "README.md").read_text()
    assert "pip install xpuruntime" not in text and "not published on PyPI" in text
    assert 'pip install -c requirements/constraints.txt -e ".[torch]"' in text
