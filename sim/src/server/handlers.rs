//! The HTTP API: each request is authenticated, routed, put through fault injection and handed
//! to the store.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, header};
use http_body_util::{BodyExt, Limited};
use serde_json::{Value, json};

use super::AppState;
use super::proxy;
use super::request::{Query, ResourcePath, Route, route};
use super::response::{self, Body};
use crate::admission_seam::UserInfo;
use crate::discovery;
use crate::openapi;
use crate::registry::{Gvr, ResourceInfo};
use crate::status::{ApiError, success_status};
use crate::store::{DeleteOptions, ListOptions, PatchBody, WriteOptions};
use crate::table::{self, IncludeObject};
use crate::watch::WatchOptions;

/// The apiserver's request body limit (`--max-request-body-bytes` default, 3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// Who is calling, from the TLS handshake and the Authorization header: the admin's client
/// certificate or static token, or a ServiceAccount token (see [`crate::service_account_tokens`]).
pub(crate) fn authenticate(state: &AppState, client_cert: bool, headers: &HeaderMap) -> Option<UserInfo> {
    if client_cert {
        return Some(admin());
    }
    let auth = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = auth
        .strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("bearer "))?
        .trim();
    if token.is_empty() {
        return None;
    }
    if token == state.token {
        return Some(admin());
    }
    let now = jiff::Timestamp::now().as_second();
    match state.service_account_tokens.authenticate(&state.store, token, now) {
        Ok(user) => Some(user),
        Err(e) => {
            // kube-apiserver logs why and answers a plain 401.
            tracing::debug!(error = %e, "bearer token rejected");
            None
        }
    }
}

/// Who a request without credentials is, for the paths anyone may read (kube-apiserver's
/// anonymous authentication; other paths answer 401 without credentials).
fn anonymous() -> UserInfo {
    UserInfo {
        username: crate::auth::ANONYMOUS.into(),
        uid: String::new(),
        groups: vec![crate::auth::ALL_UNAUTHENTICATED.into()],
    }
}

fn admin() -> UserInfo {
    UserInfo {
        username: crate::tls::ADMIN_USER.into(),
        uid: String::new(),
        groups: vec![crate::tls::ADMIN_GROUP.into(), "system:authenticated".into()],
    }
}

/// Handles one request and records it in the audit log (when that is on).
pub(crate) async fn handle(
    state: Arc<AppState>,
    req: Request<hyper::body::Incoming>,
    client_cert: bool,
) -> Response<Body> {
    if !state.audit.is_enabled() {
        return handle_request(state, req, client_cert).await;
    }
    let received = jiff::Timestamp::now();
    let user_agent = user_agent(req.headers()).to_owned();
    let username = authenticate(&state, client_cert, req.headers())
        .map(|u| u.username)
        .unwrap_or_default();
    let path = match route(req.uri().path()) {
        Route::Resource(p) => {
            let query = Query::parse(req.uri().query());
            Some((verb_of(req.method(), &p, &query), p))
        }
        _ => None,
    };
    let mut response = handle_request(state.clone(), req, client_cert).await;
    if let Some((verb, mut p)) = path {
        // kube-apiserver completes a create's objectRef with the request object's name (`LogRequestObject`,
        // at the Metadata level too): the created object's, read from the answer, unless it was generated
        // (a `generateName` create's request has no name, and its event none either).
        if verb == "create" && p.name.is_none() && response.status().is_success() {
            let (parts, body) = response.into_parts();
            // The body is in memory (Infallible): collecting it cannot fail.
            let bytes = match body.collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(never) => match never {},
            };
            p.name = serde_json::from_slice::<Value>(&bytes).ok().and_then(|o| {
                let generated = o
                    .pointer("/metadata/generateName")
                    .and_then(Value::as_str)
                    .is_some_and(|g| !g.is_empty());
                (!generated)
                    .then(|| o.pointer("/metadata/name")?.as_str().map(str::to_owned))
                    .flatten()
            });
            response = Response::from_parts(parts, http_body_util::Full::new(bytes).boxed_unsync());
        }
        state.audit.record(crate::audit::AuditEvent {
            received,
            answered: jiff::Timestamp::now(),
            verb: verb.to_owned(),
            group: p.group,
            resource: p.resource,
            subresource: p.subresource,
            namespace: p.namespace,
            name: p.name,
            username,
            user_agent,
            code: response.status().as_u16(),
        });
    }
    response
}

