//! The check that needs the API server: ownerReferences to objects that are not in the object's namespace.
//!
//! OwnerReferences carry no namespace: Kubernetes looks a namespaced owner up in the dependent's own
//! namespace, and when it is not there the garbage collector deletes the dependent. A SparkApplication owned
//! by, say, an Argo Workflow in another namespace is therefore deleted the moment it is created.
//!
//! The admission webhook detects this in three steps, keeping everything but the lookups pure:
//! 1. [`owner_lookups`] lists the lookups to make, one per ownerReference;
//! 2. the webhook GETs each owner in the object's namespace (through discovery for its kind) and records
//!    an [`OwnerLookupOutcome`];
//! 3. [`owner_reference_errors`] turns the outcomes into field errors with an explanation.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::field::{FieldError, FieldPath};

/// One owner to look up in the dependent's namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerLookup {
    /// Path of the ownerReference, e.g. `metadata.ownerReferences[0]`.
    pub path: FieldPath,
    /// The dependent's namespace, where Kubernetes will look for the owner.
    pub namespace: String,
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
}

/// What looking an owner up found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnerLookupOutcome {
    /// An object of that kind and name exists in the namespace, with this uid.
    Found { uid: String },
    /// No object of that kind and name exists in the namespace.
    NotFound,
    /// The kind is cluster-scoped: owners of that kind are never looked up in a namespace.
    ClusterScoped,
    /// The kind is not served by the API server (Kubernetes then leaves the dependent alone until it is).
    UnknownKind,
    /// The operator may not read objects of that kind (a 403 on the GET): the owner cannot be checked, which
    /// is no reason to refuse the object; the message says what the API server answered.
    NotAllowed(String),
    /// The lookup itself failed; the message says why.
    Failed(String),
}

/// The lookups to make for an object's ownerReferences; none when it has none or no namespace.
pub fn owner_lookups(metadata: &ObjectMeta, default_namespace: Option<&str>) -> Vec<OwnerLookup> {
    let Some(namespace) = metadata.namespace.as_deref().or(default_namespace) else {
        return Vec::new();
    };
    let path = FieldPath::new("metadata").child("ownerReferences");
    metadata
        .owner_references
        .iter()
        .flatten()
        .enumerate()
        .map(|(index, owner)| OwnerLookup {
            path: path.index(index),
            namespace: namespace.to_owned(),
            api_version: owner.api_version.clone(),
            kind: owner.kind.clone(),
            name: owner.name.clone(),
            uid: owner.uid.clone(),
        })
        .collect()
}

/// Warnings for the owners that could not be checked but are no reason to refuse the object: a kind the
/// cluster does not serve, and a kind the operator may not read.
pub fn owner_reference_warnings(outcomes: &[(OwnerLookup, OwnerLookupOutcome)]) -> Vec<String> {
    outcomes
        .iter()
        .filter_map(|(lookup, outcome)| match outcome {
            OwnerLookupOutcome::UnknownKind => Some(format!(
                "{}: the cluster does not serve {} {}, so the garbage collector leaves this object alone until it does",
                lookup.path, lookup.api_version, lookup.kind
            )),
            OwnerLookupOutcome::NotAllowed(reason) => Some(format!(
                "{}: could not check that the owner {} {}/{} exists in namespace {:?}, as the operator may not read that kind ({reason}). If it is not there, Kubernetes garbage-collects this object at once; to have such owners checked, list the kind in the chart's `webhook.ownerResources`",
                lookup.path, lookup.api_version, lookup.kind, lookup.name, lookup.namespace
            )),
            _ => None,
        })
        .collect()
}

/// Errors for the owners the garbage collector would not find, and for failed lookups (the webhook must
/// not admit an object it could not check).
pub fn owner_reference_errors(outcomes: &[(OwnerLookup, OwnerLookupOutcome)]) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (lookup, outcome) in outcomes {
        let owner = format!(
            "{} {}/{} (uid {})",
            lookup.api_version, lookup.kind, lookup.name, lookup.uid
        );
        let consequence = "ownerReferences have no namespace, so Kubernetes looks the owner up in this object's namespace and, not finding it, garbage-collects this object at once";
        let message = match outcome {
            OwnerLookupOutcome::Found { uid } if *uid == lookup.uid => continue,
            OwnerLookupOutcome::ClusterScoped | OwnerLookupOutcome::UnknownKind | OwnerLookupOutcome::NotAllowed(_) => {
                continue;
            }
            OwnerLookupOutcome::Found { uid } => format!(
                "the owner {owner} is not in namespace {:?}: an object of that name there has uid {uid}. {consequence}. Remove the ownerReference, or point it at the object in this namespace",
                lookup.namespace
            ),
            OwnerLookupOutcome::NotFound => format!(
                "the owner {owner} is not in namespace {:?}. {consequence}. Remove the ownerReference, or create this object in its owner's namespace",
                lookup.namespace
            ),
            OwnerLookupOutcome::Failed(reason) => {
                format!(
                    "could not check that the owner {owner} exists in namespace {:?}: {reason}; retry",
                    lookup.namespace
                )
            }
        };
        errors.push(FieldError::new(lookup.path.clone(), message));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn owned(namespace: Option<&str>) -> ObjectMeta {
        let owner = |name: &str, uid: &str| OwnerReference {
            api_version: "argoproj.io/v1alpha1".into(),
            kind: "Workflow".into(),
            name: name.into(),
            uid: uid.into(),
            ..Default::default()
        };
        ObjectMeta {
            name: Some("spark-pi".into()),
            namespace: namespace.map(Into::into),
            owner_references: Some(vec![owner("wf-a", "uid-a"), owner("wf-b", "uid-b")]),
            ..Default::default()
        }
    }

    #[test]
    fn one_lookup_per_owner_in_the_objects_namespace() {
        let lookups = owner_lookups(&owned(Some("jobs")), None);
        assert_eq!(lookups.len(), 2);
        assert_eq!(lookups[1].path.as_str(), "metadata.ownerReferences[1]");
        assert_eq!(lookups[1].namespace, "jobs");
        assert_eq!(lookups[1].name, "wf-b");
        assert_eq!(owner_lookups(&owned(None), Some("req-ns"))[0].namespace, "req-ns");
        assert!(owner_lookups(&owned(None), None).is_empty());
    }

    #[test]
    fn missing_or_different_owners_are_errors() {
        let lookups = owner_lookups(&owned(Some("jobs")), None);
        let outcomes = vec![
            (lookups[0].clone(), OwnerLookupOutcome::NotFound),
            (
                lookups[1].clone(),
                OwnerLookupOutcome::Found {
                    uid: "someone-else".into(),
                },
            ),
        ];
        let errors = owner_reference_errors(&outcomes);
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].path.as_str(), "metadata.ownerReferences[0]");
        assert!(errors[0].message.contains("garbage-collects"), "{}", errors[0].message);
        assert!(errors[1].message.contains("someone-else"));
    }

    #[test]
    fn present_and_cluster_scoped_owners_pass_but_failed_lookups_do_not() {
        let lookups = owner_lookups(&owned(Some("jobs")), None);
        let outcomes = vec![
            (lookups[0].clone(), OwnerLookupOutcome::Found { uid: "uid-a".into() }),
            (lookups[1].clone(), OwnerLookupOutcome::ClusterScoped),
        ];
        assert!(owner_reference_errors(&outcomes).is_empty());
        let failed = vec![(lookups[0].clone(), OwnerLookupOutcome::Failed("timeout".into()))];
        assert_eq!(owner_reference_errors(&failed).len(), 1);
    }
}
