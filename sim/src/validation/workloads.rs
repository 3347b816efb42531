//! Workload validation as kube-apiserver 1.37 runs it: Deployments, ReplicaSets, DaemonSets,
//! StatefulSets (`pkg/apis/apps/validation`), Jobs and CronJobs (`pkg/apis/batch/validation`),
//! on the defaulted object. A pod template is validated as a pod (`ValidatePodTemplateSpec`,
//! which calls `pod::pod_spec` at `<template>.spec`) plus each kind's own template rules: the
//! selector must select the template's labels, the restart policy each kind allows, no
//! `activeDeadlineSeconds` where pods must run for ever.
//!
//! Not checked: a CronJob's schedule and time zone, a Job's `podFailurePolicy`,
//! `successPolicy` and `managedBy` contents, StatefulSet `volumeClaimTemplates` specs, the
//! deprecated `templateGeneration` and `rollbackTo`. A suspended Job's template is not compared
//! on update (kube-apiserver lets scheduling directives change until it starts).

use serde_json::{Value, json};

use super::fields::{
    Selector, array_at, immutable, int_or_percent_value, label_selector, nonnegative, not_more_than_100_percent,
    positive_int_or_percent, required_because, selector_has_no_terms, set_at, str_at,
};
use super::{annotations, dns1123_label_errors, labels, pod};
use crate::status::FieldCause;

/// `maxParallelismForIndexedJob`.
const MAX_INDEXED_PARALLELISM: i64 = 100_000;

/// Rules for a new object of an `apps` or `batch` kind.
pub(super) fn on_create(kind: &str, obj: &Value, causes: &mut Vec<FieldCause>) {
    match kind {
        "Deployment" => deployment(obj, causes),
        "ReplicaSet" => replica_set(obj, causes),
        "DaemonSet" => daemon_set(obj, causes),
        "StatefulSet" => stateful_set(obj.get("spec"), "spec", true, causes),
        "Job" => {
            generated_selector(obj, causes);
            job_spec(obj.get("spec"), causes);
        }
        "CronJob" => {
            cron_job(obj.get("spec"), causes);
            // The controller appends an 11-character suffix to name each Job (at most 63).
            if crate::meta::name(obj).len() > 52 {
                causes.push(FieldCause::invalid(
                    "metadata.name",
                    &json!(crate::meta::name(obj)),
                    "must be no more than 52 characters",
                ));
            }
        }
        _ => {}
    }
}

/// Rules for an update of an `apps` or `batch` kind: the new object's, and what may not change.
pub(super) fn on_update(kind: &str, old: &Value, new: &Value, causes: &mut Vec<FieldCause>) {
    let (o, n) = (old.get("spec"), new.get("spec"));
    let same = |field: &str, causes: &mut Vec<FieldCause>| {
        immutable(
            &format!("spec.{field}"),
            set_at(o, &format!("/{field}")),
            set_at(n, &format!("/{field}")),
            causes,
        );
    };
    match kind {
        "Deployment" => {
            deployment(new, causes);
            same("selector", causes);
        }
        "ReplicaSet" => {
            replica_set(new, causes);
            same("selector", causes);
        }
        "DaemonSet" => {
            same("selector", causes);
            daemon_set(new, causes);
        }
        "StatefulSet" => {
            // An old StatefulSet whose spec is invalid under today's rules may still change
            // (to be deleted past its finalizers): its template is then not validated.
            let mut old_errors = Vec::new();
            stateful_set(o, "spec", true, &mut old_errors);
            stateful_set(n, "spec", old_errors.is_empty(), causes);
            for field in ["selector", "volumeClaimTemplates", "serviceName", "podManagementPolicy"] {
                same(field, causes);
            }
        }
        "Job" => {
            job_spec(n, causes);
            // Completions may change only for Indexed Jobs (with parallelism, not checked here).
            if str_at(n, "/completionMode") != "Indexed" {
                same("completions", causes);
            }
            same("selector", causes);
            if !set_at(o, "/suspend").is_some_and(|s| s == &json!(true)) {
                same("template", causes);
            }
            for field in [
                "completionMode",
                "podFailurePolicy",
                "backoffLimitPerIndex",
                "managedBy",
                "successPolicy",
            ] {
                same(field, causes);
            }
        }
        "CronJob" => cron_job(n, causes),
        _ => {}
    }
}

