//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it: the
//! leader renews the Lease every retry period; a standby takes it over once it has seen the same
//! record unchanged for the lease duration (measured on its own monotonic clock, so clock skew between
//! replicas does not matter). Every write is conditional on the Lease's resourceVersion, so two
//! replicas can never both believe they won.
//!
//! A leader that cannot renew for the lease duration stops leading (the caller stops reconciling); one
//! that shuts down cleanly releases the Lease so its standby takes over at once.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};

/// Why leadership could not be gained or kept.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("lost the lease {namespace}/{name}: {reason}")]
    Lost {
        namespace: String,
        name: String,
        reason: String,
    },
}

/// One replica's side of the election.
#[derive(Clone)]
pub struct LeaderElector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    duration: Duration,
    retry: Duration,
}

/// What a standby last saw of the Lease, and since when.
struct Observed {
    record: (Option<String>, Option<MicroTime>),
    since: Instant,
}

impl LeaderElector {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
        retry: Duration,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            duration,
            retry: retry.min(duration / 2).max(Duration::from_millis(100)),
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn spec(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        let ours = previous.and_then(|p| p.holder_identity.as_deref()) == Some(self.identity.as_str());
        let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(i32::try_from(self.duration.as_secs().max(1)).unwrap_or(i32::MAX)),
            acquire_time: if ours {
                previous.and_then(|p| p.acquire_time.clone())
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if ours || previous.is_none() {
                transitions
            } else {
                transitions + 1
            }),
            ..LeaseSpec::default()
        }
    }

    /// One attempt to take or renew the Lease; true when we hold it afterwards.
    async fn try_acquire(&self, observed: &mut Option<Observed>) -> bool {
        let current = match self.api.get_opt(&self.name).await {
            Ok(current) => current,
            Err(error) => {
                tracing::debug!(%error, lease = self.name, "reading the lease");
                return false;
            }
        };
        let Some(lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(None)),
            };
            return self.api.create(&PostParams::default(), &lease).await.is_ok();
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let ours = holder.as_deref() == Some(self.identity.as_str());
        if !ours && holder.is_some() {
            let record = (holder.clone(), spec.renew_time.clone());
            let duration = spec
                .lease_duration_seconds
                .map_or(self.duration, |s| Duration::from_secs(u64::try_from(s).unwrap_or(0)));
            match observed {
                Some(seen) if seen.record == record => {
                    if seen.since.elapsed() < duration {
                        return false;
                    }
                }
                _ => {
                    *observed = Some(Observed {
                        record,
                        since: Instant::now(),
                    });
                    return false;
                }
            }
        }
        let mut next = lease.clone();
        next.spec = Some(self.spec(Some(&spec)));
        // `replace` carries the resourceVersion read: a concurrent writer makes it fail with 409.
        match self.api.replace(&self.name, &PostParams::default(), &next).await {
            Ok(_) => true,
            Err(error) => {
                tracing::debug!(%error, lease = self.name, "taking or renewing the lease");
                false
            }
        }
    }

    /// Waits until this replica leads.
    pub async fn acquire(&self) {
        let mut observed = None;
        loop {
            if self.try_acquire(&mut observed).await {
                tracing::info!(identity = self.identity, lease = self.name, "leading");
                return;
            }
            tokio::time::sleep(self.retry).await;
        }
    }

    /// Renews the Lease while leading; returns when leadership is lost (not renewed within the lease
    /// duration, or taken by another replica).
    pub async fn hold(&self) -> Error {
        let mut last_renewal = Instant::now();
        loop {
            tokio::time::sleep(self.retry).await;
            let mut observed = None;
            if self.try_acquire(&mut observed).await {
                last_renewal = Instant::now();
            } else if observed.is_some() {
                return self.lost("another replica holds it");
            } else if last_renewal.elapsed() >= self.duration.mul_f32(0.8) {
                // Stop before the lease can expire for the others.
                return self.lost("could not renew it in time");
            }
        }
    }

    fn lost(&self, reason: &str) -> Error {
        tracing::warn!(identity = self.identity, lease = self.name, reason, "leadership lost");
        Error::Lost {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            reason: reason.to_owned(),
        }
    }

    /// Gives the Lease up (clean shutdown), so a standby need not wait for it to expire.
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else { return };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        if let Err(error) = self.api.replace(&self.name, &PostParams::default(), &lease).await {
            tracing::debug!(%error, "releasing the lease");
        }
    }
}
