//! An audit log of API requests, as kube-apiserver's audit backend records them at the `Metadata` level
//! (who, from which user agent, did what to which object, with which answer). Off until a test turns it
//! on (kube-apiserver audits nothing without a policy either), and bounded so a long run cannot grow it
//! without end: past the bound the oldest events are dropped and counted.

use std::collections::VecDeque;
use std::sync::Mutex;

use jiff::Timestamp;

/// One request, as recorded when its answer was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEvent {
    /// When the request was received.
    pub received: Timestamp,
    /// When its answer was ready.
    pub answered: Timestamp,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// Empty for the core group.
    pub group: String,
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub username: String,
    pub user_agent: String,
    pub code: u16,
}

impl AuditEvent {
    /// True for requests that change something.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

/// Events kept at most.
pub const DEFAULT_CAPACITY: usize = 200_000;

#[derive(Debug, Default)]
struct Inner {
    enabled: bool,
    events: VecDeque<AuditEvent>,
    dropped: u64,
}

/// The log, shared by the server and tests.
#[derive(Debug, Default)]
pub struct AuditLog(Mutex<Inner>);

impl AuditLog {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts recording.
    pub fn enable(&self) {
        self.inner().enabled = true;
    }

    pub fn is_enabled(&self) -> bool {
        self.inner().enabled
    }

    pub fn record(&self, event: AuditEvent) {
        let mut inner = self.inner();
        if !inner.enabled {
            return;
        }
        if inner.events.len() >= DEFAULT_CAPACITY {
            inner.events.pop_front();
            inner.dropped += 1;
        }
        inner.events.push_back(event);
    }

    /// Every event kept, oldest first.
    pub fn events(&self) -> Vec<AuditEvent> {
        self.inner().events.iter().cloned().collect()
    }

    /// Events dropped because the log was full.
    pub fn dropped(&self) -> u64 {
        self.inner().dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(verb: &str) -> AuditEvent {
        AuditEvent {
            received: Timestamp::UNIX_EPOCH,
            answered: Timestamp::UNIX_EPOCH,
            verb: verb.into(),
            group: String::new(),
            resource: "pods".into(),
            subresource: None,
            namespace: Some("default".into()),
            name: Some("p".into()),
            username: "u".into(),
            user_agent: "a".into(),
            code: 200,
        }
    }

    #[test]
    fn records_only_once_enabled() {
        let log = AuditLog::default();
        log.record(event("create"));
        assert!(log.events().is_empty());
        log.enable();
        log.record(event("create"));
        log.record(event("get"));
        let events = log.events();
        assert_eq!(events.len(), 2);
        assert!(events[0].is_write() && !events[1].is_write());
    }
}
