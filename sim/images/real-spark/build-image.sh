#!/usr/bin/env bash
# Builds kube-sim's stand-in for the apache/spark image: a directory local image (rootfs/ +
# config.json, see sim/README.md "Process pods") from a Spark distribution installed from PyPI.
#
#   build-image.sh SPARK_HOME DEST      (SPARK_HOME: .../pyspark-X.Y.Z/deps, as get-spark.sh prints)
#
# Files are hard links into SPARK_HOME where possible (same filesystem), so DEST costs little.
# Layout as the image's: /opt/spark/{bin,sbin,jars,data}, /opt/spark/examples/src/main/python,
# /opt/spark/python/lib/{pyspark.zip,py4j-*.zip}, /opt/spark/work-dir (owned by 185, the image's
# `spark` user), /opt/entrypoint.sh. Env and working directory as the image's config.
set -euo pipefail
src=$(cd "$1" && pwd)
dest=$2
here=$(cd "$(dirname "$0")" && pwd)
java_home=$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")
pkg=$(dirname "$src")
rm -rf "$dest.new"
root="$dest.new/rootfs"
mkdir -p "$root/opt/spark/examples/src/main" "$root/opt/spark/python/lib" "$root/opt/spark/work-dir"
link() { cp -al "$1" "$2" 2>/dev/null || cp -a "$1" "$2"; }
for d in bin sbin jars data; do [ -e "$src/$d" ] && link "$src/$d" "$root/opt/spark/$d"; done
link "$src/examples" "$root/opt/spark/examples/src/main/python"
for z in "$pkg"/lib/*.zip; do link "$z" "$root/opt/spark/python/lib/"; done
version=$(sed -n 's/^Version: //p' "$pkg/PKG-INFO" | head -1)
echo "Spark $version built for Hadoop 3 (kube-sim image from pyspark $version on PyPI)" > "$root/opt/spark/RELEASE"
chown 185:185 "$root/opt/spark/work-dir"
chmod 0755 "$root/opt/spark/work-dir"
install -m 0755 "$here/entrypoint.sh" "$root/opt/entrypoint.sh"
# The image's `spark` user and group (uid/gid 185, home /home/spark), added to this machine's
# files as the image's Dockerfile adds them to its base image's.
mkdir -p "$root/etc"
grep -v '^spark:' /etc/passwd > "$root/etc/passwd"
echo 'spark:x:185:185::/home/spark:/bin/sh' >> "$root/etc/passwd"
grep -v '^spark:' /etc/group > "$root/etc/group"
echo 'spark:x:185:' >> "$root/etc/group"
cat > "$dest.new/config.json" <<JSON
{"config": {
  "User": "185",
  "Entrypoint": ["/opt/entrypoint.sh"],
  "Env": [
    "PATH=$java_home/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "JAVA_HOME=$java_home",
    "SPARK_HOME=/opt/spark",
    "SPARK_VERSION=$version"
  ],
  "WorkingDir": "/opt/spark/work-dir"
}}
JSON
rm -rf "$dest"
mv "$dest.new" "$dest"
echo "$dest"
