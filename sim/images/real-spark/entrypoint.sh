#!/bin/bash
# The entrypoint of kube-sim's Spark image (see README.md here): what the official
# apache/spark image's /opt/entrypoint.sh does for `driver` and `executor`, written from Spark's
# documentation ("Running on Kubernetes", the driver and executor pods' args and env), not copied.
#
#   driver ARGS...    spark-submit in client mode inside the driver pod, bound to the pod's address
#   executor          the Kubernetes executor backend, configured by the SPARK_* env of its pod
#   anything else     run as given (the image's pass-through mode)
set -eo pipefail

: "${SPARK_HOME:=/opt/spark}"
export SPARK_HOME

# Python applications: the interpreter the application asked for, if any (the pod's env).
if [ -n "${PYSPARK_PYTHON:-}" ]; then export PYSPARK_PYTHON; fi
if [ -n "${PYSPARK_DRIVER_PYTHON:-}" ]; then export PYSPARK_DRIVER_PYTHON; fi

# Extra classpath the pod may carry (hadoop/conf directories mounted by Spark's feature steps).
classpath="$SPARK_HOME/jars/*"
if [ -n "${SPARK_EXTRA_CLASSPATH:-}" ]; then classpath="$classpath:$SPARK_EXTRA_CLASSPATH"; fi
if [ -n "${HADOOP_CONF_DIR:-}" ]; then classpath="$HADOOP_CONF_DIR:$classpath"; fi
if [ -n "${SPARK_CONF_DIR:-}" ]; then classpath="$SPARK_CONF_DIR:$classpath"; elif [ -d "$SPARK_HOME/conf" ]; then classpath="$SPARK_HOME/conf:$classpath"; fi

case "${1:-}" in
  driver)
    shift
    exec "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client \
      "$@"
    ;;
  executor)
    shift
    # Spark passes the executor's JVM options as SPARK_JAVA_OPT_0, _1, ... (in index order).
    java_opts=()
    while IFS= read -r name; do
      java_opts+=("${!name}")
    done < <(compgen -e | grep '^SPARK_JAVA_OPT_[0-9]*$' | sort -t_ -k4 -n)
    exec "${JAVA_HOME:+$JAVA_HOME/bin/}java" \
      "${java_opts[@]}" \
      -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
      -cp "$classpath${SPARK_DIST_CLASSPATH:+:$SPARK_DIST_CLASSPATH}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" \
      --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" \
      --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
      --podName "${SPARK_EXECUTOR_POD_NAME}"
    ;;
  *)
    exec "$@"
    ;;
esac
