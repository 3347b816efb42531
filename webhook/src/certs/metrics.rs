//! What the certificate machinery counts, for `/metrics` (a [`Render`] registered with the runtime).

use std::sync::atomic::{AtomicBool, Ordering};

use spark_operator_runtime::metrics::{Counter, Gauge, Render, write_counter, write_gauge};

/// This replica's certificate metrics.
#[derive(Debug, Default)]
pub struct CertMetrics {
    /// CAs this replica generated and stored (the first one, a replacement of an unusable one, or a
    /// staged successor). Summed over replicas, one per CA that ever existed.
    pub ca_generated: Counter,
    /// Switches of the Secret's current CA that this replica saw (not counting the first load).
    pub ca_rotations: Counter,
    /// Serving certificates signed after the first (renewal at 2/3 of the lifetime, or a new CA).
    pub leaf_renewals: Counter,
    /// Writes of the CA Secret refused because another replica wrote first (409 or AlreadyExists).
    pub secret_conflicts: Counter,
    /// Applies of `caBundle` to the webhook configurations.
    pub bundle_applies: Counter,
    /// Unix seconds at which the CA that signs this replica's serving certificate expires.
    pub ca_expiry: Gauge,
    /// Unix seconds at which the serving certificate expires.
    pub leaf_expiry: Gauge,
    loaded: AtomicBool,
}

impl CertMetrics {
    pub(crate) fn set_loaded(&self) {
        self.loaded.store(true, Ordering::Relaxed);
    }
}

impl Render for CertMetrics {
    fn render(&self, out: &mut String) {
        write_counter(
            out,
            "spark_operator_webhook_ca_generated",
            "Webhook CAs this replica generated and stored in the CA Secret",
            self.ca_generated.get(),
        );
        write_counter(
            out,
            "spark_operator_webhook_ca_rotations",
            "Changes of the current webhook CA this replica saw in the CA Secret",
            self.ca_rotations.get(),
        );
        write_counter(
            out,
            "spark_operator_webhook_leaf_renewals",
            "Serving certificates this replica signed after its first",
            self.leaf_renewals.get(),
        );
        write_counter(
            out,
            "spark_operator_webhook_secret_conflicts",
            "Writes of the CA Secret lost to another replica (conflict or already exists)",
            self.secret_conflicts.get(),
        );
        write_counter(
            out,
            "spark_operator_webhook_ca_bundle_applies",
            "Server-side applies of caBundle to the webhook configurations",
            self.bundle_applies.get(),
        );
        write_gauge(
            out,
            "spark_operator_webhook_ca_expiry_timestamp_seconds",
            "When the CA that signs this replica's serving certificate expires (Unix seconds)",
            self.ca_expiry.get(),
        );
        write_gauge(
            out,
            "spark_operator_webhook_certificate_expiry_timestamp_seconds",
            "When this replica's serving certificate expires (Unix seconds)",
            self.leaf_expiry.get(),
        );
        write_gauge(
            out,
            "spark_operator_webhook_certificate_loaded",
            "1 once this replica has a serving certificate",
            i64::from(self.loaded.load(Ordering::Relaxed)),
        );
    }
}
