#!/bin/sh
# The long-lived Spark Connect server of the live analytics, as dev/groupscope_dev/spark_connect.py
# starts it for ./run: the pyspark wheel's sbin/start-connect-server.sh in the foreground, with
# the confs every groupscope Spark application runs with (groupscope.analyze.io.spark_conf),
# here on the standalone cluster SPARK_MASTER_URL. Extra arguments are passed on (--conf ...).
set -eu
: "${SPARK_HOME:?}" "${SPARK_MASTER_URL:?}"
set -- --master "$SPARK_MASTER_URL" \
  --conf "spark.connect.grpc.binding.port=${SPARK_CONNECT_PORT:-15002}" "$@"
for conf in $(python -c 'from groupscope.analyze.io import spark_conf
print(" ".join(f"{k}={v}" for k, v in spark_conf().items()))'); do
  set -- "$@" --conf "$conf"
done
export SPARK_NO_DAEMONIZE=1 SPARK_LOG_DIR="${SPARK_LOG_DIR:-/tmp/spark-logs}" \
  SPARK_PID_DIR="${SPARK_PID_DIR:-/tmp}"
exec "$SPARK_HOME/sbin/start-connect-server.sh" "$@"
