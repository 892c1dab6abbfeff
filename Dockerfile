# lakecleaner on Airflow 3 + Spark 3.5 (local mode by default).
# The tag's Airflow version must equal the apache-airflow pin in requirements.txt and
# requirements.lock (tests/test_dockerfile.py checks this).
FROM apache/airflow:3.3.2-python3.11

# Spark 3.5 runs on Java 8/11/17 only; 17 is what the stack was checked with.
# Debian replaces package versions on every point/security release, so an exact apt pin would
# break rebuilds; the base image tag already fixes the Debian release.
# The arch-neutral symlink keeps JAVA_HOME valid on both amd64 and arm64 builds.
# /opt/lakecleaner is created here, owned by the airflow user (UID 50000), because COPY --chown
# does not chown the directories it creates on every builder (classic builder: moby/moby#42819).
USER 0
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && apt-get autoremove -yqq --purge \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17-openjdk \
    && install -d -o 50000 -g 0 /opt/lakecleaner
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk

# Back to the base image's airflow user (group 0), numeric as the base image itself sets it.
# The image refuses pip as root; packages go to that user's venv (~/.local/bin is on PATH, which
# also puts pyspark's spark-submit there for SparkSubmitHook).
USER 50000

# Dependencies first, so code changes don't reinstall them. The lock also pins apache-airflow,
# which keeps pip from moving the Airflow that the base image ships.
COPY --chown=50000:0 requirements.txt requirements.lock /opt/lakecleaner/
RUN pip install --no-cache-dir -r /opt/lakecleaner/requirements.txt -c /opt/lakecleaner/requirements.lock

# Owned by the airflow user: pip builds the package in place (egg-info, build/), and the default
# config's Hadoop-catalog warehouse (../warehouse) resolves to /opt/lakecleaner/warehouse.
COPY --chown=50000:0 pyproject.toml /opt/lakecleaner/
COPY --chown=50000:0 include /opt/lakecleaner/include
COPY --chown=50000:0 jobs /opt/lakecleaner/jobs
COPY --chown=50000:0 dags /opt/lakecleaner/dags
COPY --chown=50000:0 plugins /opt/lakecleaner/plugins
RUN pip install --no-cache-dir --no-deps /opt/lakecleaner

# A non-editable install can't find jobs/ or the config relative to its own files.
# AIRFLOW_CONN_SPARK_DEFAULT is only a default: without it SparkSubmitHook falls back to YARN;
# deployments override it (and LAKECLEANER_CONFIG) at run time.
ENV LAKECLEANER_JOBS_DIR=/opt/lakecleaner/jobs \
    LAKECLEANER_CONFIG=/opt/lakecleaner/include/lakecleaner.yaml \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/lakecleaner/dags \
    AIRFLOW__CORE__PLUGINS_FOLDER=/opt/lakecleaner/plugins \
    AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type":"spark","host":"local[*]"}'
