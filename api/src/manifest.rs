//! From a raw manifest (parsed JSON or YAML) to a checked, typed object: the pipeline behind
//! `spark-operator validate`, also usable by the webhook on an admission request's raw object.
//!
//! 1. Structural check against the full schema (every wrong type and missing field, with paths; unknown
//!    fields); embedded core/v1 objects are checked against their k8s-openapi schemas.
//! 2. Decoding into the typed object; a failure still names its path.
//! 3. [`crate::validation`] on the typed object.

use std::sync::OnceLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::application::SparkApplication;
use crate::crd::full_schema;
use crate::field::{FieldError, FieldPath, ValidationReport};
use crate::labels::{API_VERSION, GROUP};
use crate::scheduled::ScheduledSparkApplication;
use crate::structural::{self, Findings};
use crate::validation::{ValidationContext, validate_scheduled_spark_application, validate_spark_application};

pub use crate::structural::UnknownField;

/// The kinds this crate defines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    SparkApplication,
    ScheduledSparkApplication,
}

impl ObjectKind {
    /// Every kind served in [`API_VERSION`] (the CRDs of [`crate::crd::all_crds`]).
    pub const ALL: [Self; 2] = [Self::SparkApplication, Self::ScheduledSparkApplication];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::SparkApplication => "SparkApplication",
            Self::ScheduledSparkApplication => "ScheduledSparkApplication",
        }
    }

    fn parse(kind: &str) -> Option<Self> {
        match kind {
            "SparkApplication" => Some(Self::SparkApplication),
            "ScheduledSparkApplication" => Some(Self::ScheduledSparkApplication),
            _ => None,
        }
    }
}

/// Why a document could not be checked at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("not a Kubernetes object: expected a mapping with apiVersion and kind, got {found}")]
    NotAnObject { found: &'static str },
    #[error("not a Kubernetes object: apiVersion and kind are required")]
    MissingTypeMeta,
    #[error("{kind} is served as {API_VERSION} only, not {api_version}: change apiVersion")]
    UnsupportedVersion { kind: String, api_version: String },
    /// Worded as kubectl's "no matches for kind" (its REST mapping finds no such resource).
    #[error(
        "kind: no matches for kind {kind:?} in version {api_version:?}: {API_VERSION} serves {}{}",
        served_kinds(),
        suggestion.map(|kind| format!("; did you mean {}?", kind.as_str())).unwrap_or_default()
    )]
    UnknownKind {
        kind: String,
        api_version: String,
        /// The served kind the given one is a close misspelling of.
        suggestion: Option<ObjectKind>,
    },
}

/// `SparkApplication and ScheduledSparkApplication`.
fn served_kinds() -> String {
    let kinds: Vec<&str> = ObjectKind::ALL.iter().map(|kind| kind.as_str()).collect();
    match kinds.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The served kind `kind` is a close misspelling of: at most [`MAX_TYPOS`] letters inserted, deleted or
/// changed, ignoring case (kinds are case-sensitive, so `sparkapplication` is a typo too).
fn nearest_kind(kind: &str) -> Option<ObjectKind> {
    const MAX_TYPOS: usize = 3;
    let kind = kind.to_ascii_lowercase();
    ObjectKind::ALL
        .into_iter()
        // The distance is at least the difference in length (and a long input costs nothing).
        .filter(|served| kind.chars().count().abs_diff(served.as_str().len()) <= MAX_TYPOS)
        .map(|served| (edit_distance(&kind, &served.as_str().to_ascii_lowercase()), served))
        .filter(|(distance, _)| *distance <= MAX_TYPOS)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, served)| served)
}

/// Levenshtein distance, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let change = previous[j] + usize::from(ca != cb);
            current[j + 1] = change.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

/// A decoded object of one of our kinds.
#[derive(Clone, Debug, PartialEq)]
pub enum DecodedObject {
    SparkApplication(Box<SparkApplication>),
    ScheduledSparkApplication(Box<ScheduledSparkApplication>),
}

