"""How OpenLineage and Airflow's assets name a table (lakecleaner.core.lineage): the location as the
dataset, openlineage-spark's TABLE identifier per catalog type, the asset URI naming the catalog by
its address, and never a credential in any of them."""
from __future__ import annotations

import pytest

from lakecleaner.core import lineage
from lakecleaner.core.config import CatalogConfig
from lakecleaner.core.lineage import DatasetName

SECRET = "s3cr3t"


def _catalog(kind: str, warehouse: str = "s3://bucket/wh", **props) -> CatalogConfig:
    return CatalogConfig(name="lake", type=kind, warehouse=warehouse, properties=props)


@pytest.mark.parametrize("location, expected", [
    ("/data/wh/demo/orders", DatasetName("file", "/data/wh/demo/orders")),
    ("file:/data/wh/demo/orders", DatasetName("file", "/data/wh/demo/orders")),
    ("file:///data/wh/demo/orders/", DatasetName("file", "/data/wh/demo/orders")),
    ("s3://bucket/wh/demo/orders", DatasetName("s3://bucket", "wh/demo/orders")),
    ("s3a://bucket/wh/demo/orders", DatasetName("s3://bucket", "wh/demo/orders")),
    ("gs://bucket/wh/demo/orders", DatasetName("gs://bucket", "wh/demo/orders")),
    ("hdfs://nn:8020/wh/demo/orders", DatasetName("hdfs://nn:8020", "/wh/demo/orders")),
    (f"s3://AKIA:{SECRET}@bucket/wh/t", DatasetName("s3://bucket", "wh/t")),
])
def test_a_location_is_named_by_the_naming_spec_of_its_store(location, expected):
    assert lineage.location_dataset(location) == expected


def test_each_catalog_type_has_openlineage_sparks_table_identifier_and_its_own_asset_uri():
    table = "demo.orders"
    cases = {
        "rest": (_catalog("rest", uri="https://polaris.example.com:8181/api/catalog/"),
                 DatasetName("https://polaris.example.com:8181/api/catalog", table),
                 "iceberg://polaris.example.com:8181/api/catalog/demo/orders"),
        "hive": (_catalog("hive", uri="thrift://hms-1:9083,thrift://hms-2:9083"),
                 DatasetName("hive://hms-1:9083", table), "iceberg://hms-1:9083/demo/orders"),
        "jdbc": (_catalog("sql", uri="jdbc:postgresql://pg.example.com/iceberg"),
                 DatasetName("postgres://pg.example.com:5432", "iceberg.demo.orders"),
                 "iceberg://pg.example.com:5432/iceberg/demo/orders"),
        "sqlite": (_catalog("sql", uri="jdbc:sqlite:/var/lake/catalog.db"),
                   DatasetName("sqlite:/var/lake/catalog.db", table),
                   "iceberg://localhost/var/lake/catalog.db/demo/orders"),
        "glue": (_catalog("glue", **{"glue.region": "eu-west-1", "glue.id": "123456789012"}),
                 DatasetName("arn:aws:glue:eu-west-1:123456789012", "table/demo/orders"),
                 "iceberg://glue.eu-west-1.amazonaws.com/123456789012/demo/orders"),
        "hadoop": (_catalog("hadoop", warehouse="/data/wh"), DatasetName("file:/data/wh", table),
                   "iceberg://localhost/data/wh/demo/orders"),
    }
    for case, (catalog, spark, uri) in cases.items():
        assert (lineage.spark_identifier(catalog, table), lineage.table_uri(catalog, table)) == (spark, uri), case
        asset = lineage.asset_dataset(uri)
        assert asset.name == table and uri == f"{asset.namespace}/demo/orders", case
        assert lineage.symlinks(catalog, table) == (spark, asset), case


def test_the_config_alias_never_names_the_catalog():
    one = _catalog("rest", uri="https://cat.example.com/api")
    other = CatalogConfig(name="elsewhere", type="rest", properties={"uri": "https://cat.example.com/api"})
    assert lineage.table_uri(one, "a.b") == lineage.table_uri(other, "a.b") == "iceberg://cat.example.com/api/a/b"


