# An example: the official Airflow image, extended the documented way
# (https://airflow.apache.org/docs/docker-stack/build.html) with a JDK for Spark and the lakecleaner
# wheel. It adds packages and nothing else: no DAGs folder, no plugins folder, no connection, no
# lakecleaner setting. Airflow finds the provider and the Lake Cleaner page by the wheel's entry
# points; the DAG file, the Spark connection and the [lakecleaner] options are the deployment's
# (README: "Adding lakecleaner to an existing Airflow").
#
# The final stage's Airflow version must equal the apache-airflow pin in requirements.txt and
# requirements.lock, and the wheel stage's Python the final stage's (tests/test_dockerfile.py).

# Stage 1: the wheel, built from the checkout as any user builds it (pip wheel; setuptools, the
# build backend, is fetched into pip's isolated build environment). Root in a plain Python image:
# the Airflow image refuses pip as root, and its airflow user cannot write the copied sources on
# every builder.
FROM python:3.11-slim-bookworm AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY include/lakecleaner include/lakecleaner
RUN PIP_ROOT_USER_ACTION=ignore pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

# Stage 2: the image a deployment runs (scheduler, dag-processor, workers, API server).
FROM apache/airflow:3.3.2-python3.11

# Spark 3.5 runs on Java 8/11/17 only; 17 is what the stack was checked with (Debian bookworm, the
# base image's release, packages it). Debian replaces package versions on every point/security
# release, so an exact apt pin would break rebuilds; the base image tag already fixes the release.
# The arch-neutral symlink keeps JAVA_HOME valid on both amd64 and arm64 builds.
USER 0
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && apt-get autoremove -yqq --purge \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17-openjdk
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk

# Back to the base image's airflow user, numeric as the base image sets it (a runAsNonRoot pod can
# only check a numeric user). pip installs into that user's venv, whose bin directory is on PATH:
# pyspark's spark-submit lands there for SparkSubmitHook.
USER 50000

# The image's own Airflow held ("apache-airflow==${AIRFLOW_VERSION}", as the official docs do), so
# pip adds lakecleaner and what it lacks (pyspark, the Iceberg runtime jar's package, GX, pyiceberg,
# the Spark provider) within the wheel's declared ranges, and moves nothing the image resolved.
# requirements.lock is not applied: it pins this repository's test venv, and as constraints here it
# would replace packages the image's Airflow and providers were installed with.
COPY --from=wheel /dist/ /tmp/lakecleaner-dist/
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" \
        "lakecleaner[airflow] @ file://$(find /tmp/lakecleaner-dist -name 'lakecleaner-*.whl')"
