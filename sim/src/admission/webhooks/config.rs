//! The stored Mutating/ValidatingWebhookConfigurations, read into [`Webhook`]s, and which of
//! them a request must be sent to (`webhook/generic.ShouldCallHook` and `webhook/predicates`).

use std::time::Duration;

use serde_json::Value;

use crate::admission_seam::{AdmissionRequest, Operation};
use crate::registry::Gvr;
use crate::selectors::LabelSelector;
use crate::status::ApiError;
use crate::store::Store;

/// Which kind of configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Mutating,
    Validating,
}

impl Phase {
    fn resource(self) -> &'static str {
        match self {
            Phase::Mutating => "mutatingwebhookconfigurations",
            Phase::Validating => "validatingwebhookconfigurations",
        }
    }
}

/// Where a webhook is served.
#[derive(Debug, Clone)]
pub(crate) enum Endpoint {
    Url(String),
    Service {
        namespace: String,
        name: String,
        path: String,
        port: u16,
    },
}

/// One `rules` entry.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rule {
    pub operations: Vec<String>,
    pub api_groups: Vec<String>,
    pub api_versions: Vec<String>,
    pub resources: Vec<String>,
    pub scope: String,
}

/// One webhook of a configuration, with the v1 defaults filled in.
#[derive(Debug, Clone)]
pub(crate) struct Webhook {
    pub name: String,
    pub endpoint: Option<Endpoint>,
    /// PEM bytes (decoded from the base64 `caBundle`); None means the system's roots.
    pub ca_bundle: Option<Vec<u8>>,
    pub rules: Vec<Rule>,
    /// `failurePolicy: Ignore` (the v1 default is Fail).
    pub ignore_failures: bool,
    /// `matchPolicy: Equivalent` (the v1 default).
    pub equivalent: bool,
    pub namespace_selector: Result<LabelSelector, String>,
    pub object_selector: Result<LabelSelector, String>,
    pub side_effects: Option<String>,
    pub timeout: Duration,
    pub review_versions: Vec<String>,
    /// `reinvocationPolicy: IfNeeded` (mutating only).
    pub reinvoke_if_needed: bool,
}

