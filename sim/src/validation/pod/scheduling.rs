//! Where a pod may run: node affinity (`validateNodeAffinity`, `ValidateNodeSelector`,
//! `ValidatePreferredSchedulingTerms`), pod (anti-)affinity term weights and topology keys
//! (`validatePodAffinity`, without the label selectors), and tolerations (`ValidateTolerations`,
//! with TaintTolerationComparisonOperators off as in 1.37).

use serde_json::Value;

use super::{array_of, label_value_errors, qualified_name_errors, required, set, str_of, string};
use crate::status::FieldCause;

const TAINT_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// `validateAffinity`.
pub(super) fn affinity(path: &str, affinity: Option<&Value>, causes: &mut Vec<FieldCause>) {
    let Some(affinity) = affinity else { return };
    if let Some(na) = set(affinity, "nodeAffinity") {
        let at = format!("{path}.nodeAffinity");
        if let Some(required_terms) = set(na, "requiredDuringSchedulingIgnoredDuringExecution") {
            let terms_path = format!("{at}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms");
            let terms = array_of(Some(required_terms), "nodeSelectorTerms");
            if terms.is_empty() {
                causes.push(required(&terms_path, "must have at least one node selector term"));
            }
            for (i, term) in terms.iter().enumerate() {
                node_selector_term(&format!("{terms_path}[{i}]"), term, false, causes);
            }
        }
        for (i, term) in array_of(Some(na), "preferredDuringSchedulingIgnoredDuringExecution")
            .iter()
            .enumerate()
        {
            let term_path = format!("{at}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
            weight(&term_path, term, causes);
            let preference = term.get("preference").unwrap_or(&Value::Null);
            // Invalid label values are always allowed in preferences.
            node_selector_term(&format!("{term_path}.preference"), preference, true, causes);
        }
    }
    for kind in ["podAffinity", "podAntiAffinity"] {
        let Some(pa) = set(affinity, kind) else { continue };
        let at = format!("{path}.{kind}");
        for (i, term) in array_of(Some(pa), "requiredDuringSchedulingIgnoredDuringExecution")
            .iter()
            .enumerate()
        {
            pod_affinity_term(
                &format!("{at}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"),
                term,
                causes,
            );
        }
        for (i, term) in array_of(Some(pa), "preferredDuringSchedulingIgnoredDuringExecution")
            .iter()
            .enumerate()
        {
            let term_path = format!("{at}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
            weight(&term_path, term, causes);
            let inner = term.get("podAffinityTerm").unwrap_or(&Value::Null);
            pod_affinity_term(&format!("{term_path}.podAffinityTerm"), inner, causes);
        }
    }
}

fn weight(term_path: &str, term: &Value, causes: &mut Vec<FieldCause>) {
    let w = term.get("weight").and_then(Value::as_i64).unwrap_or(0);
    if !(1..=100).contains(&w) {
        causes.push(FieldCause::invalid(
            format!("{term_path}.weight"),
            &Value::from(w),
            "must be in the range 1-100",
        ));
    }
}

/// `validatePodAffinityTerm`, its namespaces and topology key.
fn pod_affinity_term(path: &str, term: &Value, causes: &mut Vec<FieldCause>) {
    for ns in array_of(Some(term), "namespaces") {
        let name = ns.as_str().unwrap_or_default();
        for msg in super::dns1123_label_errors(name) {
            causes.push(FieldCause::invalid(format!("{path}.namespace"), &string(name), msg));
        }
    }
    let key = str_of(term, "topologyKey");
    if key.is_empty() {
        causes.push(required(format!("{path}.topologyKey"), "can not be empty"));
    }
    for msg in qualified_name_errors(key) {
        causes.push(FieldCause::invalid(format!("{path}.topologyKey"), &string(key), msg));
    }
}

/// `ValidateNodeSelectorTerm`.
fn node_selector_term(path: &str, term: &Value, allow_invalid_values: bool, causes: &mut Vec<FieldCause>) {
    for (j, req) in array_of(Some(term), "matchExpressions").iter().enumerate() {
        let at = format!("{path}.matchExpressions[{j}]");
        let values = array_of(Some(req), "values");
        let operator = req.get("operator").cloned().unwrap_or(Value::String(String::new()));
        match operator.as_str().unwrap_or_default() {
            "In" | "NotIn" if values.is_empty() => causes.push(required(
                format!("{at}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => causes.push(FieldCause::forbidden(
                format!("{at}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "Gt" | "Lt" if values.len() != 1 => causes.push(required(
                format!("{at}.values"),
                "must be specified single value when `operator` is 'Lt' or 'Gt'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => {}
            _ => causes.push(FieldCause::invalid(
                format!("{at}.operator"),
                &operator,
                "not a valid selector operator",
            )),
        }
        let key = str_of(req, "key");
        for msg in qualified_name_errors(key) {
            causes.push(FieldCause::invalid(format!("{at}.key"), &string(key), msg));
        }
        if !allow_invalid_values {
            for (k, v) in values.iter().enumerate() {
                for msg in label_value_errors(v.as_str().unwrap_or_default()) {
                    causes.push(FieldCause::invalid(format!("{at}.values[{k}]"), v, msg));
                }
            }
        }
    }
    for (j, req) in array_of(Some(term), "matchFields").iter().enumerate() {
        let at = format!("{path}.matchFields[{j}]");
        let values = array_of(Some(req), "values");
        let operator = req.get("operator").cloned().unwrap_or(Value::String(String::new()));
        match operator.as_str().unwrap_or_default() {
            "In" | "NotIn" => {
                if values.len() != 1 {
                    causes.push(required(
                        format!("{at}.values"),
                        "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
                    ));
                }
            }
            _ => causes.push(FieldCause::invalid(
                format!("{at}.operator"),
                &operator,
                "not a valid selector operator",
            )),
        }
        let key = str_of(req, "key");
        if key != "metadata.name" {
            causes.push(FieldCause::invalid(
                format!("{at}.key"),
                &string(key),
                "not a valid field selector key",
            ));
        } else {
            for (k, v) in values.iter().enumerate() {
                for msg in super::dns1123_subdomain_errors(v.as_str().unwrap_or_default()) {
                    causes.push(FieldCause::invalid(format!("{at}.values[{k}]"), v, msg));
                }
            }
        }
    }
}

/// `ValidateTolerations`.
pub(super) fn tolerations(path: &str, tolerations: &[Value], causes: &mut Vec<FieldCause>) {
    for (i, t) in tolerations.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let key = str_of(t, "key");
        let operator = str_of(t, "operator");
        let value = str_of(t, "value");
        let effect = str_of(t, "effect");
        if !key.is_empty() {
            for msg in qualified_name_errors(key) {
                causes.push(FieldCause::invalid(format!("{at}.key"), &string(key), msg));
            }
        }
        if key.is_empty() && operator != "Exists" {
            causes.push(FieldCause::invalid(
                format!("{at}.operator"),
                &string(operator),
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if set(t, "tolerationSeconds").is_some() && effect != "NoExecute" {
            causes.push(FieldCause::invalid(
                format!("{at}.effect"),
                &string(effect),
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match operator {
            "Equal" | "" => {
                let errs = label_value_errors(value);
                if !errs.is_empty() {
                    causes.push(FieldCause::invalid(
                        format!("{at}.operator"),
                        &string(value),
                        errs.join(";"),
                    ));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    causes.push(FieldCause::invalid(
                        format!("{at}.operator"),
                        &string(value),
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            // Comparison operators need TaintTolerationComparisonOperators (alpha, off).
            "Lt" | "Gt" => causes.push(FieldCause::not_supported(
                format!("{at}.operator"),
                &string(operator),
                &["Equal", "Exists", "Lt", "Gt"],
            )),
            _ => causes.push(FieldCause::not_supported(
                format!("{at}.operator"),
                &string(operator),
                &["Equal", "Exists"],
            )),
        }
        if !effect.is_empty() && !TAINT_EFFECTS.contains(&effect) {
            causes.push(FieldCause::not_supported(
                format!("{at}.effect"),
                &string(effect),
                TAINT_EFFECTS,
            ));
        }
    }
}
