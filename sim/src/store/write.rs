//! Writes: create, update, patch (all four types), delete with finalizers and grace periods,
//! deletecollection and pod binding. Each runs defaulting, admission, the resource's rules,
//! validation and the size limit before committing.

use std::sync::Arc;

use serde_json::{Value, json};

use super::crd;
use super::{ChangeKind, State, Store, WriteOptions};
use crate::admission_seam::{AdmissionRequest, Operation, UserInfo};
use crate::apply::{self, ApplyRequest};
use crate::convert;
use crate::defaults;
use crate::list_types::KindSchema;
use crate::managed_fields;
use crate::meta;
use crate::patch::{self, PatchError};
use crate::registry::{Gvr, ResourceInfo, api_version};
use crate::status::ApiError;
use crate::validation;

/// The result of a successful write.
#[derive(Debug, Clone)]
pub struct Written {
    /// The object as stored (in the requested version).
    pub object: Value,
    /// Admission warnings for the client.
    pub warnings: Vec<String>,
    /// True when the write created the object (apply may create).
    pub created: bool,
}

/// A patch body by type.
#[derive(Debug, Clone)]
pub enum PatchBody {
    /// `application/json-patch+json`
    Json(Value),
    /// `application/merge-patch+json`
    Merge(Value),
    /// `application/strategic-merge-patch+json`
    Strategic(Value),
    /// `application/apply-patch+yaml` (already parsed)
    Apply(Value),
}

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part<'a> {
    Main,
    Status,
    /// `namespaces/<name>/finalize`
    Finalize,
    Binding(&'a str),
}

impl<'a> Part<'a> {
    fn parse(subresource: Option<&str>) -> Result<Self, ApiError> {
        match subresource.unwrap_or("") {
            "" => Ok(Part::Main),
            "status" => Ok(Part::Status),
            "finalize" => Ok(Part::Finalize),
            other => Err(ApiError::BadRequest(format!(
                "subresource {other:?} is not supported for this operation"
            ))),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Part::Main => "",
            Part::Status => "status",
            Part::Finalize => "finalize",
            Part::Binding(_) => "binding",
        }
    }
}

/// How the new object of an update is produced from the current one.
enum Change<'a> {
    Replace(&'a Value),
    Patch(&'a PatchBody),
}

/// Optimistic retries of one write racing others (etcd3's GuaranteedUpdate retries until it wins).
const MAX_RETRIES: usize = 1000;

fn schema<'a>(info: &'a ResourceInfo, version: &str) -> KindSchema<'a> {
    KindSchema::new(
        &info.group,
        &info.kind,
        info.crd.as_ref().and_then(|c| c.schemas.get(version)),
    )
}

/// Metadata only the server sets.
const SYSTEM_META: &[&str] = &[
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
];

impl Store {
    /// Creates an object in `namespace` (ignored for cluster-scoped resources).
    pub async fn create(
        &self,
        gvr: &Gvr,
        namespace: &str,
        obj: Value,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let info = self.resolve(gvr)?;
        self.create_inner(&info, gvr, namespace, obj, opts, None).await
    }