/// Every webhook of every configuration of `phase`, configurations in name order (as the
/// apiserver sorts them), webhooks in their listed order.
pub(crate) fn load(store: &Store, phase: Phase) -> Vec<Webhook> {
    let gvr = Gvr::new("admissionregistration.k8s.io", "v1", phase.resource());
    let Ok(list) = store.list(&gvr, None, &Default::default()) else {
        return Vec::new();
    };
    let mut configs: Vec<Value> = list["items"].as_array().cloned().unwrap_or_default();
    configs.sort_by(|a, b| crate::meta::name(a).cmp(crate::meta::name(b)));
    configs
        .iter()
        .flat_map(|c| c["webhooks"].as_array().cloned().unwrap_or_default())
        .map(|w| parse(&w, phase))
        .collect()
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

fn selector(v: Option<&Value>) -> Result<LabelSelector, String> {
    match v {
        None | Some(Value::Null) => Ok(LabelSelector::default()),
        Some(s) => LabelSelector::from_object(s).map_err(|e| e.to_string()),
    }
}

fn parse(w: &Value, phase: Phase) -> Webhook {
    let cc = &w["clientConfig"];
    let endpoint = if let Some(url) = cc.get("url").and_then(Value::as_str) {
        Some(Endpoint::Url(url.to_string()))
    } else {
        cc.get("service").filter(|s| s.is_object()).map(|s| Endpoint::Service {
            namespace: s["namespace"].as_str().unwrap_or_default().to_string(),
            name: s["name"].as_str().unwrap_or_default().to_string(),
            path: s["path"].as_str().unwrap_or_default().to_string(),
            port: s["port"].as_u64().and_then(|p| u16::try_from(p).ok()).unwrap_or(443),
        })
    };
    let ca_bundle = cc
        .get("caBundle")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(|b64| {
            use base64::Engine as _;
            // An undecodable bundle becomes one no certificate parses from, so TLS fails as it would.
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap_or_else(|_| b64.as_bytes().to_vec())
        });
    let rules = w["rules"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|r| Rule {
                    operations: strings(r.get("operations")),
                    api_groups: strings(r.get("apiGroups")),
                    api_versions: strings(r.get("apiVersions")),
                    resources: strings(r.get("resources")),
                    scope: r.get("scope").and_then(Value::as_str).unwrap_or("*").to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    let timeout_seconds = w["timeoutSeconds"].as_u64().unwrap_or(10).clamp(1, 30);
    Webhook {
        name: w["name"].as_str().unwrap_or_default().to_string(),
        endpoint,
        ca_bundle,
        rules,
        ignore_failures: w["failurePolicy"].as_str() == Some("Ignore"),
        equivalent: w["matchPolicy"].as_str() != Some("Exact"),
        namespace_selector: selector(w.get("namespaceSelector")),
        object_selector: selector(w.get("objectSelector")),
        side_effects: w["sideEffects"].as_str().map(str::to_string),
        timeout: Duration::from_secs(timeout_seconds),
        review_versions: strings(w.get("admissionReviewVersions")),
        reinvoke_if_needed: phase == Phase::Mutating && w["reinvocationPolicy"].as_str() == Some("IfNeeded"),
    }
}

/// The resource a webhook is called for: the request's own, or with `matchPolicy: Equivalent`
/// another served version of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invocation {
    pub version: String,
}

/// Requests about the admission configuration itself never go to webhooks (so a broken webhook
/// can always be removed).
pub(crate) fn exempt(req: &AdmissionRequest) -> bool {
    req.group == "admissionregistration.k8s.io"
        && matches!(
            req.resource.as_str(),
            "mutatingwebhookconfigurations"
                | "validatingwebhookconfigurations"
                | "validatingadmissionpolicies"
                | "validatingadmissionpolicybindings"
                | "mutatingadmissionpolicies"
                | "mutatingadmissionpolicybindings"
        )
}

/// The namespace attribute of a request: for a Namespace object itself, its name.
pub(crate) fn request_namespace(req: &AdmissionRequest) -> &str {
    if is_namespace_resource(req) {
        &req.name
    } else {
        &req.namespace
    }
}

fn is_namespace_resource(req: &AdmissionRequest) -> bool {
    req.group.is_empty() && req.resource == "namespaces"
}

fn any_is(list: &[String], value: &str) -> bool {
    list.iter().any(|x| x == "*" || x == value)
}

impl Rule {
    /// `rules.Matcher.Matches` for the request addressed as `group/version/resource`.
    fn matches(&self, req: &AdmissionRequest, version: &str) -> bool {
        let namespace = request_namespace(req);
        let scope = match self.scope.as_str() {
            "*" | "" => true,
            "Namespaced" => !is_namespace_resource(req) && !namespace.is_empty(),
            "Cluster" => is_namespace_resource(req) || namespace.is_empty(),
            _ => false,
        };
        let resource = self.resources.iter().any(|r| {
            let (res, sub) = r.split_once('/').unwrap_or((r.as_str(), ""));
            (res == "*" || res == req.resource) && (sub == "*" || sub == req.subresource)
        });
        any_is(&self.operations, req.operation.as_str())
            && any_is(&self.api_groups, &req.group)
            && any_is(&self.api_versions, version)
            && resource
            && scope
    }
}

impl Webhook {
    /// Whether (and as which version) `req` goes to this webhook. Errors are the apiserver's own
    /// (a missing namespace is its 404, a broken selector a 500), returned only for matching
    /// webhooks, as `ShouldCallHook` does.
    pub fn should_call(
        &self,
        store: &Store,
        req: &AdmissionRequest,
        served_versions: &[String],
    ) -> Result<Option<Invocation>, ApiError> {
        let ns_match = self.match_namespace(store, req);
        if matches!(ns_match, Ok(false)) {
            return Ok(None);
        }
        let obj_match = self.match_object(req);
        if matches!(obj_match, Ok(false)) {
            return Ok(None);
        }
        let mut invocation = self
            .rules
            .iter()
            .any(|r| r.matches(req, &req.version))
            .then(|| Invocation {
                version: req.version.clone(),
            });
        if invocation.is_none() && self.equivalent {
            'rules: for rule in &self.rules {
                for v in served_versions.iter().filter(|v| **v != req.version) {
                    if rule.matches(req, v) {
                        invocation = Some(Invocation { version: v.clone() });
                        break 'rules;
                    }
                }
            }
        }
        if invocation.is_none() {
            return Ok(None);
        }
        ns_match?;
        obj_match?;
        Ok(invocation)
    }

    fn match_namespace(&self, store: &Store, req: &AdmissionRequest) -> Result<bool, ApiError> {
        let namespace = request_namespace(req);
        if namespace.is_empty() && !is_namespace_resource(req) {
            // Cluster-scoped resources other than namespaces are never exempted.
            return Ok(true);
        }
        let selector = self
            .namespace_selector
            .as_ref()
            .map_err(|e| ApiError::Internal(e.clone()))?;
        if selector.is_empty() {
            return Ok(true);
        }
        let labels = if is_namespace_resource(req)
            && req.subresource.is_empty()
            && matches!(req.operation, Operation::Create | Operation::Update)
        {
            req.object.as_ref().and_then(|o| o.pointer("/metadata/labels")).cloned()
        } else {
            let ns = store.get(&Gvr::new("", "v1", "namespaces"), "", namespace)?;
            ns.pointer("/metadata/labels").cloned()
        };
        Ok(selector.matches(labels.as_ref().and_then(Value::as_object)))
    }

    fn match_object(&self, req: &AdmissionRequest) -> Result<bool, ApiError> {
        let selector = self
            .object_selector
            .as_ref()
            .map_err(|e| ApiError::Internal(e.clone()))?;
        if selector.is_empty() {
            return Ok(true);
        }
        let matches = |o: Option<&Value>| o.is_some_and(|o| selector.matches_object(o));
        Ok(matches(req.object.as_ref()) || matches(req.old_object.as_deref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission_seam::UserInfo;
    use serde_json::json;

    fn request(resource: &str, subresource: &str, namespace: &str, op: Operation) -> AdmissionRequest {
        AdmissionRequest {
            operation: op,
            group: String::new(),
            version: "v1".into(),
            resource: resource.into(),
            subresource: subresource.into(),
            kind: "Pod".into(),
            namespace: namespace.into(),
            name: "x".into(),
            object: Some(json!({ "metadata": { "name": "x", "labels": { "app": "spark" } } })),
            old_object: None,
            dry_run: false,
            user: UserInfo::default(),
            options: json!({}),
            warnings: Vec::new(),
            audit_annotations: Vec::new(),
        }
    }

    fn rule(resources: &[&str], scope: &str) -> Rule {
        Rule {
            operations: vec!["CREATE".into()],
            api_groups: vec!["".into()],
            api_versions: vec!["*".into()],
            resources: resources.iter().map(|s| s.to_string()).collect(),
            scope: scope.into(),
        }
    }

    #[test]
    fn resources_and_subresources_match_like_the_apiserver() {
        let pod = request("pods", "", "ns", Operation::Create);
        let status = request("pods", "status", "ns", Operation::Create);
        assert!(rule(&["pods"], "*").matches(&pod, "v1"));
        assert!(!rule(&["pods"], "*").matches(&status, "v1"));
        assert!(rule(&["pods/status"], "*").matches(&status, "v1"));
        assert!(rule(&["*/status"], "*").matches(&status, "v1"));
        assert!(rule(&["pods/*"], "*").matches(&status, "v1"));
        assert!(rule(&["*"], "*").matches(&pod, "v1"));
        assert!(!rule(&["*"], "*").matches(&status, "v1"));
        assert!(rule(&["*/*"], "*").matches(&status, "v1"));
        assert!(!rule(&["pods"], "*").matches(&request("pods", "", "ns", Operation::Update), "v1"));
    }

    #[test]
    fn scope_separates_namespaced_and_cluster_requests() {
        let pod = request("pods", "", "ns", Operation::Create);
        let node = request("nodes", "", "", Operation::Create);
        let ns = request("namespaces", "", "", Operation::Create);
        assert!(rule(&["*"], "Namespaced").matches(&pod, "v1"));
        assert!(!rule(&["*"], "Namespaced").matches(&node, "v1"));
        assert!(!rule(&["*"], "Namespaced").matches(&ns, "v1"));
        assert!(rule(&["*"], "Cluster").matches(&ns, "v1"));
        assert!(rule(&["*"], "Cluster").matches(&node, "v1"));
        assert!(!rule(&["*"], "Cluster").matches(&pod, "v1"));
    }

    #[test]
    fn v1_defaults_are_filled_in() {
        let w = parse(
            &json!({ "name": "w", "clientConfig": { "url": "https://127.0.0.1:1/x" } }),
            Phase::Mutating,
        );
        assert!(!w.ignore_failures);
        assert!(w.equivalent);
        assert_eq!(w.timeout, Duration::from_secs(10));
        assert!(!w.reinvoke_if_needed);
        assert!(matches!(w.endpoint, Some(Endpoint::Url(_))));
    }
}
