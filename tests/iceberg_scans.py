"""What Spark's SQL tab shows of the Iceberg scans a piece of work ran: the filters pushed to
Iceberg and how many data files Iceberg planned or skipped. How a test sees that a scan is pruned."""
from contextlib import contextmanager

FULL_DESCRIPTIONS = "spark.sql.maxMetadataStringLength"  # Spark cuts a scan's filters at 100 characters


@contextmanager
def iceberg_scans(spark):
    """The Iceberg scans run inside the block, with their filters in full."""
    cut_at = spark.conf.get(FULL_DESCRIPTIONS)
    spark.conf.set(FULL_DESCRIPTIONS, "1000000")
    since, scans = last_execution_id(spark), []
    try:
        yield scans
    finally:
        spark.conf.set(FULL_DESCRIPTIONS, cut_at)
    scans.extend(table_scans(spark, since))


def last_execution_id(spark) -> int:
    execs = spark._jsparkSession.sharedState().statusStore().executionsList()
    return execs.apply(execs.size() - 1).executionId() if execs.size() else -1


def table_scans(spark, since: int) -> list[dict]:
    """Every Iceberg scan of the SQL executions after ``since``: its description (with the filters
    pushed to Iceberg) and Iceberg's file counts, as the Spark UI's SQL tab shows them."""
    store = spark._jsparkSession.sharedState().statusStore()
    execs, scans = store.executionsList(), []
    for e in (execs.apply(i) for i in range(execs.size())):
        if e.executionId() <= since:
            continue
        values = store.executionMetrics(e.executionId())
        nodes = store.planGraph(e.executionId()).allNodes()
        for node in (nodes.apply(i) for i in range(nodes.size())):
            if node.name().startswith("BatchScan"):
                metrics = (node.metrics().apply(i) for i in range(node.metrics().size()))
                scans.append({"desc": node.desc(), **{m.name(): int(values.get(m.accumulatorId()).get())
                                                     for m in metrics if "data files" in m.name()
                                                     and values.get(m.accumulatorId()).isDefined()}})
    return scans
