"""Erasure requests as an Iceberg table, ``<catalog>.<meta namespace>.forget_requests``, next to the
audit: the one channel by which keys to erase reach the cleaner. Airflow never sees a key: the DAG
run's conf, XCom, rendered fields, logs and spark-submit's argv carry request ids and counts only,
and in every deploy mode the application reads the keys from the catalog it already reaches.

Writing to the table is the permission to erase. A data-protection team writes rows with any SQL
engine on the catalog (one row per key, rows of one request sharing its id)::

    INSERT INTO lake.lakecleaner.forget_requests  -- request_id, table_name, key, requested_at, requested_by,
    VALUES ('dpo-2026-118', 'crm.accounts', map('tenant', '7', 'id', '42'),  -- reason, status, and three
            current_timestamp(), 'dpo@corp', 'art. 17 request 118', 'pending', NULL, NULL, NULL)  -- for the cleaner

or with ``lakecleaner forget TABLE --keys FILE`` (JSON lines). Each DAG run carries out the pending
ones before evaluating (lakecleaner.spark.forget); a done or rejected request's keys are set to null and the
table's older snapshots expired, so the request table does not keep the keys it exists to erase.
"""
from __future__ import annotations

import logging
import time
import uuid
from typing import Iterable

from lakecleaner.core.table import CompactionError, ConcurrentCommitError, NoSuchTableError, first_line
from lakecleaner.spark.catalog import create_own_table
from lakecleaner.core.config import ConfigError, LakecleanerConfig
from lakecleaner.spark.forget import (DEFAULT_INTERVAL_MS, Attribution, ForgetError, ForgetRequest, as_text, forget, scrub, utc)
from lakecleaner.core.erasure_requests import (CLAIM_LEASE_MS, DONE, IN_PROGRESS, OWN_PROPERTIES, PENDING, REJECTED,
                                               REQUESTS_SCHEMA, key_rows, requests_ref, requests_table)
from lakecleaner.core.strategies import sql_string
from lakecleaner.spark import guards
from lakecleaner.spark.frames import local_frame
from lakecleaner.spark.iceberg_ops import purge_deleted

log = logging.getLogger(__name__)

def ensure_requests_table(spark, cfg: LakecleanerConfig) -> None:
    create_own_table(spark, cfg, requests_table(cfg), REQUESTS_SCHEMA, OWN_PROPERTIES)


def enqueue(spark, cfg: LakecleanerConfig, request: ForgetRequest, now_ms: int) -> None:
    """Write one request's keys as pending rows."""
    ensure_requests_table(spark, cfg)
    rows = [(request.request_id, request.table, {str(k): as_text(v) for k, v in key.items()}, utc(now_ms),
             request.requested_by, request.reason, PENDING, None, None, None) for key in request.keys]
    local_frame(spark, rows, REQUESTS_SCHEMA).writeTo(requests_table(cfg)).append()


def _open_sql(now_ms: int) -> str:
    """``_open`` in SQL, over the request table's columns."""
    return (f"(status = {sql_string(PENDING)} OR (status = {sql_string(IN_PROGRESS)} AND "
            f"coalesce(unix_millis(processed_at), 0) < {int(now_ms) - CLAIM_LEASE_MS}))")


def pending_requests(spark, cfg: LakecleanerConfig, ids: Iterable[str] = (),
                     now_ms: int | None = None) -> list[ForgetRequest]:
    """The open requests (only ``ids``, when given), keys included: what a dry run counts, and the
    (request id, table) pairs a run claims one by one (claimed_request then reads the keys it holds)."""
    if not spark.catalog.tableExists(requests_table(cfg).replace("`", "")):
        return []
    where = _open_sql(int(now_ms if now_ms is not None else time.time() * 1000))
    if ids := [i for i in ids if isinstance(i, str)]:
        where += f" AND request_id IN ({', '.join(sql_string(i) for i in ids)})"
    return _requests(spark, cfg, where)


def claimed_request(spark, cfg: LakecleanerConfig, request_id: str, table: str, token: str) -> ForgetRequest:
    """The request as this run claimed it: exactly the rows its claim took (a key added under the
    same id after the claim waits for the next run)."""
    [request] = _requests(spark, cfg, f"request_id = {sql_string(request_id)} AND table_name = "
                                      f"{sql_string(table)} AND note = {sql_string(token)}")
    return request


