"""The Spark side: everything that runs inside a lakecleaner Spark application (the engine, its plans
and frames, maintenance, erasure, the quality suites, the applications' entry points in ``jobs``).
Never imports Airflow (tests/unit/test_layers.py holds it)."""
