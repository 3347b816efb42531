//! The in-memory object store: the simulated etcd plus the apiserver's registry logic.
//!
//! In-process controllers (garbage collector, admission, scheduler, kubelets) use it directly;
//! the HTTP server is a thin layer over the same calls, so both see identical semantics:
//!
//! - reads: [`Store::get`], [`Store::list`], [`Store::watch`] (see [`crate::watch`]),
//! - writes: [`Store::create`], [`Store::update`], [`Store::patch`], [`Store::delete`],
//!   [`Store::delete_collection`], [`Store::bind_pod`]; every write runs defaulting, admission
//!   ([`crate::admission_seam`]), validation and the size limit, and returns the stored object,
//! - all changes in commit order for controllers such as the garbage collector:
//!   [`Store::changes`] and [`Store::snapshot`].
//!
//! Objects are `serde_json::Value`s in the version the caller names in its [`Gvr`]. One global
//! resourceVersion counter orders every change; a bounded history of changes serves watches from
//! a resourceVersion, and older ones get 410 Gone as from a compacted etcd.

mod crd;
mod delete;
mod write;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use serde_json::{Value, json};

use crate::admission_seam::{AdmissionPlugin, UserInfo};
use crate::convert;
use crate::meta;
use crate::registry::{Gvr, Registry, ResourceInfo, ResourceKey};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;

pub use delete::{DeleteOptions, Deleted};
pub use write::{PatchBody, Written};

/// Limits of the store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Changes kept for watches; a watch from an older resourceVersion gets 410 Gone.
    pub history_limit: usize,
    /// etcd's request size limit (1.5 MiB): larger objects are rejected.
    pub max_object_bytes: usize,
    /// Paginated list snapshots kept for `continue` tokens.
    pub continue_limit: usize,
    /// Where Services' cluster IPs come from (kube-apiserver's `--service-cluster-ip-range`);
    /// a `Sim` sets its own, a bare store uses kubeadm's default 10.96.0.0/12.
    pub service_cluster_ip_range: crate::network::Ipv4Cidr,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            history_limit: 10_000,
            max_object_bytes: 1536 * 1024,
            continue_limit: 256,
            service_cluster_ip_range: crate::network::Ipv4Cidr::new(std::net::Ipv4Addr::new(10, 96, 0, 0), 12),
        }
    }
}

/// Identifies an object inside one resource: (namespace, name), namespace empty when cluster-scoped.
pub type ObjectKey = (String, String);

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

impl ChangeKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One committed change. Objects are in storage form (their storage apiVersion); for a deletion
/// `object` is the last stored state with the deletion's resourceVersion.
#[derive(Debug, Clone)]
pub struct Change {
    pub rv: u64,
    pub kind: ChangeKind,
    pub resource: ResourceKey,
    pub object: Arc<Value>,
    /// The state before this change (None for additions).
    pub previous: Option<Arc<Value>>,
}

/// Options of a write.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: everything runs, nothing is stored.
    pub dry_run: bool,
    /// `fieldManager`; when empty, derived from the user agent as the apiserver does.
    pub field_manager: Option<String>,
    /// `User-Agent`, for the default field manager.
    pub user_agent: Option<String>,
    /// `force` (apply only).
    pub force: bool,
    /// `fieldValidation`: `Strict`, `Warn` (default), `Ignore`.
    pub field_validation: Option<String>,
    pub user: UserInfo,
}

impl WriteOptions {
    /// The manager recorded in managedFields for non-apply writes.
    pub fn manager(&self) -> String {
        if let Some(m) = self.field_manager.as_ref().filter(|m| !m.is_empty()) {
            return m.clone();
        }
        // prefixFromUserAgent: the part before the first '/'.
        match &self.user_agent {
            Some(ua) if !ua.is_empty() => ua.split('/').next().unwrap_or(ua).to_string(),
            _ => "unknown".into(),
        }
    }
}

/// Options of a list.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
}

pub(crate) struct State {
    pub rv: u64,
    pub registry: Registry,
    pub tables: HashMap<ResourceKey, BTreeMap<ObjectKey, Arc<Value>>>,
    pub history: VecDeque<Arc<Change>>,
    /// Every change with rv <= this is gone from the history.
    pub compacted_rv: u64,
    pub pages: PageCache,
}

/// Remaining items of paginated lists, by continue id.
#[derive(Default)]
pub(crate) struct PageCache {
    next_id: u64,
    entries: VecDeque<(u64, u64, Vec<Arc<Value>>)>,
}

