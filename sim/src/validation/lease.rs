//! Lease validation as kube-apiserver 1.37 runs it (`ValidateLeaseSpec`). `strategy` and
//! `preferredHolder` are not checked: CoordinatedLeaderElection is off by default in 1.37, and
//! the registry drops both fields of a new Lease then.

use serde_json::Value;

use super::fields::{IS_NEGATIVE, set_at};
use crate::status::FieldCause;

/// `ValidateLeaseSpec`, on create and update.
pub(super) fn lease(obj: &Value, causes: &mut Vec<FieldCause>) {
    let spec = obj.get("spec");
    if let Some(v) = set_at(spec, "/leaseDurationSeconds")
        && v.as_i64().is_some_and(|n| n <= 0)
    {
        causes.push(FieldCause::invalid(
            "spec.leaseDurationSeconds",
            v,
            "must be greater than 0",
        ));
    }
    if let Some(v) = set_at(spec, "/leaseTransitions")
        && v.as_i64().is_some_and(|n| n < 0)
    {
        causes.push(FieldCause::invalid("spec.leaseTransitions", v, IS_NEGATIVE));
    }
}
