//! Which namespaces the controllers reconcile: the scope the flags ask for ([`NamespaceScope`]), and the
//! filter a reconcile applies within a watch ([`NamespaceFilter`]).

use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::reflector::{ObjectRef, Store};

/// Which namespaces the controller reconciles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceScope {
    All,
    List(Vec<String>),
    Selector(String),
}

/// Which namespaces are reconciled: all the watch returns, or those a label selector picks.
#[derive(Clone)]
pub enum NamespaceFilter {
    /// The watches are already scoped (all namespaces, or one controller per listed namespace).
    Watched,
    /// Namespaces matching the selector, as cached.
    Selected(Store<Namespace>),
}

impl NamespaceFilter {
    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            Self::Watched => true,
            Self::Selected(store) => store.get(&ObjectRef::new(namespace)).is_some(),
        }
    }
}
