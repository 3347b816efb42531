#!/usr/bin/env bash
# fake API server was on port 43651 (random free port each run)
export SPARK_HOME=/root/.cache/spark-oracle/pyspark-3.5.3/deps
/root/.cache/spark-oracle/pyspark-3.5.3/deps/bin/spark-submit \
  --master k8s://http://127.0.0.1:43651 \
  --deploy-mode cluster \
  --conf spark.kubernetes.submission.waitAppCompletion=false \
  --conf spark.kubernetes.namespace=default \
  --conf spark.kubernetes.container.image=apache/spark:3.5.3 \
  --class org.apache.spark.examples.SparkPi \
  local:///opt/spark/examples/jars/spark-examples.jar \
  1000
