"""Erasure requests without Spark: the one key syntax (a JSON object per key), the keyed hash, and
the deadline (the README's bound)."""
import dataclasses
import hashlib
import hmac
import re

import pytest

from lakecleaner.core.config import LONG_MAX, resolve_table, physical_deletion_deadline
from lakecleaner.core.erasure_requests import key_rows
from lakecleaner.spark.forget import scrub
from lakecleaner.spark.forget import ForgetError, ForgetRequest, parse_key
from lakecleaner.core.keyhash import UNKEYED, KeyHasher, KeySecretError

COLUMNS = {"key": "string", "offset": "bigint", "partition": "int", "value": "string"}
SECRET = "0123456789abcdef0123456789abcdef"


def test_a_key_is_an_object_and_its_value_is_taken_as_it_is():
    # no second syntax: 'key=alice' is the value 'key=alice', '-x' is '-x', commas are commas
    assert parse_key("ns.t", {"key": "key=alice"}, ("key",)) == {"key": "key=alice"}
    assert parse_key("ns.t", {"key": "-x,y"}, ("key",)) == {"key": "-x,y"}
    assert parse_key("ns.t", {"id": 42, "tenant": 7}, ("tenant", "id")) == {"tenant": "7", "id": "42"}
    assert parse_key("ns.t", {"flag": True}, ("flag",)) == {"flag": "true"}


def test_a_bad_key_names_the_problem_never_the_value():
    for spec, problem in (({"tenant": 7}, "missing key column(s) id"), ({"tenant": 7, "id": 1, "x": 2}, "1 name(s) "
                          "that are no key column"), ({"tenant": None, "id": 1}, "null"), ("tenant=7,id=1", "must be an object"),
                          ({"tenant": [7], "id": 1}, "an object or a list"),
                          # the map's arguments swapped: the value stands where a column's name should
                          ({"7": "tenant", "id": 1}, "1 name(s) that are no key column; missing key column(s) tenant")):
        with pytest.raises(ForgetError, match=f"table ns.t: .*{re.escape(problem)}") as err:
            parse_key("ns.t", spec, ("tenant", "id"))
        assert "7" not in str(err.value).replace("table ns.t", "") and err.value.rejected


def test_key_lines_are_json_objects_and_errors_name_the_line_not_its_text():
    assert key_rows(['{"key": "-x"}', "", '{"tenant": 7, "id": 42}'], "f") == [{"key": "-x"}, {"tenant": 7, "id": 42}]
    for lines, problem in ((["alice"], "line 1 is not JSON"), (['{"k": 1}', '["secret"]'], "line 2 is not a JSON object"),
                           ([], "no key given")):
        with pytest.raises(ValueError, match=problem) as err:
            key_rows(lines, "f")
        assert "alice" not in str(err.value) and "secret" not in str(err.value)


def test_a_long_decimal_key_keeps_every_digit_it_was_given():
    # as a float, 12345678901234567.89 would become 1.2345678901234568e+16: another key, nothing erased
    [key] = key_rows(['{"amount_id": 12345678901234567.89, "n": 42, "rate": 0.1}'], "f")
    assert parse_key("ns.t", key, ("amount_id", "n", "rate")) == {"amount_id": "12345678901234567.89", "n": "42",
                                                                 "rate": "0.1"}


def test_an_error_text_loses_every_key_value_of_the_request():
    request = ForgetRequest("ns.t", ({"key": "alice@example.org"}, {"key": "bob"}))
    assert scrub("cannot cast 'alice@example.org' nor bob", request) == "cannot cast '<key>' nor <key>"
    short = ForgetRequest("ns.t_12", ({"id": 1},))  # a whole word only: the table name keeps its digits
    assert scrub("table ns.t_12: cannot cast 1 to date", short) == "table ns.t_12: cannot cast <key> to date"


def test_the_keyed_hash_is_hmac_sha256_under_the_secret_and_names_its_key():
    hasher = KeyHasher.from_environment("S", {"S": SECRET})
    message = '["alice"]'
    assert hasher.digest(message) == hmac.new(SECRET.encode(), message.encode(), hashlib.sha256).hexdigest()
    assert hasher.scheme.startswith("hmac-sha256:") and SECRET not in hasher.scheme and SECRET not in repr(hasher)
    other = KeyHasher.from_environment("S", {"S": SECRET[::-1]})
    assert other.scheme != hasher.scheme and other.digest(message) != hasher.digest(message)
    unkeyed = KeyHasher.from_environment("S", {})
    assert unkeyed.scheme == UNKEYED and unkeyed.digest(message) == hashlib.sha256(message.encode()).hexdigest()


