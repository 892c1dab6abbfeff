"""The pure core: settings, rules, strategies, the reference model, evaluation from metadata, state
documents, scheduling and the spark-submit command line. Imports neither Spark nor Airflow
(tests/unit/test_layers.py holds it), so the CLI, the scheduler and the UI use it without either."""