fn user_agent(headers: &HeaderMap) -> &str {
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

async fn handle_request(
    state: Arc<AppState>,
    req: Request<hyper::body::Incoming>,
    client_cert: bool,
) -> Response<Body> {
    let route = route(req.uri().path());
    let public = matches!(route, Route::Version | Route::Health(_));
    let user = authenticate(&state, client_cert, req.headers());
    let Some(user) = user.or_else(|| public.then(anonymous)) else {
        return response::error(&ApiError::Unauthorized);
    };
    let query = Query::parse(req.uri().query());
    let mode = state.store.authorization_mode();
    let user = match crate::auth::impersonation::acting_user(&state.store, mode, user, req.headers()) {
        Ok(u) => u,
        Err(e) => return response::error(&e),
    };
    let attrs = super::authz::attributes(req.method(), req.uri().path(), &route, &query);
    if let Err(e) = state.store.authorize(&user, &attrs) {
        return response::error(&e);
    }
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();

    let (verb, group, resource, subresource) = match &route {
        Route::Resource(p) => (
            verb_of(req.method(), p, &query),
            p.group.clone(),
            p.resource.clone(),
            p.subresource.clone(),
        ),
        _ => ("get", String::new(), String::new(), None),
    };
    let decision = state.faults.decide(
        verb,
        &group,
        &resource,
        subresource.as_deref(),
        user_agent(req.headers()),
    );
    if !decision.delay.is_zero() {
        tokio::time::sleep(decision.delay).await;
    }
    if let Some(err) = decision.fail {
        return response::error(&err);
    }

    let reg = state.store.registry();
    match route {
        Route::Version => response::json(200, &discovery::version()),
        Route::Health(_) => response::bytes_response(200, "text/plain; charset=utf-8", b"ok".to_vec()),
        Route::CoreVersions => match discovery::wants_aggregated(&accept) {
            Some(v) => aggregated(&reg, true, v),
            None => response::json(200, &discovery::core_versions(&state.server_address)),
        },
        Route::Groups => match discovery::wants_aggregated(&accept) {
            Some(v) => aggregated(&reg, false, v),
            None => response::json(200, &discovery::groups(&reg)),
        },
        Route::Group(g) => match discovery::group(&reg, &g) {
            Some(v) => response::json(200, &v),
            None => response::error(&ApiError::ResourceNotServed),
        },
        Route::GroupVersion { group, version } => match discovery::resource_list(&reg, &group, &version) {
            Some(v) => response::json(200, &v),
            None => response::error(&ApiError::ResourceNotServed),
        },
        Route::OpenApiV2 => {
            if accept.contains("protobuf") {
                response::bytes_response(200, openapi::V2_PROTOBUF, openapi::v2_protobuf())
            } else {
                response::json(200, &openapi::v2_json())
            }
        }
        Route::OpenApiV3Root => response::json(200, &openapi::v3_root(&reg)),
        Route::OpenApiV3 { group, version } => match openapi::v3_group_version(&reg, &group, &version) {
            Some(v) => response::json(200, &v),
            None => response::error(&ApiError::ResourceNotServed),
        },
        Route::Resource(path) => {
            // The pods this client is served show no container termination (a test's fault).
            let hide_terminations = path.group.is_empty()
                && path.resource == "pods"
                && state.faults.hides_terminations(user_agent(req.headers()));
            let present = Present {
                table: wants_table(&accept),
                hide_terminations,
            };
            let deprecated = deprecation_warning(&path.group, &path.version, &path.resource);
            let resp = match resource_request(&state, req, path, query, user, present).await {
                Ok(resp) => resp,
                Err(e) => response::error(&e),
            };
            match deprecated {
                Some(warning) => response::with_warnings(resp, &[warning.to_owned()]),
                None => resp,
            }
        }
        Route::NotFound => response::error(&ApiError::ResourceNotServed),
    }
}

/// How the objects of one request are shown to its client.
#[derive(Debug, Clone, Copy)]
struct Present {
    /// The client asked for a Table (`kubectl get`).
    table: bool,
    /// [`crate::faults::Faults::hide_terminations`]: set only for pods.
    hide_terminations: bool,
}

impl Present {
    fn object(self, obj: &mut Value) {
        if self.hide_terminations {
            crate::faults::hide_pod_terminations(obj);
        }
    }

    fn list(self, list: &mut Value) {
        if self.hide_terminations {
            for item in list
                .get_mut("items")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                crate::faults::hide_pod_terminations(item);
            }
        }
    }
}

