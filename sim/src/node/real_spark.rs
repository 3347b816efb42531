//! The stand-in for the official Spark image (`apache/spark`, `spark`): a directory local image
//! (`local_images.rs`) built from a Spark distribution as pyspark's source package on PyPI carries it
//! (`.../pyspark-X.Y.Z/deps`: `bin`, `jars`, the Python examples; `sim/images/real-spark/get-spark.sh`
//! fetches one). Pods with it run Spark's own driver and executors (see `sim/README.md`, "Spark images").
//!
//! The image's layout: `/opt/spark/{bin,sbin,jars,data}`, `examples/src/main/python`,
//! `python/lib/{pyspark.zip,py4j-*.zip}`, `work-dir` (owned by 185, the image's `spark` user),
//! `/opt/entrypoint.sh` (ours, `sim/images/real-spark/entrypoint.sh`), and
//! `examples/jars/spark-examples.jar`: the distribution has no examples jar, so ours is compiled here
//! with `javac` against its jars (`sim/images/real-spark/examples/`: `SparkPi`, `sim.SparkPiInWaves`).
//! Files are hard links into the distribution where the filesystem allows, copies where not.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::local_images::LocalImage;

const ENTRYPOINT: &str = include_str!("../../images/real-spark/entrypoint.sh");
/// Our examples' sources, at their paths under `org/apache/spark/examples/`.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "SparkPi.java",
        include_str!("../../images/real-spark/examples/org/apache/spark/examples/SparkPi.java"),
    ),
    (
        "sim/SparkPiInWaves.java",
        include_str!("../../images/real-spark/examples/org/apache/spark/examples/sim/SparkPiInWaves.java"),
    ),
];
/// The image's `spark` user and group.
const SPARK_UID: u32 = 185;
/// Where the examples jar is in the official images (Kubeflow's `spark-pi.yaml` runs it).
pub const EXAMPLES_JAR: &str = "/opt/spark/examples/jars/spark-examples.jar";

/// Why the image could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(
        "{} is not a Spark distribution (it has no bin/spark-submit): give the `deps` directory of an unpacked pyspark source package, e.g. the one sim/images/real-spark/get-spark.sh 4.3.0 prints",
        .0.display()
    )]
    NotADistribution(PathBuf),
    #[error(
        "cannot tell the Spark version of {}: it is not in an unpacked pyspark source package (no PKG-INFO with a `Version:` line next to it)",
        .0.display()
    )]
    NoVersion(PathBuf),
    #[error("no `{0}` on PATH: kube-sim's Spark image needs a JDK 17 (java, javac, jar)")]
    NoJdk(&'static str),
    #[error("cannot read this machine's {}, which the image's users are added to", .0.display())]
    HostUsers(PathBuf, #[source] std::io::Error),
    #[error("writing the image at {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot run {tool} to compile the image's examples jar")]
    Run {
        tool: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{tool} failed compiling the image's examples jar: {stderr}")]
    Compile { tool: &'static str, stderr: String },
}

/// A Spark distribution on this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SparkDistribution {
    /// The `deps` directory (Spark's home).
    pub home: PathBuf,
    /// `4.3.0`, from its package's `PKG-INFO`.
    pub version: String,
}

impl SparkDistribution {
    pub fn open(home: &Path) -> Result<Self, ImageError> {
        if !home.join("bin/spark-submit").is_file() {
            return Err(ImageError::NotADistribution(home.to_path_buf()));
        }
        // It has bin/spark-submit: a canonical path exists unless it went away meanwhile.
        let home = home
            .canonicalize()
            .map_err(|_| ImageError::NotADistribution(home.to_path_buf()))?;
        let info = home.parent().map(|p| p.join("PKG-INFO")).unwrap_or_default();
        let version = std::fs::read_to_string(&info)
            .ok()
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("Version: "))
                    .map(|v| v.trim().to_owned())
            })
            .filter(|v| !v.is_empty())
            .ok_or(ImageError::NoVersion(home.clone()))?;
        Ok(Self { home, version })
    }
}

/// `LINE=DIR`: the distribution behind the images of a Spark version line (`4`, `3.5`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SparkHome {
    pub line: String,
    pub dir: PathBuf,
}

/// A `--spark-home` value that is not `LINE=DIR`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid Spark home {0:?}: expected LINE=DIR with LINE a version line such as 4 or 3.5, e.g. 3.5=/opt/pyspark-3.5.3/deps"
)]
pub struct SparkHomeParseError(String);

impl std::str::FromStr for SparkHome {
    type Err = SparkHomeParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (line, dir) = s
            .trim()
            .split_once('=')
            .ok_or_else(|| SparkHomeParseError(s.to_owned()))?;
        let numbers: Vec<&str> = line.trim().split('.').collect();
        let is_line = numbers.len() <= 2
            && numbers
                .iter()
                .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !is_line || dir.trim().is_empty() {
            return Err(SparkHomeParseError(s.to_owned()));
        }
        Ok(Self {
            line: line.trim().to_owned(),
            dir: PathBuf::from(dir.trim()),
        })
    }
}