def test_a_short_secret_is_refused_naming_the_variable_only():
    with pytest.raises(KeySecretError, match="^S: the key-hash secret must be at least 16 bytes") as err:
        KeyHasher.from_environment("S", {"S": "hunter2"})
    assert "hunter2" not in str(err.value)


def test_hmac_pads_follow_rfc_2104_for_long_secrets_too():
    long = "x" * 100
    hasher = KeyHasher.from_environment("S", {"S": long})
    ipad, opad = hasher.pads()
    key = hashlib.sha256(long.encode()).digest().ljust(64, b"\0")
    inner = hashlib.sha256(ipad + b"m").digest()
    assert hashlib.sha256(opad + inner).hexdigest() == hmac.new(long.encode(), b"m", hashlib.sha256).hexdigest()
    assert ipad == bytes(b ^ 0x36 for b in key)


def test_the_deadline_is_the_readme_bound():
    tc = resolve_table("ns.t", {"max.compaction.lag.ms": "60000", "min.compaction.lag.ms": "500"}, COLUMNS)
    assert physical_deletion_deadline(tc, 1_000, 900) == 1_000 + 60_000 + 900 + 500
    aged = dataclasses.replace(tc, snapshot_retention=(5_000, 1))
    assert physical_deletion_deadline(aged, 1_000, 900) == 1_000 + 60_000 + 900 + 5_000
    assert physical_deletion_deadline(dataclasses.replace(tc, snapshot_retention=(None, 3)), 1_000, 900) is None
    assert physical_deletion_deadline(dataclasses.replace(tc, max_compaction_lag_ms=LONG_MAX), 1_000, 900) is None
    # a sum past a bigint (the audit row's deadline_ms): no bound in time, not a literal that fails the UPDATE
    assert physical_deletion_deadline(dataclasses.replace(tc, max_compaction_lag_ms=LONG_MAX - 10), 1_000, 900) is None


def test_one_spelling_of_a_files_location():
    from lakecleaner.spark.forget import file_path

    for spelling in ("file:///tmp/a b/x.parquet", "file:/tmp/a%20b/x.parquet", "/tmp/a b/x.parquet"):
        assert file_path(spelling) == "/tmp/a b/x.parquet"
    assert file_path("s3://bucket/a%20b/x.parquet") == "s3://bucket/a b/x.parquet"


def test_only_a_concurrent_change_is_a_yield():
    from lakecleaner.core.table import ConcurrentCommitError, TableRef, conflict_error

    ref = TableRef("lake", "ns", "t")
    for text in ("org.apache.iceberg.exceptions.CommitFailedException: Cannot commit: stale metadata",
                 "org.apache.iceberg.exceptions.ValidationException: Found conflicting files that can contain records",
                 "org.apache.iceberg.exceptions.ValidationException: Missing required files to delete: x.parquet"):
        assert isinstance(conflict_error(ref, RuntimeError(text)), ConcurrentCommitError), text
    for text in ("org.apache.iceberg.exceptions.ValidationException: Cannot find source column for partition field",
                 "java.lang.IllegalStateException: Found conflicting"):
        assert conflict_error(ref, RuntimeError(text)) is None, text


def test_an_id_the_forget_param_names_that_is_no_pending_request_is_said_and_only_an_unknown_one_fails():
    from lakecleaner.core.erasure_requests import DONE, IN_PROGRESS, PendingRequest, not_pending, unmatched_requests

    pending = [PendingRequest("r-open", "ns.t", 2)]
    named = ["r-open", "r-typo", "r-done", "r-busy", "r-typo"]
    missing = not_pending(named, pending)
    assert missing == ["r-typo", "r-done", "r-busy"]
    got = unmatched_requests(missing, {"r-done": DONE, "r-busy": IN_PROGRESS})
    assert [(u.request_id, u.fails_the_run) for u in got] == [("r-typo", True), ("r-done", False), ("r-busy", False)]
    assert [u.message("lake.lakecleaner.forget_requests") for u in got] == [
        "erasure request 'r-typo': no such request in lake.lakecleaner.forget_requests (asked for in forget)",
        "erasure request 'r-done' is done already: nothing to carry out",
        "erasure request 'r-busy' is being carried out by another run: left to it"]
    assert not_pending([], pending) == [] and not_pending(["r-open"], pending) == []  # nothing to read