/// The warning kube-apiserver adds to every request of a deprecated API (its installer's
/// `deprecation.WarningMessage`, from the types' `APILifecycleDeprecated`/`Replacement`), errors included.
fn deprecation_warning(group: &str, version: &str, resource: &str) -> Option<&'static str> {
    match (group, version, resource) {
        ("", "v1", "endpoints") => Some("v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice"),
        ("", "v1", "componentstatuses") => Some("v1 ComponentStatus is deprecated in v1.19+"),
        _ => None,
    }
}

fn aggregated(reg: &crate::registry::Registry, core: bool, version: &str) -> Response<Body> {
    let ct = if version == "v2beta1" {
        discovery::AGGREGATED_V2BETA1
    } else {
        discovery::AGGREGATED_V2
    };
    response::json_typed(200, ct, &discovery::aggregated(reg, core, version))
}

fn verb_of(method: &Method, p: &ResourcePath, q: &Query) -> &'static str {
    if p.subresource.as_deref() == Some(proxy::SUBRESOURCE) {
        return proxy::verb(method);
    }
    match (method.as_str(), p.name.is_some()) {
        ("GET", _) if p.legacy_watch || q.flag("watch") => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

async fn read_body(req: Request<hyper::body::Incoming>) -> Result<(HeaderMap, Bytes), ApiError> {
    let (parts, body) = req.into_parts();
    let collected = Limited::new(body, MAX_BODY).collect().await.map_err(|e| {
        if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
            ApiError::RequestEntityTooLarge { limit: MAX_BODY }
        } else {
            ApiError::BadRequest(format!("reading the request body: {e}"))
        }
    })?;
    Ok((parts.headers, collected.to_bytes()))
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

fn parse_object(ct: &str, body: &[u8]) -> Result<Value, ApiError> {
    match ct {
        "application/json" | "" | "*/*" => serde_json::from_slice(body)
            .map_err(|e| ApiError::BadRequest(format!("couldn't get version/kind; json parse error: {e}"))),
        crate::protobuf::MEDIA_TYPE => crate::protobuf::decode(body)
            .map_err(|e| ApiError::BadRequest(format!("the body of the request could not be decoded: {e}"))),
        "application/yaml" | "application/x-yaml" | "text/yaml" => serde_yaml::from_slice(body)
            .map_err(|e| ApiError::BadRequest(format!("error converting YAML to JSON: {e}"))),
        other => Err(ApiError::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {other})"
        ))),
    }
}

fn parse_patch(ct: &str, body: &[u8]) -> Result<PatchBody, ApiError> {
    let json = |b: &[u8]| serde_json::from_slice::<Value>(b).map_err(|e| ApiError::BadRequest(e.to_string()));
    match ct {
        "application/json-patch+json" => Ok(PatchBody::Json(json(body)?)),
        "application/merge-patch+json" => Ok(PatchBody::Merge(json(body)?)),
        "application/strategic-merge-patch+json" => Ok(PatchBody::Strategic(json(body)?)),
        // fabric8 sends JSON under the apply type; JSON is YAML, but parse it as JSON first so
        // numbers and strings keep their exact JSON types.
        "application/apply-patch+yaml" => match serde_json::from_slice::<Value>(body) {
            Ok(v) => Ok(PatchBody::Apply(v)),
            Err(_) => serde_yaml::from_slice::<Value>(body)
                .map(PatchBody::Apply)
                .map_err(|e| ApiError::BadRequest(format!("error decoding YAML: {e}"))),
        },
        _ => Err(ApiError::UnsupportedMediaType(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json".into(),
        )),
    }
}

/// Whether the client asked for a Table (`kubectl get`).
fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table") && first.contains("g=meta.k8s.io"))
}

fn write_options(q: &Query, headers: &HeaderMap, user: UserInfo) -> WriteOptions {
    WriteOptions {
        dry_run: q.get("dryRun") == Some("All"),
        field_manager: q.non_empty("fieldManager"),
        user_agent: headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        force: q.flag("force"),
        field_validation: q.non_empty("fieldValidation"),
        user,
    }
}

fn list_options(q: &Query) -> Result<ListOptions, ApiError> {
    let limit = match q.non_empty("limit") {
        Some(l) => Some(
            l.parse::<usize>()
                .map_err(|_| ApiError::BadRequest(format!("invalid limit: {l}")))?,
        ),
        None => None,
    };
    Ok(ListOptions {
        label_selector: q.non_empty("labelSelector"),
        field_selector: q.non_empty("fieldSelector"),
        limit,
        continue_token: q.non_empty("continue"),
        resource_version: q.get("resourceVersion").map(str::to_string),
        resource_version_match: q.non_empty("resourceVersionMatch"),
    })
}

