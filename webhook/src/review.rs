//! AdmissionReview (`admission.k8s.io/v1`) in and out: parsing the request and building the answer. Pure,
//! so the server, the benchmark and the tests share it.

use base64::Engine as _;
use serde_json::{Value, json};

/// Why a body is not an AdmissionReview we can answer (the server answers 400 with this).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    #[error("the body is not JSON")]
    NotJson,
    #[error("the body is not an admission.k8s.io/v1 AdmissionReview with a request.uid")]
    NotAReview,
}

/// The parts of an admission request the webhook reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub uid: String,
    /// The object's kind (`request.kind.kind`), e.g. `Pod`, `SparkApplication`.
    pub kind: String,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub operation: String,
    pub namespace: Option<String>,
    /// The object as it would be stored; None for DELETE.
    pub object: Option<Value>,
    /// Who asked (`request.userInfo.username`).
    pub username: String,
    /// A server-side dry run: no side effects (no Events) may come of it.
    pub dry_run: bool,
}

/// Parses an AdmissionReview body.
pub fn parse(body: &[u8]) -> Result<Request, ReviewError> {
    let review: Value = serde_json::from_slice(body).map_err(|_| ReviewError::NotJson)?;
    let request = review.get("request").ok_or(ReviewError::NotAReview)?;
    let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
    let uid = text(request.get("uid")).ok_or(ReviewError::NotAReview)?;
    Ok(Request {
        uid,
        kind: text(request.pointer("/kind/kind")).unwrap_or_default(),
        operation: text(request.get("operation")).unwrap_or_default(),
        namespace: text(request.get("namespace")).filter(|n| !n.is_empty()),
        object: request.get("object").filter(|o| !o.is_null()).cloned(),
        username: text(request.pointer("/userInfo/username")).unwrap_or_default(),
        dry_run: request.get("dryRun").and_then(Value::as_bool).unwrap_or(false),
    })
}

/// A refusal, as kube-apiserver shows it to the client (`kubectl` prints the message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    pub code: u16,
    /// A Status reason (`Invalid`, `Forbidden`, ...).
    pub reason: &'static str,
    pub message: String,
    /// What the denial metric counts it under (`invalid-spec`, `application-gone`, ...).
    pub cause: &'static str,
}

/// The webhook's answer to one request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Answer {
    pub denial: Option<Denial>,
    /// JSONPatch operations to apply (mutation only).
    pub patch: Vec<Value>,
    pub warnings: Vec<String>,
}

impl Answer {
    pub fn allow() -> Self {
        Self::default()
    }

    pub fn deny(code: u16, reason: &'static str, cause: &'static str, message: impl Into<String>) -> Self {
        Self {
            denial: Some(Denial {
                code,
                reason,
                message: message.into(),
                cause,
            }),
            ..Self::default()
        }
    }

    pub fn allowed(&self) -> bool {
        self.denial.is_none()
    }

    /// The AdmissionReview to send back for request `uid`.
    pub fn review(&self, uid: &str) -> Value {
        let mut response = json!({ "uid": uid, "allowed": self.allowed() });
        if let Some(denial) = &self.denial {
            response["status"] = json!({
                "status": "Failure",
                "code": denial.code,
                "reason": denial.reason,
                "message": denial.message,
            });
        }
        if !self.patch.is_empty() && self.allowed() {
            let patch = serde_json::to_vec(&self.patch).unwrap_or_default();
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(patch));
        }
        if !self.warnings.is_empty() {
            response["warnings"] = json!(self.warnings);
        }
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": response,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_parses_and_an_answer_carries_its_patch_and_denial() {
        let body = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": { "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "operation": "CREATE", "namespace": "jobs", "object": {"metadata": {"name": "p"}},
                "userInfo": {"username": "system:serviceaccount:jobs:spark"}, "dryRun": true }
        });
        let request = parse(&serde_json::to_vec(&body).unwrap()).unwrap();
        assert_eq!((request.kind.as_str(), request.operation.as_str()), ("Pod", "CREATE"));
        assert_eq!(request.namespace.as_deref(), Some("jobs"));
        assert!(request.dry_run);
        let mut answer = Answer::allow();
        answer.patch = vec![json!({"op": "add", "path": "/metadata/labels", "value": {}})];
        let review = answer.review("u-1");
        assert_eq!(review["response"]["patchType"], "JSONPatch");
        assert!(review["response"]["patch"].as_str().is_some_and(|p| !p.is_empty()));
        let denied = Answer::deny(403, "Forbidden", "application-gone", "no").review("u-2");
        assert_eq!(denied["response"]["allowed"], false);
        assert_eq!(denied["response"]["status"]["code"], 403);
        assert!(denied["response"].get("patch").is_none());
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        assert_eq!(parse(b"{").unwrap_err(), ReviewError::NotJson);
        assert_eq!(parse(b"{\"request\":{}}").unwrap_err(), ReviewError::NotAReview);
        assert_eq!(parse(b"[]").unwrap_err(), ReviewError::NotAReview);
    }
}
