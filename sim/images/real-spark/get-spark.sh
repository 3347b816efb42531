#!/usr/bin/env bash
# Fetches the Spark distribution behind kube-sim's Spark image for one pinned release: pyspark's source
# package from PyPI carries the whole distribution (bin, jars, the Python examples) under `deps/`.
# Cached outside the repository (nothing downloads it at run time); prints the SPARK_HOME to use.
# Needs pip; about 450 MB per release.
#
#   get-spark.sh [4.3.0|3.5.3] [CACHE_DIR]     (default 4.3.0, ${XDG_CACHE_HOME:-~/.cache}/spark-oracle)
set -euo pipefail
version=${1:-4.3.0}
case "$version" in
  4.3.0 | 3.5.3) ;;
  *) echo "get-spark.sh: $version is not a pinned release (4.3.0 or 3.5.3)" >&2; exit 2 ;;
esac
dest=${2:-"${XDG_CACHE_HOME:-$HOME/.cache}/spark-oracle"}
home="$dest/pyspark-$version/deps"
if [ ! -x "$home/bin/spark-submit" ]; then
  mkdir -p "$dest"
  pip download --no-deps --no-binary :all: -d "$dest" "pyspark==$version" >&2
  tar xzf "$dest/pyspark-$version.tar.gz" -C "$dest"
fi
echo "$home"
