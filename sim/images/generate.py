#!/usr/bin/env python3
"""Generates sim/images/spark-images.txt: what the official Spark images hold under /opt/spark.

The simulator's fake Spark driver (sim/src/node/spark_image.rs) embeds the output and fails as
Spark fails when an application's main class or `local://` file is not in the image.

Inputs, all real sources:

* One PyPI source package per Spark version line (`pip download --no-deps --no-binary :all:
  pyspark==X.Y.Z`). Spark's release build makes it from the same build as the
  `spark-X.Y.Z-bin-hadoop3.tgz` distribution the images unpack (dev/create-release/
  release-build.sh, `make-distribution.sh --pip`), so `deps/jars` is the image's
  /opt/spark/jars and `deps/examples` its /opt/spark/examples/src/main/python (MANIFEST.in
  keeps only `*.py` there). It does not carry the examples jar.
* A checkout of apache/spark-docker (the Dockerfiles of both `apache/spark` and the Docker
  official image `spark`): `versions.json` gives the tags of each version, the Dockerfiles the
  first version whose image links `examples/jars/spark-examples.jar` to the versioned jar.
* The examples jar's main classes of the top-level package `org.apache.spark.examples`: from
  Spark's source file names, either a checkout of the release tag (`--spark-source DIR`) or a
  list of paths (`--examples-sources FILE`). A Scala object or Java class with `main` is named
  after its file in that package; files in subpackages are not listed.

Usage:
  generate.py --spark-docker DIR --examples-sources FILE pyspark-3.5.8.tar.gz ... > spark-images.txt
"""

import argparse
import json
import os
import re
import sys
import tarfile
import zipfile
import io

REPOSITORIES = ["docker.io/apache/spark", "docker.io/library/spark"]
VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-preview(\d+))?$")
LINK = "spark-examples.jar"


def version_key(v):
    m = VERSION.match(v)
    if not m:
        raise SystemExit(f"not a Spark version: {v}")
    major, minor, patch, preview = m.groups()
    # A preview comes before its release.
    return (int(major), int(minor), int(patch), int(preview) if preview else 1 << 30)


def docker_facts(root):
    """(tag suffixes, first version with the spark-examples.jar link)."""
    with open(os.path.join(root, "versions.json")) as f:
        versions = json.load(f)["versions"]
    suffixes = set()
    for entry in versions:
        version = entry["path"].split("/")[0]
        for tag in entry["tags"]:
            if tag.startswith(version):
                suffixes.add(tag[len(version):])
    linked, unlinked = [], []
    for version in sorted(os.listdir(root)):
        if not VERSION.match(version):
            continue
        # The base image of a version is its variant without python3 or r (the others are
        # `FROM` it).
        for variant in sorted(os.listdir(os.path.join(root, version))):
            if "python3" in variant or variant.endswith("-r-ubuntu"):
                continue
            with open(os.path.join(root, version, variant, "Dockerfile")) as f:
                text = f.read()
            (linked if LINK in text else unlinked).append(version)
    since = min(linked, key=version_key)
    late = [v for v in unlinked if version_key(v) >= version_key(since)]
    if late:
        raise SystemExit(f"{LINK} is linked since {since} but missing in {late}")
    return sorted(suffixes), since


def example_classes(paths):
    pattern = re.compile(r"^examples/src/main/(?:scala|java)/org/apache/spark/examples/([A-Za-z0-9_]+)\.(?:scala|java)$")
    classes = set()
    for p in paths:
        m = pattern.match(p)
        if m:
            classes.add(f"org.apache.spark.examples.{m.group(1)}")
    return sorted(classes)


def source_paths(root):
    for base in ("scala", "java"):
        top = os.path.join(root, "examples/src/main", base, "org/apache/spark/examples")
        for name in sorted(os.listdir(top)):
            yield f"examples/src/main/{base}/org/apache/spark/examples/{name}"