/// Everything found about one manifest.
#[derive(Clone, Debug)]
pub struct ManifestCheck {
    pub kind: ObjectKind,
    pub name: Option<String>,
    pub namespace: Option<String>,
    /// Errors reject the object; warnings do not.
    pub report: ValidationReport,
    /// Fields the schema does not know (see [`UnknownField::message`]).
    pub unknown_fields: Vec<UnknownField>,
    /// The typed object, when it decoded.
    pub object: Option<DecodedObject>,
}

/// Which of our kinds a document is; `Ok(None)` for other Kubernetes objects (ConfigMaps, ...). Any other
/// kind in our group, in any version, is an error: no API server would take it (kubectl finds no resource
/// for it), and a misspelt kind must not pass as "some other object".
pub fn identify(value: &Value) -> Result<Option<ObjectKind>, ManifestError> {
    let object = value.as_object().ok_or(ManifestError::NotAnObject {
        found: match value {
            Value::Array(_) => "a list",
            Value::String(_) => "a string",
            Value::Number(_) => "a number",
            Value::Bool(_) => "a boolean",
            Value::Null => "nothing",
            Value::Object(_) => "an object",
        },
    })?;
    let api_version = object.get("apiVersion").and_then(Value::as_str);
    let kind = object.get("kind").and_then(Value::as_str);
    let (Some(api_version), Some(kind)) = (api_version, kind) else {
        return Err(ManifestError::MissingTypeMeta);
    };
    let group = api_version.split_once('/').map_or("", |(group, _)| group);
    if group != GROUP {
        return Ok(None);
    }
    let Some(kind) = ObjectKind::parse(kind) else {
        return Err(ManifestError::UnknownKind {
            kind: kind.to_owned(),
            api_version: api_version.to_owned(),
            suggestion: nearest_kind(kind),
        });
    };
    if api_version != API_VERSION {
        return Err(ManifestError::UnsupportedVersion {
            kind: kind.as_str().to_owned(),
            api_version: api_version.to_owned(),
        });
    }
    Ok(Some(kind))
}

/// The full schema of a kind, with `apiVersion`, `kind` and `metadata` (which kube leaves out of CRD
/// schemas) added. Built once: it is large.
fn schema_of(kind: ObjectKind) -> &'static Value {
    static SPARK_APPLICATION: OnceLock<Value> = OnceLock::new();
    static SCHEDULED: OnceLock<Value> = OnceLock::new();
    let build = |mut schema: Value| {
        if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
            properties.insert("apiVersion".into(), serde_json::json!({"type": "string"}));
            properties.insert("kind".into(), serde_json::json!({"type": "string"}));
            properties.insert("metadata".into(), full_schema::<ObjectMeta>());
        }
        schema
    };
    match kind {
        ObjectKind::SparkApplication => SPARK_APPLICATION.get_or_init(|| build(full_schema::<SparkApplication>())),
        ObjectKind::ScheduledSparkApplication => {
            SCHEDULED.get_or_init(|| build(full_schema::<ScheduledSparkApplication>()))
        }
    }
}

fn structural_findings(value: &Value, kind: ObjectKind) -> Findings {
    let mut findings = Findings::default();
    structural::check(value, schema_of(kind), &FieldPath::root(), &mut findings);
    findings
}

/// Fields of a manifest of one of our kinds that the schema does not know, with their paths. `Ok(empty)`
/// for other kinds.
pub fn unknown_fields(value: &Value) -> Result<Vec<UnknownField>, ManifestError> {
    Ok(match identify(value)? {
        Some(kind) => structural_findings(value, kind).unknown,
        None => Vec::new(),
    })
}

fn decode<T: DeserializeOwned>(value: &Value, kind: ObjectKind) -> Result<T, Vec<FieldError>> {
    let findings = structural_findings(value, kind);
    if !findings.errors.is_empty() {
        return Err(findings.errors);
    }
    serde_path_to_error::deserialize(value).map_err(|error| vec![decode_error(error)])
}