    async fn create_inner(
        &self,
        info: &Arc<ResourceInfo>,
        gvr: &Gvr,
        namespace: &str,
        obj: Value,
        opts: &WriteOptions,
        applied_by: Option<&PatchBody>,
    ) -> Result<Written, ApiError> {
        let mut obj = obj;
        if !obj.is_object() {
            return Err(ApiError::BadRequest(
                "the body of the request must be a JSON object".into(),
            ));
        }
        check_type_meta(info, gvr, &obj)?;
        let ns = scope_namespace(info, namespace, &obj)?;
        for f in SYSTEM_META {
            meta::remove(&mut obj, f);
        }
        if let Some(Value::Object(m)) = obj.get_mut("metadata")
            && ns.is_empty()
        {
            m.remove("namespace");
        }
        if !ns.is_empty() {
            meta::set(&mut obj, "namespace", json!(ns));
        }
        let mut stored = convert::into_storage(info, obj);
        defaults::apply(&info.group, &info.kind, &mut stored);
        if info.status_subresource
            && let Value::Object(m) = &mut stored
        {
            m.remove("status");
        }

        let unknown_fields = crd::decode(info, &gvr.version, &mut stored, opts.field_validation.as_deref(), false)?;

        let mut req = self.admission_request(
            info,
            gvr,
            Operation::Create,
            "",
            &ns,
            Some(stored),
            None,
            opts.dry_run,
            &opts.user,
        );
        req.warnings = unknown_fields;
        self.mutate(&mut req).await?;
        let mut stored = take_back(info, &mut req)?;
        crd::prune(info, &gvr.version, &mut stored);

        // Registry rules (BeforeCreate): name generation, system fields, generation, status.
        let generate = meta::name(&stored).is_empty() && !meta::str_field(&stored, "generateName").is_empty();
        if generate {
            let name = format!("{}{}", meta::str_field(&stored, "generateName"), meta::random_suffix());
            meta::set(&mut stored, "name", json!(name));
        }
        let now = meta::now_rfc3339();
        meta::set(&mut stored, "uid", json!(uuid::Uuid::new_v4().to_string()));
        meta::set(&mut stored, "creationTimestamp", json!(now));
        defaults::with_uid(&info.group, &info.kind, &mut stored);
        if info.has_generation {
            meta::set(&mut stored, "generation", json!(1));
        }
        if let Some(status) = defaults::initial_status(&info.group, &info.kind, &stored) {
            stored["status"] = status;
        }
        if crd::is_crd(info) {
            crd::establish(&mut stored, &now);
            crd::add_cleanup_finalizer(&mut stored);
        }
        if (info.group.as_str(), info.kind.as_str()) == ("", "Service") {
            let taken = self.service_ips();
            let range = self.inner.config.service_cluster_ip_range;
            defaults::allocate_service_ip(&mut stored, &range, &|ip| taken.iter().any(|t| t == ip)).map_err(
                |e| match e {
                    defaults::ClusterIpError::Invalid(cause) => {
                        ApiError::invalid(&info.group, &info.kind, meta::name(&stored), vec![cause])
                    }
                    full @ defaults::ClusterIpError::RangeFull => ApiError::Internal(full.to_string()),
                },
            )?;
        }

        let mut causes = Vec::new();
        validation::object_meta_on_create(&info.group, &info.kind, &stored, &mut causes);
        validation::finalizers::check(
            &stored,
            validation::finalizers::kube_names(&info.group, info.is_crd_backed()),
            &mut causes,
        );
        validation::on_create(&info.group, &info.kind, &stored, &mut causes);
        crd::validate(info, &gvr.version, &stored, None, &mut causes);
        if !causes.is_empty() {
            return Err(ApiError::invalid(&info.group, &info.kind, meta::name(&stored), causes));
        }
        req.warnings
            .extend(validation::warnings::on_create(&info.group, &info.kind, &stored));
        if info.is_crd_backed() {
            req.warnings
                .extend(validation::finalizers::custom_resource_warnings(&stored, None));
        }
        req.name = meta::name(&stored).to_string();
        let mut stored = self.validate_lent(info, gvr, &mut req, stored).await?;

        let schema = schema(info, &gvr.version);
        if applied_by.is_none() {
            let scope = tracked_scope(info, Part::Main);
            managed_fields::record_update(
                None,
                &mut stored,
                &schema,
                &opts.manager(),
                &gvr.api_version(),
                "",
                &now,
                &scope,
            );
        }
        self.check_size(&stored)?;
        if opts.dry_run {
            return Ok(Written {
                object: convert::to_version(info, &stored, &gvr.version),
                warnings: req.warnings,
                created: true,
            });
        }

        let committed = {
            let mut state = self.lock();
            let table = state.tables.entry(info.storage.clone()).or_default();
            let mut key = (ns.clone(), meta::name(&stored).to_string());
            if table.contains_key(&key) {
                if !generate {
                    return Err(ApiError::already_exists(&info.group, &info.resource, &key.1));
                }
                // generateName collisions are retried with a new suffix, as the apiserver does.
                while table.contains_key(&key) {
                    key.1 = format!("{}{}", meta::str_field(&stored, "generateName"), meta::random_suffix());
                }
                meta::set(&mut stored, "name", json!(key.1));
            }
            let committed = self.commit(&mut state, &info.storage, ChangeKind::Added, stored, None);
            if crd::is_crd(info)
                && let Some(served) = crd::resource_info(&committed)
            {
                state.registry.insert(served);
            }
            committed
        };
        Ok(Written {
            object: convert::to_version(info, &committed, &gvr.version),
            warnings: req.warnings,
            created: true,
        })
    }

