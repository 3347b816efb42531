//! What the official Spark images (`apache/spark`, `spark`) hold under `/opt/spark`, from the
//! listing `sim/images/spark-images.txt` (made by `sim/images/generate.py` from the pyspark
//! source packages on PyPI, apache/spark-docker and Spark's example sources; see `sim/README.md`).
//! An image is known when its repository is one of them and its tag is a release version with
//! one of the tag suffixes those repositories publish (`4.0.4`, `3.5.8-scala2.12-java17-ubuntu`)
//! on a version line the listing has. Floating tags (`latest`, `python3`), digests, unlisted
//! lines and every other image are unknown: nothing is checked for them.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use super::local_images::split_reference;

const LISTING: &str = include_str!("../../images/spark-images.txt");

/// The spark home every official image unpacks Spark into.
const SPARK_HOME: &str = "/opt/spark/";

/// The top-level package of the examples jar, the only one whose classes are listed.
pub(crate) const EXAMPLES_PACKAGE: &str = "org.apache.spark.examples";

struct Listing {
    repositories: Vec<String>,
    tag_suffixes: Vec<String>,
    /// The unversioned link to the examples jar, and the first version whose image has it.
    link: Option<(String, Version)>,
    example_classes: HashSet<String>,
    /// Per version line (`4.0`): the files under /opt/spark, `{version}` standing for the version.
    lines: HashMap<String, Line>,
}

struct Line {
    files: HashSet<String>,
    examples_jar: String,
}

/// A Spark release version: major, minor, patch, and a preview number (none sorts last).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Version(u32, u32, u32, u32);

fn parse_version(s: &str) -> Option<Version> {
    let (release, preview) = match s.split_once("-preview") {
        Some((r, p)) => (r, p.parse().ok()?),
        None => (s, u32::MAX),
    };
    let mut parts = release.split('.');
    let mut next = || parts.next()?.parse::<u32>().ok();
    let v = Version(next()?, next()?, next()?, preview);
    parts.next().is_none().then_some(v)
}

fn listing() -> Option<&'static Listing> {
    static PARSED: OnceLock<Option<Listing>> = OnceLock::new();
    PARSED.get_or_init(|| parse(LISTING)).as_ref()
}

/// Parses the listing; None if it is malformed (then no image is known).
fn parse(text: &str) -> Option<Listing> {
    let mut out = Listing {
        repositories: Vec::new(),
        tag_suffixes: Vec::new(),
        link: None,
        example_classes: HashSet::new(),
        lines: HashMap::new(),
    };
    let mut current: Option<String> = None;
    for raw in text.lines() {
        if raw.starts_with('#') || raw.trim().is_empty() {
            continue;
        }
        let (kind, rest) = raw.split_once(' ').unwrap_or((raw, ""));
        match kind {
            "repository" => out.repositories.push(rest.to_string()),
            "tag-suffix" => out.tag_suffixes.push(rest.to_string()),
            "examples-link" => {
                let (path, since) = rest.split_once(' ')?;
                out.link = Some((path.to_string(), parse_version(since)?));
            }
            "example-class" => {
                out.example_classes.insert(rest.to_string());
            }
            "line" => {
                let line = rest.split(' ').next()?.to_string();
                out.lines.insert(
                    line.clone(),
                    Line {
                        files: HashSet::new(),
                        examples_jar: String::new(),
                    },
                );
                current = Some(line);
            }
            "file" => {
                let line = out.lines.get_mut(current.as_deref()?)?;
                if rest.starts_with("examples/jars/spark-examples_") {
                    line.examples_jar = rest.to_string();
                }
                line.files.insert(rest.to_string());
            }
            _ => return None,
        }
    }
    // Longest suffix first, so that `-java17-python3` is not read as version `…-java17`.
    out.tag_suffixes.sort_by_key(|s| std::cmp::Reverse(s.len()));
    Some(out)
}

/// One official image at one Spark version.
pub(crate) struct SparkImage {
    version: String,
    parsed: Version,
    line: &'static Line,
    link: Option<&'static (String, Version)>,
}

/// The official image `image` refers to, if the listing knows it.
pub(crate) fn official(image: &str) -> Option<SparkImage> {
    let listing = listing()?;
    let (repo, tag) = split_reference(image);
    if !listing.repositories.contains(&repo) {
        return None;
    }
    let tag = tag?.strip_prefix(':')?.to_string();
    let version = listing
        .tag_suffixes
        .iter()
        .filter_map(|s| tag.strip_suffix(s.as_str()))
        .find(|v| parse_version(v).is_some())?
        .to_string();
    let parsed = parse_version(&version)?;
    let line = listing.lines.get(&format!("{}.{}", parsed.0, parsed.1))?;
    Some(SparkImage {
        version,
        parsed,
        line,
        link: listing.link.as_ref(),
    })
}

