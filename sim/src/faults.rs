//! Fault injection for tests: delay or fail requests by verb and resource (or subresource), make
//! the whole server unavailable for a while, hide container terminations from chosen clients
//! (`terminations.rs`), and cut every open watch (through [`crate::store::Store::cut_all_watches`]).

mod terminations;

pub use terminations::hide_pod_terminations;

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::status::ApiError;

/// What a matching request suffers.
#[derive(Debug, Clone)]
pub enum FaultAction {
    /// Answer only after this long.
    Delay(Duration),
    /// Answer with this Status instead of doing anything.
    Fail { code: u16, reason: String, message: String },
}

/// A rule: requests with this verb (`get`, `list`, `watch`, `create`, `update`, `patch`,
/// `delete`, `deletecollection`; None = any) on this resource (plural, `pods` or
/// `deployments.apps`, which also covers its subresources; `sparkapplications/status` or
/// `sparkapplications.sparkoperator.k8s.io/status` for one subresource only; None = any) from a
/// client whose User-Agent contains `user_agent` (None = any client) get `action`, `times` times
/// (None = until cleared).
#[derive(Debug, Clone)]
pub struct FaultRule {
    pub verb: Option<String>,
    pub resource: Option<String>,
    pub user_agent: Option<String>,
    pub action: FaultAction,
    pub times: Option<usize>,
}

/// The fault switchboard shared by the server.
#[derive(Debug, Default)]
pub struct Faults {
    rules: Mutex<Vec<FaultRule>>,
    unavailable_until: Mutex<Option<Instant>>,
    /// User-Agent substrings of the clients that see no container termination in pods.
    hidden_terminations: Mutex<Vec<String>>,
}

/// What the server must do to a request before handling it.
#[derive(Debug, Default)]
pub struct FaultDecision {
    pub delay: Duration,
    pub fail: Option<ApiError>,
}

impl Faults {
    pub fn add(&self, rule: FaultRule) {
        self.rules.lock().unwrap_or_else(|e| e.into_inner()).push(rule);
    }

    /// Removes every rule, ends any unavailability and shows terminations to every client again.
    pub fn clear(&self) {
        self.rules.lock().unwrap_or_else(|e| e.into_inner()).clear();
        *self.unavailable_until.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.hidden_terminations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Clients whose User-Agent contains `user_agent` see pods (get, list, watch, and the pods that
    /// writes return, in JSON and Table form) as if no container had ended: see
    /// [`hide_pod_terminations`]. Everyone else sees the truth. Until [`Faults::show_terminations`]
    /// or [`Faults::clear`].
    pub fn hide_terminations(&self, user_agent: impl Into<String>) {
        self.hidden_terminations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(user_agent.into());
    }

    /// Ends [`Faults::hide_terminations`] for this same `user_agent` substring.
    pub fn show_terminations(&self, user_agent: &str) {
        self.hidden_terminations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|a| a != user_agent);
    }

    /// Whether a request with this User-Agent must not see container terminations.
    pub fn hides_terminations(&self, user_agent: &str) -> bool {
        self.hidden_terminations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|a| user_agent.contains(a.as_str()))
    }

