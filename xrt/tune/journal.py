"""The tuner's journal: one JSON line per finished step, appended and flushed as it comes.

A search killed at any point resumes from it: configs with a final record are not tried again.
A torn last line (the process died mid-write) is skipped and counted, never fatal.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# A config is done when its timing is recorded or when it failed in a way a rerun would repeat.
FINAL = {"timed", "wrong", "error", "crash", "timeout"}


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.torn = 0
        self.records: list[dict[str, Any]] = []
        if path.is_file():
            for line in path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    self.torn += 1
                    continue
                if isinstance(rec, dict) and "key" in rec and "status" in rec:
                    self.records.append(rec)
                else:
                    self.torn += 1

    def last(self) -> dict[str, dict[str, Any]]:
        """The latest record of each config."""
        out: dict[str, dict[str, Any]] = {}
        for rec in self.records:
            out[rec["key"]] = rec
        return out

    def done(self, retry_failed: bool = False) -> set[str]:
        ok = {"timed"} if retry_failed else FINAL
        return {k for k, r in self.last().items() if r["status"] in ok}

    def add(self, rec: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(rec, sort_keys=True)
        # Start on a fresh line if the last run died mid-write.
        lead = ""
        if self.path.is_file() and self.path.stat().st_size:
            with open(self.path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                lead = "" if f.read(1) == b"\n" else "\n"
        with open(self.path, "a") as f:
            f.write(lead + line + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.records.append(rec)
