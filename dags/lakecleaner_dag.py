from lakecleaner.airflow import lakecleaner_dag

dag = lakecleaner_dag()  # dag_id lakecleaner; config: [lakecleaner] config (AIRFLOW__LAKECLEANER__CONFIG)