impl SparkImage {
    /// The Spark version the tag names.
    #[cfg(test)]
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The path relative to /opt/spark, as the listing writes it, if `path` is under it.
    fn relative(&self, path: &str) -> Option<String> {
        let rel = path.strip_prefix(SPARK_HOME)?;
        Some(rel.replace(&self.version, "{version}"))
    }

    /// Whether the file `path` (absolute) is in the image. Only /opt/spark is listed: other
    /// paths are taken as absent.
    pub fn has_file(&self, path: &str) -> bool {
        self.is_examples_jar(path) || self.relative(path).is_some_and(|rel| self.line.files.contains(&rel))
    }

    /// Whether `path` is the examples jar: its versioned name, or the link next to it in images
    /// built since the listing's `examples-link` version.
    pub fn is_examples_jar(&self, path: &str) -> bool {
        let Some(rel) = self.relative(path) else {
            return false;
        };
        if rel == self.line.examples_jar {
            return true;
        }
        self.link
            .is_some_and(|(link, since)| rel == *link && self.parsed >= *since)
    }
}

/// Whether the examples jar has `class` among the main classes of its top-level package.
pub(crate) fn is_example_class(class: &str) -> bool {
    listing().is_some_and(|l| l.example_classes.contains(class))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_listing_parses_and_has_every_line() {
        let l = listing().expect("the listing parses");
        for line in ["3.5", "4.0", "4.1", "4.2", "4.3"] {
            assert!(l.lines.contains_key(line), "line {line}");
        }
        assert!(is_example_class("org.apache.spark.examples.SparkPi"));
        assert!(!is_example_class("org.apache.spark.examples.SparkPI"));
    }

    #[test]
    fn official_images_are_recognized_by_repository_and_tag() {
        let v = |i: &str| official(i).map(|img| img.version().to_string());
        assert_eq!(v("apache/spark:4.0.4").as_deref(), Some("4.0.4"));
        assert_eq!(v("docker.io/apache/spark:4.0.4").as_deref(), Some("4.0.4"));
        assert_eq!(v("spark:3.5.2").as_deref(), Some("3.5.2"));
        assert_eq!(
            v("docker.io/library/spark:4.1.2-java21-python3").as_deref(),
            Some("4.1.2")
        );
        assert_eq!(
            v("apache/spark:3.5.8-scala2.12-java17-python3-ubuntu").as_deref(),
            Some("3.5.8")
        );
        // Not official, not a release tag, or a line the listing lacks.
        for unknown in [
            "apache/spark",
            "apache/spark:latest",
            "apache/spark:4",
            "apache/spark:3.5",
            "apache/spark:4.0.4-gcs-prometheus",
            "apache/spark@sha256:0123",
            "ghcr.io/apache/spark:4.0.4",
            "myrepo/spark:4.0.4",
            "spark:3.4.4",
            "spark:driver",
        ] {
            assert_eq!(v(unknown), None, "{unknown}");
        }
    }

    #[test]
    fn files_follow_the_version_of_the_tag() {
        let img = official("apache/spark:4.0.4").unwrap();
        assert!(img.has_file("/opt/spark/examples/jars/spark-examples_2.13-4.0.4.jar"));
        assert!(!img.has_file("/opt/spark/examples/jars/spark-examples_2.13-4.0.3.jar"));
        assert!(img.has_file("/opt/spark/examples/jars/spark-examples.jar"));
        assert!(img.has_file("/opt/spark/jars/spark-core_2.13-4.0.4.jar"));
        assert!(img.has_file("/opt/spark/examples/src/main/python/pi.py"));
        assert!(!img.has_file("/opt/spark/examples/src/main/python/missing.py"));
        assert!(!img.has_file("/non-existent.jar"));
        // apache/spark-docker links spark-examples.jar since 3.5.3 (SPARK-45497).
        let old = official("spark:3.5.2").unwrap();
        assert!(old.has_file("/opt/spark/examples/jars/spark-examples_2.12-3.5.2.jar"));
        assert!(!old.has_file("/opt/spark/examples/jars/spark-examples.jar"));
        assert!(
            official("spark:3.5.3")
                .unwrap()
                .is_examples_jar("/opt/spark/examples/jars/spark-examples.jar")
        );
    }
}
