//! API errors and the `metav1.Status` bodies the real apiserver returns for them.
//!
//! Messages, reasons and codes follow `k8s.io/apimachinery/pkg/api/errors` so that clients
//! which match on them (kubectl's "Error from server (NotFound): ...", kube-rs' `ErrorResponse`,
//! fabric8's `KubernetesClientException`) behave as they do against a real cluster.

use serde_json::{Value, json};

/// One field error inside an `Invalid` status (`metav1.StatusCause`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldCause {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueNotSupported`, `FieldValueForbidden`, ...
    pub reason: String,
    /// The field path, e.g. `metadata.name`.
    pub field: String,
    /// The complete message for this field, e.g. `Required value`.
    pub message: String,
}

impl FieldCause {
    /// `field: Required value`
    pub fn required(field: impl Into<String>) -> Self {
        Self {
            reason: "FieldValueRequired".into(),
            field: field.into(),
            message: "Required value".into(),
        }
    }

    /// `field: Invalid value: "x": detail`
    pub fn invalid(field: impl Into<String>, value: &Value, detail: impl AsRef<str>) -> Self {
        let shown = match value {
            Value::String(s) => format!("{s:?}"),
            other => other.to_string(),
        };
        let detail = detail.as_ref();
        let message = if detail.is_empty() {
            format!("Invalid value: {shown}")
        } else {
            format!("Invalid value: {shown}: {detail}")
        };
        Self {
            reason: "FieldValueInvalid".into(),
            field: field.into(),
            message,
        }
    }

    /// `field: Forbidden: detail`
    pub fn forbidden(field: impl Into<String>, detail: impl AsRef<str>) -> Self {
        Self {
            reason: "FieldValueForbidden".into(),
            field: field.into(),
            message: format!("Forbidden: {}", detail.as_ref()),
        }
    }

    /// `field: Unsupported value: "x": supported values: "a", "b"`
    pub fn not_supported(field: impl Into<String>, value: &Value, supported: &[&str]) -> Self {
        let shown = match value {
            Value::String(s) => format!("{s:?}"),
            other => other.to_string(),
        };
        let list = supported
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        Self {
            reason: "FieldValueNotSupported".into(),
            field: field.into(),
            message: format!("Unsupported value: {shown}: supported values: {list}"),
        }
    }
}

/// Which object a status error is about: `details.group`, `details.kind` and `details.name`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Target {
    pub group: String,
    /// For NotFound/AlreadyExists/Conflict this is the resource (plural) name, for Invalid the Kind,
    /// exactly as the real apiserver does.
    pub kind: String,
    pub name: String,
}

impl Target {
    pub fn new(group: &str, kind: &str, name: &str) -> Self {
        Self {
            group: group.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    /// `pods` or `deployments.apps`: how the apiserver names a resource in messages.
    fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }
}

/// Every error the API can answer with. Each maps to one `metav1.Status`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    #[error("{} \"{}\" not found", .0.qualified(), .0.name)]
    NotFound(Target),
    #[error("{} \"{}\" already exists", .0.qualified(), .0.name)]
    AlreadyExists(Target),
    #[error("Operation cannot be fulfilled on {} \"{}\": {detail}", .target.qualified(), .target.name)]
    Conflict { target: Target, detail: String },
    /// An `Invalid` (422) error; `target.kind` is the Kind here.
    #[error("{}", invalid_message(.target, .causes))]
    Invalid { target: Target, causes: Vec<FieldCause> },
    #[error("{0}")]
    BadRequest(String),
    /// The request path names no resource the server knows.
    #[error("the server could not find the requested resource")]
    ResourceNotServed,
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    NotAcceptable(String),
    /// A request body over the apiserver's 3 MiB limit.
    #[error("Request entity too large: limit is {limit}")]
    RequestEntityTooLarge { limit: usize },
    /// An object whose stored form is over etcd's 1.5 MiB request limit. The real apiserver passes
    /// etcd's error through unchanged, as a 500 without a reason.
    #[error("etcdserver: request is too large")]
    EtcdRequestTooLarge,
    /// A resourceVersion or continue token older than the retained history.
    #[error("{0}")]
    Expired(String),
    /// A resourceVersion newer than anything the server has seen.
    #[error("Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion { requested: u64, current: u64 },
    #[error("Unauthorized")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    ServiceUnavailable(String),
    #[error("{0}")]
    Internal(String),
    /// A Status chosen as a whole by someone else (an admission webhook, a fault injected by a test).
    #[error("{message}")]
    Custom {
        code: u16,
        reason: String,
        message: String,
        details: Option<Value>,
    },
}

fn invalid_message(target: &Target, causes: &[FieldCause]) -> String {
    let kind = if target.group.is_empty() {
        target.kind.clone()
    } else {
        format!("{}.{}", target.kind, target.group)
    };
    // `field.ErrorList.ToAggregate` drops repeated messages.
    let mut errs: Vec<String> = Vec::new();
    for e in causes.iter().map(|c| format!("{}: {}", c.field, c.message)) {
        if !errs.contains(&e) {
            errs.push(e);
        }
    }
    let list = if errs.len() == 1 {
        errs[0].clone()
    } else {
        format!("[{}]", errs.join(", "))
    };
    format!("{kind} \"{}\" is invalid: {list}", target.name)
}