    /// Every request (health checks included) gets 503 for `duration`.
    pub fn make_unavailable(&self, duration: Duration) {
        *self.unavailable_until.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + duration);
    }

    pub fn is_unavailable(&self) -> bool {
        self.unavailable_until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|until| Instant::now() < until)
    }

    /// The faults for one request (`group` empty for the core group).
    pub fn decide(
        &self,
        verb: &str,
        group: &str,
        resource: &str,
        subresource: Option<&str>,
        user_agent: &str,
    ) -> FaultDecision {
        let mut decision = FaultDecision::default();
        if self.is_unavailable() {
            decision.fail = Some(ApiError::ServiceUnavailable(
                "the server is currently unable to handle the request".into(),
            ));
            return decision;
        }
        let qualified = if group.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}.{group}")
        };
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        for rule in rules.iter_mut() {
            let verb_ok = rule.verb.as_deref().is_none_or(|v| v == verb);
            let res_ok = rule.resource.as_deref().is_none_or(|r| match r.split_once('/') {
                Some((res, sub)) => (res == resource || res == qualified) && subresource == Some(sub),
                None => r == resource || r == qualified,
            });
            let agent_ok = rule.user_agent.as_deref().is_none_or(|a| user_agent.contains(a));
            if !verb_ok || !res_ok || !agent_ok || rule.times == Some(0) {
                continue;
            }
            if let Some(t) = rule.times.as_mut() {
                *t -= 1;
            }
            match &rule.action {
                FaultAction::Delay(d) => decision.delay += *d,
                FaultAction::Fail { code, reason, message } => {
                    if decision.fail.is_none() {
                        decision.fail = Some(ApiError::Custom {
                            code: *code,
                            reason: reason.clone(),
                            message: message.clone(),
                            details: None,
                        });
                    }
                }
            }
        }
        rules.retain(|r| r.times != Some(0));
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_and_run_out() {
        let f = Faults::default();
        f.add(FaultRule {
            verb: Some("create".into()),
            resource: Some("pods".into()),
            user_agent: None,
            action: FaultAction::Fail {
                code: 500,
                reason: "InternalError".into(),
                message: "boom".into(),
            },
            times: Some(1),
        });
        assert!(f.decide("get", "", "pods", None, "").fail.is_none());
        assert!(f.decide("create", "apps", "deployments", None, "").fail.is_none());
        assert_eq!(f.decide("create", "", "pods", None, "").fail.unwrap().code(), 500);
        assert!(f.decide("create", "", "pods", None, "").fail.is_none(), "used up");
        f.add(FaultRule {
            verb: Some("update".into()),
            resource: Some("leases.coordination.k8s.io".into()),
            user_agent: Some("(replica-a)".into()),
            action: FaultAction::Fail {
                code: 500,
                reason: "InternalError".into(),
                message: "boom".into(),
            },
            times: None,
        });
        let lease_update = |agent: &str| f.decide("update", "coordination.k8s.io", "leases", None, agent).fail;
        assert!(
            lease_update("spark-operator/0.1.0 (replica-b)").is_none(),
            "another client"
        );
        assert!(lease_update("spark-operator/0.1.0 (replica-a)").is_some());
        assert!(
            lease_update("spark-operator/0.1.0 (replica-a)").is_some(),
            "until cleared"
        );
        f.clear();
        let fail_500 = FaultAction::Fail {
            code: 500,
            reason: "InternalError".into(),
            message: "boom".into(),
        };
        f.add(FaultRule {
            verb: Some("patch".into()),
            resource: Some("sparkapplications.sparkoperator.k8s.io/status".into()),
            user_agent: None,
            action: fail_500.clone(),
            times: None,
        });
        let patch = |sub: Option<&str>| {
            f.decide("patch", "sparkoperator.k8s.io", "sparkapplications", sub, "")
                .fail
        };
        assert!(patch(None).is_none(), "the main resource is not the status");
        assert!(patch(Some("scale")).is_none(), "another subresource");
        assert!(patch(Some("status")).is_some());
        f.clear();
        f.add(FaultRule {
            verb: Some("patch".into()),
            resource: Some("sparkapplications".into()),
            user_agent: None,
            action: fail_500,
            times: Some(2),
        });
        assert!(patch(None).is_some(), "unqualified: the resource");
        assert!(patch(Some("status")).is_some(), "and its subresources");
        assert!(patch(Some("status")).is_none(), "used up");
        f.make_unavailable(Duration::from_secs(60));
        assert_eq!(f.decide("get", "", "pods", None, "").fail.unwrap().code(), 503);
        f.clear();
        assert!(!f.is_unavailable());
    }

    #[test]
    fn terminations_hidden_from_chosen_clients_until_shown() {
        let f = Faults::default();
        assert!(!f.hides_terminations("spark-operator/0.1.0 (controller)"));
        f.hide_terminations("(controller)");
        assert!(f.hides_terminations("spark-operator/0.1.0 (controller)"));
        assert!(!f.hides_terminations("kubelet/v1.33.0"), "other clients see the truth");
        f.show_terminations("(controller)");
        assert!(!f.hides_terminations("spark-operator/0.1.0 (controller)"));
        f.hide_terminations("kubectl");
        f.clear();
        assert!(!f.hides_terminations("kubectl/v1.33"));
    }
}