def test_no_credential_reaches_a_name_or_an_asset_uri():
    catalogs = [
        _catalog("sql", uri=f"jdbc:postgresql://pg:5433/iceberg?user=lake&password={SECRET}"),
        _catalog("sql", uri=f"postgresql+psycopg2://lake:{SECRET}@pg:5433/iceberg"),
        _catalog("rest", uri=f"https://client:{SECRET}@cat.example.com/api?token={SECRET}#{SECRET}",
                 credential=f"client:{SECRET}", token=SECRET),
        _catalog("hive", uri=f"thrift://admin:{SECRET}@hms:9083"),
        _catalog("glue", **{"glue.region": "us-east-1", "glue.id": "1", "s3.secret-access-key": SECRET}),
    ]
    for catalog in catalogs:
        names = [lineage.table_uri(catalog, "demo.orders"), lineage.catalog_id(catalog),
                 *(f"{s.namespace} {s.name}" for s in lineage.symlinks(catalog, "demo.orders"))]
        assert not [n for n in names if SECRET in n or "@" in n], catalog.properties
    jdbc = lineage.spark_identifier(catalogs[0], "demo.orders")
    assert jdbc == DatasetName("postgres://pg:5433", "iceberg.demo.orders")
    assert lineage.spark_identifier(catalogs[1], "demo.orders") == jdbc  # pyiceberg's URL names it alike


def test_sql_servers_properties_and_a_port_that_is_no_number_show_no_secret():
    """SQL Server's JDBC URLs carry ;name=value properties after the port, a password among them:
    urlsplit's port error quoted them all."""
    assert lineage.public_uri(f"sqlserver://db:1433;databaseName=x;password={SECRET}").geturl() == "sqlserver://db:1433"
    with pytest.raises(ValueError) as err:
        lineage.public_uri(f"postgresql://pg:{SECRET}/iceberg")
    assert SECRET not in str(err.value) and "port is not a number" in str(err.value)


def test_a_catalog_that_says_too_little_gets_no_spark_identifier_but_still_an_asset():
    glue = _catalog("glue", **{"glue.region": "us-east-1"})  # no account id: no ARN
    assert lineage.spark_identifier(glue, "a.b") is None
    assert lineage.table_uri(glue, "a.b") == "iceberg://glue.us-east-1.amazonaws.com/a/b"
    assert lineage.symlinks(glue, "a.b") == (DatasetName("iceberg://glue.us-east-1.amazonaws.com", "a.b"),)
    with pytest.raises(ValueError, match="without a uri property"):
        lineage.table_uri(_catalog("rest"), "a.b")


@pytest.mark.parametrize("uri", ["iceberg://cat/orders", "iceberg:///data/wh/a/b", "file://cat/a/b",
                                 "iceberg://cat/a/b?x=1"])
def test_an_asset_uri_of_another_shape_is_refused(uri):
    with pytest.raises(ValueError, match="iceberg://<catalog id>/<namespace>/<table>"):
        lineage.asset_dataset(uri)


def test_the_default_location_is_the_warehouse_namespace_and_table():
    assert lineage.default_location(_catalog("hadoop", warehouse="/data/wh/"), "a.b") == "/data/wh/a/b"


def test_the_asset_uri_normalizer_takes_a_catalog_id_with_a_path_and_refuses_the_rest():
    from urllib.parse import urlsplit

    from lakecleaner.airflow.assets import normalize_table_uri

    ok = normalize_table_uri(urlsplit("iceberg://cat.example.com/api/catalog//demo/orders"))
    assert ok.geturl() == "iceberg://cat.example.com/api/catalog/demo/orders"
    for wrong in ("iceberg://cat/orders", "iceberg:///data/wh/demo/orders", "iceberg://cat/a/b#x"):
        with pytest.raises(ValueError, match="iceberg://<catalog id>/<namespace>/<table>"):
            normalize_table_uri(urlsplit(wrong))


def test_the_catalog_facets_uri_and_warehouse_carry_no_credential():
    jdbc = _catalog("sql", warehouse=f"s3://AKIA:{SECRET}@bucket/wh",
                    uri=f"jdbc:postgresql://lake:{SECRET}@pg:5433/iceberg?password={SECRET}")
    assert lineage.catalog_uri(jdbc) == "jdbc:postgresql://pg:5433/iceberg"
    assert lineage.public_warehouse(jdbc) == "s3://bucket/wh"
    hadoop = _catalog("hadoop", warehouse="/data/wh")
    assert (lineage.catalog_uri(hadoop), lineage.public_warehouse(hadoop)) == (None, "file:/data/wh")
