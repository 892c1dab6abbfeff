"""Development tools, not part of the installed package (never shipped to executors): the demo
lakehouse, the record generator, table builders for tests and benchmarks, a throwaway PostgreSQL.
Importable from a checkout (``include/`` on the path: the Makefile and pytest set it)."""
