//! AdmissionReview requests (`admission.k8s.io/v1`, or `v1beta1` for webhooks that only speak
//! that) and the checks the apiserver makes on responses (`VerifyAdmissionResponse`).

use serde_json::{Map, Value, json};

use crate::admission_seam::{AdmissionRequest, Operation};

/// The review versions the sim speaks, in preference order.
const SUPPORTED: &[&str] = &["v1", "v1beta1"];

/// The first version in the webhook's `admissionReviewVersions` the sim speaks.
pub(crate) fn pick_version(accepted: &[String]) -> Option<&'static str> {
    accepted
        .iter()
        .find_map(|a| SUPPORTED.iter().find(|s| **s == a.as_str()).copied())
}

/// What a request looks like to one webhook: the object in the version the webhook is called
/// for (`matchPolicy: Equivalent` may choose another one than the client's).
pub(crate) struct ReviewInput<'a> {
    pub uid: &'a str,
    pub review_version: &'a str,
    pub req: &'a AdmissionRequest,
    pub version: &'a str,
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
    pub namespace: &'a str,
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({ "group": group, "version": version, "kind": kind })
}

fn gvr(group: &str, version: &str, resource: &str) -> Value {
    json!({ "group": group, "version": version, "resource": resource })
}

/// The options object of the operation (`CreateOptions`, `UpdateOptions`, `DeleteOptions`).
fn options(req: &AdmissionRequest) -> Value {
    let kind = match req.operation {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
        Operation::Delete => "DeleteOptions",
        Operation::Connect => return req.options.clone(),
    };
    let mut o = match &req.options {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    o.insert("apiVersion".into(), json!("meta.k8s.io/v1"));
    o.insert("kind".into(), json!(kind));
    Value::Object(o)
}

pub(crate) fn build(input: &ReviewInput<'_>) -> Value {
    let req = input.req;
    let mut request = json!({
        "uid": input.uid,
        "kind": gvk(&req.group, input.version, &req.kind),
        "resource": gvr(&req.group, input.version, &req.resource),
        "requestKind": gvk(&req.group, &req.version, &req.kind),
        "requestResource": gvr(&req.group, &req.version, &req.resource),
        "operation": req.operation.as_str(),
        "userInfo": { "username": req.user.username, "groups": req.user.groups },
        "object": input.object.cloned().unwrap_or(Value::Null),
        "oldObject": input.old_object.cloned().unwrap_or(Value::Null),
        "dryRun": req.dry_run,
        "options": options(req),
    });
    if !req.user.uid.is_empty() {
        request["userInfo"]["uid"] = json!(req.user.uid);
    }
    if !req.subresource.is_empty() {
        request["subResource"] = json!(req.subresource);
        request["requestSubResource"] = json!(req.subresource);
    }
    if !req.name.is_empty() {
        request["name"] = json!(req.name);
    }
    if !input.namespace.is_empty() {
        request["namespace"] = json!(input.namespace);
    }
    json!({
        "apiVersion": format!("admission.k8s.io/{}", input.review_version),
        "kind": "AdmissionReview",
        "request": request,
    })
}

/// A response that passed the apiserver's checks.
#[derive(Debug, Clone, Default)]
pub(crate) struct Verdict {
    pub allowed: bool,
    /// Decoded from base64.
    pub patch: Vec<u8>,
    pub patch_type: String,
    /// `response.status` (a metav1.Status) when present.
    pub status: Option<Value>,
    pub warnings: Vec<String>,
    pub audit_annotations: Vec<(String, String)>,
}

/// `VerifyAdmissionResponse`: the error texts are the apiserver's.
pub(crate) fn verify(uid: &str, review_version: &str, mutating: bool, review: &Value) -> Result<Verdict, String> {
    let api_version = review["apiVersion"].as_str().unwrap_or("");
    let kind = review["kind"].as_str().unwrap_or("");
    let expected = format!("admission.k8s.io/{review_version}");
    let Some(response) = review.get("response").filter(|r| r.is_object()) else {
        return Err("webhook response was absent".into());
    };
    let got_uid = response["uid"].as_str().unwrap_or("");
    if got_uid != uid {
        return Err(format!("expected response.uid={uid:?}, got {got_uid:?}"));
    }
    if review_version == "v1" && (api_version != expected || kind != "AdmissionReview") {
        return Err(format!(
            "expected webhook response of {expected}, Kind=AdmissionReview, got {api_version}, Kind={kind}"
        ));
    }
    let patch = match response.get("patch").and_then(Value::as_str) {
        Some(b64) if !b64.is_empty() => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| format!("illegal base64 data in response.patch: {e}"))?
        }
        _ => Vec::new(),
    };
    let mut patch_type = response
        .get("patchType")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if review_version == "v1" {
        if mutating && !patch.is_empty() && patch_type.is_empty() {
            return Err("webhook returned response.patch but not response.patchType".into());
        }
        if mutating && patch.is_empty() && !patch_type.is_empty() {
            return Err("webhook returned response.patchType but not response.patch".into());
        }
    } else if !patch.is_empty() && patch_type.is_empty() {
        // v1beta1 allowed leaving the type out; JSONPatch was the only one.
        patch_type = "JSONPatch".into();
    }
    if !mutating && !patch.is_empty() {
        return Err("validating webhook may not return response.patch".into());
    }
    if !mutating && !patch_type.is_empty() {
        return Err("validating webhook may not return response.patchType".into());
    }
    let warnings = response["warnings"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    let audit_annotations = response["auditAnnotations"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    Ok(Verdict {
        allowed: response["allowed"].as_bool().unwrap_or(false),
        patch,
        patch_type,
        status: response.get("status").filter(|s| s.is_object()).cloned(),
        warnings,
        audit_annotations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_first_supported_version() {
        assert_eq!(
            pick_version(&["v2".into(), "v1beta1".into(), "v1".into()]),
            Some("v1beta1")
        );
        assert_eq!(pick_version(&["v2".into()]), None);
    }

    #[test]
    fn rejects_responses_the_apiserver_rejects() {
        let ok = json!({ "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": { "uid": "u", "allowed": true } });
        assert!(verify("u", "v1", true, &ok).is_ok_and(|v| v.allowed));
        assert_eq!(
            verify("other", "v1", true, &ok).err(),
            Some("expected response.uid=\"other\", got \"u\"".into())
        );
        let patch_without_type = json!({ "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": { "uid": "u", "allowed": true, "patch": "W10=" } });
        assert_eq!(
            verify("u", "v1", true, &patch_without_type).err(),
            Some("webhook returned response.patch but not response.patchType".into())
        );
        let validating_patch = json!({ "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": { "uid": "u", "allowed": true, "patch": "W10=", "patchType": "JSONPatch" } });
        assert_eq!(
            verify("u", "v1", false, &validating_patch).err(),
            Some("validating webhook may not return response.patch".into())
        );
        assert_eq!(
            verify("u", "v1", true, &json!({})).err(),
            Some("webhook response was absent".into())
        );
    }
}