    /// Replaces an object (PUT). A non-empty `metadata.resourceVersion` that is not the current
    /// one is a 409 Conflict; an empty one updates unconditionally.
    pub async fn update(
        &self,
        gvr: &Gvr,
        namespace: &str,
        name: &str,
        obj: Value,
        subresource: Option<&str>,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let info = self.resolve(gvr)?;
        check_type_meta(&info, gvr, &obj)?;
        let body_name = meta::name(&obj);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        self.update_loop(
            &info,
            gvr,
            namespace,
            name,
            Change::Replace(&obj),
            Part::parse(subresource)?,
            opts,
        )
        .await
    }

    /// Patches an object. Server-side apply creates the object when it does not exist.
    pub async fn patch(
        &self,
        gvr: &Gvr,
        namespace: &str,
        name: &str,
        body: &PatchBody,
        subresource: Option<&str>,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let info = self.resolve(gvr)?;
        if matches!(body, PatchBody::Strategic(_)) && info.is_crd_backed() {
            return Err(ApiError::UnsupportedMediaType(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into(),
            ));
        }
        if let PatchBody::Apply(applied) = body {
            if opts.field_manager.as_deref().unwrap_or("").is_empty() {
                return Err(ApiError::invalid(
                    "meta.k8s.io",
                    "PatchOptions",
                    "",
                    vec![crate::status::FieldCause {
                        reason: "FieldValueRequired".into(),
                        field: "fieldManager".into(),
                        message: "Required value: is required for apply patch".into(),
                    }],
                ));
            }
            check_type_meta(&info, gvr, applied)?;
            if applied.get("apiVersion").is_none() || applied.get("kind").is_none() {
                return Err(ApiError::BadRequest("invalid object type: /, Kind=".into()));
            }
            let applied_name = meta::name(applied);
            if applied_name != name {
                return Err(ApiError::BadRequest(format!(
                    "the name of the object ({applied_name}) does not match the name on the URL ({name})"
                )));
            }
            let ns = if info.namespaced { namespace } else { "" };
            if self.get_stored(&info.storage, ns, name).is_none() && Part::parse(subresource)? == Part::Main {
                let schema = schema(&info, &gvr.version);
                let now = meta::now_rfc3339();
                let req = ApplyRequest {
                    applied,
                    schema,
                    manager: opts.field_manager.as_deref().unwrap_or(""),
                    api_version: &gvr.api_version(),
                    subresource: "",
                    force: opts.force,
                    now: &now,
                };
                let obj = apply::apply(None, &req)?;
                return match self.create_inner(&info, gvr, namespace, obj, opts, Some(body)).await {
                    // Lost a race with another creator: apply onto what they made.
                    Err(ApiError::AlreadyExists(_)) => {
                        self.update_loop(&info, gvr, namespace, name, Change::Patch(body), Part::Main, opts)
                            .await
                    }
                    other => other,
                };
            }
        }
        self.update_loop(
            &info,
            gvr,
            namespace,
            name,
            Change::Patch(body),
            Part::parse(subresource)?,
            opts,
        )
        .await
    }

