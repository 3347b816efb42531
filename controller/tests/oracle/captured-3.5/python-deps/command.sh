#!/usr/bin/env bash
# fake API server was on port 58211 (random free port each run)
export SPARK_HOME=/root/.cache/spark-oracle/pyspark-3.5.3/deps
/root/.cache/spark-oracle/pyspark-3.5.3/deps/bin/spark-submit \
  --master k8s://http://127.0.0.1:58211 \
  --deploy-mode cluster \
  --conf spark.kubernetes.submission.waitAppCompletion=false \
  --conf spark.kubernetes.namespace=default \
  --conf spark.kubernetes.container.image=apache/spark:3.5.3 \
  --conf spark.kubernetes.driver.pod.name=spark-pi-driver \
  --conf spark.app.name=spark-pi \
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
  --conf spark.kubernetes.pyspark.pythonVersion=3 \
  --conf spark.hadoop.fs.s3a.endpoint=http://minio.storage:9000 \
  --conf spark.hadoop.fs.s3a.path.style.access=true \
  --conf spark.kubernetes.driver.secrets.gcp-sa=/mnt/secrets/gcp \
  --conf spark.kubernetes.driverEnv.GOOGLE_APPLICATION_CREDENTIALS=/mnt/secrets/gcp/key.json \
  --conf spark.kubernetes.driver.secrets.hadoop-token=/mnt/secrets/hadoop \
  --conf spark.kubernetes.driverEnv.HADOOP_TOKEN_FILE_LOCATION=/mnt/secrets/hadoop/hadoop.token \
  --conf spark.kubernetes.executor.secrets.gcp-sa=/mnt/secrets/gcp \
  --conf spark.executorEnv.GOOGLE_APPLICATION_CREDENTIALS=/mnt/secrets/gcp/key.json \
  --conf spark.kubernetes.driver.volumes.hostPath.spark-local-dir-1.mount.path=/tmp/spark-local-1 \
  --conf spark.kubernetes.driver.volumes.hostPath.spark-local-dir-1.options.path=/mnt/disks/ssd0 \
  --conf spark.kubernetes.driver.volumes.emptyDir.spark-local-dir-2.mount.path=/tmp/spark-local-2 \
  --conf spark.kubernetes.driver.volumes.emptyDir.spark-local-dir-2.options.sizeLimit=10Gi \
  --conf spark.kubernetes.executor.volumes.hostPath.spark-local-dir-1.mount.path=/tmp/spark-local-1 \
  --conf spark.kubernetes.executor.volumes.hostPath.spark-local-dir-1.options.path=/mnt/disks/ssd0 \
  --conf spark.dynamicAllocation.enabled=true \
  --conf spark.dynamicAllocation.initialExecutors=1 \
  --conf spark.dynamicAllocation.minExecutors=1 \
  --conf spark.dynamicAllocation.maxExecutors=5 \
  --conf spark.dynamicAllocation.shuffleTracking.enabled=true \
  --jars local:///opt/spark/extra/udfs.jar,https://repo.example.com/libs/connector.jar \
  --files https://data.example.com/lookup.csv \
  --py-files local:///opt/app/deps.zip,local:///opt/app/helpers.py \
  local:///opt/spark/examples/src/main/python/wordcount.py \
  s3a://bucket/input.txt
