//! Probes and lifecycle handlers (`validateLivenessProbe`, `validateReadinessProbe`,
//! `validateStartupProbe`, `validateProbe`, `validateLifecycle`, `validateHandler`). Probes were
//! defaulted first (`SetDefaults_Probe`: zero timeouts, periods and thresholds become 1, 10, 1,
//! 3; `SetDefaults_HTTPGetAction`: path `/`, scheme `HTTP`), so only negative numbers and a
//! liveness or startup `successThreshold` other than 1 are left to refuse. A named port is not
//! checked against the container's ports: kube-apiserver accepts one that does not exist (the
//! kubelet fails the probe).

use serde_json::Value;

use super::{array_of, int_of, nonnegative, set, str_of};
use crate::status::FieldCause;
use crate::validation::fields::port_name_errors;

const HTTP_SCHEMES: &[&str] = &["HTTP", "HTTPS"];
const HTTP_HEADER_NAME_MSG: &str = "a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')";

/// A container's three probes.
pub(super) fn probes(at: &str, c: &Value, grace: Option<i64>, causes: &mut Vec<FieldCause>) {
    for kind in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let Some(probe) = set(c, kind) else { continue };
        let path = format!("{at}.{kind}");
        handler(&path, probe, &["exec", "httpGet", "tcpSocket", "grpc"], grace, causes);
        for field in [
            "initialDelaySeconds",
            "timeoutSeconds",
            "periodSeconds",
            "successThreshold",
            "failureThreshold",
        ] {
            nonnegative(format!("{path}.{field}"), int_of(probe, field), causes);
        }
        if let Some(v) = set(probe, "terminationGracePeriodSeconds") {
            if v.as_i64().is_some_and(|n| n <= 0) {
                causes.push(FieldCause::invalid(
                    format!("{path}.terminationGracePeriodSeconds"),
                    v,
                    "must be greater than 0",
                ));
            }
            if kind == "readinessProbe" {
                causes.push(FieldCause::invalid(
                    format!("{path}.terminationGracePeriodSeconds"),
                    v,
                    "must not be set for readinessProbes",
                ));
            }
        }
        if kind != "readinessProbe"
            && let Some(v) = probe.get("successThreshold").filter(|v| v.as_i64() != Some(1))
        {
            causes.push(FieldCause::invalid(format!("{path}.successThreshold"), v, "must be 1"));
        }
    }
}

/// `validateLifecycle`.
pub(super) fn lifecycle(path: &str, lifecycle: Option<&Value>, grace: Option<i64>, causes: &mut Vec<FieldCause>) {
    let Some(lifecycle) = lifecycle else { return };
    for hook in ["postStart", "preStop"] {
        if let Some(h) = set(lifecycle, hook) {
            handler(
                &format!("{path}.{hook}"),
                h,
                &["exec", "httpGet", "tcpSocket", "sleep"],
                grace,
                causes,
            );
        }
    }
    // `stopSignal` needs ContainerStopSignals (alpha, off in 1.37): the field is dropped, not judged.
}

/// `validateHandler`: exactly one of the handler types `kinds`, each checked.
fn handler(path: &str, h: &Value, kinds: &[&str], grace: Option<i64>, causes: &mut Vec<FieldCause>) {
    let mut found = 0;
    for kind in kinds {
        let Some(action) = set(h, kind) else { continue };
        let at = format!("{path}.{kind}");
        if found > 0 {
            causes.push(FieldCause::forbidden(at, "may not specify more than 1 handler type"));
            continue;
        }
        found += 1;
        match *kind {
            "exec" if array_of(Some(action), "command").is_empty() => {
                causes.push(FieldCause::required(format!("{at}.command")));
            }
            "httpGet" => {
                if str_of(action, "path").is_empty() {
                    causes.push(FieldCause::required(format!("{at}.path")));
                }
                port_num_or_name(&format!("{at}.port"), action.get("port"), causes);
                let scheme = action.get("scheme").cloned().unwrap_or(Value::String(String::new()));
                if !scheme.as_str().is_some_and(|s| HTTP_SCHEMES.contains(&s)) {
                    causes.push(FieldCause::not_supported(format!("{at}.scheme"), &scheme, HTTP_SCHEMES));
                }
                for header in array_of(Some(action), "httpHeaders") {
                    let name = str_of(header, "name");
                    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                        causes.push(FieldCause::invalid(
                            format!("{at}.httpHeaders"),
                            &Value::String(name.into()),
                            HTTP_HEADER_NAME_MSG,
                        ));
                    }
                }
            }
            "tcpSocket" => port_num_or_name(&format!("{at}.port"), action.get("port"), causes),
            "grpc" => {
                let port = action.get("port").cloned().unwrap_or(Value::from(0));
                port_num_or_name(&format!("{at}.port"), Some(&port), causes);
            }
            "sleep" => {
                let seconds = int_of(action, "seconds").unwrap_or(0);
                if let Some(g) = grace
                    && (seconds < 0 || seconds > g)
                {
                    causes.push(FieldCause::invalid(
                        at,
                        &Value::from(seconds),
                        format!("must be non-negative and less than terminationGracePeriodSeconds ({g})"),
                    ));
                }
            }
            _ => {}
        }
    }
    if found == 0 {
        causes.push(super::required(path, "must specify a handler type"));
    }
}

/// `ValidatePortNumOrName`: a number in 1..65535 or a valid port name.
fn port_num_or_name(field: &str, port: Option<&Value>, causes: &mut Vec<FieldCause>) {
    match port {
        Some(Value::String(name)) => {
            for msg in port_name_errors(name) {
                causes.push(FieldCause::invalid(field, &Value::String(name.clone()), msg));
            }
        }
        other => {
            let n = other.and_then(Value::as_i64).unwrap_or(0);
            if !(1..=65535).contains(&n) {
                causes.push(FieldCause::invalid(
                    field,
                    &Value::from(n),
                    "must be between 1 and 65535, inclusive",
                ));
            }
        }
    }
}
