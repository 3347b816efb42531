//! Dynamic admission: the stored MutatingWebhookConfigurations and
//! ValidatingWebhookConfigurations, called over HTTPS as the apiserver's `MutatingAdmissionWebhook`
//! and `ValidatingAdmissionWebhook` plugins call them.
//!
//! - Mutating webhooks run one after the other (configurations in name order); a JSONPatch
//!   answer is applied to the object the next webhook sees. Webhooks with
//!   `reinvocationPolicy: IfNeeded` are called once more if a later webhook changed the object.
//! - Validating webhooks run in parallel on the final object; the first denial (in webhook order)
//!   is returned.
//! - A denial reaches the client as `admission webhook "<name>" denied the request: <message>`
//!   with the webhook's code (at least 400). A webhook that cannot be called (connection refused,
//!   TLS failure, timeout, invalid response) is skipped with `failurePolicy: Ignore`, and with
//!   `Fail` (the default) the request fails with a 500 InternalError
//!   `Internal error occurred: failed calling webhook "<name>": ...`.
//! - Warnings become `Warning` headers; a dry-run request is refused for webhooks whose
//!   `sideEffects` are not `None`/`NoneOnDryRun`.
//!
//! **Where a webhook is.** `clientConfig.url` is used as given. A `clientConfig.service` is
//! resolved the way `kube-apiserver --enable-aggregator-routing` resolves services: through the
//! Service's port (`port`, default 443) and its `Endpoints` object to an address and target port,
//! while the certificate must be valid for `<service>.<namespace>.svc`. In the sim nothing
//! listens on cluster IPs, so a webhook served in-process is published by creating an Endpoints
//! object for its Service with `ip: 127.0.0.1` and the port it listens on.
//!
//! Not simulated: `matchConditions` (CEL; webhooks with them are called as if they matched),
//! audit annotations beyond recording them on the request.

mod client;
mod config;
mod review;

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::admission_seam::{AdmissionPlugin, AdmissionRequest, BoxFuture};
use crate::convert;
use crate::registry::Gvr;
use crate::status::ApiError;
use crate::store::Store;
use client::{CallError, HttpsClient, Target};
use config::{Endpoint, Invocation, Phase, Webhook};

/// The webhook admission plugin (both phases). Register it after the built-in plugins.
pub struct WebhookAdmission {
    store: Store,
    client: Arc<HttpsClient>,
}

impl WebhookAdmission {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            client: Arc::new(HttpsClient::default()),
        }
    }
}

impl AdmissionPlugin for WebhookAdmission {
    fn name(&self) -> &str {
        "AdmissionWebhooks"
    }

    fn mutate<'a>(&'a self, request: &'a mut AdmissionRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(self.run_mutating(request))
    }

    fn validate_with_warnings<'a>(&'a self, request: &'a mut AdmissionRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(self.run_validating(request))
    }
}

/// `apierrors.NewInternalError(err)`.
fn internal_error(message: String) -> ApiError {
    ApiError::Custom {
        code: 500,
        reason: "InternalError".into(),
        message: format!("Internal error occurred: {message}"),
        details: Some(json!({ "causes": [{ "message": message }] })),
    }
}

