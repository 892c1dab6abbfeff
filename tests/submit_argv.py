"""Reading a spark-submit command line back, for the tests that compare the CLI's with Airflow's."""
from __future__ import annotations

import zipfile


def argv_options(argv: list[str]) -> tuple[dict, dict, list[str]]:
    """A spark-submit command line as (flags, Spark conf, application and its arguments); the
    --driver-memory flag is the conf spark.driver.memory, as spark-submit reads it."""
    flags, conf, i = {}, {}, 1
    while i < len(argv) and argv[i].startswith("--"):
        flag, value = argv[i], argv[i + 1]
        if flag == "--conf":
            key, _, val = value.partition("=")
            assert key not in conf, f"{key} given twice"
            conf[key] = val
        elif flag == "--driver-memory":
            conf["spark.driver.memory"] = value
        else:
            assert flag not in flags, f"{flag} given twice"
            flags[flag] = value
        i += 2
    return flags, conf, argv[i:]


def zip_content(path: str) -> dict[str, bytes]:
    """Each member of a --py-files zip and its bytes (two zips of the same package compare equal)."""
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name) for name in zf.namelist()}
