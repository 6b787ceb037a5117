"""A real `streamlit run` of the dashboard for the tests that need a server (sockets, a browser)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def streamlit_server(app: str | Path, log_dir: Path, env: dict, cwd: Path, *flags: str,
                     timeout: float = 60) -> Iterator[tuple[str, int]]:
    """Start ``streamlit run APP FLAGS`` (headless, a free port, no file watcher), wait until its health
    endpoint answers, yield ``(url, port)``; stopped on exit. A server that dies or never comes up
    fails the test with the end of its log."""
    port = free_port()
    log_path = log_dir / "streamlit.log"
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(app), "--server.headless", "true",
                             "--server.port", str(port), "--server.fileWatcherType", "none", *flags],
                            cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if urllib.request.urlopen(url + "/_stcore/health", timeout=1).read().strip() == b"ok":
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail("streamlit did not come up:\n" + log_path.read_text()[-3000:])
            time.sleep(0.2)
        yield url, port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