pub(crate) struct Inner {
    pub state: Mutex<State>,
    /// The latest committed resourceVersion, for watchers to wake on.
    pub latest: tokio::sync::watch::Sender<u64>,
    /// Bumped to end every open watch (fault injection).
    pub watch_epoch: tokio::sync::watch::Sender<u64>,
    pub admission: RwLock<Vec<Arc<dyn AdmissionPlugin>>>,
    pub authorization: RwLock<Option<crate::auth::AuthorizationMode>>,
    pub config: StoreConfig,
}

/// The store. Cheap to clone; all clones share the same data.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// An empty store serving the built-in resources.
    pub fn new(config: StoreConfig) -> Self {
        let state = State {
            rv: 0,
            registry: Registry::builtin(),
            tables: HashMap::new(),
            history: VecDeque::new(),
            compacted_rv: 0,
            pages: PageCache::default(),
        };
        let (latest, _) = tokio::sync::watch::channel(0);
        let (watch_epoch, _) = tokio::sync::watch::channel(0);
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                latest,
                watch_epoch,
                admission: RwLock::new(Vec::new()),
                authorization: RwLock::new(None),
                config,
            }),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-updated (each commit is a
        // few inserts), so a poisoned lock is still usable.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends an admission plugin; plugins run in registration order (all mutating phases, then
    /// all validating phases).
    pub fn add_admission_plugin(&self, plugin: Arc<dyn AdmissionPlugin>) {
        self.inner
            .admission
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(plugin);
    }

    pub(crate) fn admission_plugins(&self) -> Vec<Arc<dyn AdmissionPlugin>> {
        self.inner.admission.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A copy of the served resources (built-ins and established CRDs).
    pub fn registry(&self) -> Registry {
        self.lock().registry.clone()
    }

    /// The resource served at `gvr`, or the 404 the apiserver gives for unknown paths.
    pub fn resolve(&self, gvr: &Gvr) -> Result<Arc<ResourceInfo>, ApiError> {
        self.lock().registry.lookup(gvr).ok_or(ApiError::ResourceNotServed)
    }

    /// The latest committed resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// Reads one object.
    pub fn get(&self, gvr: &Gvr, namespace: &str, name: &str) -> Result<Value, ApiError> {
        let info = self.resolve(gvr)?;
        let ns = if info.namespaced { namespace } else { "" };
        let state = self.lock();
        let obj = state
            .tables
            .get(&info.storage)
            .and_then(|t| t.get(&(ns.to_string(), name.to_string())))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&info.group, &info.resource, name))?;
        drop(state);
        Ok(convert::to_version(&info, &obj, &gvr.version))
    }

    /// Lists objects (all namespaces when `namespace` is None) as a `<Kind>List`.
    pub fn list(&self, gvr: &Gvr, namespace: Option<&str>, opts: &ListOptions) -> Result<Value, ApiError> {
        let info = self.resolve(gvr)?;
        let labels = match opts.label_selector.as_deref() {
            Some(s) => LabelSelector::parse(s).map_err(|e| ApiError::BadRequest(e.to_string()))?,
            None => LabelSelector::default(),
        };
        let fields = match opts.field_selector.as_deref() {
            Some(s) => FieldSelector::parse(
                s,
                &info.group,
                &info.resource,
                &crd::selectable_fields(&info, &gvr.version),
            )
            .map_err(|e| ApiError::BadRequest(e.to_string()))?,
            None => FieldSelector::default(),
        };
        let namespace = if info.namespaced {
            namespace.filter(|n| !n.is_empty())
        } else {
            None
        };
        let mut state = self.lock();
        check_list_rv(&state, opts)?;
        let (list_rv, items, remaining_count, next) = match opts.continue_token.as_deref().filter(|t| !t.is_empty()) {
            Some(token) => {
                let (id, rv) = decode_continue(token)?;
                let Some(rest) = state.pages.take(id) else {
                    return Err(ApiError::Expired(EXPIRED_CONTINUE.into()));
                };
                let (page, rest) = split_page(rest, opts.limit);
                let remaining = rest.len();
                let next = if rest.is_empty() {
                    None
                } else {
                    Some(state.pages.put(rv, rest, self.inner.config.continue_limit))
                };
                (rv, page, remaining, next.map(|id| encode_continue(id, rv)))
            }
            None => {
                let rv = state.rv;
                let matching: Vec<Arc<Value>> = state
                    .tables
                    .get(&info.storage)
                    .map(|t| {
                        // Objects are keyed by (namespace, name): one namespace is a range.
                        let rows: Box<dyn Iterator<Item = (&ObjectKey, &Arc<Value>)>> = match namespace {
                            Some(n) => Box::new(
                                t.range((n.to_string(), String::new())..)
                                    .take_while(move |((ns, _), _)| ns == n),
                            ),
                            None => Box::new(t.iter()),
                        };
                        rows.filter(|(_, o)| {
                            labels.matches_object(o)
                                && (fields.is_empty() || fields.matches(&convert::as_version(&info, o, &gvr.version)))
                        })
                        .map(|(_, o)| o.clone())
                        .collect()
                    })
                    .unwrap_or_default();
                let (page, rest) = split_page(matching, opts.limit);
                let remaining = rest.len();
                let next = if rest.is_empty() {
                    None
                } else {
                    Some(state.pages.put(rv, rest, self.inner.config.continue_limit))
                };
                (rv, page, remaining, next.map(|id| encode_continue(id, rv)))
            }
        };
        drop(state);
        let crd_backed = info.is_crd_backed();
        let items: Vec<Value> = items
            .iter()
            .map(|o| {
                let mut v = convert::to_version(&info, o, &gvr.version);
                // Typed lists of built-in kinds leave apiVersion/kind out of their items.
                if !crd_backed && let Value::Object(m) = &mut v {
                    m.remove("apiVersion");
                    m.remove("kind");
                }
                v
            })
            .collect();
        let mut metadata = json!({ "resourceVersion": list_rv.to_string() });
        if let Some(token) = next {
            metadata["continue"] = json!(token);
            if labels.is_empty() && fields.is_empty() {
                metadata["remainingItemCount"] = json!(remaining_count);
            }
        }
        Ok(json!({
            "apiVersion": gvr.api_version(),
            "kind": info.list_kind,
            "metadata": metadata,
            "items": items,
        }))
    }

    /// Every object of every resource with the resourceVersion they were read at, to start a
    /// [`Store::changes`] feed from without missing anything (storage form).
    pub fn snapshot(&self) -> (u64, Vec<(ResourceKey, Arc<Value>)>) {
        let state = self.lock();
        let mut out = Vec::new();
        for (key, table) in &state.tables {
            out.extend(table.values().map(|o| (key.clone(), o.clone())));
        }
        (state.rv, out)
    }

    /// Every stored object of a storage key (in one namespace, or all), in storage form, by
    /// namespace and name — without copying them (for the authorizer, which reads the RBAC
    /// objects at every decision).
    pub fn stored_objects(&self, key: &ResourceKey, namespace: Option<&str>) -> Vec<Arc<Value>> {
        let state = self.lock();
        let Some(table) = state.tables.get(key) else {
            return Vec::new();
        };
        match namespace {
            None => table.values().cloned().collect(),
            Some(ns) => table
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
        }
    }

    /// The authorization mode requests are checked under (`None` on a bare store: everything
    /// is allowed, as nothing authorizes).
    pub fn authorization_mode(&self) -> Option<crate::auth::AuthorizationMode> {
        *self.inner.authorization.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Turns authorization on (what [`crate::Sim::start`] does with its configured mode).
    pub fn set_authorization_mode(&self, mode: Option<crate::auth::AuthorizationMode>) {
        *self.inner.authorization.write().unwrap_or_else(|e| e.into_inner()) = mode;
    }

    /// Whether `user` may do `attrs`: the API server's decision, for in-process writers that act
    /// as a user (the fake Spark driver) — a 403 with kube-apiserver's message if not.
    pub fn authorize(&self, user: &UserInfo, attrs: &crate::auth::Attributes) -> Result<(), ApiError> {
        let Some(mode) = self.authorization_mode() else {
            return Ok(());
        };
        let decision = crate::auth::authorize(self, mode, user, attrs);
        if decision.allowed {
            Ok(())
        } else {
            Err(crate::auth::forbidden(user, attrs, &decision.reason))
        }
    }

    /// Reads one object in storage form by its storage key (for controllers that follow
    /// [`Store::changes`]).
    pub fn get_stored(&self, key: &ResourceKey, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.lock()
            .tables
            .get(key)
            .and_then(|t| t.get(&(namespace.to_string(), name.to_string())))
            .cloned()
    }

    /// Commits a change: assigns the next resourceVersion, stores or removes the object, and
    /// appends to the history. Must be called with the state locked.
    pub(crate) fn commit(
        &self,
        state: &mut State,
        key: &ResourceKey,
        kind: ChangeKind,
        mut obj: Value,
        previous: Option<Arc<Value>>,
    ) -> Arc<Value> {
        state.rv += 1;
        let rv = state.rv;
        meta::set(&mut obj, "resourceVersion", json!(rv.to_string()));
        let obj = Arc::new(obj);
        let okey = (meta::namespace(&obj).to_string(), meta::name(&obj).to_string());
        let table = state.tables.entry(key.clone()).or_default();
        match kind {
            ChangeKind::Deleted => {
                table.remove(&okey);
            }
            _ => {
                table.insert(okey, obj.clone());
            }
        }
        state.history.push_back(Arc::new(Change {
            rv,
            kind,
            resource: key.clone(),
            object: obj.clone(),
            previous,
        }));
        while state.history.len() > self.inner.config.history_limit {
            if let Some(old) = state.history.pop_front() {
                state.compacted_rv = old.rv;
            }
        }
        self.inner.latest.send_replace(rv);
        obj
    }

    /// Ends every open watch stream now (fault injection): clients see the connection close.
    pub fn cut_all_watches(&self) {
        self.inner.watch_epoch.send_modify(|e| *e += 1);
    }

    /// Changes whenever [`Store::cut_all_watches`] runs: other long-running streams (followed
    /// logs) end with the watches, so a shutting-down server has no request that never ends.
    pub fn watch_cuts(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.watch_epoch.subscribe()
    }

    /// Forgets the history up to now, so that any watch or continue from an older
    /// resourceVersion gets 410 Gone (as after an etcd compaction).
    pub fn compact(&self) {
        let mut state = self.lock();
        state.compacted_rv = state.rv;
        state.history.clear();
        state.pages = PageCache::default();
    }
}

