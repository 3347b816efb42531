#!/usr/bin/env bash
# fake API server was on port 46705 (random free port each run)
export SPARK_HOME=/root/.cache/spark-oracle/pyspark-3.5.3/deps
/root/.cache/spark-oracle/pyspark-3.5.3/deps/bin/spark-submit \
  --master k8s://http://127.0.0.1:46705 \
  --deploy-mode cluster \
  --conf spark.kubernetes.submission.waitAppCompletion=false \
  --conf spark.kubernetes.namespace=default \
  --conf spark.kubernetes.container.image=apache/spark:3.5.3 \
  --conf spark.kubernetes.authenticate.driver.serviceAccountName=spark \
  --conf spark.driver.cores=1 \
  --conf spark.driver.memory=512m \
  --conf spark.executor.cores=1 \
  --conf spark.executor.memory=512m \
  --conf spark.executor.instances=2 \
  --conf spark.kubernetes.driver.label.sparkoperator.k8s.io/app-name=spark-pi \
  --conf spark.kubernetes.driver.label.sparkoperator.k8s.io/launched-by-spark-operator=true \
  --conf spark.kubernetes.driver.label.sparkoperator.k8s.io/submission-id=00000000-1111-2222-3333-444444444444 \
  --conf spark.kubernetes.executor.label.sparkoperator.k8s.io/app-name=spark-pi \
  --conf spark.kubernetes.executor.label.sparkoperator.k8s.io/launched-by-spark-operator=true \
  --conf spark.kubernetes.executor.label.sparkoperator.k8s.io/submission-id=00000000-1111-2222-3333-444444444444 \
  --conf spark.kubernetes.submission.connectionTimeout=10000 \
  --conf spark.kubernetes.submission.requestTimeout=10000 \
  --conf 'spark.app.name=My Spark.Pi_App 2026 with a very long name exceeding sixty-three characters' \
  --class org.apache.spark.examples.SparkPi \
  local:///opt/spark/examples/jars/spark-examples.jar \
  1000
