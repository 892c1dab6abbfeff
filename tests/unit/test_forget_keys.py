"""Erasure requests: key specs and the deadline (the README's bound), without Spark."""
import dataclasses
import re

import pytest

from lakecleaner.config import LONG_MAX, resolve_table, physical_deletion_deadline
from lakecleaner.forget import ForgetError, parse_key

COLUMNS = {"key": "string", "offset": "bigint", "partition": "int", "value": "string"}


def test_a_one_column_key_takes_the_whole_text_as_its_value():
    assert parse_key("ns.t", "a,b=c", ("key",)) == {"key": "a,b=c"}
    assert parse_key("ns.t", "key=a,b", ("key",)) == {"key": "a,b"}


def test_a_composite_key_needs_every_column_once():
    assert parse_key("ns.t", "id=42,tenant=7", ("tenant", "id")) == {"tenant": "7", "id": "42"}
    assert parse_key("ns.t", {"tenant": 7, "id": 42}, ("tenant", "id")) == {"tenant": "7", "id": "42"}
    for spec, problem in (("tenant=7", "missing key column(s) id"), ("tenant=7,id=1,x=2", "unknown key column(s) x"),
                          ("tenant=7,tenant=8,id=1", "given twice"), ({"tenant": None, "id": 1}, "null")):
        with pytest.raises(ForgetError, match=f"table ns.t: bad key: .*{re.escape(problem)}") as err:
            parse_key("ns.t", spec, ("tenant", "id"))
        assert "7" not in str(err.value)  # never the value


def test_the_deadline_is_the_readme_bound():
    tc = resolve_table("ns.t", {"max.compaction.lag.ms": "60000", "min.compaction.lag.ms": "500"}, COLUMNS)
    assert physical_deletion_deadline(tc, 1_000, 900) == 1_000 + 60_000 + 900 + 500
    aged = dataclasses.replace(tc, snapshot_retention=(5_000, 1))
    assert physical_deletion_deadline(aged, 1_000, 900) == 1_000 + 60_000 + 900 + 5_000
    assert physical_deletion_deadline(dataclasses.replace(tc, snapshot_retention=(None, 3)), 1_000, 900) is None
    assert physical_deletion_deadline(dataclasses.replace(tc, max_compaction_lag_ms=LONG_MAX), 1_000, 900) is None
