"""The database's tables, its schema version and the migrations that bring an older file up to date.

Every migration runs inside the writer's transaction (DuckDB DDL is transactional), so a
database is either at the old version or at the new one, never in between. A reader of an older
file reads a migrated private copy (:func:`xrt.db.store.read`): every reader sees the latest tables.
"""

from __future__ import annotations

from typing import Any

# (version, description, statements). Append only: never edit a released migration.
MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (1, "tables: machines, commits, benchmarks, runs, results, ingest_files, ingest_errors, ingests", [
        """CREATE TABLE machines (
            machine VARCHAR PRIMARY KEY, os VARCHAR, arch VARCHAR, cpu VARCHAR, num_cpu VARCHAR,
            ram VARCHAR, gpu_model VARCHAR, facts JSON, file VARCHAR)""",
        """CREATE TABLE commits (
            hash VARCHAR PRIMARY KEY, position INTEGER, first_parent_index INTEGER,
            author_date TIMESTAMP, author VARCHAR, message VARCHAR, parents VARCHAR[], source VARCHAR)""",
        """CREATE TABLE benchmarks (
            name VARCHAR PRIMARY KEY, type VARCHAR, unit VARCHAR, params JSON, param_names VARCHAR[],
            version VARCHAR, bytes DOUBLE[], flops DOUBLE[], sol_s DOUBLE[], attrs JSON)""",
        """CREATE TABLE runs (
            run_id INTEGER PRIMARY KEY, file VARCHAR, content_hash VARCHAR, machine VARCHAR,
            commit_hash VARCHAR, env_name VARCHAR, commit_date TIMESTAMP, python VARCHAR,
            asv_schema INTEGER, params JSON, requirements JSON, gpu_model VARCHAR, driver VARCHAR,
            cuda VARCHAR, torch VARCHAR, triton VARCHAR, sm_clock_mhz DOUBLE, mem_clock_mhz DOUBLE,
            throttle_share DOUBLE, peak_gbps DOUBLE, peak_tflops DOUBLE, facts JSON,
            n_values INTEGER, n_ok INTEGER, n_failed INTEGER, n_skipped INTEGER,
            started_at TIMESTAMP, ingested_at TIMESTAMP)""",
        """CREATE TABLE results (
            run_id INTEGER, machine VARCHAR, commit_hash VARCHAR, env_name VARCHAR, benchmark VARCHAR,
            param_index INTEGER, params VARCHAR[], param_key VARCHAR, value DOUBLE, status VARCHAR,
            samples DOUBLE[], ci_99_a DOUBLE, ci_99_b DOUBLE, q25 DOUBLE, q75 DOUBLE, number DOUBLE,
            repeat DOUBLE, unit VARCHAR, version VARCHAR, started_at TIMESTAMP, duration DOUBLE,
            bytes DOUBLE, flops DOUBLE, sol_s DOUBLE, gbps DOUBLE, tflops DOUBLE, pct_sol DOUBLE)""",
        """CREATE TABLE ingest_files (
            file VARCHAR PRIMARY KEY, kind VARCHAR, content_hash VARCHAR, status VARCHAR,
            run_id INTEGER, ingest_id INTEGER, ingested_at TIMESTAMP)""",
        """CREATE TABLE ingest_errors (
            file VARCHAR, kind VARCHAR, reason VARCHAR, ingest_id INTEGER, recorded_at TIMESTAMP)""",
        """CREATE TABLE ingests (
            ingest_id INTEGER PRIMARY KEY, started_at TIMESTAMP, seconds DOUBLE, results_dir VARCHAR,
            repo VARCHAR, files_ingested INTEGER, files_unchanged INTEGER, errors INTEGER,
            values_ok INTEGER, failures INTEGER, skips INTEGER)""",
    ]),
    (2, "views: results_by_commit (results in commit order), series (one row per time series)", [
        """CREATE VIEW results_by_commit AS
            SELECT r.*, c.position AS commit_position, c.author_date AS commit_date
            FROM results r LEFT JOIN commits c ON c.hash = r.commit_hash""",
        """CREATE VIEW series AS
            SELECT machine, benchmark, param_key, any_value(unit) AS unit, count(*) AS n,
                   count(value) AS n_values, count(*) FILTER (status = 'failed') AS n_failed,
                   count(*) FILTER (status = 'skipped') AS n_skipped
            FROM results GROUP BY machine, benchmark, param_key""",
    ]),
    (3, "results: sm_mhz, cycles, cycles_median, throttled_share (from the timing layer's .xrt sidecar)", [
        "DROP VIEW IF EXISTS results_by_commit",
        "ALTER TABLE results ADD COLUMN sm_mhz DOUBLE",
        "ALTER TABLE results ADD COLUMN cycles DOUBLE[]",
        "ALTER TABLE results ADD COLUMN cycles_median DOUBLE",
        "ALTER TABLE results ADD COLUMN throttled_share DOUBLE",
        # views bind their columns when created: recreate so that r.* has the new ones
        """CREATE VIEW results_by_commit AS
            SELECT r.*, c.position AS commit_position, c.author_date AS commit_date
            FROM results r LEFT JOIN commits c ON c.hash = r.commit_hash""",
    ]),
    # Until version 4, xrt.track created `regressions` (and writers of tuning results created
    # `tuning_results`) with CREATE TABLE IF NOT EXISTS: an older file may have either already.
    (4, "tables: regressions (detected steps and their acknowledgements), tuning_results (the tuner's configs)", [
        """CREATE TABLE IF NOT EXISTS regressions (
            id VARCHAR PRIMARY KEY, machine VARCHAR, benchmark VARCHAR, param_key VARCHAR, params VARCHAR[],
            kind VARCHAR, "commit" VARCHAR, previous_commit VARCHAR, before DOUBLE, after DOUBLE, ratio DOUBLE,
            p_value DOUBLE, z DOUBLE, cycles_ratio DOUBLE, unit VARCHAR, n_before INTEGER, n_after INTEGER,
            fixed_by VARCHAR, status VARCHAR, note VARCHAR, detected_at TIMESTAMP, updated_at TIMESTAMP,
            still_detected BOOLEAN, diag JSON)""",
        """CREATE TABLE IF NOT EXISTS tuning_results (
            op VARCHAR, device VARCHAR, shape VARCHAR, dtype VARCHAR, provider VARCHAR, config JSON,
            median_s DOUBLE, gbps DOUBLE)""",
    ]),
    # Since 4 the regressions table exists in every file, so "was detection ever run here?" needs
    # its own record (the dashboard says "run xrt regressions" only when it never ran). A file that
    # already holds steps was detected at least once: seeded from them.
    (5, "table: detection_runs (one row per stored `xrt regressions` run)", [
        "CREATE TABLE detection_runs (run_at TIMESTAMP, machine VARCHAR, steps INTEGER)",
        "INSERT INTO detection_runs SELECT max(updated_at), NULL, count(*) FROM regressions HAVING count(*) > 0",
    ]),
    # `xrt bench run --changed-only` leaves <machine>/<commit>.carried: the units (ops) it did not run
    # at that commit because their sources had not changed, each with the commit measured at. The
    # gate judges those series on that commit's samples (xrt.bench.sources, docs/regressions.md).
    (6, "table: carried (units carried forward by xrt bench run --changed-only)", [
        """CREATE TABLE carried (
            machine VARCHAR, commit_hash VARCHAR, unit VARCHAR, from_commit VARCHAR, since_commit VARCHAR,
            reason VARCHAR, file VARCHAR)""",
    ]),
    # The newest commit of each series is judged at ingest (xrt.track.newest): a suspected
    # regression is stored at once (suspected = true) until the detector confirms or withdraws it;
    # every series' judgement, with the reason where it could not be judged, has its own table.
    (7, "regressions.suspected; table: newest_judgements (each series' newest commit, judged at ingest)", [
        "ALTER TABLE regressions ADD COLUMN suspected BOOLEAN",
        """CREATE TABLE newest_judgements (
            machine VARCHAR, benchmark VARCHAR, param_key VARCHAR, "commit" VARCHAR, previous_commit VARCHAR,
            verdict VARCHAR, reason VARCHAR, ratio DOUBLE, z DOUBLE, p_value DOUBLE, judged_at TIMESTAMP)""",
    ]),
    # Every evaluation of the tuner (xrt tune's journals, loaded by `xrt db ingest`): one row per
    # config tried, timed or failed, with the space hash it was tried under and its place in the
    # search (eval). The table of version 4 had the first eight columns only, and only tests wrote
    # to it: its rows are kept (file NULL).
    (8, "tuning_results: every evaluation of the tuner's journals (status, error, space hash, eval order)", [
        "ALTER TABLE tuning_results RENAME TO tuning_results_v4",
        """CREATE TABLE tuning_results (
            op VARCHAR, device VARCHAR, shape VARCHAR, dtype VARCHAR, provider VARCHAR, config JSON,
            median_s DOUBLE, gbps DOUBLE, machine VARCHAR, space VARCHAR, space_hash VARCHAR, config_key VARCHAR,
            is_default BOOLEAN, status VARCHAR, error VARCHAR, max_rel_err DOUBLE, rel_noise DOUBLE, n INTEGER,
            ran_on VARCHAR, strategy VARCHAR, seed INTEGER, eval INTEGER, evaluated_at TIMESTAMP, file VARCHAR)""",
        """INSERT INTO tuning_results (op, device, shape, dtype, provider, config, median_s, gbps, status)
            SELECT op, device, shape, dtype, provider, config, median_s, gbps, 'timed' FROM tuning_results_v4""",
        "DROP TABLE tuning_results_v4",
    ]),
    # `xrt explain` (xrt.track.explain): what changed between base and head for one benchmark case
    # (kernel list, launch configuration, registers and spills, NCU throughput, settings), one row per
    # case and commit pair, keyed by the regression it explains (NULL for `--base/--head/--bench`).
    # (Merged before 8: migrate() applies every version a file has not recorded, so a file migrated
    # to 9 before 8 existed still gets 8.)
    (9, "table: explanations (xrt explain: what changed between base and head for a benchmark case)", [
        """CREATE TABLE explanations (
            regression_id VARCHAR, machine VARCHAR, benchmark VARCHAR, param_key VARCHAR,
            base_commit VARCHAR, head_commit VARCHAR, created_at TIMESTAMP, host VARCHAR,
            payload JSON, markdown VARCHAR)""",
    ]),
    # The gate looks up a commit's ingest errors by this column (it matched '/<hash[:8]>' in file
    # names before): the run's commit where the file was read, else the commit its name gives
    # (asv's <hash[:8]>-<env>.json and its sidecars, xrt's <hash>.carried); NULL for the others
    # (benchmarks.json, machine.json, tuner journals). Older rows are filled in the same way.
    (10, "ingest_errors.commit_hash (the commit whose files the error is about)", [
        "ALTER TABLE ingest_errors ADD COLUMN commit_hash VARCHAR",
        r"""UPDATE ingest_errors SET commit_hash = coalesce(
            (SELECT any_value(r.commit_hash) FROM ingest_files f JOIN runs r ON r.run_id = f.run_id
             WHERE f.file = ingest_errors.file),
            nullif(regexp_extract(file, '(^|/)([0-9a-f]{40})\.carried$', 2), ''),
            nullif(regexp_extract(file, '(^|/)([0-9a-f]{8})-[^/]*$', 2), ''))""",
    ]),
    # The host series' paired reference: per sample, the host time of the machine's reference call
    # taken in turn with it (xrt.bench.suite.HostCase). The gate judges sample / reference, which a
    # slower or faster host moves alike.
    (11, "results.ref_samples (the host series' reference call, sample by sample)", [
        "ALTER TABLE results ADD COLUMN ref_samples DOUBLE[]",
    ]),
    # `xrt culprit` (xrt.orchestrate.culprit) bisects a failing gate's range and stores, on each
    # regression of the group it bisected, the commit to blame and the evidence: the bisect's measured
    # commits with their values and verdicts, and the first rows of `xrt explain` on the culprit.
    (12, "regressions.culprit, regressions.bisection (xrt culprit: the commit to blame and the evidence)", [
        "ALTER TABLE regressions ADD COLUMN culprit VARCHAR",
        "ALTER TABLE regressions ADD COLUMN bisection JSON",
    ]),
    # A model's step (the GPT and CNN suites): how many tokens or images one call processes, from the
    # op's definition (OpDef.step_items) through the sidecar; throughput is items / value.
    (13, "results.items, results.item_unit (what a model's step processes: tokens, images)", [
        "DROP VIEW IF EXISTS results_by_commit",
        "ALTER TABLE results ADD COLUMN items DOUBLE",
        "ALTER TABLE results ADD COLUMN item_unit VARCHAR",
        # views bind their columns when created: recreate so that r.* has the new ones
        """CREATE VIEW results_by_commit AS
            SELECT r.*, c.position AS commit_position, c.author_date AS commit_date
            FROM results r LEFT JOIN commits c ON c.hash = r.commit_hash""",
    ]),
]

