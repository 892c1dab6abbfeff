"""The erasure request table's shape and what may be read of it without Spark: the pending requests
without their keys (for the DAG), and the JSON-lines syntax of a key (for the CLI). Carrying a request
out runs in Spark: lakecleaner.spark.erasure_requests, whose docstring says how requests arrive."""
from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Iterable

from pyiceberg.expressions import In

from lakecleaner.core.config import LakecleanerConfig
from lakecleaner.core.metadata import own_table
from lakecleaner.core.strategies import ident
from lakecleaner.core.table import TableRef

PENDING, DONE, REJECTED = "pending", "done", "rejected"


REQUESTS_TABLE = "forget_requests"


REQUESTS_SCHEMA = (
    "request_id string, table_name string, key map<string,string>, requested_at timestamp, requested_by string, "
    "reason string, status string, processed_at timestamp, processed_by string, note string"
)


# Copy-on-write: a request's keys, set to null when it is done, leave their data files at once (the
# older snapshots are then expired), instead of lingering under a position delete.
OWN_PROPERTIES = {"write.update.mode": "copy-on-write", "write.delete.mode": "copy-on-write",
                  "write.merge.mode": "copy-on-write"}


def requests_table(cfg: LakecleanerConfig) -> str:
    return f"{ident(cfg.catalog.name)}.{ident(cfg.cleaner.meta_namespace)}.{ident(REQUESTS_TABLE)}"


def requests_ref(cfg: LakecleanerConfig) -> TableRef:
    return TableRef(cfg.catalog.name, cfg.cleaner.meta_namespace, REQUESTS_TABLE)


@dataclass(frozen=True)
class PendingRequest:
    """What the Airflow side may know of a pending request: its id, table and number of keys."""
    request_id: str
    table: str
    keys: int


# ---------------------------------------------------------------- writing requests
def key_rows(lines: Iterable[str], source: str) -> list[dict[str, Any]]:
    """Keys as JSON lines, each an object {key column: value}: the one syntax for a key. Errors
    name the line, never its text. A number with a fraction or an exponent is kept as written
    (Decimal): a float would round a long decimal key to another key, which nothing matches."""
    keys = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            key = json.loads(line, parse_float=Decimal)
        except ValueError:
            raise ValueError(f"{source}: line {number} is not JSON (one object per line, e.g. "
                             '{"tenant": 7, "id": 42})') from None
        if not isinstance(key, dict) or not key:
            raise ValueError(f"{source}: line {number} is not a JSON object naming the key columns")
        keys.append(key)
    if not keys:
        raise ValueError(f"{source}: no key given")
    return keys


# ---------------------------------------------------------------- reading and claiming them
IN_PROGRESS = "in progress"


# A claim older than this is taken over: its run died (the request resumes from its audit rows).
CLAIM_LEASE_MS = 6 * 3_600_000


def _open(status: str | None, claimed_at_ms: int | None, now_ms: int) -> bool:
    """Whether a request row waits for a run: pending, or claimed by a run that outlived the lease."""
    return status == PENDING or (status == IN_PROGRESS and (claimed_at_ms or 0) < now_ms - CLAIM_LEASE_MS)


@dataclass(frozen=True)
class UnmatchedRequest:
    """A request id the `forget` param named that is no pending request: why. Only an id the table
    does not hold fails the run (a typo would otherwise erase nothing without a word); a request
    done, rejected or being carried out by another run is said and left."""
    request_id: str
    status: str | None  # the request's status in the table; None: no such request

    @property
    def fails_the_run(self) -> bool:
        return self.status is None

    def message(self, table: str) -> str:
        if self.status is None:
            return f"erasure request {self.request_id!r}: no such request in {table} (asked for in forget)"
        if self.status == IN_PROGRESS:
            return f"erasure request {self.request_id!r} is being carried out by another run: left to it"
        return f"erasure request {self.request_id!r} is {self.status} already: nothing to carry out"


def not_pending(named: Iterable[str], pending: Iterable[PendingRequest]) -> list[str]:
    """The ids ``named`` (once each, in order) that no ``pending`` request has: the only ones whose
    status is worth reading (none in the usual case, where every named id is pending)."""
    open_ids = {p.request_id for p in pending}
    return [i for i in dict.fromkeys(named) if i not in open_ids]


def unmatched_requests(missing: Iterable[str], statuses: dict[str, str]) -> list[UnmatchedRequest]:
    """Each id of ``not_pending`` with its status in the table (``statuses``: id -> status, of the
    ids the table holds)."""
    return [UnmatchedRequest(i, statuses.get(i)) for i in missing]


def request_statuses(cfg: LakecleanerConfig, ids: Iterable[str]) -> dict[str, str]:
    """id -> status of the requests the table holds among ``ids`` (read through pyiceberg, no key)."""
    ids = [i for i in ids if isinstance(i, str)]
    tbl = own_table(cfg, REQUESTS_TABLE) if ids else None
    if tbl is None:
        return {}
    rows = tbl.scan(row_filter=In("request_id", ids), selected_fields=("request_id", "status")).to_arrow()
    return {r["request_id"]: r["status"] for r in rows.to_pylist()}


def list_pending(cfg: LakecleanerConfig, ids: Iterable[str] = (), now_ms: int | None = None) -> list[PendingRequest]:
    """The open requests without their keys, read through pyiceberg (no Spark): for the DAG, which
    submits an application only when there is work and never reads a key column."""
    tbl = own_table(cfg, REQUESTS_TABLE)
    if tbl is None:
        return []
    now_ms = int(now_ms if now_ms is not None else time.time() * 1000)
    wanted = {i for i in ids if isinstance(i, str)}  # an old run's conf may hold objects (keys): never used
    counts: dict[tuple[str, str], int] = {}
    rows = tbl.scan(row_filter=In("status", (PENDING, IN_PROGRESS)),
                    selected_fields=("request_id", "table_name", "status", "processed_at")).to_arrow()
    for r in rows.to_pylist():
        claimed = r["processed_at"]
        claimed_ms = None if claimed is None else int(claimed.replace(tzinfo=dt.timezone.utc).timestamp() * 1000)
        if _open(r["status"], claimed_ms, now_ms) and (not wanted or r["request_id"] in wanted):
            counts[(r["request_id"], r["table_name"])] = counts.get((r["request_id"], r["table_name"]), 0) + 1
    return [PendingRequest(rid, table, n) for (rid, table), n in sorted(counts.items())]