/// `ValidatePodTemplateSpec` at `path` (`spec.template`): its labels (at `<path>.labels`, as
/// kube-apiserver names them), annotations, and the pod spec.
fn pod_template(path: &str, template: Option<&Value>, causes: &mut Vec<FieldCause>) {
    labels(
        template.and_then(|t| t.pointer("/metadata/labels")),
        &format!("{path}.labels"),
        causes,
    );
    annotations(
        template.and_then(|t| t.pointer("/metadata/annotations")),
        &format!("{path}.annotations"),
        causes,
    );
    pod::pod_spec(&format!("{path}.spec"), template.and_then(|t| t.get("spec")), causes);
    if !array_at(template, "/spec/ephemeralContainers").is_empty() {
        causes.push(FieldCause::forbidden(
            format!("{path}.spec.ephemeralContainers"),
            "ephemeral containers not allowed in pod template",
        ));
    }
}

fn template_labels(template: Option<&Value>) -> Option<&Value> {
    template.and_then(|t| t.pointer("/metadata/labels"))
}

/// The template's labels must be selected by the selector.
fn selector_matches_template(selector: &Selector, template: Option<&Value>, path: &str, causes: &mut Vec<FieldCause>) {
    if !selector.matches(template_labels(template)) {
        causes.push(FieldCause::invalid(
            format!("{path}.metadata.labels"),
            template_labels(template).unwrap_or(&Value::Null),
            "`selector` does not match template `labels`",
        ));
    }
}

/// A template whose pods must run for ever: `restartPolicy: Always`, no deadline.
fn always_restart(path: &str, template: Option<&Value>, kind: &str, causes: &mut Vec<FieldCause>) {
    let policy = set_at(template, "/spec/restartPolicy").cloned().unwrap_or(json!(""));
    if policy != "Always" {
        causes.push(FieldCause::not_supported(
            format!("{path}.spec.restartPolicy"),
            &policy,
            &["Always"],
        ));
    }
    if set_at(template, "/spec/activeDeadlineSeconds").is_some() {
        causes.push(FieldCause::forbidden(
            format!("{path}.spec.activeDeadlineSeconds"),
            format!("activeDeadlineSeconds in {kind} is not Supported"),
        ));
    }
}

/// A required, non-empty selector (Deployments, ReplicaSets, StatefulSets).
fn required_selector(spec: Option<&Value>, owner: &str, causes: &mut Vec<FieldCause>) -> Selector {
    let Some(sel) = set_at(spec, "/selector") else {
        causes.push(FieldCause::required("spec.selector"));
        return Selector::Nothing;
    };
    let selector = label_selector(Some(sel), "spec.selector", causes);
    if selector_has_no_terms(sel) {
        causes.push(FieldCause::invalid(
            "spec.selector",
            sel,
            format!("empty selector is invalid for {owner}"),
        ));
    }
    selector
}

/// `ValidatePodTemplateSpecForReplicaSet` (Deployments too).
fn replica_set_template(selector: &Selector, spec: Option<&Value>, causes: &mut Vec<FieldCause>) {
    if let Selector::Invalid = selector {
        let sel = set_at(spec, "/selector").unwrap_or(&Value::Null);
        causes.push(FieldCause::invalid("spec.selector", sel, "invalid label selector"));
        return;
    }
    let template = spec.and_then(|s| s.get("template"));
    if !selector.is_empty() {
        selector_matches_template(selector, template, "spec.template", causes);
    }
    pod_template("spec.template", template, causes);
    always_restart("spec.template", template, "ReplicaSet", causes);
}