/// `webhookerrors.ToStatusErr`: the webhook's Status, its message prefixed with who denied.
fn denial(webhook: &str, status: Option<&Value>) -> ApiError {
    let denied_by = format!("admission webhook {webhook:?} denied the request");
    let status = status.cloned().unwrap_or(json!({}));
    let code = status["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| *c >= 400)
        .unwrap_or(400);
    let reason = status["reason"].as_str().unwrap_or("").to_string();
    let message = match status["message"].as_str().filter(|m| !m.is_empty()) {
        Some(m) => format!("{denied_by}: {m}"),
        None if !reason.is_empty() => format!("{denied_by}: {reason}"),
        None => format!("{denied_by} without explanation"),
    };
    ApiError::Custom {
        code,
        reason,
        message,
        details: status.get("details").filter(|d| d.is_object()).cloned(),
    }
}

impl WebhookAdmission {
    /// The versions the requested resource is served in (for `matchPolicy: Equivalent`).
    fn served_versions(&self, req: &AdmissionRequest) -> Vec<String> {
        self.store
            .resolve(&Gvr::new(&req.group, &req.version, &req.resource))
            .map(|i| i.versions.clone())
            .unwrap_or_default()
    }

    /// `obj` (in the request's version) in `version`.
    fn in_version(&self, req: &AdmissionRequest, obj: Option<&Value>, version: &str) -> Option<Value> {
        let obj = obj?;
        if version == req.version {
            return Some(obj.clone());
        }
        match self.store.resolve(&Gvr::new(&req.group, &req.version, &req.resource)) {
            Ok(info) => Some(convert::to_version(&info, &convert::to_storage(&info, obj), version)),
            Err(_) => Some(obj.clone()),
        }
    }

    async fn run_mutating(&self, req: &mut AdmissionRequest) -> Result<(), ApiError> {
        if config::exempt(req) {
            return Ok(());
        }
        let hooks = config::load(&self.store, Phase::Mutating);
        if hooks.is_empty() {
            return Ok(());
        }
        let versions = self.served_versions(req);
        let mut reinvocable: Vec<usize> = Vec::new();
        let mut reinvoke: BTreeSet<usize> = BTreeSet::new();
        for (i, hook) in hooks.iter().enumerate() {
            let Some(inv) = hook.should_call(&self.store, req, &versions)? else {
                continue;
            };
            if self.call_mutating(hook, &inv, req).await? {
                // A change means every earlier IfNeeded webhook must see the new object.
                reinvoke.extend(reinvocable.iter().copied());
            }
            if hook.reinvoke_if_needed {
                reinvocable.push(i);
            }
        }
        // One reinvocation round, as the apiserver does (it never calls a webhook a third time).
        for i in reinvoke {
            let hook = &hooks[i];
            if let Some(inv) = hook.should_call(&self.store, req, &versions)? {
                self.call_mutating(hook, &inv, req).await?;
            }
        }
        Ok(())
    }

    /// Calls one mutating webhook and applies its patch; returns whether the object changed.
    async fn call_mutating(
        &self,
        hook: &Webhook,
        inv: &Invocation,
        req: &mut AdmissionRequest,
    ) -> Result<bool, ApiError> {
        let verdict = match self.call(hook, inv, req, true).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => return Err(e),
            Err(e) if hook.ignore_failures => {
                tracing::warn!(webhook = %hook.name, error = %e, "failed calling webhook, failing open");
                return Ok(false);
            }
            Err(e) => return Err(internal_error(format!("failed calling webhook {:?}: {e}", hook.name))),
        };
        // Warnings and audit annotations are kept whatever the verdict, as the apiserver does.
        req.warnings.extend(verdict.warnings.iter().cloned());
        req.audit_annotations.extend(
            verdict
                .audit_annotations
                .iter()
                .map(|(k, v)| (format!("{}/{k}", hook.name), v.clone())),
        );
        if !verdict.allowed {
            return Err(denial(&hook.name, verdict.status.as_ref()));
        }
        if verdict.patch.is_empty() {
            return Ok(false);
        }
        let fail = |reason: String| -> Result<bool, ApiError> {
            if hook.ignore_failures {
                tracing::warn!(webhook = %hook.name, error = %reason, "failed calling webhook, failing open");
                Ok(false)
            } else {
                Err(internal_error(format!(
                    "failed calling webhook {:?}: {reason}",
                    hook.name
                )))
            }
        };
        let patch: json_patch::Patch = match serde_json::from_slice(&verdict.patch) {
            Ok(p) => p,
            Err(e) => return fail(format!("received undecodable patch in webhook response: {e}")),
        };
        if patch.0.is_empty() {
            return Ok(false);
        }
        let Some(current) = self.in_version(req, req.object.as_ref(), &inv.version) else {
            return Err(internal_error(format!(
                "admission webhook {:?} attempted to modify the object, which is not supported for this operation",
                hook.name
            )));
        };
        if verdict.patch_type != "JSONPatch" {
            return fail(format!("unsupported patch type {:?}", verdict.patch_type));
        }
        let mut patched = current.clone();
        json_patch::patch(&mut patched, &patch).map_err(|e| internal_error(e.to_string()))?;
        if !patched.is_object() {
            return Err(internal_error(format!(
                "admission webhook {:?} patched the object into a non-object",
                hook.name
            )));
        }
        let changed = patched != current;
        if changed {
            req.object = self.in_version(req, Some(&patched), &req.version.clone());
        }
        Ok(changed)
    }

    /// Calls every matching validating webhook at once. Their warnings are kept whatever their verdicts, in
    /// the configurations' order, as the apiserver records them (`warning.AddWarning` before the verdict is
    /// looked at).
    async fn run_validating(&self, req: &mut AdmissionRequest) -> Result<(), ApiError> {
        if config::exempt(req) {
            return Ok(());
        }
        let hooks = config::load(&self.store, Phase::Validating);
        if hooks.is_empty() {
            return Ok(());
        }
        let versions = self.served_versions(req);
        let request: &AdmissionRequest = req;
        let mut calls = Vec::new();
        for hook in &hooks {
            if let Some(inv) = hook.should_call(&self.store, request, &versions)? {
                calls.push(async move {
                    match self.call(hook, &inv, request, false).await {
                        Ok(Ok(v)) if v.allowed => (v.warnings, Ok(())),
                        Ok(Ok(v)) => (v.warnings, Err(denial(&hook.name, v.status.as_ref()))),
                        Ok(Err(e)) => (Vec::new(), Err(e)),
                        Err(e) if hook.ignore_failures => {
                            tracing::warn!(webhook = %hook.name, error = %e, "failed calling webhook, failing open");
                            (Vec::new(), Ok(()))
                        }
                        Err(e) => (
                            Vec::new(),
                            Err(internal_error(format!("failed calling webhook {:?}: {e}", hook.name))),
                        ),
                    }
                });
            }
        }
        let mut outcome = Ok(());
        for (warnings, result) in futures::future::join_all(calls).await {
            req.warnings.extend(warnings);
            if outcome.is_ok() {
                outcome = result;
            }
        }
        outcome
    }

    /// One AdmissionReview round trip. `Err` is a failure to call (subject to `failurePolicy`);
    /// a webhook that refuses dry runs is a 400 regardless of it.
    async fn call(
        &self,
        hook: &Webhook,
        inv: &Invocation,
        req: &AdmissionRequest,
        mutating: bool,
    ) -> Result<Result<review::Verdict, ApiError>, CallFailure> {
        if req.dry_run {
            match hook.side_effects.as_deref() {
                None => return Err(CallFailure("Webhook SideEffects is nil".into())),
                Some("None" | "NoneOnDryRun") => {}
                Some(_) => {
                    return Ok(Err(ApiError::BadRequest(format!(
                        "admission webhook {:?} does not support dry run",
                        hook.name
                    ))));
                }
            }
        }
        let Some(review_version) = review::pick_version(&hook.review_versions) else {
            return Err(CallFailure(format!(
                "webhook does not accept known AdmissionReview versions: accepted {:?}, supported [\"v1\", \"v1beta1\"]",
                hook.review_versions
            )));
        };
        let target = self.target(hook).map_err(|e| CallFailure(e.to_string()))?;
        let uid = uuid::Uuid::new_v4().to_string();
        let object = self.in_version(req, req.object.as_ref(), &inv.version);
        let old_object = self.in_version(req, req.old_object.as_deref(), &inv.version);
        let body = review::build(&review::ReviewInput {
            uid: &uid,
            review_version,
            req,
            version: &inv.version,
            object: object.as_ref(),
            old_object: old_object.as_ref(),
            namespace: config::request_namespace(req),
        });
        let bytes =
            serde_json::to_vec(&body).map_err(|e| CallFailure(format!("could not create admission objects: {e}")))?;
        let (code, resp) = self
            .client
            .post(&target, Bytes::from(bytes), hook.timeout)
            .await
            .map_err(|e| CallFailure(e.to_string()))?;
        if !(200..300).contains(&code) {
            return Err(CallFailure(
                CallError::Call(client::status_error(code, &resp)).to_string(),
            ));
        }
        let parsed: Value =
            serde_json::from_slice(&resp).map_err(|e| CallFailure(CallError::Call(e.to_string()).to_string()))?;
        let verdict = review::verify(&uid, review_version, mutating, &parsed)
            .map_err(|e| CallFailure(format!("received invalid webhook response: {e}")))?;
        Ok(Ok(verdict))
    }

    /// Where to send the review (see the module docs for services).
    fn target(&self, hook: &Webhook) -> Result<Target, CallError> {
        let timeout_param = format!("timeout={}s", hook.timeout.as_secs());
        match &hook.endpoint {
            Some(Endpoint::Url(url)) => url_target(url, &timeout_param, hook.ca_bundle.clone()),
            Some(Endpoint::Service {
                namespace,
                name,
                path,
                port,
            }) => {
                let (ip, target_port) =
                    resolve_service(&self.store, namespace, name, *port).map_err(CallError::Client)?;
                let connect = if ip.contains(':') {
                    format!("[{ip}]:{target_port}")
                } else {
                    format!("{ip}:{target_port}")
                };
                let path = if path.is_empty() { "/".to_string() } else { path.clone() };
                let path_and_query = format!("{path}?{timeout_param}");
                Ok(Target {
                    url: format!("https://{name}.{namespace}.svc:{port}{path_and_query}"),
                    host_header: connect.clone(),
                    connect,
                    server_name: format!("{name}.{namespace}.svc"),
                    path_and_query,
                    ca_bundle: hook.ca_bundle.clone(),
                })
            }
            None => Err(CallError::Client(
                "webhook has neither clientConfig.url nor clientConfig.service".into(),
            )),
        }
    }
}