const EXPIRED_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

fn check_list_rv(state: &State, opts: &ListOptions) -> Result<(), ApiError> {
    let Some(rv) = opts.resource_version.as_deref().filter(|r| !r.is_empty() && *r != "0") else {
        return Ok(());
    };
    let n: u64 = rv
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("invalid resource version: {rv}")))?;
    if n > state.rv {
        return Err(ApiError::TooLargeResourceVersion {
            requested: n,
            current: state.rv,
        });
    }
    if opts.resource_version_match.as_deref() == Some("Exact") && n != state.rv && n <= state.compacted_rv {
        return Err(ApiError::Expired(format!(
            "too old resource version: {n} ({})",
            state.compacted_rv
        )));
    }
    Ok(())
}

fn split_page(mut items: Vec<Arc<Value>>, limit: Option<usize>) -> (Vec<Arc<Value>>, Vec<Arc<Value>>) {
    match limit {
        Some(l) if l > 0 && items.len() > l => {
            let rest = items.split_off(l);
            (items, rest)
        }
        _ => (items, Vec::new()),
    }
}

impl PageCache {
    fn put(&mut self, rv: u64, rest: Vec<Arc<Value>>, cap: usize) -> u64 {
        self.next_id += 1;
        self.entries.push_back((self.next_id, rv, rest));
        while self.entries.len() > cap {
            self.entries.pop_front();
        }
        self.next_id
    }

    fn take(&mut self, id: u64) -> Option<Vec<Arc<Value>>> {
        let pos = self.entries.iter().position(|(i, _, _)| *i == id)?;
        self.entries.remove(pos).map(|(_, _, rest)| rest)
    }
}

/// Continue tokens look like the apiserver's (base64 JSON with `v`, `rv`, `start`); `start`
/// carries the snapshot id here.
fn encode_continue(id: u64, rv: u64) -> String {
    use base64::Engine as _;
    let body = json!({ "v": "meta.k8s.io/v1", "rv": rv, "start": format!("{id}\u{0}") });
    base64::engine::general_purpose::URL_SAFE.encode(body.to_string())
}

fn decode_continue(token: &str) -> Result<(u64, u64), ApiError> {
    use base64::Engine as _;
    let bad = || ApiError::BadRequest(format!("continue key is not valid: {token}"));
    let bytes = base64::engine::general_purpose::URL_SAFE
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    let rv = v.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
    let id = v
        .get("start")
        .and_then(Value::as_str)
        .and_then(|s| s.trim_end_matches('\u{0}').parse::<u64>().ok())
        .ok_or_else(bad)?;
    Ok((id, rv))
}