def _requests(spark, cfg: LakecleanerConfig, where: str) -> list[ForgetRequest]:
    grouped: dict[tuple[str, str], dict] = {}
    for r in spark.sql(f"SELECT *, unix_millis(requested_at) AS lc_requested_ms FROM {requests_table(cfg)} "
                       f"WHERE {where} ORDER BY requested_at").collect():
        entry = grouped.setdefault((r["request_id"], r["table_name"]), {
            "keys": [], "by": r["requested_by"], "reason": r["reason"], "at": r["lc_requested_ms"]})
        entry["keys"].append(dict(r["key"] or {}))
    return [ForgetRequest(table, tuple(e["keys"]), request_id, e["by"], e["reason"], e["at"])
            for (request_id, table), e in grouped.items()]


def claim(spark, cfg: LakecleanerConfig, request_id: str, table: str, by: Attribution, now_ms: int) -> str | None:
    """Take the request for this run, or None when another run has it: two runs of the DAG (a
    backfill beside a scheduled run) list the same pending request, and one request must be carried
    out by one run at a time. The claim is an Iceberg commit: of two runs updating the same rows,
    the second fails validation, or finds them no longer open."""
    token = f"claim {uuid.uuid4().hex}"
    where = f"request_id = {sql_string(request_id)} AND table_name = {sql_string(table)}"
    try:
        with guards.yielding(requests_ref(cfg)):
            spark.sql(f"UPDATE {requests_table(cfg)} SET status = {sql_string(IN_PROGRESS)}, processed_at = "
                      f"current_timestamp(), processed_by = {sql_string(_processed_by(by))}, "
                      f"note = {sql_string(token)} WHERE {where} AND {_open_sql(now_ms)}")
    except ConcurrentCommitError:  # Iceberg's validation: another run claimed it first
        return None
    mine = spark.sql(f"SELECT count(*) FROM {requests_table(cfg)} WHERE {where} AND note = {sql_string(token)}")
    return token if mine.collect()[0][0] else None


def _processed_by(by: Attribution) -> str:
    return by.dag_run_id or "lakecleaner forget (CLI)"


def finish(spark, cfg: LakecleanerConfig, request: ForgetRequest, token: str, status: str, note: str,
           by: Attribution) -> None:
    """Close a claimed request: its keys set to null and the outcome noted (purge_closed_keys then
    makes that physical, once for every request an application closed)."""
    spark.sql(f"UPDATE {requests_table(cfg)} SET key = NULL, status = {sql_string(status)}, "
              f"processed_at = current_timestamp(), processed_by = {sql_string(_processed_by(by))}, "
              f"note = {sql_string(note)} WHERE request_id = {sql_string(request.request_id)} "
              f"AND table_name = {sql_string(request.table)} AND note = {sql_string(token)}")


def purge_closed_keys(spark, cfg: LakecleanerConfig) -> None:
    """Rewrite the request table and expire its older snapshots, so no file keeps a key that a
    closed request set to null. Once per application, not per request: each purge rewrites the table."""
    purge_deleted(spark, requests_ref(cfg))


def release(spark, cfg: LakecleanerConfig, request: ForgetRequest, token: str, note: str) -> None:
    """Give a claimed request back (a failure that a later run may get past): pending again."""
    spark.sql(f"UPDATE {requests_table(cfg)} SET status = {sql_string(PENDING)}, note = {sql_string(note)} "
              f"WHERE request_id = {sql_string(request.request_id)} AND table_name = {sql_string(request.table)} "
              f"AND note = {sql_string(token)}")


# ---------------------------------------------------------------- carrying them out
def carry_out(spark, cfg: LakecleanerConfig, request: ForgetRequest, now_ms: int, interval_ms: int,
              by: Attribution, dry_run: bool) -> dict:
    """One listed request: its result line. A dry run counts what its keys would remove. Otherwise
    it is claimed first (another run carrying it out: yielded) and carried out with the keys the
    claim took. A rejected request (a bad key, no such table) is closed as such; any other failure
    gives it back, to be retried (resumed, when its delete committed)."""
    if dry_run:
        return _attempt(spark, cfg, request, now_ms, interval_ms, by, True)[0]
    token = claim(spark, cfg, request.request_id, request.table, by, now_ms)
    if token is None:
        return {"request_id": request.request_id, "table": request.table, "status": "yielded",
                "reason": "another run is carrying this request out", "keys": len(request.keys)}
    request = claimed_request(spark, cfg, request.request_id, request.table, token)
    line, rejected = _attempt(spark, cfg, request, now_ms, interval_ms, by, False)
    try:
        if line["status"] != "failed":
            finish(spark, cfg, request, token, DONE, f"removed {line['removed_records']} record(s), "
                                                     f"{line['removed_quarantined']} from quarantine; physically "
                                                     f"removed: {line['physically_removed']}", by)
        elif rejected:
            finish(spark, cfg, request, token, REJECTED, line["error"], by)
        else:
            release(spark, cfg, request, token, line["error"])
    except Exception as exc:  # noqa: BLE001 - carried out; the request row is retried after the lease
        return {**line, "status": "failed", "error": f"table {request.table}: request {request.request_id} was "
                f"carried out ({line.get('status')}) but could not be closed in the request table "
                f"({type(exc).__name__}); it is resumed from its audit after the claim's lease"}
    return line