    /// Binds a pod to a node (`pods/<name>/binding`), as the scheduler does.
    pub async fn bind_pod(
        &self,
        namespace: &str,
        name: &str,
        node: &str,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let gvr = Gvr::new("", "v1", "pods");
        let info = self.resolve(&gvr)?;
        let placeholder = json!({});
        self.update_loop(
            &info,
            &gvr,
            namespace,
            name,
            Change::Replace(&placeholder),
            Part::Binding(node),
            opts,
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn update_loop(
        &self,
        info: &Arc<ResourceInfo>,
        gvr: &Gvr,
        namespace: &str,
        name: &str,
        change: Change<'_>,
        part: Part<'_>,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let ns = if info.namespaced {
            namespace.to_string()
        } else {
            String::new()
        };
        let schema = schema(info, &gvr.version);
        for _ in 0..MAX_RETRIES {
            let current = self
                .get_stored(&info.storage, &ns, name)
                .ok_or_else(|| ApiError::not_found(&info.group, &info.resource, name))?;
            let current_rv = meta::resource_version(&current).to_string();
            // Borrowed unless converting changes it: the writes below copy what they change.
            let current_v = convert::as_version(info, &current, &gvr.version);
            let now = meta::now_rfc3339();
            let mut applied_managed = false;

            // The object the client wants, in the requested version.
            let mut desired = match (&change, part) {
                (_, Part::Binding(node)) => {
                    if let Some(assigned) = current
                        .pointer("/spec/nodeName")
                        .and_then(Value::as_str)
                        .filter(|n| !n.is_empty())
                    {
                        return Err(ApiError::Conflict {
                            target: crate::status::Target::new("", "pods/binding", name),
                            detail: format!("pod {name} is already assigned to node {assigned:?}"),
                        });
                    }
                    let mut pod = current_v.clone().into_owned();
                    pod["spec"]["nodeName"] = json!(node);
                    set_condition(&mut pod, "PodScheduled", &now);
                    pod
                }
                (Change::Replace(obj), _) => (*obj).clone(),
                (Change::Patch(body), _) => {
                    let mut target = current_v.clone().into_owned();
                    match body {
                        PatchBody::Json(p) => patch::json_patch(&mut target, p).map_err(patch_error)?,
                        PatchBody::Merge(p) => patch::merge_patch(&mut target, p),
                        PatchBody::Strategic(p) => {
                            target = patch::strategic_merge_patch(&target, p, &schema).map_err(patch_error)?;
                        }
                        PatchBody::Apply(p) => {
                            let req = ApplyRequest {
                                applied: p,
                                schema,
                                manager: opts.field_manager.as_deref().unwrap_or(""),
                                api_version: &gvr.api_version(),
                                subresource: part.name(),
                                force: opts.force,
                                now: &now,
                            };
                            target = apply::apply(Some(current_v.as_ref()), &req)?;
                            applied_managed = true;
                        }
                    }
                    target
                }
            };
            if !desired.is_object() {
                return Err(ApiError::BadRequest(
                    "the body of the request must be a JSON object".into(),
                ));
            }
            let requested_rv = meta::resource_version(&desired).to_string();
            if !requested_rv.is_empty() && requested_rv != current_rv {
                return Err(ApiError::stale(&info.group, &info.resource, name));
            }
            if meta::name(&desired).is_empty() {
                meta::set(&mut desired, "name", json!(name));
            }
            if info.namespaced {
                let body_ns = meta::namespace(&desired);
                if !body_ns.is_empty() && body_ns != ns {
                    return Err(ApiError::BadRequest(
                        "the namespace of the provided object does not match the namespace sent on the request".into(),
                    ));
                }
                meta::set(&mut desired, "namespace", json!(ns));
            }
            let mut new = convert::into_storage(info, desired);
            defaults::apply(&info.group, &info.kind, &mut new);
            // Server-side apply reports unknown fields as an update does; other patches on their `patch` field.
            let patched = matches!(change, Change::Patch(body) if !matches!(body, PatchBody::Apply(_)));
            let unknown_fields = crd::decode(info, &gvr.version, &mut new, opts.field_validation.as_deref(), patched)?;

            let mut req = self.admission_request(
                info,
                gvr,
                Operation::Update,
                part.name(),
                &ns,
                Some(new),
                Some(&current),
                opts.dry_run,
                &opts.user,
            );
            req.name = name.to_string();
            req.warnings = unknown_fields;
            self.mutate(&mut req).await?;
            let mut new = take_back(info, &mut req)?;
            crd::prune(info, &gvr.version, &mut new);

            // Registry rules (BeforeUpdate).
            new = prepare_update(info, &current, new, part);
            let mut causes = Vec::new();
            validation::object_meta(&info.group, &info.kind, &new, &mut causes);
            validation::finalizers::check(
                &new,
                validation::finalizers::kube_names(&info.group, info.is_crd_backed()),
                &mut causes,
            );
            if !matches!(part, Part::Binding(_)) {
                validation::on_update(&info.group, &info.kind, &current, &new, &mut causes);
            }
            crd::validate(info, &gvr.version, &new, Some(&*current), &mut causes);
            if !causes.is_empty() {
                return Err(ApiError::invalid(&info.group, &info.kind, name, causes));
            }
            if info.is_crd_backed() {
                req.warnings
                    .extend(validation::finalizers::custom_resource_warnings(&new, Some(&*current)));
            }
            let mut new = self.validate_lent(info, gvr, &mut req, new).await?;

            if !applied_managed {
                let manager = opts.manager();
                let scope = tracked_scope(info, part);
                managed_fields::record_update(
                    Some(&current),
                    &mut new,
                    &schema,
                    &manager,
                    &gvr.api_version(),
                    part.name(),
                    &now,
                    &scope,
                );
            }
            meta::set(&mut new, "resourceVersion", json!(current_rv));
            if new == *current {
                // No change: nothing is written and the resourceVersion stays.
                return Ok(Written {
                    object: current_v.into_owned(),
                    warnings: req.warnings,
                    created: false,
                });
            }
            self.check_size(&new)?;
            // `shouldDeleteDuringUpdate`: only removing the last finalizer of an object whose
            // deletion has no grace period left deletes it; a pod's status update while its
            // kubelet stops it (no finalizers, grace pending) is an ordinary update.
            // Namespaces also go when their last `spec.finalizers` entry is removed
            // (`ShouldDeleteNamespaceDuringUpdate`).
            let finishes_deletion = meta::is_deleting(&current)
                && (!meta::finalizers(&current).is_empty() || namespace_pending(info, &current))
                && meta::finalizers(&new).is_empty()
                && new
                    .pointer("/metadata/deletionGracePeriodSeconds")
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
                    == 0
                && !namespace_pending(info, &new);
            if opts.dry_run {
                return Ok(Written {
                    object: convert::to_version(info, &new, &gvr.version),
                    warnings: req.warnings,
                    created: false,
                });
            }
            let mut state = self.lock();
            let still_current = state
                .tables
                .get(&info.storage)
                .and_then(|t| t.get(&(ns.clone(), name.to_string())))
                .is_some_and(|o| meta::resource_version(o) == current_rv);
            if !still_current {
                continue;
            }
            let committed = if finishes_deletion {
                // The last finalizer went: the object is deleted instead of updated.
                let mut last = (*current).clone();
                meta::set(&mut last, "finalizers", json!(meta::finalizers(&new)));
                self.remove_locked(&mut state, info, current.clone(), last.clone());
                Arc::new(last)
            } else {
                let committed = self.commit(
                    &mut state,
                    &info.storage,
                    ChangeKind::Modified,
                    new,
                    Some(current.clone()),
                );
                if crd::is_crd(info)
                    && let Some(served) = crd::resource_info(&committed)
                {
                    state.registry.insert(served);
                }
                committed
            };
            return Ok(Written {
                object: convert::to_version(info, &committed, &gvr.version),
                warnings: req.warnings,
                created: false,
            });
        }
        Err(ApiError::Internal(format!(
            "too many concurrent writes to {} {name:?}; try again",
            info.resource
        )))
    }

    fn service_ips(&self) -> Vec<String> {
        let state = self.lock();
        let key = crate::registry::ResourceKey {
            group: String::new(),
            resource: "services".into(),
        };
        state
            .tables
            .get(&key)
            .map(|t| {
                t.values()
                    .filter_map(|s| s.pointer("/spec/clusterIP").and_then(Value::as_str).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub(super) fn check_size(&self, obj: &Value) -> Result<(), ApiError> {
        let mut counted = ByteCount(0);
        let size = serde_json::to_writer(&mut counted, obj).map_or(usize::MAX, |()| counted.0);
        if size > self.inner.config.max_object_bytes {
            Err(ApiError::EtcdRequestTooLarge)
        } else {
            Ok(())
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn admission_request(
        &self,
        info: &ResourceInfo,
        gvr: &Gvr,
        operation: Operation,
        subresource: &str,
        namespace: &str,
        stored: Option<Value>,
        old: Option<&Arc<Value>>,
        dry_run: bool,
        user: &UserInfo,
    ) -> AdmissionRequest {
        AdmissionRequest {
            operation,
            group: gvr.group.clone(),
            version: gvr.version.clone(),
            resource: gvr.resource.clone(),
            subresource: subresource.to_string(),
            kind: info.kind.clone(),
            namespace: namespace.to_string(),
            name: stored.as_ref().map(meta::name).unwrap_or_default().to_string(),
            object: stored.map(|o| convert::into_version(info, o, &gvr.version)),
            old_object: old.map(|o| convert::shared_version(info, o, &gvr.version)),
            dry_run,
            user: user.clone(),
            options: json!({}),
            warnings: Vec::new(),
            audit_annotations: Vec::new(),
        }
    }

    /// The mutating admission phase.
    pub(super) async fn mutate(&self, req: &mut AdmissionRequest) -> Result<(), ApiError> {
        for plugin in self.admission_plugins() {
            plugin.mutate(req).await?;
        }
        Ok(())
    }

    /// The validating admission phase over `stored` (an object about to be written), given back
    /// unchanged: validating plugins only read it.
    async fn validate_lent(
        &self,
        info: &ResourceInfo,
        gvr: &Gvr,
        req: &mut AdmissionRequest,
        stored: Value,
    ) -> Result<Value, ApiError> {
        if !convert::round_trips(info) {
            req.object = Some(convert::to_version(info, &stored, &gvr.version));
            self.validate(req).await?;
            return Ok(stored);
        }
        // Lent rather than copied: a write's object is large and copying it was a good part of a
        // write's cost.
        req.object = Some(convert::into_version(info, stored, &gvr.version));
        let validated = self.validate(req).await;
        let stored = take_back(info, req)?;
        validated.map(|()| stored)
    }

    /// The validating admission phase.
    pub(super) async fn validate(&self, req: &mut AdmissionRequest) -> Result<(), ApiError> {
        for plugin in self.admission_plugins() {
            plugin.validate_with_warnings(req).await?;
        }
        Ok(())
    }
}

/// The fields a write to `part` can own: a main-resource write of a kind with a status
/// subresource does not own status (the apiserver resets it), a status write owns only status.
fn tracked_scope(info: &ResourceInfo, part: Part<'_>) -> impl Fn(&managed_fields::FieldPath) -> bool + use<> {
    let status_sub = info.status_subresource;
    let status_only = part == Part::Status;
    move |p: &managed_fields::FieldPath| {
        let is_status = matches!(p.first(), Some(managed_fields::PathElement::Field(f)) if f == "status");
        if status_only {
            is_status
        } else {
            !(status_sub && is_status)
        }
    }
}

fn patch_error(e: PatchError) -> ApiError {
    match e {
        PatchError::ParseJsonPatch(_) => ApiError::BadRequest(e.to_string()),
        other => ApiError::Custom {
            code: 422,
            reason: "Invalid".into(),
            message: other.to_string(),
            details: None,
        },
    }
}

/// The object of a create or update back from an admission phase, in stored form. The phases change
/// it but never remove it.
fn take_back(info: &ResourceInfo, req: &mut AdmissionRequest) -> Result<Value, ApiError> {
    req.object
        .take()
        .map(|object| convert::into_storage(info, object))
        .ok_or_else(|| ApiError::Internal("admission removed the object being written".into()))
}

pub(super) fn is_still(state: &State, info: &ResourceInfo, ns: &str, name: &str, current: &Arc<Value>) -> bool {
    state
        .tables
        .get(&info.storage)
        .and_then(|t| t.get(&(ns.to_string(), name.to_string())))
        .is_some_and(|o| meta::resource_version(o) == meta::resource_version(current))
}

/// Checks `apiVersion`/`kind` of a body against the resource it was sent to.
fn check_type_meta(info: &ResourceInfo, gvr: &Gvr, obj: &Value) -> Result<(), ApiError> {
    let expected = api_version(&info.group, &gvr.version);
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str)
        && av != expected
    {
        return Err(ApiError::BadRequest(format!(
            "the API version in the data ({av}) does not match the expected API version ({expected})"
        )));
    }
    if let Some(kind) = obj.get("kind").and_then(Value::as_str)
        && kind != info.kind
    {
        return Err(ApiError::BadRequest(format!(
            "{kind} in version {:?} cannot be handled as a {}",
            gvr.version, info.kind
        )));
    }
    Ok(())
}

/// The namespace an object is created in.
fn scope_namespace(info: &ResourceInfo, namespace: &str, obj: &Value) -> Result<String, ApiError> {
    if !info.namespaced {
        return Ok(String::new());
    }
    let body_ns = meta::namespace(obj);
    match (namespace.is_empty(), body_ns.is_empty()) {
        (false, false) if body_ns != namespace => Err(ApiError::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request".into(),
        )),
        (false, _) => Ok(namespace.to_string()),
        (true, false) => Ok(body_ns.to_string()),
        (true, true) => Err(ApiError::BadRequest(
            "an empty namespace may not be set during creation".into(),
        )),
    }
}

/// Keeps what the client may not change in this part of the object.
fn prepare_update(info: &ResourceInfo, current: &Value, mut new: Value, part: Part<'_>) -> Value {
    match part {
        Part::Status => {
            // The status the client sent is moved in and the stored one never copied: a status can be most
            // of an object.
            let mut out = match current {
                Value::Object(fields) => Value::Object(
                    fields
                        .iter()
                        .filter(|(key, _)| *key != "status")
                        .map(|(key, value)| (key.clone(), value.clone()))
                        .collect(),
                ),
                other => other.clone(),
            };
            if let Some(status) = new.as_object_mut().and_then(|m| m.remove("status")) {
                out["status"] = status;
            }
            if !info.is_crd_backed() {
                for f in ["labels", "annotations"] {
                    match meta::remove(&mut new, f) {
                        Some(v) => meta::set(&mut out, f, v),
                        None => {
                            meta::remove(&mut out, f);
                        }
                    }
                }
            }
            if let Some(mf) = meta::remove(&mut new, "managedFields") {
                meta::set(&mut out, "managedFields", mf);
            }
            return out;
        }
        Part::Finalize => {
            let mut out = current.clone();
            out["spec"]["finalizers"] = new.pointer("/spec/finalizers").cloned().unwrap_or(json!([]));
            return out;
        }
        Part::Main | Part::Binding(_) => {}
    }
    for f in SYSTEM_META {
        match current.pointer(&format!("/metadata/{f}")) {
            Some(v) => meta::set(&mut new, f, v.clone()),
            None => {
                meta::remove(&mut new, f);
            }
        }
    }
    if (info.group.as_str(), info.kind.as_str()) == ("", "Service") {
        defaults::keep_service_ip(current, &mut new);
    }
    if info.status_subresource && !matches!(part, Part::Binding(_)) {
        match current.get("status") {
            Some(s) => new["status"] = s.clone(),
            None => {
                if let Value::Object(m) = &mut new {
                    m.remove("status");
                }
            }
        }
    }
    if (info.has_generation || info.is_crd_backed()) && spec_changed(info, current, &new) {
        meta::set(&mut new, "generation", json!(meta::generation(current) + 1));
    }
    if crd::is_crd(info) {
        // The apiextensions controllers keep the status of an established CRD current.
        let now = current
            .pointer("/status/conditions/1/lastTransitionTime")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        crd::establish(&mut new, &now);
    }
    new
}

/// Whether anything but metadata (and status, where it is a subresource) changed.
fn spec_changed(info: &ResourceInfo, old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Value::Object(m) = &mut v {
            m.remove("metadata");
            if info.status_subresource {
                m.remove("status");
            }
        }
        v
    };
    strip(old) != strip(new)
}

/// A namespace whose `spec.finalizers` are not empty waits for the namespace controller.
pub(super) fn namespace_pending(info: &ResourceInfo, obj: &Value) -> bool {
    (info.group.as_str(), info.kind.as_str()) == ("", "Namespace")
        && obj
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty())
}

/// Sets a pod condition to True (the scheduler's PodScheduled on binding).
fn set_condition(pod: &mut Value, type_: &str, now: &str) {
    let cond = json!({ "type": type_, "status": "True", "lastProbeTime": null, "lastTransitionTime": now });
    let status = pod
        .as_object_mut()
        .map(|m| m.entry("status").or_insert_with(|| json!({})));
    let Some(Value::Object(status)) = status else { return };
    let conditions = status.entry("conditions").or_insert_with(|| json!([]));
    if let Value::Array(list) = conditions {
        list.retain(|c| c.get("type").and_then(Value::as_str) != Some(type_));
        list.push(cond);
    }
}

/// Counts the bytes of a serialization without keeping them.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
