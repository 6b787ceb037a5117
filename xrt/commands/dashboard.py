"""``xrt dashboard``: serve the Streamlit dashboard (``dashboard/app.py``) on one database.

The dashboard lives in the repository's ``dashboard/`` folder and is not shipped in the wheel:
this command finds it relative to the checkout xrt was installed from (an editable install) or
the current directory, and says so when it cannot.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from xrt.db.store import DB_ENV, DEFAULT_DB
from xrt.interrupt import INTERRUPT

READONLY_ENV = "XRT_DASHBOARD_READONLY"  # set (by --read-only): the pages offer no writes


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dashboard", help="serve the Streamlit dashboard",
        description="Run `streamlit run dashboard/app.py` with XRT_DB set (docs/dashboard.md). The dashboard is "
        "not shipped in the wheel: it lives in the repository, so run this from a checkout "
        "(pip install -e '.[dashboard]').")
    p.add_argument("--db", default=DEFAULT_DB, help=f"the results database [{DEFAULT_DB}]")
    p.add_argument("--port", type=int, default=8501, help="port [8501]")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind [127.0.0.1: this machine only; 0.0.0.0 serves the network]")
    p.add_argument("--read-only", action="store_true",
                   help="hide the acknowledge / ignore form (for a dashboard served to many)")
    p.set_defaults(func=run)


def find_app() -> Path | None:
    """``dashboard/app.py`` of the checkout: beside the ``xrt`` package (editable install), else in the cwd."""
    for root in (Path(__file__).resolve().parents[2], Path.cwd()):
        app = root / "dashboard" / "app.py"
        if app.is_file():
            return app
    return None


def command(app: Path, host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "streamlit", "run", str(app), "--server.address", host, "--server.port", str(port),
            "--server.headless", "true", "--browser.gatherUsageStats", "false", "--client.showErrorDetails", "none",
            "--client.toolbarMode", "viewer"]


def run(args: argparse.Namespace) -> int:
    app = find_app()
    if app is None:
        print("xrt dashboard: dashboard/app.py not found: the dashboard is not shipped in the wheel; run this from "
              "a checkout of xpuruntime (pip install -e '.[dashboard]')", file=sys.stderr)
        return 2
    try:
        import streamlit  # noqa: F401
    except ImportError:
        print("xrt dashboard: needs streamlit: pip install -e '.[dashboard]'", file=sys.stderr)
        return 2
    db = Path(args.db).resolve()
    if not db.exists():
        print(f"xrt dashboard: {db} does not exist yet; the dashboard will say what to run", file=sys.stderr)
    env = {**os.environ, DB_ENV: str(db)}
    if args.read_only:
        env[READONLY_ENV] = "1"
    cmd = command(app, args.host, args.port)
    INTERRUPT.check()  # a Ctrl-C while streamlit was imported
    INTERRUPT.disarm()  # a timer would outlive the exec and end streamlit
    print(f"xrt dashboard: serving {db} at http://{args.host}:{args.port}/", flush=True)
    os.execvpe(cmd[0], cmd, env)
    return 0  # not reached
