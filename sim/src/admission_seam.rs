//! The seam where admission plugs into the write path.
//!
//! Every write that reaches the [`Store`](crate::store::Store) — over HTTP or in-process — runs,
//! in the order the real apiserver does:
//!
//! 1. decoding and defaulting,
//! 2. **mutating admission**: [`AdmissionPlugin::mutate`] of every registered plugin, in order
//!    (they may change [`AdmissionRequest::object`]),
//! 3. the resource's own rules (generateName, uid, generation, status subresource, validation),
//! 4. **validating admission**: [`AdmissionPlugin::validate`] of every plugin, in order,
//! 5. the size check and the commit.
//!
//! Deletes run both phases with `operation = Delete`, `object = None` and `old_object` set.
//! Nothing is registered by default: the webhook dispatcher and the built-in plugins
//! (NamespaceLifecycle, ServiceAccount, ...) live in `admission/` and are registered with
//! [`Store::add_admission_plugin`](crate::store::Store::add_admission_plugin).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use crate::status::ApiError;

/// A boxed, sendable future: admission plugins are called through `dyn`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// `admission.k8s.io/v1` operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    /// The AdmissionReview spelling: `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
            Self::Connect => "CONNECT",
        }
    }
}

/// Who made the request (`authentication.k8s.io/v1` UserInfo).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
}

impl Default for UserInfo {
    /// The identity of in-process callers that do not say who they are.
    fn default() -> Self {
        Self {
            username: "system:admin".into(),
            uid: String::new(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        }
    }
}

/// Everything an admission plugin is told about a write; the fields of an AdmissionReview request.
#[derive(Debug, Clone)]
pub struct AdmissionRequest {
    pub operation: Operation,
    /// Group, version and resource as the client addressed them.
    pub group: String,
    pub version: String,
    pub resource: String,
    /// `""`, `"status"`, ...
    pub subresource: String,
    /// The object's kind (same group and version as above).
    pub kind: String,
    /// Empty for cluster-scoped resources.
    pub namespace: String,
    /// May be empty on create when the client used `generateName`.
    pub name: String,
    /// The new object (create, update); mutating plugins change it in place.
    pub object: Option<Value>,
    /// The current object (update, delete), shared with the store where it is stored in this version:
    /// plugins only read it, and a copy per write was a large share of a simulated API server's time.
    pub old_object: Option<Arc<Value>>,
    pub dry_run: bool,
    pub user: UserInfo,
    /// CreateOptions / UpdateOptions / PatchOptions / DeleteOptions as an object.
    pub options: Value,
    /// Warnings for the client (returned as `Warning: 299 - "..."` headers).
    pub warnings: Vec<String>,
    /// Annotations to add to the audit event (kept for webhooks that return them).
    pub audit_annotations: Vec<(String, String)>,
}

/// An admission plugin. Both phases default to admitting unchanged.
///
/// Return an [`ApiError`] to deny: it reaches the client as the Status it maps to (webhook
/// denials use [`ApiError::Custom`] with the webhook's code and message).
pub trait AdmissionPlugin: Send + Sync + 'static {
    /// A name for logs.
    fn name(&self) -> &str;

    /// Mutating phase: may change `request.object`.
    fn mutate<'a>(&'a self, request: &'a mut AdmissionRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        let _ = request;
        Box::pin(async { Ok(()) })
    }

    /// Validating phase: must not change anything.
    fn validate<'a>(&'a self, request: &'a AdmissionRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        let _ = request;
        Box::pin(async { Ok(()) })
    }

    /// What the store calls in the validating phase. By default [`AdmissionPlugin::validate`];
    /// override it instead when the plugin returns warnings (push them to
    /// `request.warnings`, the only field it may change).
    fn validate_with_warnings<'a>(&'a self, request: &'a mut AdmissionRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move { self.validate(request).await })
    }
}