async fn resource_request(
    state: &AppState,
    req: Request<hyper::body::Incoming>,
    path: ResourcePath,
    q: Query,
    user: UserInfo,
    present: Present,
) -> Result<Response<Body>, ApiError> {
    let gvr = Gvr::new(&path.group, &path.version, &path.resource);
    let info = state.store.resolve(&gvr)?;
    if crate::auth::reviews::is_review(&info.group, &info.resource, path.subresource.as_deref()) {
        return review(state, req, &path, info.namespaced, user).await;
    }
    if path.namespace.is_some() && !info.namespaced {
        return Err(ApiError::ResourceNotServed);
    }
    if let Some(sub) = &path.subresource {
        let served = (sub == "status" && info.status_subresource)
            || (sub == "finalize" && info.resource == "namespaces")
            || (sub == "binding" && info.resource == "pods")
            || (sub == "log" && info.resource == "pods" && info.group.is_empty())
            || (sub == proxy::SUBRESOURCE && discovery::has_proxy_subresource(&info.group, &info.resource));
        if !served {
            return Err(ApiError::ResourceNotServed);
        }
        if sub == proxy::SUBRESOURCE {
            if info.namespaced && path.namespace.is_none() {
                return Err(ApiError::ResourceNotServed);
            }
            return proxy::serve(&state.store, req, &path).await;
        }
    }
    let ns = path.namespace.clone().unwrap_or_default();
    let method = req.method().clone();
    let store = &state.store;
    match (method.as_str(), path.name.clone()) {
        ("GET", None) if path.legacy_watch || q.flag("watch") => {
            watch(state, &info, &gvr, path.namespace.as_deref(), &q, None, present)
        }
        ("GET", None) => {
            let mut list = store.list(&gvr, path.namespace.as_deref(), &list_options(&q)?)?;
            present.list(&mut list);
            if present.table {
                let items: Vec<Value> = list["items"]
                    .as_array()
                    .map(|items| {
                        items
                            .iter()
                            .map(|i| crate::convert::to_version(&info, i, &gvr.version))
                            .collect()
                    })
                    .unwrap_or_default();
                let include = IncludeObject::parse(q.get("includeObject"));
                return Ok(response::json(
                    200,
                    &table::table(&info, &gvr.version, &items, include, list["metadata"].clone(), true),
                ));
            }
            Ok(response::json(200, &list))
        }
        ("GET", Some(name)) if path.legacy_watch => {
            watch(state, &info, &gvr, path.namespace.as_deref(), &q, Some(&name), present)
        }
        ("GET", Some(name)) if path.subresource.as_deref() == Some("log") => pod_log(state, &ns, &name, &q),
        ("GET", Some(name)) => {
            if info.namespaced && path.namespace.is_none() {
                return Err(ApiError::ResourceNotServed);
            }
            let mut obj = store.get(&gvr, &ns, &name)?;
            present.object(&mut obj);
            if present.table {
                let include = IncludeObject::parse(q.get("includeObject"));
                let meta = json!({ "resourceVersion": crate::meta::resource_version(&obj) });
                return Ok(response::json(
                    200,
                    &table::table(&info, &gvr.version, &[obj], include, meta, true),
                ));
            }
            Ok(response::json(200, &obj))
        }
        ("POST", None) => {
            if info.namespaced && path.namespace.is_none() {
                return Err(ApiError::MethodNotAllowed);
            }
            let (headers, body) = read_body(req).await?;
            let obj = parse_object(&content_type(&headers), &body)?;
            let opts = write_options(&q, &headers, user);
            let mut written = store.create(&gvr, &ns, obj, &opts).await?;
            present.object(&mut written.object);
            Ok(response::with_warnings(
                response::json(201, &written.object),
                &written.warnings,
            ))
        }
        ("POST", Some(name)) if path.subresource.as_deref() == Some("binding") => {
            let (headers, body) = read_body(req).await?;
            let binding = parse_object(&content_type(&headers), &body)?;
            let node = binding.pointer("/target/name").and_then(Value::as_str).unwrap_or("");
            if node.is_empty() {
                return Err(ApiError::invalid(
                    "",
                    "Binding",
                    &name,
                    vec![crate::status::FieldCause::required("target.name")],
                ));
            }
            let opts = write_options(&q, &headers, user);
            let written = store.bind_pod(&ns, &name, node, &opts).await?;
            let mut status =
                json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201 });
            if written.object.is_null() {
                status["code"] = json!(201);
            }
            Ok(response::json(201, &status))
        }
        ("PUT", Some(name)) => {
            let (headers, body) = read_body(req).await?;
            let obj = parse_object(&content_type(&headers), &body)?;
            let opts = write_options(&q, &headers, user);
            let mut written = store
                .update(&gvr, &ns, &name, obj, path.subresource.as_deref(), &opts)
                .await?;
            present.object(&mut written.object);
            Ok(response::with_warnings(
                response::json(200, &written.object),
                &written.warnings,
            ))
        }
        ("PATCH", Some(name)) => {
            let (headers, body) = read_body(req).await?;
            let patch = parse_patch(&content_type(&headers), &body)?;
            let opts = write_options(&q, &headers, user);
            let mut written = store
                .patch(&gvr, &ns, &name, &patch, path.subresource.as_deref(), &opts)
                .await?;
            present.object(&mut written.object);
            let code = if written.created { 201 } else { 200 };
            Ok(response::with_warnings(
                response::json(code, &written.object),
                &written.warnings,
            ))
        }
        ("DELETE", Some(name)) => {
            let (headers, body) = read_body(req).await?;
            let opts = delete_options(&q, &headers, &body, user)?;
            let deleted = store.delete(&gvr, &ns, &name, &opts).await?;
            let body = if deleted.gone && !info.return_deleted_object {
                success_status(&info.group, &info.resource, &name, crate::meta::uid(&deleted.object))
            } else {
                let mut obj = deleted.object;
                present.object(&mut obj);
                obj
            };
            Ok(response::with_warnings(response::json(200, &body), &deleted.warnings))
        }
        ("DELETE", None) => {
            if info.namespaced && path.namespace.is_none() {
                return Err(ApiError::MethodNotAllowed);
            }
            let list = list_options(&q)?;
            let (headers, body) = read_body(req).await?;
            let opts = delete_options(&q, &headers, &body, user)?;
            let mut result = store
                .delete_collection(&gvr, path.namespace.as_deref(), &list, &opts)
                .await?;
            present.list(&mut result);
            Ok(response::json(200, &result))
        }
        _ => Err(ApiError::MethodNotAllowed),
    }
}