/// The pinned releases `sim/images/real-spark/get-spark.sh` fetches, and the lines they back.
pub const PINNED: &[(&str, &str)] = &[("4", "4.3.0"), ("3.5", "3.5.3")];

/// The distributions `get-spark.sh` cached (`${XDG_CACHE_HOME:-~/.cache}/spark-oracle/pyspark-X.Y.Z/deps`),
/// present or not.
pub fn cached_homes() -> Vec<SparkHome> {
    // As the script's `${XDG_CACHE_HOME:-~/.cache}`: empty is unset.
    let set = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let cache = set("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| set("HOME").map(|h| PathBuf::from(h).join(".cache")));
    let Some(cache) = cache else {
        return Vec::new();
    };
    PINNED
        .iter()
        .map(|(line, release)| SparkHome {
            line: (*line).to_owned(),
            dir: cache.join(format!("spark-oracle/pyspark-{release}/deps")),
        })
        .collect()
}

/// The local images an image directory backs for one Spark version line (`4`, `3.5`): every tag of
/// `apache/spark` and `spark` on that line, with any suffix (`4.0.4`, `3.5.3-python3`).
pub fn local_images(line: &str, dir: &Path) -> Vec<LocalImage> {
    ["apache/spark", "spark"]
        .iter()
        .map(|repo| LocalImage::new(format!("{repo}:{line}.*"), dir))
        .collect()
}

/// Where the image of `dist` is kept by default: next to the distribution (its package's directory), so
/// its files can be hard links into it.
pub fn image_dir(dist: &SparkDistribution) -> PathBuf {
    dist.home
        .parent()
        .unwrap_or(&dist.home)
        .join(format!("kube-sim-image-{}", dist.version))
}

/// Builds the image of `dist` at `dest` (replacing what is there) and returns `dest`. Nothing is left
/// half-built: it is made beside `dest` and moved into place, or removed on a failure.
pub fn build_image(dist: &SparkDistribution, dest: &Path) -> Result<PathBuf, ImageError> {
    let mut staging = dest.as_os_str().to_owned();
    staging.push(".new");
    let staging = PathBuf::from(staging);
    let built = build_at(dist, &staging, dest);
    if built.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    built
}

fn build_at(dist: &SparkDistribution, staging: &Path, dest: &Path) -> Result<PathBuf, ImageError> {
    let java = which("java").ok_or(ImageError::NoJdk("java"))?;
    let java_home = java
        .canonicalize()
        .ok()
        .and_then(|p| p.parent()?.parent().map(Path::to_path_buf))
        .ok_or(ImageError::NoJdk("java"))?;
    let write = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ImageError::Write { path, source }
    };
    if staging.exists() {
        std::fs::remove_dir_all(staging).map_err(write(staging))?;
    }
    let root = staging.join("rootfs");
    let spark = root.join("opt/spark");
    for dir in ["bin", "sbin", "jars", "data"] {
        let from = dist.home.join(dir);
        if from.exists() {
            link_tree(&from, &spark.join(dir)).map_err(write(&spark.join(dir)))?;
        }
    }
    let python_examples = spark.join("examples/src/main/python");
    link_tree(&dist.home.join("examples"), &python_examples).map_err(write(&python_examples))?;
    let lib = spark.join("python/lib");
    std::fs::create_dir_all(&lib).map_err(write(&lib))?;
    if let Some(pkg) = dist.home.parent()
        && let Ok(entries) = std::fs::read_dir(pkg.join("lib"))
    {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "zip") {
                link_tree(&path, &lib.join(entry.file_name())).map_err(write(&lib))?;
            }
        }
    }
    let file = |path: PathBuf, text: &str, mode: u32| -> Result<(), ImageError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(write(parent))?;
        }
        std::fs::write(&path, text).map_err(write(&path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).map_err(write(&path))
    };
    file(
        spark.join("RELEASE"),
        &format!(
            "Spark {v} built for Hadoop 3 (kube-sim image from pyspark {v} on PyPI)\n",
            v = dist.version
        ),
        0o644,
    )?;
    let work_dir = spark.join("work-dir");
    std::fs::create_dir_all(&work_dir).map_err(write(&work_dir))?;
    std::fs::set_permissions(&work_dir, std::fs::Permissions::from_mode(0o755)).map_err(write(&work_dir))?;
    // Owned by `spark` as in the image; only root may give files away, and only root runs process pods.
    let _ = std::os::unix::fs::chown(&work_dir, Some(SPARK_UID), Some(SPARK_UID));
    file(root.join("opt/entrypoint.sh"), ENTRYPOINT, 0o755)?;
    // The image's `spark` user and group, added to this machine's as the image's Dockerfile adds them
    // to its base image's.
    for (name, entry) in [
        (
            "passwd",
            format!("spark:x:{SPARK_UID}:{SPARK_UID}::/home/spark:/bin/sh"),
        ),
        ("group", format!("spark:x:{SPARK_UID}:")),
    ] {
        let host_file = Path::new("/etc").join(name);
        let host = std::fs::read_to_string(&host_file).map_err(|e| ImageError::HostUsers(host_file.clone(), e))?;
        let mut text: String = host
            .lines()
            .filter(|l| !l.starts_with("spark:"))
            .flat_map(|l| [l, "\n"])
            .collect();
        text.push_str(&entry);
        text.push('\n');
        file(root.join("etc").join(name), &text, 0o644)?;
    }
    examples_jar(dist, staging, &root.join(EXAMPLES_JAR.trim_start_matches('/')))?;
    let config = serde_json::json!({"config": {
        "User": SPARK_UID.to_string(),
        "Entrypoint": ["/opt/entrypoint.sh"],
        "Env": [
            format!("PATH={}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", java_home.display()),
            format!("JAVA_HOME={}", java_home.display()),
            "SPARK_HOME=/opt/spark",
            format!("SPARK_VERSION={}", dist.version),
        ],
        "WorkingDir": "/opt/spark/work-dir",
    }});
    file(staging.join("config.json"), &config.to_string(), 0o644)?;
    if dest.exists() {
        std::fs::remove_dir_all(dest).map_err(write(dest))?;
    }
    std::fs::rename(staging, dest).map_err(write(dest))?;
    Ok(dest.to_path_buf())
}

