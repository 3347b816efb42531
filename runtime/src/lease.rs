//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it, with
//! leadership published as a value ([`Leadership`] in a `watch` channel) that writers consult, as
//! linkerd's policy controller does. Serving never waits for it; reconciling does.
//!
//! The leader renews the Lease every retry period. A standby takes it over once it has seen the same
//! record unchanged for the lease duration, measured on its own monotonic clock, so clock skew between
//! replicas does not matter. Every write is conditional on the Lease's resourceVersion, so two replicas
//! can never both believe they won.
//!
//! **Fencing.** A leader's leadership is valid until [`VALIDITY`] of the lease duration after it *sent*
//! its last successful renewal. A standby cannot take over before a whole duration has passed since it
//! first saw that renewal, which is after it was sent; so the old leader's validity ends before any
//! standby can hold the Lease, whatever happens to the old leader's requests (a renewal that hangs, a
//! Lease update the API server refuses). [`crate::fence`] refuses writes outside the validity.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::sync::watch;

use crate::error_chain::kube_error;
use crate::shutdown::Shutdown;

/// The share of the lease duration a renewal keeps the leader valid for; the rest is margin for clocks
/// that run at slightly different rates.
pub const VALIDITY: f64 = 0.8;

/// This replica's standing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// Another replica leads, or nobody does yet.
    Standby,
    /// This replica leads until the instant (then it must stop writing unless it renewed).
    Leading { until: Instant },
    /// No election: the only replica always leads.
    Always,
}

impl Leadership {
    pub fn is_leading_at(&self, now: Instant) -> bool {
        match self {
            Self::Standby => false,
            Self::Leading { until } => now < *until,
            Self::Always => true,
        }
    }

    pub fn is_leading(&self) -> bool {
        self.is_leading_at(Instant::now())
    }
}

/// A replica's view of its leadership, cheap to clone.
#[derive(Clone, Debug)]
pub struct LeadershipWatch(watch::Receiver<Leadership>);

impl LeadershipWatch {
    /// A watch that always leads (leader election off).
    pub fn always() -> Self {
        let (tx, rx) = watch::channel(Leadership::Always);
        std::mem::forget(tx);
        Self(rx)
    }

    /// A view of an elector's channel (tests drive leadership by hand with it).
    pub fn from_receiver(receiver: watch::Receiver<Leadership>) -> Self {
        Self(receiver)
    }

    pub fn current(&self) -> Leadership {
        *self.0.borrow()
    }

    pub fn is_leading(&self) -> bool {
        self.current().is_leading()
    }