fn delete_options(q: &Query, headers: &HeaderMap, body: &[u8], user: UserInfo) -> Result<DeleteOptions, ApiError> {
    let from_body: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        parse_object(&content_type(headers), body)?
    };
    let grace = match q.non_empty("gracePeriodSeconds") {
        Some(g) => Some(
            g.parse::<i64>()
                .map_err(|_| ApiError::BadRequest(format!("invalid gracePeriodSeconds: {g}")))?,
        ),
        None => from_body.get("gracePeriodSeconds").and_then(Value::as_i64),
    };
    let orphan = q
        .get("orphanDependents")
        .map(|v| v == "true")
        .or_else(|| from_body.get("orphanDependents").and_then(Value::as_bool));
    let policy = q
        .non_empty("propagationPolicy")
        .or_else(|| {
            from_body
                .get("propagationPolicy")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .or_else(|| {
            orphan.map(|o| {
                if o {
                    "Orphan".to_string()
                } else {
                    "Background".to_string()
                }
            })
        });
    let dry_run = q.get("dryRun") == Some("All")
        || from_body
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|v| v == "All"));
    Ok(DeleteOptions {
        grace_period_seconds: grace,
        propagation_policy: policy,
        precondition_uid: from_body
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string),
        precondition_resource_version: from_body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string),
        dry_run,
        user,
    })
}

