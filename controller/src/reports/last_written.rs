//! The applications as this replica's last status write of each returned them, for the few applications
//! written most recently: the receiver's next write of one starts from its copy instead of a read, so
//! recording a batch of reports costs one request instead of two. At a high rate of ends on one
//! application the writes follow each other back to back, and a read before each was half of every
//! report's wait. A copy may be stale (the leader or another replica wrote since): its write then fails
//! on the `resourceVersion` it carries and the receiver reads afresh, so a stale copy costs a request,
//! never a wrong write.
//!
//! Bounded in entries, so a replica receiving reports for thousands of applications keeps a few copies,
//! not one per application; the least recently written goes first.

use std::collections::VecDeque;

use spark_operator_api::SparkApplication;

/// Copies kept at most: enough for the applications whose executors churn at once on a replica.
pub(crate) const CAPACITY: usize = 32;

/// The last written copies, least recently written first.
#[derive(Debug)]
pub(crate) struct LastWritten {
    capacity: usize,
    copies: VecDeque<((String, String), SparkApplication)>,
}

impl Default for LastWritten {
    fn default() -> Self {
        Self::with_capacity(CAPACITY)
    }
}

impl LastWritten {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            capacity,
            copies: VecDeque::new(),
        }
    }

    /// Takes the copy of `namespace/name` out (the write that uses it puts back what it writes).
    pub(crate) fn take(&mut self, namespace: &str, name: &str) -> Option<SparkApplication> {
        let at = self
            .copies
            .iter()
            .position(|((ns, n), _)| ns == namespace && n == name)?;
        self.copies.remove(at).map(|(_, app)| app)
    }

    /// Keeps `app` as written last, dropping the least recently written copy beyond the bound.
    pub(crate) fn put(&mut self, namespace: &str, name: &str, app: SparkApplication) {
        let _ = self.take(namespace, name);
        if self.capacity == 0 {
            return;
        }
        while self.copies.len() >= self.capacity {
            self.copies.pop_front();
        }
        self.copies.push_back(((namespace.to_owned(), name.to_owned()), app));
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.copies.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.copies.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(version: &str) -> SparkApplication {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "sparkoperator.k8s.io/v1beta2",
            "kind": "SparkApplication",
            "metadata": {"name": "pi", "resourceVersion": version},
            "spec": {"type": "Scala", "sparkVersion": "4.0.4", "mainApplicationFile": "local:///pi.jar",
                     "driver": {}, "executor": {}}
        }))
        .unwrap()
    }

    fn version(app: Option<SparkApplication>) -> Option<String> {
        app.and_then(|a| a.metadata.resource_version)
    }

    #[test]
    fn a_copy_is_taken_once_and_the_least_recently_written_goes_first() {
        let mut copies = LastWritten::with_capacity(2);
        copies.put("ns", "a", app("1"));
        copies.put("ns", "b", app("2"));
        // Writing `a` again makes it the most recent: `b` is the one to go.
        copies.put("ns", "a", app("3"));
        copies.put("other", "a", app("4"));
        assert_eq!(copies.len(), 2);
        assert_eq!(version(copies.take("ns", "b")), None);
        assert_eq!(version(copies.take("ns", "a")), Some("3".into()));
        assert_eq!(version(copies.take("ns", "a")), None, "taken out");
        assert_eq!(version(copies.take("other", "a")), Some("4".into()));
        assert!(copies.is_empty());

        let mut none = LastWritten::with_capacity(0);
        none.put("ns", "a", app("1"));
        assert!(none.is_empty());
    }
}
