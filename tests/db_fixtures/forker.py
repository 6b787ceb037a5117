"""A warm process that forks ``xrt`` commands on request, so tests can run (and kill) many real
processes without paying the imports each time.

Protocol, one JSON line each way: the test writes a list of argv lists; the forker starts one child
per argv at once (each runs ``xrt.cli.main(argv)`` and exits with its code), answers
``{"pids": [...]}``, waits for all of them and answers ``{"codes": [...]}`` (a negative code: killed by
that signal). The test may SIGKILL a pid in between. Started with ``python forker.py``; an empty line ends it.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    # everything an ingest and its judgement import, loaded before any fork (no threads started yet)
    import duckdb  # noqa: F401
    import numpy  # noqa: F401
    import pyarrow  # noqa: F401

    import xrt.cli
    import xrt.db.ingest  # noqa: F401
    import xrt.db.tuning  # noqa: F401
    import xrt.track.diag  # noqa: F401
    import xrt.track.newest  # noqa: F401
    import xrt.track.regressions  # noqa: F401

    xrt.cli.build_parser()  # imports every command's registration

    for line in sys.stdin:
        if not line.strip():
            break
        pids = []
        for argv in json.loads(line):
            pid = os.fork()
            if pid == 0:
                code = 99
                try:
                    code = xrt.cli.main(argv)
                finally:
                    sys.stderr.flush()
                    os._exit(code)
            pids.append(pid)
        print(json.dumps({"pids": pids}), flush=True)
        codes = []
        for pid in pids:
            _, status = os.waitpid(pid, 0)
            codes.append(-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
        print(json.dumps({"codes": codes}), flush=True)


if __name__ == "__main__":
    main()
