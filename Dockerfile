# The groupscope image: the library (the wheel, with the locked dependencies), Airflow with the
# groupscope DAGs and plugins in AIRFLOW_HOME, and pyspark with a JRE for spark-submit, the
# Spark standalone master and worker and the Spark Connect server. docker-compose.yml runs every
# groupscope service from it (Airflow's four components and its init, Spark, the warehouse
# migrations, the Grafana provisioning and the demo workload).
#
#   docker build -t groupscope .
#
# Built from the build inputs only (.dockerignore): pyproject.toml, README.md, src/ for the
# wheel; requirements.lock; dags/, plugins/ and deploy/ (the compose services' scripts).

# -- the wheel ---------------------------------------------------------------------------------
FROM python:3.11-slim-trixie AS wheel
WORKDIR /build
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

# -- the runtime -------------------------------------------------------------------------------
FROM python:3.11-slim-trixie
# A JRE for Spark (Java 21: Debian trixie's default; Spark 4 runs on 17 and 21), and procps:
# Spark's scripts call ps.
RUN apt-get update \
    && apt-get install -y --no-install-recommends default-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

# Exactly the locked versions (the lock holds every extra: Airflow and its providers, pyspark,
# Great Expectations, the Grafana SDK), then the project itself without resolving anything.
COPY requirements.lock /tmp/requirements.lock
RUN pip install --no-cache-dir --disable-pip-version-check -r /tmp/requirements.lock \
    && rm /tmp/requirements.lock
COPY --from=wheel /dist/ /tmp/dist/
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps /tmp/dist/groupscope-*.whl \
    && rm -rf /tmp/dist

# Kafka's Java Admin client, for share and streams groups (groupscope.kafka.java_admin): its
# jars from Maven Central, checked by their SHA-256.
COPY deploy/kafka-java/fetch.py /tmp/fetch-kafka-java.py
RUN python /tmp/fetch-kafka-java.py /opt/groupscope/kafka-java && rm /tmp/fetch-kafka-java.py
ENV GROUPSCOPE_KAFKA_JAVA_CLASSPATH=/opt/groupscope/kafka-java

# One unprivileged user for every service (group 0, as Airflow's own image). The folders that
# compose mounts named volumes on are created here, owned by it: a fresh volume takes the
# owner of the folder it is mounted on.
RUN useradd --uid 50000 --gid 0 --create-home --home-dir /home/groupscope groupscope \
    && mkdir -p /opt/airflow/logs /landing /etc/grafana/provisioning \
    && chown -R groupscope:0 /opt/airflow /landing /etc/grafana/provisioning

ENV AIRFLOW_HOME=/opt/airflow \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/airflow/dags \
    AIRFLOW__CORE__PLUGINS_FOLDER=/opt/airflow/plugins \
    AIRFLOW__CORE__LOAD_EXAMPLES=False \
    GROUPSCOPE_LANDING=/landing \
    SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/usr/local/bin/python \
    PYSPARK_DRIVER_PYTHON=/usr/local/bin/python \
    GX_ANALYTICS_ENABLED=false \
    PYTHONUNBUFFERED=1

COPY --chown=groupscope:0 dags /opt/airflow/dags
COPY --chown=groupscope:0 plugins /opt/airflow/plugins
COPY deploy/airflow /opt/groupscope/deploy/airflow
COPY deploy/spark /opt/groupscope/deploy/spark

USER groupscope
WORKDIR /home/groupscope
CMD ["groupscope", "--help"]
