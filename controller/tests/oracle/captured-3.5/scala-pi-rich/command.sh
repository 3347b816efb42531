#!/usr/bin/env bash
# fake API server was on port 45225 (random free port each run)
export SPARK_HOME=/root/.cache/spark-oracle/pyspark-3.5.3/deps
/root/.cache/spark-oracle/pyspark-3.5.3/deps/bin/spark-submit \
  --master k8s://http://127.0.0.1:45225 \
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
  --conf spark.kubernetes.driverEnv.ZED=z \
  --conf spark.kubernetes.driverEnv.ALPHA=a \
  --conf spark.kubernetes.driverEnv.FOO=bar \
  --conf spark.kubernetes.driverEnv.MIDDLE=m \
  --conf spark.kubernetes.driverEnv.BETA=b \
  --conf spark.kubernetes.driver.annotation.example.com/owner=team-a \
  --conf spark.kubernetes.driver.service.annotation.example.com/svc=yes \
  --conf spark.kubernetes.driver.service.label.example.com/svc-label=yes \
  --conf spark.kubernetes.node.selector.disktype=ssd \
  --conf spark.kubernetes.driver.request.cores=500m \
  --conf spark.kubernetes.driver.limit.cores=2 \
  --conf spark.driver.memoryOverhead=256m \
  --conf spark.kubernetes.container.image.pullPolicy=Always \
  --conf spark.kubernetes.container.image.pullSecrets=regcred \
  --conf spark.kubernetes.driver.secrets.mysecret=/etc/secrets \
  --conf spark.kubernetes.driver.secretKeyRef.DB_PASS=dbsecret:password \
  --conf spark.kubernetes.driver.volumes.persistentVolumeClaim.data.mount.path=/data \
  --conf spark.kubernetes.driver.volumes.persistentVolumeClaim.data.options.claimName=my-pvc \
  --conf spark.kubernetes.driver.scheduler.name=volcano-not-really \
  --conf spark.kubernetes.driver.priorityClassName=high \
  --class org.apache.spark.examples.SparkPi \
  local:///opt/spark/examples/jars/spark-examples.jar \
  1000
