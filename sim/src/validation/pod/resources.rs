//! A container's `resources` (`ValidateContainerResourceRequirements`): resource names, quantities
//! (non-negative, integers where the resource counts things), requests against limits, huge pages.
//! Runs after defaulting, so a limit without a request has already become the request too
//! (`SetDefaults_Pod`), and quantities are compared at milli precision (`SetDefaults_ResourceList`).

use serde_json::{Map, Value};

use super::qualified_name_errors;
use crate::quantity::{self, Quantity};
use crate::status::FieldCause;

/// `helper.standardResources` (what a quota or a limit range may name).
const STANDARD_RESOURCES: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "storage",
    "requests.storage",
    "services.nodeports",
    "services.loadbalancers",
];

/// `helper.integerResources`.
const INTEGER_RESOURCES: &[&str] = &[
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "services.nodeports",
    "services.loadbalancers",
];

/// A quantity as the request decoded it (a string or a bare number), rounded to milli precision.
pub(super) fn quantity_of(v: &Value) -> Option<Quantity> {
    let parsed = match v {
        Value::String(s) => quantity::parse(s.trim()),
        Value::Number(n) => quantity::parse(&n.to_string()),
        _ => return None,
    };
    parsed.ok().map(|q| q.rounded_to_milli())
}

fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn is_huge_pages(name: &str) -> bool {
    name.starts_with("hugepages-")
}

fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

fn is_extended(name: &str) -> bool {
    !is_native(name) && !name.starts_with("requests.") && qualified_name_errors(&format!("requests.{name}")).is_empty()
}

fn overcommit_allowed(name: &str) -> bool {
    is_native(name) && !is_huge_pages(name)
}

fn is_integer_resource(name: &str) -> bool {
    INTEGER_RESOURCES.contains(&name) || is_extended(name)
}

/// `ValidateContainerResourceName`.
fn resource_name(field: &str, name: &str, causes: &mut Vec<FieldCause>) {
    let value = Value::String(name.into());
    let qualified = qualified_name_errors(name);
    let unqualified = !name.contains('/');
    if !qualified.is_empty() {
        for msg in qualified {
            causes.push(FieldCause::invalid(field, &value, msg));
        }
    } else if unqualified
        && !(STANDARD_RESOURCES.contains(&name) || is_huge_pages(name) || name.starts_with("requests.hugepages-"))
    {
        causes.push(FieldCause::invalid(
            field,
            &value,
            "must be a standard resource type or fully qualified",
        ));
    }
    if unqualified {
        if !(matches!(name, "cpu" | "memory" | "ephemeral-storage") || is_huge_pages(name)) {
            causes.push(FieldCause::invalid(
                field,
                &value,
                "must be a standard resource for containers",
            ));
        }
    } else if !is_native(name) && !is_extended(name) {
        causes.push(FieldCause::invalid(
            field,
            &value,
            "doesn't follow extended resource name standard",
        ));
    }
}

/// `ValidateResourceQuantityValue`, and the huge page size multiple.
fn quantity_value(field: &str, name: &str, v: &Value, q: Option<Quantity>, causes: &mut Vec<FieldCause>) {
    let Some(q) = q else { return };
    if q.is_negative() {
        causes.push(FieldCause::invalid(
            field,
            &Value::String(shown(v)),
            "must be greater than or equal to 0",
        ));
    }
    if is_integer_resource(name) && q.milli_value() % 1000 != 0 {
        causes.push(FieldCause::invalid(
            field,
            &Value::String(shown(v)),
            "must be an integer",
        ));
    }
    if let Some(page) = name.strip_prefix("hugepages-") {
        let page_size = quantity::parse(page).ok();
        let divisible = page_size
            .filter(|p| !p.is_negative() && p.value() > 0 && p.milli_value() % 1000 == 0)
            .is_some_and(|p| q.value() % p.value() == 0);
        if !divisible {
            causes.push(FieldCause::invalid(
                field,
                &Value::String(shown(v)),
                format!("{} is not positive integer multiple of {name}", shown(v)),
            ));
        }
    }
}

/// `validateResourceRequirements` with `ValidateContainerResourceName`.
pub(super) fn container_resources(path: &str, resources: Option<&Value>, causes: &mut Vec<FieldCause>) {
    let empty = Map::new();
    let list = |key: &str| {
        resources
            .and_then(|r| r.get(key))
            .and_then(Value::as_object)
            .unwrap_or(&empty)
    };
    let (limits, requests) = (list("limits"), list("requests"));
    let (lim_path, req_path) = (format!("{path}.limits"), format!("{path}.requests"));
    let mut cpu_or_memory = false;
    let mut huge_pages = false;
    for (name, v) in limits {
        let field = format!("{lim_path}[{name}]");
        resource_name(&field, name, causes);
        quantity_value(&field, name, v, quantity_of(v), causes);
        huge_pages |= is_huge_pages(name);
        cpu_or_memory |= matches!(name.as_str(), "cpu" | "memory");
    }
    for (name, v) in requests {
        let field = format!("{req_path}[{name}]");
        resource_name(&field, name, causes);
        let q = quantity_of(v);
        quantity_value(&field, name, v, q, causes);
        match limits.get(name) {
            Some(limit) => {
                let lq = quantity_of(limit);
                if let (Some(q), Some(lq)) = (q, lq) {
                    let request = Value::String(shown(v));
                    if q != lq && !overcommit_allowed(name) {
                        causes.push(FieldCause::invalid(
                            &req_path,
                            &request,
                            format!("must be equal to {name} limit of {}", shown(limit)),
                        ));
                    } else if q > lq {
                        causes.push(FieldCause::invalid(
                            &req_path,
                            &request,
                            format!("must be less than or equal to {name} limit of {}", shown(limit)),
                        ));
                    }
                }
            }
            None if !overcommit_allowed(name) => {
                causes.push(super::required(
                    &lim_path,
                    "Limit must be set for non overcommitable resources",
                ));
            }
            None => {}
        }
        huge_pages |= is_huge_pages(name);
        cpu_or_memory |= matches!(name.as_str(), "cpu" | "memory");
    }
    if huge_pages && !cpu_or_memory {
        causes.push(FieldCause::forbidden(path, "HugePages require cpu or memory"));
    }
}