# Versions handed to migrations on other branches, not yet in this file: skipped by the checks that
# the versions are consecutive. Remove a number when its migration is merged.
RESERVED: tuple[int, ...] = ()

LATEST = MIGRATIONS[-1][0]


def current_version(con: Any) -> int:
    """The file's schema version; 0 for an empty database. (Every result fetched whole: DuckDB refuses
    ``con.sql`` on a connection with an unfinished result.)"""
    has = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'schema_version' "
                      "AND database_name = current_database()").fetchall()[0][0]
    if not has:
        return 0
    v = con.execute("SELECT max(version) FROM schema_version").fetchall()[0][0]
    return int(v or 0)


def migrate(con: Any, upto: int = LATEST) -> int:
    """Bring the database to version ``upto`` inside the caller's transaction; returns the old version.

    Every migration up to ``upto`` that the file has not recorded is applied, in version order: also
    one numbered below the file's version (a migration merged after a later-numbered one had
    already been applied to the file; their tables are independent)."""
    old = current_version(con)
    if old > LATEST:
        raise RuntimeError(f"database schema version {old} is newer than this xrt knows ({LATEST}); "
                           "upgrade xrt")
    if old == 0:
        con.execute("CREATE TABLE schema_version (version INTEGER, applied_at TIMESTAMP, description VARCHAR)")
        applied: set[int] = set()
    else:
        # migrate() records every version it applies, so the table lists them all
        applied = {int(v) for (v,) in con.execute("SELECT DISTINCT version FROM schema_version").fetchall()}
    for version, description, statements in MIGRATIONS:
        if version not in applied and version <= upto:
            for s in statements:
                con.execute(s)
            con.execute("INSERT INTO schema_version VALUES (?, now()::TIMESTAMP, ?)", [version, description])
    return old
