//! Levels, versions and the namespace labels that choose them (`k8s.io/pod-security-admission/api`).

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Value, json};

use crate::status::FieldCause;

pub const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";
pub const ENFORCE_LEVEL_LABEL: &str = "pod-security.kubernetes.io/enforce";
pub const ENFORCE_VERSION_LABEL: &str = "pod-security.kubernetes.io/enforce-version";
pub const AUDIT_LEVEL_LABEL: &str = "pod-security.kubernetes.io/audit";
pub const AUDIT_VERSION_LABEL: &str = "pod-security.kubernetes.io/audit-version";
pub const WARN_LEVEL_LABEL: &str = "pod-security.kubernetes.io/warn";
pub const WARN_VERSION_LABEL: &str = "pod-security.kubernetes.io/warn-version";

/// Why a label value is refused; worded as `api.ParseLevel` / `api.ParseVersion` word it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    #[error("must be one of privileged, baseline, restricted")]
    Level,
    #[error(r#"must be "latest" or "v1.x""#)]
    Version,
}

/// A Pod Security Standard, ordered from the most to the least permissive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    pub fn parse(s: &str) -> Result<Level, LabelError> {
        match s {
            "privileged" => Ok(Level::Privileged),
            "baseline" => Ok(Level::Baseline),
            "restricted" => Ok(Level::Restricted),
            _ => Err(LabelError::Level),
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// A policy version: `v1.<minor>` or `latest` (newer than every numbered version).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    Minor(u32),
    Latest,
}

impl Version {
    /// `^v1\.([0-9]|[1-9][0-9]*)$` or `latest`.
    pub fn parse(s: &str) -> Result<Version, LabelError> {
        if s == "latest" {
            return Ok(Version::Latest);
        }
        let digits = s.strip_prefix("v1.").ok_or(LabelError::Version)?;
        let well_formed = !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'));
        if !well_formed {
            return Err(LabelError::Version);
        }
        digits.parse().map(Version::Minor).map_err(|_| LabelError::Version)
    }

    /// `Version.Older`: latest is never older, everything numbered is older than latest.
    pub fn older(&self, other: &Version) -> bool {
        match (self, other) {
            (Version::Latest, _) => false,
            (_, Version::Latest) => true,
            (Version::Minor(a), Version::Minor(b)) => a < b,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Minor(m) => write!(f, "v1.{m}"),
            Version::Latest => f.write_str("latest"),
        }
    }
}

/// A level at a version, shown as `restricted:latest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LevelVersion {
    pub level: Level,
    pub version: Version,
}

impl LevelVersion {
    pub const PRIVILEGED_LATEST: LevelVersion = LevelVersion {
        level: Level::Privileged,
        version: Version::Latest,
    };
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

/// What a namespace enforces, audits and warns about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub enforce: LevelVersion,
    pub audit: LevelVersion,
    pub warn: LevelVersion,
}

impl Policy {
    /// kube-apiserver's default configuration: privileged:latest for all three modes.
    pub const DEFAULT: Policy = Policy {
        enforce: LevelVersion::PRIVILEGED_LATEST,
        audit: LevelVersion::PRIVILEGED_LATEST,
        warn: LevelVersion::PRIVILEGED_LATEST,
    };

    pub fn fully_privileged(&self) -> bool {
        self.enforce.level == Level::Privileged
            && self.audit.level == Level::Privileged
            && self.warn.level == Level::Privileged
    }
}