def _attempt(spark, cfg: LakecleanerConfig, request: ForgetRequest, now_ms: int, interval_ms: int,
             by: Attribution, dry_run: bool) -> tuple[dict, bool]:
    """The request's result line, and whether it failed for good (rejected)."""
    try:
        return forget(spark, cfg, request, now_ms, interval_ms, by, dry_run).as_dict(), False
    except Exception as exc:  # noqa: BLE001 - this request's failure, named; the others go on
        text = (str(exc) if isinstance(exc, (CompactionError, ConfigError))
                else scrub(f"table {request.table}: {first_line(exc)}", request))
        # never to be carried out: a bad key, a malformed name, a table the catalog says does not exist; a
        # table's own problem (a setting, its layout) or a catalog that cannot be asked waits, the request kept
        rejected = ((isinstance(exc, ForgetError) and exc.rejected) or isinstance(exc, NoSuchTableError)
                    or (isinstance(exc, ConfigError) and exc.prop == "table"))
        return {"request_id": request.request_id, "table": request.table, "status": "failed", "error": text,
                "rejected": rejected, "keys": len(request.keys)}, rejected


def job_main(argv: list[str] | None = None) -> int:
    """The forget application: enqueue the CLI's keys (a file the CLI wrote, 0600) if given, then
    carry out the pending requests (those named, or the one just enqueued); one result line per
    request; exit 1 if any failed."""
    import argparse

    from lakecleaner.spark.session import get_spark, job_config
    from lakecleaner.core.submit import format_result

    p = argparse.ArgumentParser(prog="jobs/forget.py")
    p.add_argument("--config")
    p.add_argument("--request-id", action="append", default=[], help="only these pending requests")
    p.add_argument("--enqueue-file", help="JSON lines of keys for a new request on --table")
    p.add_argument("--table")
    p.add_argument("--requested-by")
    p.add_argument("--reason")
    p.add_argument("--enqueue-only", action="store_true")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--dag-run-id")
    p.add_argument("--triggered-by")
    p.add_argument("--now-ms", type=int)
    p.add_argument("--interval-ms", type=int, default=DEFAULT_INTERVAL_MS)
    args = p.parse_args(argv)
    cfg = job_config(args.config)
    now_ms = int(args.now_ms if args.now_ms is not None else time.time() * 1000)
    by = Attribution(args.dag_run_id, args.triggered_by)
    spark = get_spark(cfg, "lakecleaner-forget", set_master=False)
    failed = 0
    try:
        ids = list(args.request_id)
        if args.enqueue_file:
            with open(args.enqueue_file) as f:
                keys = key_rows(f, "keys")
            request = ForgetRequest(args.table, tuple(keys), requested_by=args.requested_by, reason=args.reason)
            if args.dry_run:  # what would go; nothing written, not even the request
                line = carry_out(spark, cfg, request, now_ms, args.interval_ms, by, dry_run=True)
                print(format_result(line), flush=True)
                return 1 if line.get("status") == "failed" else 0
            enqueue(spark, cfg, request, now_ms)
            ids = [request.request_id]
            if args.enqueue_only:
                print(format_result({"request_id": request.request_id, "table": request.table,
                                     "status": PENDING, "keys": len(keys)}), flush=True)
                return 0
        lines = []
        for request in pending_requests(spark, cfg, ids, now_ms):
            lines.append(carry_out(spark, cfg, request, now_ms, args.interval_ms, by, args.dry_run))
            failed += lines[-1].get("status") == "failed"
            print(format_result(lines[-1]), flush=True)
        if not args.dry_run and any(line.get("status") != "yielded" for line in lines):
            purge_closed_keys(spark, cfg)
    finally:
        spark.stop()
    return 1 if failed else 0