fn watch(
    state: &AppState,
    info: &Arc<ResourceInfo>,
    gvr: &Gvr,
    namespace: Option<&str>,
    q: &Query,
    name: Option<&str>,
    present: Present,
) -> Result<Response<Body>, ApiError> {
    let mut field_selector = q.non_empty("fieldSelector");
    if let Some(n) = name {
        let by_name = format!("metadata.name={n}");
        field_selector = Some(match field_selector {
            Some(f) => format!("{f},{by_name}"),
            None => by_name,
        });
    }
    let timeout = match q.non_empty("timeoutSeconds") {
        Some(t) => {
            Some(Duration::from_secs(t.parse::<u64>().map_err(|_| {
                ApiError::BadRequest(format!("invalid timeoutSeconds: {t}"))
            })?))
        }
        None => None,
    };
    let send_initial_events = match q.get("sendInitialEvents") {
        Some("true") => Some(true),
        Some("false") => Some(false),
        _ => None,
    };
    let opts = WatchOptions {
        resource_version: q.get("resourceVersion").map(str::to_string),
        resource_version_match: q.non_empty("resourceVersionMatch"),
        label_selector: q.non_empty("labelSelector"),
        field_selector,
        allow_bookmarks: q.flag("allowWatchBookmarks"),
        send_initial_events,
        timeout,
        bookmark_interval: Some(state.bookmark_interval),
    };
    let stream = state.store.watch(gvr, namespace, &opts)?;
    let as_table = present.table;
    let include = IncludeObject::parse(q.get("includeObject"));
    let info = info.clone();
    let version = gvr.version.clone();
    let chunks = futures::stream::unfold((stream, true), move |(mut stream, mut first)| {
        let info = info.clone();
        let version = version.clone();
        async move {
            let mut ev = stream.next().await?;
            present.object(&mut ev.object);
            if as_table && matches!(ev.type_, "ADDED" | "MODIFIED" | "DELETED") {
                let meta = json!({ "resourceVersion": crate::meta::resource_version(&ev.object) });
                let object = std::mem::take(&mut ev.object);
                ev.object = table::table(&info, &version, &[object], include, meta, first);
                first = false;
            }
            let mut bytes = serde_json::to_vec(&ev).unwrap_or_default();
            bytes.push(b'\n');
            Some((Bytes::from(bytes), (stream, first)))
        }
    });
    Ok(response::streaming("application/json", chunks))
}

/// `GET .../pods/{name}/log`: the kubelet's answer, read from the node's CRI log files.
fn pod_log(state: &AppState, ns: &str, name: &str, q: &Query) -> Result<Response<Body>, ApiError> {
    let int = |k: &str| -> Result<Option<i64>, ApiError> {
        q.non_empty(k)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| ApiError::BadRequest(format!("invalid {k}: {v}")))
            })
            .transpose()
    };
    let query = crate::node::logs::LogQuery {
        container: q.non_empty("container"),
        previous: q.flag("previous"),
        follow: q.flag("follow"),
        timestamps: q.flag("timestamps"),
        tail_lines: int("tailLines")?,
        since_seconds: int("sinceSeconds")?,
        since_time: q.non_empty("sinceTime"),
        limit_bytes: int("limitBytes")?,
    };
    match crate::node::logs::pod_log(&state.store, &state.data_dir, ns, name, &query)? {
        crate::node::logs::LogBody::Full(bytes) => Ok(response::bytes_response(200, "text/plain", bytes)),
        crate::node::logs::LogBody::Follow(stream) => Ok(response::streaming("text/plain", stream)),
    }
}

/// `POST` of a review kind or a TokenRequest: answered, not stored.
async fn review(
    state: &AppState,
    req: Request<hyper::body::Incoming>,
    path: &ResourcePath,
    namespaced: bool,
    user: UserInfo,
) -> Result<Response<Body>, ApiError> {
    if req.method() != Method::POST {
        return Err(ApiError::MethodNotAllowed);
    }
    let is_token = path.subresource.is_some();
    if (namespaced && path.namespace.is_none()) || (path.name.is_some() != is_token) {
        return Err(ApiError::ResourceNotServed);
    }
    let (headers, body) = read_body(req).await?;
    let body = parse_object(&content_type(&headers), &body)?;
    let authenticate_token = |token: &str, audiences: &[String]| -> Result<UserInfo, String> {
        let default_audience = audiences.iter().any(|a| a == crate::service_account_tokens::ISSUER);
        if default_audience && token == state.token {
            return Ok(admin());
        }
        let now = jiff::Timestamp::now().as_second();
        state
            .service_account_tokens
            .authenticate_for(&state.store, token, now, audiences)
            .map_err(|e| format!("[invalid bearer token, {e}]"))
    };
    let ctx = crate::auth::reviews::ReviewContext {
        store: &state.store,
        mode: state.store.authorization_mode(),
        signer: &state.service_account_tokens,
        authenticate_token: &authenticate_token,
        user: &user,
    };
    let answer = crate::auth::reviews::serve(
        &ctx,
        &path.group,
        &path.resource,
        path.namespace.as_deref().unwrap_or(""),
        path.name.as_deref().unwrap_or(""),
        body,
    )?;
    Ok(response::json(201, &answer))
}