/// The labels of an object (`metadata.labels`), string values only.
pub fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// `api.PolicyToEvaluate`: the policy the labels select, starting from the defaults, with a field
/// error per bad label. An invalid enforce level fails closed (restricted), an invalid audit or
/// warn level fails open (privileged), an invalid version means latest; a namespace that sets an
/// enforce level but no warn level is warned at its enforce level (and version).
pub fn policy_to_evaluate(labels: &BTreeMap<String, String>) -> (Policy, Vec<FieldCause>) {
    let mut p = Policy::DEFAULT;
    let mut errs = Vec::new();
    let mut bad = |label: &str, value: &str, e: LabelError| {
        errs.push(FieldCause::invalid(
            format!("metadata.labels[{label}]"),
            &json!(value),
            e.to_string(),
        ));
    };
    let mut has_enforce_level = false;
    if let Some(level) = labels.get(ENFORCE_LEVEL_LABEL) {
        match Level::parse(level) {
            Ok(l) => {
                p.enforce.level = l;
                has_enforce_level = true;
            }
            Err(e) => {
                p.enforce.level = Level::Restricted;
                bad(ENFORCE_LEVEL_LABEL, level, e);
            }
        }
    }
    if let Some(version) = labels.get(ENFORCE_VERSION_LABEL) {
        p.enforce.version = Version::parse(version).unwrap_or_else(|e| {
            bad(ENFORCE_VERSION_LABEL, version, e);
            Version::Latest
        });
    }
    if let Some(level) = labels.get(AUDIT_LEVEL_LABEL) {
        p.audit.level = Level::parse(level).unwrap_or_else(|e| {
            bad(AUDIT_LEVEL_LABEL, level, e);
            Level::Privileged
        });
    }
    if let Some(version) = labels.get(AUDIT_VERSION_LABEL) {
        p.audit.version = Version::parse(version).unwrap_or_else(|e| {
            bad(AUDIT_VERSION_LABEL, version, e);
            Version::Latest
        });
    }
    let has_warn_level = labels.contains_key(WARN_LEVEL_LABEL);
    if let Some(level) = labels.get(WARN_LEVEL_LABEL) {
        p.warn.level = Level::parse(level).unwrap_or_else(|e| {
            bad(WARN_LEVEL_LABEL, level, e);
            Level::Privileged
        });
    }
    let has_warn_version = labels.contains_key(WARN_VERSION_LABEL);
    if let Some(version) = labels.get(WARN_VERSION_LABEL) {
        p.warn.version = Version::parse(version).unwrap_or_else(|e| {
            bad(WARN_VERSION_LABEL, version, e);
            Version::Latest
        });
    }
    if !has_warn_level && has_enforce_level && p.enforce.level > p.warn.level {
        p.warn.level = p.enforce.level;
        if !has_warn_version {
            p.warn.version = p.enforce.version;
        }
    }
    (p, errs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn versions_parse_as_the_plugin_parses_them() {
        assert_eq!(Version::parse("latest"), Ok(Version::Latest));
        assert_eq!(Version::parse("v1.0"), Ok(Version::Minor(0)));
        assert_eq!(Version::parse("v1.33"), Ok(Version::Minor(33)));
        for bad in ["v1.033", "v1.", "1.25", "v2.0", "v1.x", "Latest", "v1.-1", ""] {
            assert_eq!(Version::parse(bad), Err(LabelError::Version), "{bad}");
        }
        assert!(Version::Minor(40).older(&Version::Latest));
        assert!(!Version::Latest.older(&Version::Minor(40)));
        assert_eq!(Version::Minor(25).to_string(), "v1.25");
    }

    #[test]
    fn no_labels_is_privileged_everywhere() {
        let (p, errs) = policy_to_evaluate(&BTreeMap::new());
        assert!(errs.is_empty());
        assert!(p.fully_privileged());
        assert_eq!(p.enforce.to_string(), "privileged:latest");
    }

    #[test]
    fn enforce_without_warn_also_warns_at_that_level() {
        let (p, errs) = policy_to_evaluate(&labels(&[
            (ENFORCE_LEVEL_LABEL, "baseline"),
            (ENFORCE_VERSION_LABEL, "v1.24"),
        ]));
        assert!(errs.is_empty());
        assert_eq!(p.enforce.to_string(), "baseline:v1.24");
        assert_eq!(p.warn.to_string(), "baseline:v1.24");
        assert_eq!(p.audit.to_string(), "privileged:latest");
        // An explicit warn label wins.
        let (p, _) = policy_to_evaluate(&labels(&[
            (ENFORCE_LEVEL_LABEL, "baseline"),
            (WARN_LEVEL_LABEL, "privileged"),
        ]));
        assert_eq!(p.warn.level, Level::Privileged);
    }

    #[test]
    fn bad_labels_are_field_errors_and_fail_closed_or_open() {
        let (p, errs) = policy_to_evaluate(&labels(&[
            (ENFORCE_LEVEL_LABEL, "strict"),
            (WARN_LEVEL_LABEL, "loud"),
            (AUDIT_VERSION_LABEL, "1.25"),
        ]));
        assert_eq!(p.enforce.level, Level::Restricted);
        assert_eq!(p.warn.level, Level::Privileged);
        let shown: Vec<String> = errs.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        assert_eq!(
            shown,
            vec![
                "metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted",
                "metadata.labels[pod-security.kubernetes.io/audit-version]: Invalid value: \"1.25\": must be \"latest\" or \"v1.x\"",
                "metadata.labels[pod-security.kubernetes.io/warn]: Invalid value: \"loud\": must be one of privileged, baseline, restricted",
            ]
        );
    }
}
