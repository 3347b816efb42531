//! Admission for the sim: the built-in plugins a real cluster runs ([`builtin`]) and dynamic
//! admission webhooks ([`webhooks`]), plugged into the store through
//! [`crate::admission_seam`], plus the controllers they depend on.
//!
//! [`install`] registers them in the apiserver's order: NamespaceLifecycle, ServiceAccount,
//! OwnerReferencesPermissionEnforcement ([`owner_references`], when enabled, validating only), PodSecurity ([`pod_security`], validating only), then the webhooks (mutating webhooks after
//! the built-in mutations, validating webhooks in the validating phase after PodSecurity).

pub mod builtin;
pub mod owner_references;
pub mod pod_security;
pub mod webhooks;

use std::sync::Arc;

use crate::gc::BackgroundTask;
use crate::store::Store;

/// What to install.
#[derive(Debug, Clone)]
pub struct AdmissionConfig {
    /// NamespaceLifecycle and ServiceAccount, with the namespace and service-account controllers.
    pub builtin: bool,
    /// Pod Security admission (the `PodSecurity` plugin, on in every real cluster since 1.25).
    pub pod_security: bool,
    /// Mutating and validating admission webhooks.
    pub webhooks: bool,
    /// `OwnerReferencesPermissionEnforcement` ([`owner_references`]): off, as in kube-apiserver by default.
    pub owner_references_permission_enforcement: bool,
    /// The cluster CA (PEM), published as the `kube-root-ca.crt` ConfigMap in every namespace.
    pub root_ca_pem: Option<String>,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        Self {
            builtin: true,
            pod_security: true,
            webhooks: true,
            owner_references_permission_enforcement: false,
            root_ca_pem: None,
        }
    }
}

/// Registers the admission plugins on `store` and starts their controllers (needs a tokio
/// runtime). Keep the returned tasks: dropping them stops the controllers.
pub fn install(store: &Store, config: &AdmissionConfig) -> Vec<BackgroundTask> {
    let mut tasks = Vec::new();
    if config.builtin {
        store.add_admission_plugin(Arc::new(builtin::NamespaceLifecycle::new(store.clone())));
        store.add_admission_plugin(Arc::new(builtin::ServiceAccountAdmission::new(store.clone())));
        tasks.push(builtin::namespace_controller::spawn(store));
        tasks.push(builtin::serviceaccounts_controller::spawn(
            store,
            config.root_ca_pem.clone(),
        ));
    }
    if config.owner_references_permission_enforcement {
        store.add_admission_plugin(Arc::new(owner_references::OwnerReferencesPermissionEnforcement::new(
            store.clone(),
        )));
    }
    if config.pod_security {
        store.add_admission_plugin(Arc::new(pod_security::PodSecurity::new(store.clone())));
    }
    if config.webhooks {
        store.add_admission_plugin(Arc::new(webhooks::WebhookAdmission::new(store.clone())));
    }
    tasks
}