fn decode_error(error: serde_path_to_error::Error<serde_json::Error>) -> FieldError {
    use serde_path_to_error::Segment;
    // Rendered as our paths are: map keys in brackets (serde_path_to_error would join them with dots).
    // Only objects with named fields are structs here; any other map is a string-keyed map.
    let mut path = FieldPath::root();
    let mut in_map = false;
    for segment in error.path().iter() {
        match segment {
            Segment::Seq { index } => path = path.index(*index),
            Segment::Map { key } if in_map => path = path.key(key),
            Segment::Map { key } => {
                in_map = MAP_FIELDS.contains(&key.as_str());
                path = path.child(key);
                continue;
            }
            Segment::Enum { variant } => path = path.child(variant),
            Segment::Unknown => path = path.child("?"),
        }
        in_map = false;
    }
    FieldError::new(path, error.into_inner().to_string())
}

/// Fields whose values are string-keyed maps, so the next path segment is a key.
const MAP_FIELDS: [&str; 14] = [
    "sparkConf",
    "hadoopConf",
    "nodeSelector",
    "labels",
    "annotations",
    "envVars",
    "envSecretKeyRefs",
    "serviceAnnotations",
    "serviceLabels",
    "ingressAnnotations",
    "resources",
    "limits",
    "requests",
    "data",
];

/// Decodes a SparkApplication, reporting every structural problem with its path when it does not decode.
pub fn decode_spark_application(value: &Value) -> Result<SparkApplication, Vec<FieldError>> {
    decode(value, ObjectKind::SparkApplication)
}

/// Decodes a ScheduledSparkApplication, reporting every structural problem with its path when it does not
/// decode.
pub fn decode_scheduled_spark_application(value: &Value) -> Result<ScheduledSparkApplication, Vec<FieldError>> {
    decode(value, ObjectKind::ScheduledSparkApplication)
}