/// Compiles our examples against the distribution's jars into `jar`.
fn examples_jar(dist: &SparkDistribution, staging: &Path, jar: &Path) -> Result<(), ImageError> {
    let javac = which("javac").ok_or(ImageError::NoJdk("javac"))?;
    let jar_tool = which("jar").ok_or(ImageError::NoJdk("jar"))?;
    let build = staging.join("examples-build");
    let sources = build.join("src/org/apache/spark/examples");
    let classes = build.join("classes");
    let write = |path: &Path, source| ImageError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut paths = Vec::new();
    for (name, text) in EXAMPLES {
        let path = sources.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| write(parent, e))?;
        }
        let mut out = std::fs::File::create(&path).map_err(|e| write(&path, e))?;
        out.write_all(text.as_bytes()).map_err(|e| write(&path, e))?;
        paths.push(path);
    }
    std::fs::create_dir_all(&classes).map_err(|e| write(&classes, e))?;
    if let Some(parent) = jar.parent() {
        std::fs::create_dir_all(parent).map_err(|e| write(parent, e))?;
    }
    let run = |tool: &'static str, command: &mut Command| -> Result<(), ImageError> {
        let output = command.output().map_err(|source| ImageError::Run { tool, source })?;
        if output.status.success() {
            Ok(())
        } else {
            Err(ImageError::Compile {
                tool,
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            })
        }
    };
    run(
        "javac",
        Command::new(javac)
            .args(["--release", "17", "-nowarn", "-cp"])
            .arg(format!("{}/jars/*", dist.home.display()))
            .arg("-d")
            .arg(&classes)
            .args(&paths),
    )?;
    run(
        "jar",
        Command::new(jar_tool)
            .arg("--create")
            .arg("--file")
            .arg(jar)
            .arg("-C")
            .arg(&classes)
            .arg("."),
    )?;
    std::fs::remove_dir_all(&build).map_err(|e| write(&build, e))
}

/// `from` (a file, directory or symlink) at `to`: directories made anew, files hard-linked (copied
/// across filesystems), symlinks recreated.
fn link_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(from)?;
    if meta.file_type().is_symlink() {
        return std::os::unix::fs::symlink(std::fs::read_link(from)?, to);
    }
    if meta.is_dir() {
        std::fs::create_dir_all(to)?;
        std::fs::set_permissions(to, meta.permissions())?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            link_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        return Ok(());
    }
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to)?;
    }
    Ok(())
}

/// `name` on this process's PATH.
fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_spark_submit_is_named_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let error = SparkDistribution::open(dir.path()).unwrap_err();
        assert!(matches!(error, ImageError::NotADistribution(_)));
        assert!(error.to_string().contains("get-spark.sh"), "{error}");
    }

    #[test]
    fn spark_homes_are_a_version_line_and_a_directory() {
        let home: SparkHome = "3.5=/opt/x=y".parse().unwrap();
        assert_eq!((home.line.as_str(), home.dir.as_path()), ("3.5", Path::new("/opt/x=y")));
        assert_eq!("4=/d".parse::<SparkHome>().unwrap().line, "4");
        for bad in ["/d", "4.0.4=/d", "x=/d", "4=", "=/d", "4.=/d"] {
            let error = bad.parse::<SparkHome>().unwrap_err();
            assert!(error.to_string().contains("LINE=DIR"), "{bad}: {error}");
        }
    }

    #[test]
    fn a_line_backs_every_tag_on_it_in_both_repositories() {
        let images = local_images("3.5", Path::new("/img"));
        let found = |i: &str| super::super::local_images::lookup(&images, i).is_some();
        assert!(found("apache/spark:3.5.3"));
        assert!(found("docker.io/library/spark:3.5.8-python3"));
        assert!(!found("apache/spark:3.4.1"));
        assert!(!found("apache/spark:4.0.4"));
        assert!(!found("apache/spark"));
    }
}