/// A failure to call a webhook (before the `failed calling webhook "<name>": ` prefix).
#[derive(Debug, Clone)]
struct CallFailure(String);

impl std::fmt::Display for CallFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn url_target(url: &str, timeout_param: &str, ca_bundle: Option<Vec<u8>>) -> Result<Target, CallError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| CallError::Client(format!("invalid URL {url:?}: {e}")))?;
    if uri.scheme_str() != Some("https") {
        return Err(CallError::Client(format!(
            "invalid URL {url:?}: the scheme must be https"
        )));
    }
    let host = uri
        .host()
        .ok_or_else(|| CallError::Client(format!("invalid URL {url:?}: no host")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
    let port = uri.port_u16().unwrap_or(443);
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_string())
        .unwrap_or_else(|| host.clone());
    let path = if uri.path().is_empty() { "/" } else { uri.path() };
    let path_and_query = match uri.query() {
        Some(q) => format!("{path}?{q}&{timeout_param}"),
        None => format!("{path}?{timeout_param}"),
    };
    let connect = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    Ok(Target {
        url: format!("https://{authority}{path_and_query}"),
        host_header: authority,
        connect,
        server_name: host,
        path_and_query,
        ca_bundle,
    })
}

/// `proxy.ResolveEndpoint`: the Service's port → a ready address and port of its Endpoints.
fn resolve_service(store: &Store, namespace: &str, name: &str, port: u16) -> Result<(String, u16), String> {
    let svc = store
        .get(&Gvr::new("", "v1", "services"), namespace, name)
        .map_err(|e| e.to_string())?;
    let svc_type = svc.pointer("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP");
    if !matches!(svc_type, "ClusterIP" | "LoadBalancer" | "NodePort") {
        return Err(format!("unsupported service type {svc_type:?}"));
    }
    let ports = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let svc_port = ports
        .iter()
        .find(|p| p["port"].as_u64() == Some(u64::from(port)))
        .ok_or_else(|| format!("no service port {port} found for service {name:?}"))?;
    let port_name = svc_port["name"].as_str().unwrap_or("");
    let eps = store
        .get(&Gvr::new("", "v1", "endpoints"), namespace, name)
        .map_err(|e| e.to_string())?;
    for subset in eps["subsets"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let Some(ip) = subset["addresses"]
            .as_array()
            .and_then(|a| a.first())
            .and_then(|a| a["ip"].as_str())
        else {
            continue;
        };
        let found = subset["ports"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"].as_str().unwrap_or("") == port_name));
        if let Some(p) = found
            .and_then(|p| p["port"].as_u64())
            .and_then(|p| u16::try_from(p).ok())
        {
            return Ok((ip.to_string(), p));
        }
    }
    Err(format!("no endpoints available for service {name:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_read_like_the_apiserver() {
        let e = denial(
            "pods.example.com",
            Some(&json!({ "code": 403, "reason": "Forbidden", "message": "no" })),
        );
        assert_eq!(
            e.to_string(),
            "admission webhook \"pods.example.com\" denied the request: no"
        );
        assert_eq!(e.code(), 403);
        let bare = denial("w", None);
        assert_eq!(
            bare.to_string(),
            "admission webhook \"w\" denied the request without explanation"
        );
        assert_eq!(bare.code(), 400);
    }

    #[test]
    fn urls_get_the_timeout_parameter() {
        let t = url_target("https://127.0.0.1:8443/mutate?x=1", "timeout=10s", None).ok();
        let t = t.map(|t| (t.connect, t.server_name, t.path_and_query, t.url));
        assert_eq!(
            t,
            Some((
                "127.0.0.1:8443".to_string(),
                "127.0.0.1".to_string(),
                "/mutate?x=1&timeout=10s".to_string(),
                "https://127.0.0.1:8443/mutate?x=1&timeout=10s".to_string()
            ))
        );
        assert!(url_target("http://127.0.0.1/x", "timeout=1s", None).is_err());
    }

    #[test]
    fn internal_errors_carry_the_cause() {
        let e = internal_error("failed calling webhook \"w\": boom".into());
        let s = e.to_status();
        assert_eq!(
            s["message"],
            "Internal error occurred: failed calling webhook \"w\": boom"
        );
        assert_eq!(s["reason"], "InternalError");
        assert_eq!(
            s["details"]["causes"][0]["message"],
            "failed calling webhook \"w\": boom"
        );
    }
}
