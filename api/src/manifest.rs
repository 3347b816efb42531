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

/// Which of our kinds a document is; `Ok(None)` for other Kubernetes objects (ConfigMaps, ...).
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
        return Ok(None);
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
