//! Readiness composed from what each serving component reports: `/readyz` is 200 only when every
//! registered check is ready, so a Service sends admissions and reports only to replicas that can answer
//! them (standbys included: serving does not wait for the lease).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Every check of the process.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<Mutex<BTreeMap<String, bool>>>);

/// One component's check, flipped by that component.
#[derive(Clone, Debug)]
pub struct Check {
    name: String,
    all: Readiness,
}

impl Readiness {
    /// Adds a check, not ready until set.
    pub fn register(&self, name: &str) -> Check {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), false);
        Check {
            name: name.to_owned(),
            all: self.clone(),
        }
    }

    /// The checks that are not ready, by name; empty when ready.
    pub fn not_ready(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(_, ready)| !**ready)
            .map(|(name, _)| name.clone())
            .collect()
    }

    pub fn is_ready(&self) -> bool {
        self.not_ready().is_empty()
    }

    /// Drops the checks whose names start with `prefix` (a component that stopped for a while, such as
    /// a controller whose replica no longer leads).
    pub fn remove_prefixed(&self, prefix: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|name, _| !name.starts_with(prefix));
    }
}

impl Check {
    pub fn set(&self, ready: bool) {
        self.all
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(self.name.clone(), ready);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_check_is() {
        let readiness = Readiness::default();
        assert!(readiness.is_ready(), "nothing to wait for");
        let api = readiness.register("apiserver");
        let webhook = readiness.register("webhook");
        api.set(true);
        assert_eq!(readiness.not_ready(), vec!["webhook".to_owned()]);
        webhook.set(true);
        assert!(readiness.is_ready());
        api.set(false);
        assert!(!readiness.is_ready());
        readiness.remove_prefixed("api");
        assert!(readiness.is_ready());
    }
}
