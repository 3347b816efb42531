//! The owner lookups of `api::ownership`, made against the API server: the owner's kind resolved through
//! discovery (cached for a minute: kinds rarely change), whether the operator may read that kind there
//! (a SelfSubjectAccessReview, cached for a minute), then a GET in the dependent's namespace.
//!
//! The access review comes first so that an owner of a kind the chart does not let the operator read is
//! admitted with a warning without a refused request: a GET answered 403 lands in the audit log as a denial,
//! and platform teams alert on those.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, ApiCapabilities, Scope};
use spark_operator_api::ownership::{OwnerLookup, OwnerLookupOutcome};
use spark_operator_runtime::error_chain::kube_error;

/// How long a discovered kind is trusted.
const DISCOVERY_TTL: Duration = Duration::from_secs(60);

type Discovered = Option<(ApiResource, ApiCapabilities)>;
/// Discovered kinds by (apiVersion, kind), with when they were discovered.
type KindCache = HashMap<(String, String), (Instant, Discovered)>;
/// Whether the operator may get (group, resource) in a namespace: None when it may, else why not; with when
/// the API server said so.
type AccessCache = HashMap<(String, String, String), (Instant, Option<String>)>;

/// Resolves owners; cheap to clone.
#[derive(Clone)]
pub struct Owners {
    client: kube::Client,
    kinds: Arc<Mutex<KindCache>>,
    access: Arc<Mutex<AccessCache>>,
}

impl Owners {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            kinds: Arc::default(),
            access: Arc::default(),
        }
    }

    async fn kind(&self, api_version: &str, kind: &str) -> Result<Discovered, kube::Error> {
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some((at, found)) = self.kinds.lock().unwrap_or_else(PoisonError::into_inner).get(&key)
            && at.elapsed() < DISCOVERY_TTL
        {
            return Ok(found.clone());
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let found = match discovery::pinned_kind(&self.client, &gvk).await {
            Ok(found) => Some(found),
            // The group, version or kind is not served.
            Err(kube::Error::Discovery(_)) => None,
            Err(kube::Error::Api(status)) if status.code == 404 => None,
            Err(error) => return Err(error),
        };
        self.kinds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, (Instant::now(), found.clone()));
        Ok(found)
    }

    /// Why the operator may not get objects of `resource` in `namespace`, or None when it may (a
    /// SelfSubjectAccessReview, which every authenticated user may create).
    async fn denied(&self, resource: &ApiResource, namespace: &str) -> Result<Option<String>, kube::Error> {
        let key = (resource.group.clone(), resource.plural.clone(), namespace.to_owned());
        if let Some((at, denied)) = self.access.lock().unwrap_or_else(PoisonError::into_inner).get(&key)
            && at.elapsed() < DISCOVERY_TTL
        {
            return Ok(denied.clone());
        }
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(namespace.to_owned()),
                    verb: Some("get".into()),
                    group: Some(resource.group.clone()),
                    resource: Some(resource.plural.clone()),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let answer = Api::<SelfSubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let status = answer.status.unwrap_or_default();
        let denied = (!status.allowed).then(|| {
            let kind = if resource.group.is_empty() {
                format!("{:?}", resource.plural)
            } else {
                format!("{:?} in API group {:?}", resource.plural, resource.group)
            };
            let reason = status
                .reason
                .filter(|r| !r.is_empty())
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            format!("its RBAC does not allow get on {kind} in namespace {namespace:?}{reason}")
        });
        self.access
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, (Instant::now(), denied.clone()));
        Ok(denied)
    }

    /// What looking one owner up finds.
    pub async fn look_up(&self, lookup: &OwnerLookup) -> OwnerLookupOutcome {
        let (resource, capabilities) = match self.kind(&lookup.api_version, &lookup.kind).await {
            Ok(Some(found)) => found,
            Ok(None) => return OwnerLookupOutcome::UnknownKind,
            Err(error) => return OwnerLookupOutcome::Failed(kube_error(&error)),
        };
        if capabilities.scope == Scope::Cluster {
            return OwnerLookupOutcome::ClusterScoped;
        }
        match self.denied(&resource, &lookup.namespace).await {
            Ok(None) => {}
            Ok(Some(why)) => return OwnerLookupOutcome::NotAllowed(why),
            Err(error) => return OwnerLookupOutcome::Failed(kube_error(&error)),
        }
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &lookup.namespace, &resource);
        match api.get_metadata_opt(&lookup.name).await {
            Ok(Some(owner)) => OwnerLookupOutcome::Found {
                uid: owner.metadata.uid.unwrap_or_default(),
            },
            Ok(None) => OwnerLookupOutcome::NotFound,
            // RBAC does not let the operator read this kind (the chart grants reads of the kinds listed
            // in `webhook.ownerResources` only) though the access review said it may (RBAC changed within
            // the cache's minute): unchecked, not refused.
            Err(kube::Error::Api(status)) if status.code == 403 => OwnerLookupOutcome::NotAllowed(status.message),
            Err(error) => OwnerLookupOutcome::Failed(kube_error(&error)),
        }
    }

    /// Every lookup, in order.
    pub async fn look_up_all(&self, lookups: &[OwnerLookup]) -> Vec<(OwnerLookup, OwnerLookupOutcome)> {
        let mut outcomes = Vec::with_capacity(lookups.len());
        for lookup in lookups {
            outcomes.push((lookup.clone(), self.look_up(lookup).await));
        }
        outcomes
    }
}