/// `ValidateDeploymentSpec`.
fn deployment(obj: &Value, causes: &mut Vec<FieldCause>) {
    let spec = obj.get("spec");
    nonnegative("spec.replicas", set_at(spec, "/replicas"), causes);
    let selector = required_selector(spec, "deployment", causes);
    replica_set_template(&selector, spec, causes);

    let strategy = set_at(spec, "/strategy");
    match str_at(strategy, "/type") {
        "Recreate" => {
            if set_at(strategy, "/rollingUpdate").is_some() {
                causes.push(FieldCause::forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        "RollingUpdate" => match set_at(strategy, "/rollingUpdate") {
            None => causes.push(required_because(
                "spec.strategy.rollingUpdate",
                "this should be defaulted and never be nil",
            )),
            Some(ru) => {
                let path = "spec.strategy.rollingUpdate";
                let (unavailable, surge) = (set_at(Some(ru), "/maxUnavailable"), set_at(Some(ru), "/maxSurge"));
                positive_int_or_percent(&format!("{path}.maxUnavailable"), unavailable, causes);
                positive_int_or_percent(&format!("{path}.maxSurge"), surge, causes);
                if int_or_percent_value(unavailable) == 0 && int_or_percent_value(surge) == 0 {
                    causes.push(FieldCause::invalid(
                        format!("{path}.maxUnavailable"),
                        unavailable.unwrap_or(&json!(0)),
                        "may not be 0 when `maxSurge` is 0",
                    ));
                }
                not_more_than_100_percent(&format!("{path}.maxUnavailable"), unavailable, causes);
            }
        },
        _ => causes.push(FieldCause::not_supported(
            "spec.strategy",
            strategy.unwrap_or(&Value::Null),
            &["Recreate", "RollingUpdate"],
        )),
    }
    let min_ready = set_at(spec, "/minReadySeconds");
    nonnegative("spec.minReadySeconds", min_ready, causes);
    nonnegative(
        "spec.revisionHistoryLimit",
        set_at(spec, "/revisionHistoryLimit"),
        causes,
    );
    if let Some(deadline) = set_at(spec, "/progressDeadlineSeconds") {
        nonnegative("spec.progressDeadlineSeconds", Some(deadline), causes);
        let min_ready = min_ready.and_then(Value::as_i64).unwrap_or(0);
        if deadline.as_i64().is_some_and(|d| d <= min_ready) {
            causes.push(FieldCause::invalid(
                "spec.progressDeadlineSeconds",
                deadline,
                "must be greater than minReadySeconds",
            ));
        }
    }
}

/// `ValidateReplicaSetSpec`.
fn replica_set(obj: &Value, causes: &mut Vec<FieldCause>) {
    let spec = obj.get("spec");
    nonnegative("spec.replicas", set_at(spec, "/replicas"), causes);
    nonnegative("spec.minReadySeconds", set_at(spec, "/minReadySeconds"), causes);
    // kube-apiserver says "deployment" for ReplicaSets too.
    let selector = required_selector(spec, "deployment", causes);
    replica_set_template(&selector, spec, causes);
}

/// `ValidateDaemonSetSpec`: no selector is not "required" here, but selects nothing.
fn daemon_set(obj: &Value, causes: &mut Vec<FieldCause>) {
    let spec = obj.get("spec");
    let template = spec.and_then(|s| s.get("template"));
    let sel = set_at(spec, "/selector");
    let selector = label_selector(sel, "spec.selector", causes);
    if !matches!(selector, Selector::Invalid) {
        selector_matches_template(&selector, template, "spec.template", causes);
    }
    if let Some(sel) = sel
        && selector_has_no_terms(sel)
    {
        causes.push(FieldCause::invalid(
            "spec.selector",
            sel,
            "empty selector is invalid for daemonset",
        ));
    }
    pod_template("spec.template", template, causes);
    always_restart("spec.template", template, "DaemonSet", causes);
    nonnegative("spec.minReadySeconds", set_at(spec, "/minReadySeconds"), causes);
    nonnegative("spec.templateGeneration", set_at(spec, "/templateGeneration"), causes);

    let strategy = set_at(spec, "/updateStrategy");
    match str_at(strategy, "/type") {
        "OnDelete" => {}
        "RollingUpdate" => match set_at(strategy, "/rollingUpdate") {
            None => causes.push(FieldCause::required("spec.updateStrategy.rollingUpdate")),
            Some(ru) => {
                let path = "spec.updateStrategy.rollingUpdate";
                let (unavailable, surge) = (set_at(Some(ru), "/maxUnavailable"), set_at(Some(ru), "/maxSurge"));
                positive_int_or_percent(&format!("{path}.maxUnavailable"), unavailable, causes);
                positive_int_or_percent(&format!("{path}.maxSurge"), surge, causes);
                not_more_than_100_percent(&format!("{path}.maxUnavailable"), unavailable, causes);
                not_more_than_100_percent(&format!("{path}.maxSurge"), surge, causes);
                let has_unavailable = int_or_percent_value(unavailable) != 0;
                let has_surge = int_or_percent_value(surge) != 0;
                if has_unavailable && has_surge {
                    causes.push(FieldCause::invalid(
                        format!("{path}.maxSurge"),
                        surge.unwrap_or(&Value::Null),
                        "may not be set when maxUnavailable is non-zero",
                    ));
                } else if !has_unavailable && !has_surge {
                    causes.push(required_because(
                        format!("{path}.maxUnavailable"),
                        "cannot be 0 when maxSurge is 0",
                    ));
                }
            }
        },
        _ => causes.push(FieldCause::not_supported(
            "spec.updateStrategy",
            strategy.unwrap_or(&Value::Null),
            &["RollingUpdate", "OnDelete"],
        )),
    }
    nonnegative(
        "spec.revisionHistoryLimit",
        set_at(spec, "/revisionHistoryLimit"),
        causes,
    );
}

/// `ValidateStatefulSetSpec`; `with_template` is false when an update must not validate it.
fn stateful_set(spec: Option<&Value>, path: &str, with_template: bool, causes: &mut Vec<FieldCause>) {
    match str_at(spec, "/podManagementPolicy") {
        "" => causes.push(FieldCause::required(format!("{path}.podManagementPolicy"))),
        "OrderedReady" | "Parallel" => {}
        other => causes.push(FieldCause::invalid(
            format!("{path}.podManagementPolicy"),
            &json!(other),
            "must be 'OrderedReady' or 'Parallel'",
        )),
    }
    let strategy = set_at(spec, "/updateStrategy");
    let rolling = set_at(strategy, "/rollingUpdate");
    match str_at(strategy, "/type") {
        "" => causes.push(FieldCause::required(format!("{path}.updateStrategy"))),
        "OnDelete" => {
            if let Some(ru) = rolling {
                causes.push(FieldCause::invalid(
                    format!("{path}.updateStrategy.rollingUpdate"),
                    ru,
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        "RollingUpdate" => {
            if let Some(ru) = rolling {
                let at = format!("{path}.updateStrategy.rollingUpdate");
                nonnegative(&format!("{at}.partition"), set_at(Some(ru), "/partition"), causes);
                let max = set_at(Some(ru), "/maxUnavailable");
                if max.is_some() {
                    let field = format!("{at}.maxUnavailable");
                    positive_int_or_percent(&field, max, causes);
                    if int_or_percent_value(max) == 0 {
                        causes.push(FieldCause::invalid(&field, max.unwrap_or(&Value::Null), "cannot be 0"));
                    }
                    not_more_than_100_percent(&field, max, causes);
                }
            }
        }
        _ => causes.push(FieldCause::invalid(
            format!("{path}.updateStrategy"),
            strategy.unwrap_or(&Value::Null),
            "must be 'RollingUpdate' or 'OnDelete'",
        )),
    }
    for when in ["whenDeleted", "whenScaled"] {
        let v = set_at(spec, &format!("/persistentVolumeClaimRetentionPolicy/{when}"));
        if set_at(spec, "/persistentVolumeClaimRetentionPolicy").is_some()
            && !v
                .and_then(Value::as_str)
                .is_some_and(|s| s == "Retain" || s == "Delete")
        {
            causes.push(FieldCause::not_supported(
                format!("{path}.persistentVolumeClaimRetentionPolicy.{when}"),
                v.unwrap_or(&json!("")),
                &["Retain", "Delete"],
            ));
        }
    }
    nonnegative(&format!("{path}.replicas"), set_at(spec, "/replicas"), causes);
    nonnegative(
        &format!("{path}.minReadySeconds"),
        set_at(spec, "/minReadySeconds"),
        causes,
    );
    nonnegative(
        &format!("{path}.ordinals.start"),
        set_at(spec, "/ordinals/start"),
        causes,
    );
    let service_name = str_at(spec, "/serviceName");
    if !service_name.is_empty() {
        for msg in dns1123_label_errors(service_name) {
            causes.push(FieldCause::invalid(
                format!("{path}.serviceName"),
                &json!(service_name),
                msg,
            ));
        }
    }
    let selector = required_selector(spec, "statefulset", causes);
    if let Selector::Invalid = selector {
        let sel = set_at(spec, "/selector").unwrap_or(&Value::Null);
        causes.push(FieldCause::invalid(format!("{path}.selector"), sel, ""));
    } else {
        // The controller sets each pod's hostname and subdomain, and adds a volume per claim
        // template: the template is validated as the pods will be.
        let mut template = spec.and_then(|s| s.get("template")).cloned().unwrap_or(json!({}));
        if let Some(pod) = template.get_mut("spec").and_then(Value::as_object_mut) {
            pod.remove("hostname");
            pod.remove("subdomain");
            let claims: Vec<String> = array_at(spec, "/volumeClaimTemplates")
                .iter()
                .map(|c| str_at(Some(c), "/metadata/name").to_string())
                .collect();
            if !claims.is_empty() {
                let mut volumes: Vec<Value> = claims
                    .iter()
                    .map(|c| json!({ "name": c, "persistentVolumeClaim": { "claimName": c } }))
                    .collect();
                if let Some(Value::Array(own)) = pod.get("volumes") {
                    volumes.extend(
                        own.iter()
                            .filter(|v| !claims.iter().any(|c| v.get("name") == Some(&json!(c))))
                            .cloned(),
                    );
                }
                pod.insert("volumes".into(), Value::Array(volumes));
            }
        }
        let template_path = format!("{path}.template");
        if !selector.is_empty() {
            selector_matches_template(&selector, Some(&template), &template_path, causes);
        }
        if with_template {
            pod_template(&template_path, Some(&template), causes);
        }
        // ValidatePodTemplateSpecForStatefulSet checks these twice, as kube-apiserver does.
        labels(
            template_labels(Some(&template)),
            &format!("{template_path}.labels"),
            causes,
        );
        annotations(
            template.pointer("/metadata/annotations"),
            &format!("{template_path}.annotations"),
            causes,
        );
    }
    let template = spec.and_then(|s| s.get("template"));
    always_restart(&format!("{path}.template"), template, "StatefulSet", causes);
}

/// `validateGeneratedSelector` on create: unless `manualSelector`, the template carries the
/// generated labels and the selector selects them.
fn generated_selector(obj: &Value, causes: &mut Vec<FieldCause>) {
    let spec = obj.get("spec");
    if set_at(spec, "/manualSelector") == Some(&json!(true)) {
        return;
    }
    let Some(sel) = set_at(spec, "/selector") else {
        return;
    };
    let uid = crate::meta::uid(obj);
    let name = crate::meta::name(obj);
    let template_labels = set_at(spec, "/template/metadata/labels");
    for (key, expected) in [
        ("controller-uid", uid),
        ("job-name", name),
        ("batch.kubernetes.io/controller-uid", uid),
        ("batch.kubernetes.io/job-name", name),
    ] {
        let field = format!("spec.template.metadata.labels[{key}]");
        let must = format!("must be '{expected}'");
        match template_labels.and_then(|l| l.get(key)) {
            None => causes.push(required_because(field, &must)),
            Some(v) if v.as_str() != Some(expected) => {
                causes.push(FieldCause::invalid(
                    field,
                    template_labels.unwrap_or(&Value::Null),
                    must,
                ));
            }
            Some(_) => {}
        }
    }
    if let Ok(selector) = crate::selectors::LabelSelector::from_object(sel) {
        let expected = json!({
            "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
            "controller-uid": uid, "job-name": name,
        });
        if !selector.matches(expected.as_object()) {
            causes.push(FieldCause::invalid(
                "spec.selector",
                sel,
                "`selector` not auto-generated",
            ));
        }
    }
}

/// `ValidateJobSpec`: `validateJobSpec`, then the selector, which must select the template.
fn job_spec(spec: Option<&Value>, causes: &mut Vec<FieldCause>) {
    job_spec_common(spec, "spec", causes);
    let selector = match set_at(spec, "/selector") {
        None => {
            causes.push(FieldCause::required("spec.selector"));
            Selector::Nothing
        }
        Some(sel) => label_selector(Some(sel), "spec.selector", causes),
    };
    if !matches!(selector, Selector::Invalid) {
        selector_matches_template(&selector, spec.and_then(|s| s.get("template")), "spec.template", causes);
    }
}

/// `validateJobSpec` at `path` (`spec`, or a CronJob's `spec.jobTemplate.spec`).
fn job_spec_common(spec: Option<&Value>, path: &str, causes: &mut Vec<FieldCause>) {
    for field in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
    ] {
        nonnegative(&format!("{path}.{field}"), set_at(spec, &format!("/{field}")), causes);
    }
    let max_failed = set_at(spec, "/maxFailedIndexes");
    let per_index = set_at(spec, "/backoffLimitPerIndex");
    if let Some(v) = max_failed {
        nonnegative(&format!("{path}.maxFailedIndexes"), Some(v), causes);
        if per_index.is_none() {
            causes.push(required_because(
                format!("{path}.backoffLimitPerIndex"),
                "when maxFailedIndexes is specified",
            ));
        }
    }
    let mode = set_at(spec, "/completionMode");
    if let Some(m) = mode
        && !m.as_str().is_some_and(|s| s == "NonIndexed" || s == "Indexed")
    {
        causes.push(FieldCause::not_supported(
            format!("{path}.completionMode"),
            m,
            &["NonIndexed", "Indexed"],
        ));
    }
    let indexed = mode.and_then(Value::as_str) == Some("Indexed");
    if indexed {
        if set_at(spec, "/completions").is_none() {
            causes.push(required_because(
                format!("{path}.completions"),
                "when completion mode is Indexed",
            ));
        }
        if let Some(p) = set_at(spec, "/parallelism")
            && p.as_i64().is_some_and(|p| p > MAX_INDEXED_PARALLELISM)
        {
            causes.push(FieldCause::invalid(
                format!("{path}.parallelism"),
                p,
                format!("must be less than or equal to {MAX_INDEXED_PARALLELISM} when completion mode is Indexed"),
            ));
        }
    } else if mode.is_none_or(|m| m == "NonIndexed") {
        for (field, v) in [("backoffLimitPerIndex", per_index), ("maxFailedIndexes", max_failed)] {
            if let Some(v) = v {
                causes.push(FieldCause::invalid(
                    format!("{path}.{field}"),
                    v,
                    "requires indexed completion mode",
                ));
            }
        }
    }
    if let Some(p) = set_at(spec, "/successPolicy")
        && !indexed
    {
        causes.push(FieldCause::invalid(
            format!("{path}.successPolicy"),
            p,
            "requires indexed completion mode",
        ));
    }
    let failure_policy = set_at(spec, "/podFailurePolicy").is_some();
    if let Some(p) = set_at(spec, "/podReplacementPolicy") {
        if failure_policy {
            if p != "Failed" {
                causes.push(FieldCause::not_supported(
                    format!("{path}.podReplacementPolicy"),
                    p,
                    &["Failed"],
                ));
            }
        } else if !p.as_str().is_some_and(|s| s == "Failed" || s == "TerminatingOrFailed") {
            causes.push(FieldCause::not_supported(
                format!("{path}.podReplacementPolicy"),
                p,
                &["Failed", "TerminatingOrFailed"],
            ));
        }
    }

    let template_path = format!("{path}.template");
    let template = spec.and_then(|s| s.get("template"));
    pod_template(&template_path, template, causes);
    // An unset restartPolicy would have been defaulted to Always.
    let field = format!("{template_path}.spec.restartPolicy");
    match str_at(template, "/spec/restartPolicy") {
        "" | "Always" => causes.push(required_because(field, "valid values: \"OnFailure\", \"Never\"")),
        "OnFailure" if failure_policy => causes.push(FieldCause::invalid(
            field,
            &json!("OnFailure"),
            "only \"Never\" is supported when podFailurePolicy is specified",
        )),
        "OnFailure" | "Never" => {}
        other => causes.push(FieldCause::not_supported(field, &json!(other), &["OnFailure", "Never"])),
    }
}

/// `validateCronJobSpec`, without the schedule's syntax and the time zone's existence.
fn cron_job(spec: Option<&Value>, causes: &mut Vec<FieldCause>) {
    let schedule = str_at(spec, "/schedule");
    if schedule.is_empty() {
        causes.push(FieldCause::required("spec.schedule"));
    } else if schedule.contains("TZ") {
        causes.push(FieldCause::invalid(
            "spec.schedule",
            &json!(schedule),
            "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
        ));
    }
    nonnegative(
        "spec.startingDeadlineSeconds",
        set_at(spec, "/startingDeadlineSeconds"),
        causes,
    );
    if let Some(tz) = set_at(spec, "/timeZone")
        && tz == ""
    {
        causes.push(FieldCause::invalid(
            "spec.timeZone",
            tz,
            "timeZone must be nil or non-empty string",
        ));
    }
    match set_at(spec, "/concurrencyPolicy") {
        None => causes.push(FieldCause::required("spec.concurrencyPolicy")),
        Some(p) if p == "" => causes.push(FieldCause::required("spec.concurrencyPolicy")),
        Some(p) if !p.as_str().is_some_and(|s| ["Allow", "Forbid", "Replace"].contains(&s)) => {
            causes.push(FieldCause::not_supported(
                "spec.concurrencyPolicy",
                p,
                &["Allow", "Forbid", "Replace"],
            ));
        }
        Some(_) => {}
    }
    let job = spec.and_then(|s| s.pointer("/jobTemplate/spec"));
    job_spec_common(job, "spec.jobTemplate.spec", causes);
    if let Some(sel) = set_at(job, "/selector") {
        causes.push(FieldCause::invalid(
            "spec.jobTemplate.spec.selector",
            sel,
            "`selector` will be auto-generated",
        ));
    }
    if set_at(job, "/manualSelector") == Some(&json!(true)) {
        causes.push(FieldCause::not_supported(
            "spec.jobTemplate.spec.manualSelector",
            &json!(true),
            &["nil", "false"],
        ));
    }
    for field in ["successfulJobsHistoryLimit", "failedJobsHistoryLimit"] {
        nonnegative(&format!("spec.{field}"), set_at(spec, &format!("/{field}")), causes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(kind: &str, obj: Value) -> Vec<String> {
        let mut c = Vec::new();
        on_create(kind, &obj, &mut c);
        c.into_iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    fn template(labels: Value, restart: &str) -> Value {
        json!({ "metadata": { "labels": labels },
                "spec": { "restartPolicy": restart, "containers": [{ "name": "c", "image": "i" }] } })
    }

    #[test]
    fn a_deployment_selects_its_template() {
        let ok = json!({ "spec": { "replicas": 1, "selector": { "matchLabels": { "app": "a" } },
            "template": template(json!({ "app": "a" }), "Always"),
            "strategy": { "type": "RollingUpdate", "rollingUpdate": { "maxSurge": "25%", "maxUnavailable": "25%" } } } });
        assert_eq!(errors("Deployment", ok.clone()), Vec::<String>::new());
        let mut bad = ok;
        bad["spec"]["template"]["metadata"]["labels"] = json!({ "app": "b" });
        bad["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
        bad["spec"]["replicas"] = json!(-1);
        assert_eq!(
            errors("Deployment", bad),
            [
                "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
                "spec.template.metadata.labels: Invalid value: {\"app\":\"b\"}: `selector` does not match template `labels`",
                "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
            ]
        );
    }

    #[test]
    fn an_invalid_selector_skips_the_template() {
        let obj = json!({ "spec": { "selector": { "matchExpressions": [{ "key": "a", "operator": "Near" }] },
            "template": {}, "strategy": { "type": "Recreate" } } });
        let fields: Vec<String> = errors("Deployment", obj)
            .into_iter()
            .map(|e| e.split(':').next().unwrap_or("").to_string())
            .collect();
        assert_eq!(fields, ["spec.selector.matchExpressions[0].operator", "spec.selector"]);
    }

    #[test]
    fn jobs_restart_only_on_failure_or_never() {
        let job = |restart: &str| {
            json!({ "metadata": { "name": "j", "uid": "u" }, "spec": {
                "selector": { "matchLabels": { "batch.kubernetes.io/controller-uid": "u" } },
                "template": template(json!({ "batch.kubernetes.io/controller-uid": "u", "batch.kubernetes.io/job-name": "j",
                    "controller-uid": "u", "job-name": "j" }), restart) } })
        };
        assert_eq!(errors("Job", job("Never")), Vec::<String>::new());
        assert_eq!(
            errors("Job", job("Always")),
            ["spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""]
        );
    }

    #[test]
    fn a_jobs_template_and_selector_are_immutable_unless_suspended() {
        let old = json!({ "spec": { "selector": { "matchLabels": { "a": "b" } }, "template": template(json!({ "a": "b" }), "Never") } });
        let mut new = old.clone();
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("other");
        let mut c = Vec::new();
        on_update("Job", &old, &new, &mut c);
        assert_eq!(
            c.iter().map(|c| c.field.as_str()).collect::<Vec<_>>(),
            ["spec.template"]
        );
        let mut suspended = old;
        suspended["spec"]["suspend"] = json!(true);
        let mut c = Vec::new();
        on_update("Job", &suspended, &new, &mut c);
        assert_eq!(c, Vec::new());
    }

    #[test]
    fn daemon_sets_surge_or_drop_but_not_both() {
        let ds = json!({ "spec": { "selector": { "matchLabels": { "a": "b" } }, "template": template(json!({ "a": "b" }), "Always"),
            "updateStrategy": { "type": "RollingUpdate", "rollingUpdate": { "maxUnavailable": 1, "maxSurge": "10%" } } } });
        assert_eq!(
            errors("DaemonSet", ds),
            [
                "spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: \"10%\": may not be set when maxUnavailable is non-zero"
            ]
        );
    }
}