    /// Resolves once this replica leads.
    pub async fn leading(&mut self) {
        loop {
            if self.is_leading() {
                return;
            }
            if self.0.changed().await.is_err() {
                // The elector is gone: leadership can no longer come.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Resolves once this replica no longer leads: a standby again, or its validity ran out without a
    /// renewal being published (the elector may be stuck in a request).
    pub async fn lost(&mut self) {
        loop {
            let current = self.current();
            match current {
                Leadership::Always => std::future::pending::<()>().await,
                Leadership::Standby => return,
                Leadership::Leading { until } => {
                    if Instant::now() >= until {
                        return;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep_until(until.into()) => {
                            if self.current() == current {
                                return;
                            }
                        }
                        changed = self.0.changed() => {
                            if changed.is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Where the election happens and how fast.
#[derive(Clone, Debug)]
pub struct ElectionSettings {
    pub namespace: String,
    pub lease_name: String,
    pub identity: String,
    pub duration: Duration,
    pub retry: Duration,
}

/// What the elector saw of another holder's record, and since when.
struct Observed {
    record: (Option<String>, Option<MicroTime>),
    since: Instant,
}

/// The outcome of one attempt.
enum Attempt {
    /// We hold the Lease; the renewal was sent at this instant.
    Held { sent: Instant },
    /// Another replica holds a record that is still fresh.
    HeldByOther,
    /// The attempt failed (API error, conflict): try again.
    Failed,
}

/// One replica's side of the election.
pub struct Elector {
    api: Api<Lease>,
    settings: ElectionSettings,
    observed: Option<Observed>,
}

impl Elector {
    pub fn new(client: kube::Client, settings: ElectionSettings) -> Self {
        let retry = settings
            .retry
            .min(settings.duration / 2)
            .max(Duration::from_millis(100));
        Self {
            api: Api::namespaced(client, &settings.namespace),
            settings: ElectionSettings { retry, ..settings },
            observed: None,
        }
    }

    fn validity(&self) -> Duration {
        self.settings.duration.mul_f64(VALIDITY)
    }

    fn spec(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        let identity = &self.settings.identity;
        let ours = previous.and_then(|p| p.holder_identity.as_deref()) == Some(identity.as_str());
        let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(identity.clone()),
            lease_duration_seconds: Some(i32::try_from(self.settings.duration.as_secs().max(1)).unwrap_or(i32::MAX)),
            acquire_time: if ours {
                previous.and_then(|p| p.acquire_time.clone())
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if ours || previous.is_none() {
                transitions
            } else {
                transitions.saturating_add(1)
            }),
            ..LeaseSpec::default()
        }
    }

    /// One attempt to take or renew the Lease.
    async fn attempt(&mut self) -> Attempt {
        let name = self.settings.lease_name.clone();
        // Measured before anything is read: the validity counts from before the write can reach the
        // API server, whatever the round trips take.
        let sent = Instant::now();
        let current = match self.api.get_opt(&name).await {
            Ok(current) => current,
            Err(error) => {
                tracing::debug!(error = %kube_error(&error), lease = name, "reading the lease");
                return Attempt::Failed;
            }
        };
        let Some(lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(self.settings.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Attempt::Held { sent },
                Err(error) => {
                    tracing::debug!(error = %kube_error(&error), lease = name, "creating the lease");
                    Attempt::Failed
                }
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let ours = holder.as_deref() == Some(self.settings.identity.as_str());
        if !ours && holder.is_some() {
            let record = (holder.clone(), spec.renew_time.clone());
            let duration = spec.lease_duration_seconds.map_or(self.settings.duration, |s| {
                Duration::from_secs(u64::try_from(s).unwrap_or(0))
            });
            match &self.observed {
                Some(seen) if seen.record == record => {
                    if seen.since.elapsed() < duration {
                        return Attempt::HeldByOther;
                    }
                }
                _ => {
                    self.observed = Some(Observed {
                        record,
                        since: Instant::now(),
                    });
                    return Attempt::HeldByOther;
                }
            }
        }
        let mut next = lease;
        next.spec = Some(self.spec(Some(&spec)));
        // `replace` carries the resourceVersion read: a concurrent writer makes it fail with 409.
        match self.api.replace(&name, &PostParams::default(), &next).await {
            Ok(_) => {
                self.observed = None;
                Attempt::Held { sent }
            }
            Err(error) => {
                tracing::debug!(error = %kube_error(&error), lease = name, "taking or renewing the lease");
                Attempt::Failed
            }
        }
    }

    /// Runs the election until `shutdown`, publishing every change of leadership; releases the Lease
    /// when shut down while leading, so a standby need not wait for it to expire.
    pub async fn run(mut self, publish: watch::Sender<Leadership>, shutdown: Shutdown) {
        let mut leading_until: Option<Instant> = None;
        loop {
            // An attempt that outlives our validity must not keep us believing we lead.
            let limit = leading_until
                .map(|until| until.saturating_duration_since(Instant::now()))
                .unwrap_or(self.settings.duration);
            let attempt = tokio::select! {
                attempt = tokio::time::timeout(limit.max(Duration::from_millis(10)), self.attempt()) => {
                    attempt.unwrap_or(Attempt::Failed)
                }
                _ = shutdown.fired() => break,
            };
            match attempt {
                Attempt::Held { sent } => {
                    let until = sent + self.validity();
                    if leading_until.is_none() {
                        tracing::info!(
                            identity = self.settings.identity,
                            lease = self.settings.lease_name,
                            "leading"
                        );
                    }
                    leading_until = Some(until);
                    publish.send_replace(Leadership::Leading { until });
                }
                Attempt::HeldByOther | Attempt::Failed => {
                    if let Some(until) = leading_until
                        && (Instant::now() >= until || matches!(attempt, Attempt::HeldByOther))
                    {
                        tracing::warn!(
                            identity = self.settings.identity,
                            lease = self.settings.lease_name,
                            "leadership lost"
                        );
                        leading_until = None;
                        publish.send_replace(Leadership::Standby);
                    }
                }
            }
            let next = match leading_until {
                // Wake in time to stand down if the next renewal does not come.
                Some(until) => self.settings.retry.min(until.saturating_duration_since(Instant::now())),
                None => self.settings.retry,
            };
            tokio::select! {
                _ = tokio::time::sleep(next) => {}
                _ = shutdown.fired() => break,
            }
        }
        if leading_until.is_some() {
            publish.send_replace(Leadership::Standby);
            self.release().await;
        }
    }

    /// Gives the Lease up.
    async fn release(&self) {
        let name = &self.settings.lease_name;
        let Ok(Some(mut lease)) = self.api.get_opt(name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else { return };
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        match self.api.replace(name, &PostParams::default(), &lease).await {
            Ok(_) => tracing::info!(identity = self.settings.identity, lease = name, "released the lease"),
            Err(error) => tracing::debug!(error = %kube_error(&error), "releasing the lease"),
        }
    }
}

/// Starts the election; the watch starts as [`Leadership::Standby`].
pub fn elect(
    client: kube::Client,
    settings: ElectionSettings,
    shutdown: Shutdown,
) -> (LeadershipWatch, tokio::task::JoinHandle<()>) {
    let (publish, watch) = watch::channel(Leadership::Standby);
    let elector = Elector::new(client, settings);
    let task = tokio::spawn(elector.run(publish, shutdown));
    (LeadershipWatch(watch), task)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_ends_at_its_validity() {
        let now = Instant::now();
        let leading = Leadership::Leading {
            until: now + Duration::from_secs(1),
        };
        assert!(leading.is_leading_at(now));
        assert!(!leading.is_leading_at(now + Duration::from_secs(1)));
        assert!(!Leadership::Standby.is_leading_at(now));
        assert!(Leadership::Always.is_leading_at(now + Duration::from_secs(1_000_000)));
    }

    #[tokio::test]
    async fn lost_fires_when_validity_runs_out_without_a_renewal() {
        let (publish, rx) = watch::channel(Leadership::Leading {
            until: Instant::now() + Duration::from_millis(50),
        });
        let mut watch = LeadershipWatch(rx);
        watch.leading().await;
        // Nothing is published: the validity alone must end the leadership.
        tokio::time::timeout(Duration::from_secs(10), watch.lost())
            .await
            .expect("leadership ends with its validity");
        drop(publish);
    }
}
