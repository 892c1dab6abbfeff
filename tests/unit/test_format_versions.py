"""Iceberg format versions 2 and 3: the tables the cleaner cleans may be either, its own tables take
the version the config chooses (cleaner.own_tables_format_version), and v1 is refused."""
from __future__ import annotations

import pytest

from lakecleaner.core.config import (CONFIG_ENV, FORMAT_VERSIONS, CleanerConfig, ConfigError, config_schema,
                                     load_config)
from lakecleaner.core.table import layout_problem


@pytest.fixture(autouse=True)
def _no_config_env(monkeypatch):
    monkeypatch.delenv(CONFIG_ENV, raising=False)


@pytest.mark.parametrize("version", ["2", "3", None])
def test_a_v2_or_v3_table_has_the_layout_the_cleaner_needs(version):
    assert layout_problem({} if version is None else {"format-version": version}) is None


def test_a_v1_table_is_refused_naming_the_versions_it_may_upgrade_to():
    assert layout_problem({"format-version": "1"}) == \
        "Iceberg format-version 1 has no row-level deletes; upgrade to 2 or 3"


def test_own_tables_are_v2_unless_the_config_says_3(tmp_path):
    assert CleanerConfig().own_tables_format_version == 2 == load_config(None).cleaner.own_tables_format_version
    path = tmp_path / "c.yaml"
    path.write_text("cleaner:\n  own_tables_format_version: '3'\n")  # as an environment variable gives it
    assert load_config(path).cleaner.own_tables_format_version == 3


@pytest.mark.parametrize("value", ["1", "4", "v3", "true"])
def test_another_own_tables_format_version_is_refused_naming_the_setting(tmp_path, value):
    path = tmp_path / "c.yaml"
    path.write_text(f"cleaner:\n  own_tables_format_version: {value}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.prop == "cleaner.own_tables_format_version"
    assert "must be an Iceberg format version the cleaner runs on: 2 or 3" in str(info.value)


def test_the_schema_offers_the_format_versions():
    cleaner = config_schema()["$defs"]["CleanerConfig"]["properties"]
    typed, _reference = cleaner["own_tables_format_version"]["anyOf"]  # or ${NAME}
    assert typed["enum"] == list(FORMAT_VERSIONS) == [2, 3]
