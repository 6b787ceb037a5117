"""An op's three series side by side from asv result files: device, host and host under torch.compile.

    python scripts/series_table.py RESULTS_DIR > table.md

Per (op, shape, dtype, provider) at the default config: the median of each series' samples, in µs
(``xrt.bench.suite.SERIES`` names the series). A series with no samples is left empty.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
from pathlib import Path

from xrt.bench.suite import SERIES, series_of
from xrt.db import result_names


def rows(folder: Path) -> dict[tuple, dict[str, float]]:
    out: dict[tuple, dict[str, float]] = {}
    for f in sorted(folder.rglob("*.json")):
        if not result_names.is_result_file(f.name):
            continue
        d = json.loads(f.read_text())
        cols = d.get("result_columns")
        for name, row in (d.get("results") or {}).items():
            found = series_of(name)
            if found is None or cols is None or "samples" not in cols:
                continue
            row = row + [None] * (len(cols) - len(row))
            samples = row[cols.index("samples")] or []
            for i, combo in enumerate(itertools.product(*row[cols.index("params")])):
                combo = tuple(c.strip("'") for c in combo)
                if combo[-1] == "default" and i < len(samples) and samples[i]:
                    out.setdefault((found[1], *combo[:-1]), {})[found[0]] = statistics.median(samples[i]) * 1e6
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: scripts/series_table.py RESULTS_DIR (a folder of asv result files)", file=sys.stderr)
        return 2
    if not Path(argv[0]).is_dir():
        print(f"series_table: RESULTS_DIR {argv[0]!r} is not a folder", file=sys.stderr)
        return 2
    lines = ["| op | shape | dtype | provider | " + " | ".join(f"{s} µs" for s in SERIES) + " |",
             "|---|---|---|---|" + "---:|" * len(SERIES)]
    for key, v in sorted(rows(Path(argv[0])).items()):
        lines.append("| " + " | ".join(key) + " | "
                     + " | ".join(f"{v[s]:.1f}" if s in v else "" for s in SERIES) + " |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
