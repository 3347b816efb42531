#!/usr/bin/env python3
"""Captures Spark 3.5's spark-submit with the project's spark-submit oracle tool
(shared/tools/spark-submit-oracle), for the variants that make sense for 3.5, and keeps only the
normalized objects here.

  SPARK_HOME=~/.cache/spark-oracle/pyspark-3.5.3/deps python3 capture.py [VARIANT ...]

The tool's own variants are used unchanged except for the image (apache/spark:3.5.3 instead of
spark:4.0.0); the NetworkPolicy variants are left out (Spark 3.5 has no NetworkPolicy step), and
`python-deps` is added: a Python application with dependencies, hadoopConf, dynamic allocation,
secrets and local-dir volumes, passed as Kubeflow passes them. The tool is imported, not copied:
set ORACLE_TOOL if it is not at ../../../../../shared/tools/spark-submit-oracle from here.
"""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.environ.get(
    "ORACLE_TOOL", os.path.normpath(os.path.join(HERE, "..", "..", "..", "..", "..", "shared", "tools",
                                                 "spark-submit-oracle")))
sys.path.insert(0, TOOL)
import normalize  # noqa: E402  (the tool's)
import run_capture as tool  # noqa: E402

IMAGE = "apache/spark:3.5.3"

if "SPARK_HOME" not in os.environ:
    sys.exit("SPARK_HOME must name the Spark 3.5 distribution (e.g. ~/.cache/spark-oracle/pyspark-3.5.3/deps)")
tool.SPARK_HOME = os.environ["SPARK_HOME"]


def with_image(confs):
    return [(k, IMAGE if k == "spark.kubernetes.container.image" else v) for k, v in confs]


tool.BASE_CONFS[:] = with_image(tool.BASE_CONFS)
tool.MINIMAL_CONFS[:] = with_image(tool.MINIMAL_CONFS)

# Spark 3.5 has no NetworkPolicyFeatureStep: the variants about it say nothing there.
for name in ("scala-pi-no-netpol", "scala-pi-netpol-forbidden"):
    del tool.VARIANTS[name]

# Options Kubeflow passes as spark-submit options go before the main file, as it passes them.
PY_DEPS_APP = [
    "--jars", "local:///opt/spark/extra/udfs.jar,https://repo.example.com/libs/connector.jar",
    "--files", "https://data.example.com/lookup.csv",
    "--py-files", "local:///opt/app/deps.zip,local:///opt/app/helpers.py",
    "local:///opt/spark/examples/src/main/python/wordcount.py", "s3a://bucket/input.txt",
]
tool.VARIANTS["python-deps"] = ([
    ("spark.kubernetes.pyspark.pythonVersion", "3"),
    ("spark.hadoop.fs.s3a.endpoint", "http://minio.storage:9000"),
    ("spark.hadoop.fs.s3a.path.style.access", "true"),
    ("spark.kubernetes.driver.secrets.gcp-sa", "/mnt/secrets/gcp"),
    ("spark.kubernetes.driverEnv.GOOGLE_APPLICATION_CREDENTIALS", "/mnt/secrets/gcp/key.json"),
    ("spark.kubernetes.driver.secrets.hadoop-token", "/mnt/secrets/hadoop"),
    ("spark.kubernetes.driverEnv.HADOOP_TOKEN_FILE_LOCATION", "/mnt/secrets/hadoop/hadoop.token"),
    ("spark.kubernetes.executor.secrets.gcp-sa", "/mnt/secrets/gcp"),
    ("spark.executorEnv.GOOGLE_APPLICATION_CREDENTIALS", "/mnt/secrets/gcp/key.json"),
    ("spark.kubernetes.driver.volumes.hostPath.spark-local-dir-1.mount.path", "/tmp/spark-local-1"),
    ("spark.kubernetes.driver.volumes.hostPath.spark-local-dir-1.options.path", "/mnt/disks/ssd0"),
    ("spark.kubernetes.driver.volumes.emptyDir.spark-local-dir-2.mount.path", "/tmp/spark-local-2"),
    ("spark.kubernetes.driver.volumes.emptyDir.spark-local-dir-2.options.sizeLimit", "10Gi"),
    ("spark.kubernetes.executor.volumes.hostPath.spark-local-dir-1.mount.path", "/tmp/spark-local-1"),
    ("spark.kubernetes.executor.volumes.hostPath.spark-local-dir-1.options.path", "/mnt/disks/ssd0"),
    ("spark.dynamicAllocation.enabled", "true"),
    ("spark.dynamicAllocation.initialExecutors", "1"),
    ("spark.dynamicAllocation.minExecutors", "1"),
    ("spark.dynamicAllocation.maxExecutors", "5"),
    ("spark.dynamicAllocation.shuffleTracking.enabled", "true"),
], PY_DEPS_APP, [])

# Kept: the normalized objects and what was run; everything else stays in the scratch directory.
KEEP = lambda fn: fn.endswith(".normalized.json") or fn in ("command.sh", "requests.summary.txt")


def main():
    variants = sys.argv[1:] or list(tool.VARIANTS)
    scratch = tempfile.mkdtemp(prefix="oracle-3.5-")
    for variant in variants:
        out = os.path.join(scratch, variant)
        stats, requests = tool.run_one(variant, out)
        normalize.sys.argv = ["normalize.py", out]
        normalize.main()
        dest = os.path.join(HERE, variant)
        shutil.rmtree(dest, ignore_errors=True)
        os.makedirs(dest)
        for fn in sorted(os.listdir(out)):
            if KEEP(fn):
                shutil.copy(os.path.join(out, fn), dest)
        print("== %s: rc=%s requests=%d" % (variant, stats.get("rc"), len(requests)))
        print(open(os.path.join(out, "requests.summary.txt")).read())
    print("full captures (logs, raw bodies) in", scratch)


if __name__ == "__main__":
    main()