impl ApiError {
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::NotFound(Target::new(group, resource, name))
    }

    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self::AlreadyExists(Target::new(group, resource, name))
    }

    /// The optimistic-concurrency conflict of an update with a stale resourceVersion.
    pub fn stale(group: &str, resource: &str, name: &str) -> Self {
        Self::Conflict {
            target: Target::new(group, resource, name),
            detail: "the object has been modified; please apply your changes to the latest version and try again"
                .into(),
        }
    }

    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<FieldCause>) -> Self {
        Self::Invalid {
            target: Target::new(group, kind, name),
            causes,
        }
    }

    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            Self::NotFound(_) | Self::ResourceNotServed => 404,
            Self::AlreadyExists(_) | Self::Conflict { .. } => 409,
            Self::Invalid { .. } => 422,
            Self::BadRequest(_) => 400,
            Self::MethodNotAllowed => 405,
            Self::UnsupportedMediaType(_) => 415,
            Self::NotAcceptable(_) => 406,
            Self::RequestEntityTooLarge { .. } => 413,
            Self::EtcdRequestTooLarge | Self::Internal(_) => 500,
            Self::Expired(_) => 410,
            Self::TooLargeResourceVersion { .. } => 504,
            Self::Unauthorized => 401,
            Self::Forbidden(_) => 403,
            Self::ServiceUnavailable(_) => 503,
            Self::Custom { code, .. } => *code,
        }
    }

    /// `metav1.Status.reason`; empty for errors the apiserver passes through without one.
    pub fn reason(&self) -> &str {
        match self {
            Self::NotFound(_) | Self::ResourceNotServed => "NotFound",
            Self::AlreadyExists(_) => "AlreadyExists",
            Self::Conflict { .. } => "Conflict",
            Self::Invalid { .. } => "Invalid",
            Self::BadRequest(_) => "BadRequest",
            Self::MethodNotAllowed => "MethodNotAllowed",
            Self::UnsupportedMediaType(_) => "UnsupportedMediaType",
            Self::NotAcceptable(_) => "NotAcceptable",
            Self::RequestEntityTooLarge { .. } => "RequestEntityTooLarge",
            Self::EtcdRequestTooLarge => "",
            Self::Expired(_) => "Expired",
            Self::TooLargeResourceVersion { .. } => "Timeout",
            Self::Unauthorized => "Unauthorized",
            Self::Forbidden(_) => "Forbidden",
            Self::ServiceUnavailable(_) => "ServiceUnavailable",
            Self::Internal(_) => "InternalError",
            Self::Custom { reason, .. } => reason,
        }
    }

    fn details(&self) -> Option<Value> {
        let target_details = |t: &Target| {
            let mut d = json!({ "name": t.name, "kind": t.kind });
            if !t.group.is_empty() {
                d["group"] = json!(t.group);
            }
            d
        };
        match self {
            Self::NotFound(t) | Self::AlreadyExists(t) => Some(target_details(t)),
            Self::Conflict { target, .. } => Some(target_details(target)),
            Self::Invalid { target, causes } => {
                let mut d = target_details(target);
                d["causes"] = causes
                    .iter()
                    .map(|c| json!({ "reason": c.reason, "message": c.message, "field": c.field }))
                    .collect();
                Some(d)
            }
            Self::TooLargeResourceVersion { .. } => Some(json!({
                "causes": [{ "reason": "ResourceVersionTooLarge", "message": "Too large resource version" }],
                "retryAfterSeconds": 1
            })),
            Self::Internal(msg) => Some(json!({ "causes": [{ "message": msg }] })),
            Self::Custom { details, .. } => details.clone(),
            _ => None,
        }
    }

    /// The `metav1.Status` body for this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "code": self.code(),
        });
        let reason = self.reason();
        if !reason.is_empty() {
            status["reason"] = json!(reason);
        }
        if let Some(details) = self.details() {
            status["details"] = details;
        }
        status
    }
}

/// The `Success` status returned by deletes of collections and of objects that are gone at once
/// for some resources (kubectl never relies on the difference).
pub fn success_status(group: &str, resource: &str, name: &str, uid: &str) -> Value {
    let mut details = json!({ "name": name, "kind": resource, "uid": uid });
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_matches_apiserver_text() {
        let e = ApiError::not_found("apps", "deployments", "web");
        assert_eq!(e.to_string(), "deployments.apps \"web\" not found");
        let s = e.to_status();
        assert_eq!(s["code"], 404);
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["details"]["group"], "apps");
    }

    #[test]
    fn invalid_lists_causes_like_the_apiserver() {
        let one = ApiError::invalid("", "Pod", "p", vec![FieldCause::required("spec.containers")]);
        assert_eq!(one.to_string(), "Pod \"p\" is invalid: spec.containers: Required value");
        let two = ApiError::invalid(
            "",
            "Pod",
            "p",
            vec![
                FieldCause::required("spec.containers"),
                FieldCause::required("metadata.name"),
            ],
        );
        assert_eq!(
            two.to_string(),
            "Pod \"p\" is invalid: [spec.containers: Required value, metadata.name: Required value]"
        );
        assert_eq!(two.to_status()["details"]["causes"][1]["field"], "metadata.name");
    }

    #[test]
    fn etcd_too_large_has_no_reason() {
        let s = ApiError::EtcdRequestTooLarge.to_status();
        assert_eq!(s["code"], 500);
        assert!(s.get("reason").is_none());
        assert_eq!(s["message"], "etcdserver: request is too large");
    }
}
