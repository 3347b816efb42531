//! The owner lookups of `api::ownership`, made against the API server: the owner's kind resolved through
//! discovery (cached for a minute: kinds rarely change), then a GET in the dependent's namespace.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::{self, ApiCapabilities, Scope};
use spark_operator_api::ownership::{OwnerLookup, OwnerLookupOutcome};
use spark_operator_runtime::error_chain::kube_error;

/// How long a discovered kind is trusted.
const DISCOVERY_TTL: Duration = Duration::from_secs(60);

type Discovered = Option<(ApiResource, ApiCapabilities)>;
/// Discovered kinds by (apiVersion, kind), with when they were discovered.
type KindCache = HashMap<(String, String), (Instant, Discovered)>;

/// Resolves owners; cheap to clone.
#[derive(Clone)]
pub struct Owners {
    client: kube::Client,
    kinds: Arc<Mutex<KindCache>>,
}

impl Owners {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            kinds: Arc::default(),
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
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &lookup.namespace, &resource);
        match api.get_metadata_opt(&lookup.name).await {
            Ok(Some(owner)) => OwnerLookupOutcome::Found {
                uid: owner.metadata.uid.unwrap_or_default(),
            },
            Ok(None) => OwnerLookupOutcome::NotFound,
            // RBAC does not let the operator read this kind (the chart grants reads of the kinds listed
            // in `webhook.ownerResources` only): unchecked, not refused.
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