/// `path` is `within` itself or a field, item or entry below it.
fn path_is_within(path: &FieldPath, within: &FieldPath) -> bool {
    let (path, within) = (path.as_str(), within.as_str());
    within.is_empty()
        || path
            .strip_prefix(within)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// Checks one manifest completely. `Ok(None)` when it is not one of our kinds.
pub fn check_manifest(value: &Value, context: &ValidationContext<'_>) -> Result<Option<ManifestCheck>, ManifestError> {
    let Some(kind) = identify(value)? else { return Ok(None) };
    let metadata = value.get("metadata");
    let text = |field: &str| {
        metadata
            .and_then(|m| m.get(field))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let mut report = ValidationReport::default();

    // The API server ignores status on create (it is a subresource); check what will be kept.
    let mut value = value.clone();
    if let Some(object) = value.as_object_mut()
        && object.remove("status").is_some_and(|status| !status.is_null())
    {
        report.warning(
            FieldPath::new("status"),
            "is ignored when the object is created or updated: remove it from the manifest",
        );
    }

    let findings = structural_findings(&value, kind);
    let unknown_fields = findings.unknown;
    let structurally_sound = findings.errors.is_empty();
    report.errors.extend(findings.errors);
    // Drop the values that are structurally wrong and put placeholders into the required fields that are
    // now missing, so the rest of the object still decodes and gets checked: every problem is reported in
    // one run. What validation says about a placeholder was already said by the structural check.
    let mut reported: Vec<FieldPath> = Vec::new();
    for pointer in &findings.bad_values {
        if let Some(bad) = value.pointer_mut(pointer) {
            *bad = Value::Null;
        }
    }
    reported.extend(findings.bad_paths);
    reported.extend(structural::fill_required(&mut value, schema_of(kind)));
    // Also covered: a list item holding a bad value (a volume whose only source was wrong has none left).
    let covered = |path: &FieldPath| {
        reported
            .iter()
            .any(|r| path_is_within(path, r) || (path.as_str().ends_with(']') && path != r && path_is_within(r, path)))
    };
    let keep_new = |mut extra: ValidationReport, report: &mut ValidationReport| {
        extra.errors.retain(|e| !covered(&e.path));
        extra.warnings.retain(|w| !covered(&w.path));
        report.extend(extra);
    };
    let object = match kind {
        ObjectKind::SparkApplication => match serde_path_to_error::deserialize::<_, SparkApplication>(&value) {
            Ok(app) => {
                keep_new(validate_spark_application(&app, context), &mut report);
                Some(DecodedObject::SparkApplication(Box::new(app)))
            }
            Err(error) => {
                let error = decode_error(error);
                if !covered(&error.path) {
                    report.errors.push(error);
                }
                None
            }
        },
        ObjectKind::ScheduledSparkApplication => {
            match serde_path_to_error::deserialize::<_, ScheduledSparkApplication>(&value) {
                Ok(app) => {
                    keep_new(validate_scheduled_spark_application(&app, context), &mut report);
                    Some(DecodedObject::ScheduledSparkApplication(Box::new(app)))
                }
                Err(error) => {
                    let error = decode_error(error);
                    if !covered(&error.path) {
                        report.errors.push(error);
                    }
                    None
                }
            }
        }
    };
    // Only a structurally sound manifest is handed out as a typed object.
    let object = object.filter(|_| structurally_sound);
    Ok(Some(ManifestCheck {
        kind,
        name: text("name"),
        namespace: text("namespace"),
        report,
        unknown_fields,
        object,
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn manifest(api_version: &str, kind: &str) -> Value {
        json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}})
    }

    #[test]
    fn the_served_kinds_are_the_crds_kinds() {
        let crds: Vec<String> = crate::crd::all_crds()
            .into_iter()
            .map(|crd| crd.spec.names.kind)
            .collect();
        let all: Vec<&str> = ObjectKind::ALL.iter().map(|kind| kind.as_str()).collect();
        assert_eq!(crds, all);
        for kind in ObjectKind::ALL {
            assert_eq!(identify(&manifest(API_VERSION, kind.as_str())), Ok(Some(kind)));
        }
    }

    #[test]
    fn an_unknown_kind_of_our_group_is_an_error_naming_the_kinds_served() {
        let error = identify(&manifest(API_VERSION, "SparkAplication")).unwrap_err();
        assert_eq!(
            error,
            ManifestError::UnknownKind {
                kind: "SparkAplication".into(),
                api_version: API_VERSION.into(),
                suggestion: Some(ObjectKind::SparkApplication),
            }
        );
        assert_eq!(
            error.to_string(),
            "kind: no matches for kind \"SparkAplication\" in version \"sparkoperator.k8s.io/v1beta2\": \
             sparkoperator.k8s.io/v1beta2 serves SparkApplication and ScheduledSparkApplication; did you mean SparkApplication?"
        );
        // Any version of the group; kinds are case-sensitive.
        for (api_version, kind, suggestion) in [
            (
                "sparkoperator.k8s.io/v1beta1",
                "ScheduledSparkAplication",
                Some(ObjectKind::ScheduledSparkApplication),
            ),
            (
                "sparkoperator.k8s.io/v1",
                "sparkapplication",
                Some(ObjectKind::SparkApplication),
            ),
            (API_VERSION, "ScheduleSparkApp", None),
            (API_VERSION, "SparkJob", None),
            (API_VERSION, "", None),
        ] {
            let error = identify(&manifest(api_version, kind)).unwrap_err();
            assert_eq!(
                error,
                ManifestError::UnknownKind {
                    kind: kind.into(),
                    api_version: api_version.into(),
                    suggestion
                },
                "{kind}"
            );
            assert!(error.to_string().starts_with("kind: no matches for kind"), "{error}");
        }
        // Other groups are not ours to judge, whatever their kinds look like.
        for api_version in [
            "v1",
            "apps/v1",
            "sparkoperator.k8s.io.example.com/v1",
            "kubeflow.org/v1",
        ] {
            assert_eq!(identify(&manifest(api_version, "SparkAplication")), Ok(None));
        }
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("abc", "ab"), 1);
        assert_eq!(edit_distance("abc", "xbc"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
