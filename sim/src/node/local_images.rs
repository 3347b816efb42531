//! Local images: an image reference mapped to an executable on this machine that stands for the
//! image's entrypoint. Pods whose image is mapped run a real process (`sandbox.rs`); other pods
//! keep the scripted runtime. References are matched as docker normalizes them: `apache/spark`
//! is `docker.io/apache/spark`, `spark` is `docker.io/library/spark`; an entry with a tag (or
//! digest) matches only that tag and beats an entry without one, which matches every tag. A tag ending
//! in `*` (`apache/spark:3.5.*`, never a real tag: `*` is not allowed in one) matches every tag it is a
//! prefix of, between the two (the longest pattern first).
//!
//! A PATH that is a directory is an image of its own (`image_dir`): `rootfs/`, a layer laid over
//! the host's root, and `config.json`, the OCI image configuration's `Entrypoint`, `Cmd`, `Env`
//! and `WorkingDir`, which the runtime applies as containerd applies an image's.

use std::path::{Path, PathBuf};
use std::str::FromStr;

/// One `IMAGE=PATH` mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalImage {
    pub image: String,
    pub path: PathBuf,
}

impl LocalImage {
    pub fn new(image: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        Self {
            image: image.into(),
            path: path.into(),
        }
    }
}

/// A `--local-image` value that is not `IMAGE=PATH`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid local image {0:?}: expected IMAGE=PATH, e.g. apache/spark:4.0.4=/opt/bin/fake-spark")]
pub struct LocalImageParseError(String);

impl FromStr for LocalImage {
    type Err = LocalImageParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // The image may contain `=` only in a digest, never; the path may: split at the first.
        match s.trim().split_once('=') {
            Some((image, path)) if !image.trim().is_empty() && !path.trim().is_empty() => {
                Ok(LocalImage::new(image.trim(), path.trim()))
            }
            _ => Err(LocalImageParseError(s.to_string())),
        }
    }
}

/// `(repository, tag or digest)` as docker normalizes a reference: `spark:4` →
/// (`docker.io/library/spark`, Some(`:4`)); `apache/spark` → (`docker.io/apache/spark`, None).
pub(crate) fn split_reference(image: &str) -> (String, Option<String>) {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(format!("@{d}"))),
        None => (image, None),
    };
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    let (repo, tag) = match name[last_slash..].rfind(':') {
        Some(i) => (&name[..last_slash + i], Some(name[last_slash + i..].to_string())),
        None => (name, None),
    };
    let first = repo.split('/').next().unwrap_or("");
    let has_registry = repo.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let repo = if has_registry {
        repo.to_string()
    } else if repo.contains('/') {
        format!("docker.io/{repo}")
    } else {
        format!("docker.io/library/{repo}")
    };
    (repo, digest.or(tag))
}

/// The executable for `image`, if any entry maps it.
pub(crate) fn lookup<'a>(images: &'a [LocalImage], image: &str) -> Option<&'a Path> {
    let (repo, tag) = split_reference(image);
    // A reference without a tag is `:latest`, as the runtime pulls it.
    let tag = tag.unwrap_or_else(|| ":latest".to_string());
    let mut untagged = None;
    // The longest matching `tag*` pattern.
    let mut pattern: Option<(usize, &Path)> = None;
    for entry in images {
        let (e_repo, e_tag) = split_reference(&entry.image);
        if e_repo != repo {
            continue;
        }
        match e_tag {
            Some(t) if t == tag => return Some(&entry.path),
            Some(t) => {
                if let Some(prefix) = t.strip_suffix('*')
                    && tag.starts_with(prefix)
                    && pattern.is_none_or(|(len, _)| prefix.len() > len)
                {
                    pattern = Some((prefix.len(), entry.path.as_path()));
                }
            }
            None => {
                untagged.get_or_insert(entry.path.as_path());
            }
        }
    }
    pattern.map(|(_, path)| path).or(untagged)
}

/// A directory local image: a root filesystem layer and the image's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ImageDir {
    /// Laid over the host's root (the image's files win).
    pub rootfs: PathBuf,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// `KEY=VALUE` pairs in order; the container's env overrides them.
    pub env: Vec<(String, String)>,
    pub working_dir: Option<String>,
}

