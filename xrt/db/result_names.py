"""asv's result-file names: the one place xrt knows the rule. Written by ``xrt.bench`` (the runner picks a
commit's files by it), read by ``xrt.db`` (ingest keys its errors by commit) and ``xrt.track`` (the gate);
standard library only (and the sidecar's suffix, from the import-free ``sidecar_keys``), so any layer may
import it."""

from __future__ import annotations

import hashlib
import re

from xrt.db.sidecar_keys import LEGACY_SUFFIX

# asv names a result file <machine>/<commit_hash[:8]>-<env_name>.json (asv.results.get_filename; an
# env name of 128 characters or more becomes "env-<md5>"); a sidecar adds its suffix to the stem.
RESULT_COMMIT_CHARS = 8
_COMMIT_OF_NAME = re.compile(r"([0-9a-f]{8})-")
# asv's other files: <machine>/machine.json, and benchmarks.json at the top
NOT_RESULTS = ("machine.json", "benchmarks.json")
# xrt's own record beside them: <machine>/<40-hex commit>.carried (written by xrt.bench.runner for
# --changed-only, read by xrt.db.ingest into the `carried` table).
CARRIED_SUFFIX = ".carried"


def result_file_prefix(commit: str) -> str:
    """The start of the name of each asv result file (and sidecar) of ``commit``."""
    return commit[:RESULT_COMMIT_CHARS]


def result_file_name(commit: str, env_name: str) -> str:
    """The name asv gives the result file of ``commit`` in the environment ``env_name``
    (``asv.results.get_filename``: an env name of 128 characters or more becomes ``env-<md5>``)."""
    if len(env_name) >= 128:
        env_name = "env-" + hashlib.md5(env_name.encode("utf-8")).hexdigest()
    return f"{result_file_prefix(commit)}-{env_name}.json"


def is_result_file(name: str) -> bool:
    """Whether ``name`` (a file name in a machine folder) is an asv result file: a ``.json`` that is neither
    asv's machine.json / benchmarks.json nor a sidecar of the older form (``X.xrt.json``)."""
    return name.endswith(".json") and name not in NOT_RESULTS and not name.endswith(LEGACY_SUFFIX)


def is_result_file_of(name: str, commit: str) -> bool:
    """Whether ``name`` (a file name in a machine folder) is one of asv's result files of ``commit``."""
    return name.startswith(result_file_prefix(commit)) and is_result_file(name)


def commit_of_name(rel: str) -> str | None:
    """The commit prefix that an asv result file's (or sidecar's) name gives, else None."""
    m = _COMMIT_OF_NAME.match(rel.rsplit("/", 1)[-1])
    return m.group(1) if m else None


# A paired measurement (xrt gate --paired) measures each commit once a round and keeps every round's
# files in one folder, each renamed with its round: ingest keys a run by its file's path. `xrt bench
# run --processes N` keeps each process of a commit the same way, named with its process: several
# runs of one commit by design, like the rounds.
ROUND_RE = r"-(?:round|proc)(\d+)\.json$"  # in SQL (regexp_extract) and Python alike: group 1 is the round
PROCESS_RE = r"-proc(\d+)\.json$"  # a process of `xrt bench run --processes N` (not paired with the other side)


def round_name(name: str, k: int, suffix: str = ".json") -> str:
    """``X.json`` of round ``k`` -> ``X-round<k>.json`` (a sidecar: ``suffix`` ``.xrt``)."""
    return f"{name[:-len(suffix)]}-round{k}{suffix}"


def process_name(name: str, k: int, suffix: str = ".json") -> str:
    """``X.json`` of process ``k`` of ``xrt bench run --processes N`` -> ``X-proc<k>.json`` (a sidecar:
    ``suffix`` ``.xrt``)."""
    return f"{name[:-len(suffix)]}-proc{k}{suffix}"
