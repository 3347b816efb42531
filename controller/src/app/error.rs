//! Why a reconcile fails, and what kind of failure that is (the label of the reconcile-error metric).

use crate::app::{driver_finalizer, submit};
use crate::metrics::ErrorCategory;
use crate::status::write as status;

/// Why a reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error(transparent)]
    Status(#[from] status::Error),
    #[error(transparent)]
    Submit(#[from] submit::Error),
    #[error(transparent)]
    Finalizer(#[from] driver_finalizer::Error),
    #[error("reading the driver pod {namespace}/{name}")]
    ReadDriver {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("re-reading the application {namespace}/{name}")]
    ReadApplication {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("recording the spec hash on {namespace}/{name}")]
    RecordSpecHash {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting {what} {namespace}/{name}")]
    Delete {
        what: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Whether an error was caused by the fence (anywhere in its source chain).
fn fenced(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if error.is::<spark_operator_runtime::fence::NotLeader>() {
            return true;
        }
        next = error.source();
    }
    false
}

impl Error {
    pub(crate) fn category(&self) -> ErrorCategory {
        match self {
            Error::Status(status::Error::Conflict { .. }) => ErrorCategory::Conflict,
            Error::Status(status::Error::Serialize { .. }) => ErrorCategory::Serialization,
            other if fenced(other) => ErrorCategory::Fenced,
            _ => ErrorCategory::Api,
        }
    }
}
