//! Fault injection for tests: delay or fail requests by verb and resource, make the whole server
//! unavailable for a while, and cut every open watch (through [`crate::store::Store::cut_all_watches`]).

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
/// `deployments.apps`; None = any) from a client whose User-Agent contains `user_agent` (None = any
/// client) get `action`, `times` times (None = until cleared).
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

    /// Removes every rule and ends any unavailability.
    pub fn clear(&self) {
        self.rules.lock().unwrap_or_else(|e| e.into_inner()).clear();
        *self.unavailable_until.lock().unwrap_or_else(|e| e.into_inner()) = None;
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
    pub fn decide(&self, verb: &str, group: &str, resource: &str, user_agent: &str) -> FaultDecision {
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
            let res_ok = rule.resource.as_deref().is_none_or(|r| r == resource || r == qualified);
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
        assert!(f.decide("get", "", "pods", "").fail.is_none());
        assert!(f.decide("create", "apps", "deployments", "").fail.is_none());
        assert_eq!(f.decide("create", "", "pods", "").fail.unwrap().code(), 500);
        assert!(f.decide("create", "", "pods", "").fail.is_none(), "used up");
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
        let lease_update = |agent: &str| f.decide("update", "coordination.k8s.io", "leases", agent).fail;
        assert!(
            lease_update("spark-operator/0.1.0 (replica-b)").is_none(),
            "another client"
        );
        assert!(lease_update("spark-operator/0.1.0 (replica-a)").is_some());
        assert!(
            lease_update("spark-operator/0.1.0 (replica-a)").is_some(),
            "until cleared"
        );
        f.make_unavailable(Duration::from_secs(60));
        assert_eq!(f.decide("get", "", "pods", "").fail.unwrap().code(), 503);
        f.clear();
        assert!(!f.is_unavailable());
    }
}
