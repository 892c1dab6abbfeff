"""The Spark applications' entry files, submitted by path (lakecleaner.core.submit.job_path): spark-submit
runs a file, not a module. Each is two lines; the logic is in the Spark layer."""