def sdist_facts(path):
    """(version, scala, revision, files relative to /opt/spark with {version} for the version)."""
    name = os.path.basename(path)
    m = re.match(r"^pyspark-(.+)\.tar\.gz$", name)
    if not m:
        raise SystemExit(f"not a pyspark source package: {name}")
    version = m.group(1)
    prefix = f"pyspark-{version}/deps/"
    files, scala, revision = [], None, None
    with tarfile.open(path) as tar:
        for member in tar:
            if not member.isfile() or not member.name.startswith(prefix):
                continue
            rel = member.name[len(prefix):]
            if rel.startswith("jars/") and rel.endswith(".jar") and rel.count("/") == 1:
                jar = rel[len("jars/"):]
                core = re.match(r"^spark-core_(2\.\d+)-" + re.escape(version) + r"\.jar$", jar)
                if core:
                    scala = core.group(1)
                if re.match(r"^spark-(core|common-utils)_", jar):
                    data = tar.extractfile(member).read()
                    with zipfile.ZipFile(io.BytesIO(data)) as z:
                        if "spark-version-info.properties" in z.namelist():
                            props = z.read("spark-version-info.properties").decode()
                            r = re.search(r"^revision=(\w+)", props, re.M)
                            revision = r.group(1) if r else revision
                files.append("jars/" + jar.replace(version, "{version}"))
            elif rel.startswith("examples/") and rel.endswith(".py"):
                files.append("examples/src/main/python/" + rel[len("examples/"):])
    if scala is None:
        raise SystemExit(f"{name}: no spark-core jar")
    files.append(f"examples/jars/spark-examples_{scala}-{{version}}.jar")
    return version, scala, revision or "unknown", sorted(set(files))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spark-docker", required=True, help="checkout of apache/spark-docker")
    parser.add_argument("--spark-docker-commit", default="", help="its commit, for the header")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--examples-sources", help="file listing Spark example source paths")
    src.add_argument("--spark-source", help="checkout of apache/spark at a release tag")
    parser.add_argument("sdists", nargs="+", help="pyspark-X.Y.Z.tar.gz from PyPI, one per version line")
    args = parser.parse_args()

    suffixes, since = docker_facts(args.spark_docker)
    if args.spark_source:
        paths = list(source_paths(args.spark_source))
        origin = "the file names of a Spark source checkout"
    else:
        with open(args.examples_sources) as f:
            paths = [l.strip() for l in f if l.strip() and not l.startswith("#")]
        origin = f"the file names in {os.path.basename(args.examples_sources)}"
    classes = example_classes(paths)

    lines = {}
    for sdist in args.sdists:
        version, scala, revision, files = sdist_facts(sdist)
        line = ".".join(version.split(".")[:2])
        if line in lines:
            raise SystemExit(f"two packages for the {line} line")
        lines[line] = (version, scala, revision, files)

    out = sys.stdout
    out.write("# Generated by sim/images/generate.py; do not edit (see sim/README.md, \"Official Spark images\").\n")
    out.write(f"# Tags and the {LINK} link: apache/spark-docker {args.spark_docker_commit}.\n")
    out.write(f"# Example classes: {origin}.\n")
    out.write("# Files per line: the pyspark source package named on its `line` row.\n")
    for repo in REPOSITORIES:
        out.write(f"repository {repo}\n")
    for s in suffixes:
        out.write(f"tag-suffix {s}\n" if s else "tag-suffix\n")
    out.write(f"examples-link examples/jars/{LINK} {since}\n")
    for c in classes:
        out.write(f"example-class {c}\n")
    for line in sorted(lines, key=lambda l: tuple(int(x) for x in l.split("."))):
        version, scala, revision, files = lines[line]
        out.write(f"line {line} pyspark-{version} scala {scala} revision {revision}\n")
        for f in files:
            out.write(f"file {f}\n")


if __name__ == "__main__":
    main()