/// Reads `DIR/config.json` (`{"config": {"Entrypoint": [...], "Cmd": [...], "Env": ["K=V"],
/// "WorkingDir": "..."}}`, the OCI image configuration) and names `DIR/rootfs`.
pub(crate) fn image_dir(dir: &Path) -> Result<ImageDir, String> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("reading image config {}: {e}", path.display()))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("image config {} is not JSON: {e}", path.display()))?;
    let config = doc.get("config").cloned().unwrap_or_default();
    let words = |k: &str| -> Vec<String> {
        config
            .get(k)
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let env = words("Env")
        .into_iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (kv, String::new()),
        })
        .collect();
    let rootfs = dir.join("rootfs");
    if !rootfs.is_dir() {
        return Err(format!("image {} has no rootfs directory", dir.display()));
    }
    Ok(ImageDir {
        rootfs,
        entrypoint: words("Entrypoint"),
        cmd: words("Cmd"),
        env,
        working_dir: config
            .get("WorkingDir")
            .and_then(serde_json::Value::as_str)
            .filter(|w| !w.is_empty())
            .map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_match_as_docker_normalizes_them() {
        let images = vec![
            LocalImage::new("apache/spark", "/any"),
            LocalImage::new("docker.io/apache/spark:4.0.4", "/tagged"),
            LocalImage::new("spark", "/library"),
            LocalImage::new("localhost:5000/x", "/registry"),
        ];
        let l = |i: &str| lookup(&images, i).map(|p| p.display().to_string());
        assert_eq!(l("apache/spark:4.0.4").as_deref(), Some("/tagged"));
        assert_eq!(l("docker.io/apache/spark:3.5").as_deref(), Some("/any"));
        assert_eq!(l("apache/spark").as_deref(), Some("/any"));
        assert_eq!(l("docker.io/library/spark:4").as_deref(), Some("/library"));
        assert_eq!(l("localhost:5000/x:1").as_deref(), Some("/registry"));
        assert_eq!(l("other/spark:4.0.4"), None);
        assert_eq!(l("sparky"), None);
        let patterns = vec![
            LocalImage::new("apache/spark", "/any"),
            LocalImage::new("apache/spark:3.*", "/three"),
            LocalImage::new("apache/spark:3.5.*", "/three-five"),
            LocalImage::new("apache/spark:3.5.3", "/exact"),
        ];
        let p = |i: &str| lookup(&patterns, i).map(|p| p.display().to_string());
        assert_eq!(p("apache/spark:3.5.3").as_deref(), Some("/exact"));
        assert_eq!(p("apache/spark:3.5.8-python3").as_deref(), Some("/three-five"));
        assert_eq!(p("apache/spark:3.4.1").as_deref(), Some("/three"));
        assert_eq!(p("apache/spark:4.0.4").as_deref(), Some("/any"));
        let tagged_only = vec![LocalImage::new("busybox:1.36", "/b")];
        assert_eq!(lookup(&tagged_only, "busybox"), None);
        assert_eq!(
            lookup(&tagged_only, "busybox:1.36").map(Path::to_path_buf),
            Some("/b".into())
        );
    }

    #[test]
    fn parses_image_equals_path() {
        assert_eq!(
            "apache/spark:4=/opt/x=y".parse::<LocalImage>(),
            Ok(LocalImage::new("apache/spark:4", "/opt/x=y"))
        );
        assert!("apache/spark".parse::<LocalImage>().is_err());
        assert!("=/x".parse::<LocalImage>().is_err());
    }

    #[test]
    fn image_dir_reads_the_oci_config() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("rootfs")).unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"config": {"Entrypoint": ["/opt/entrypoint.sh"], "Env": ["SPARK_HOME=/opt/spark", "A=b=c"], "WorkingDir": "/opt/spark/work-dir"}}"#,
        )
        .unwrap();
        let image = image_dir(dir.path()).unwrap();
        assert_eq!(image.entrypoint, vec!["/opt/entrypoint.sh"]);
        assert!(image.cmd.is_empty());
        assert_eq!(
            image.env,
            vec![("SPARK_HOME".into(), "/opt/spark".into()), ("A".into(), "b=c".into())]
        );
        assert_eq!(image.working_dir.as_deref(), Some("/opt/spark/work-dir"));
        std::fs::remove_dir(dir.path().join("rootfs")).unwrap();
        assert!(image_dir(dir.path()).unwrap_err().contains("no rootfs"));
    }
}
