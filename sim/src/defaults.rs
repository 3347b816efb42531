//! Defaulting of built-in kinds, as the apiserver's scheme defaulters do when decoding a request,
//! plus the few values registries set on create (pod phase, service cluster IP, namespace phase).
//!
//! Only the defaults clients commonly observe, and those validation depends on, are here; each one
//! is what Kubernetes sets (1.33 for most, 1.37 for pods, which the pod validation follows).

use serde_json::{Map, Value, json};

use crate::meta;

/// Applies scheme defaults to an object of `group`/`kind` (stored form). Runs on create and update.
pub fn apply(group: &str, kind: &str, obj: &mut Value) {
    match (group, kind) {
        ("", "Pod") => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                // SetDefaults_Pod, not for templates: a negative grace period becomes 1.
                if spec
                    .get("terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
                    .is_some_and(|g| g < 0)
                {
                    spec.insert("terminationGracePeriodSeconds".into(), json!(1));
                }
                pod_spec(spec);
                pod_only(spec);
            }
        }
        ("", "Service") => service(obj),
        ("", "Secret") => secret(obj),
        ("", "Namespace") => namespace(obj),
        ("apps", "Deployment") => {
            workload(
                obj,
                &[
                    ("replicas", json!(1)),
                    ("revisionHistoryLimit", json!(10)),
                    ("progressDeadlineSeconds", json!(600)),
                ],
            );
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                // SetDefaults_Deployment: an empty strategy type is RollingUpdate, whose unset
                // maxUnavailable and maxSurge are 25% each.
                let strategy = spec.entry("strategy").or_insert_with(|| json!({}));
                if let Value::Object(st) = strategy {
                    default_str(st, "type", "RollingUpdate");
                    if st.get("type") == Some(&json!("RollingUpdate")) {
                        rolling_update(st, &[("maxUnavailable", json!("25%")), ("maxSurge", json!("25%"))]);
                    }
                }
            }
        }
        ("apps", "DaemonSet") => {
            workload(obj, &[("revisionHistoryLimit", json!(10))]);
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                // SetDefaults_DaemonSet: RollingUpdate with maxUnavailable 1 and maxSurge 0.
                let strategy = spec.entry("updateStrategy").or_insert_with(|| json!({}));
                if let Value::Object(st) = strategy {
                    default_str(st, "type", "RollingUpdate");
                    if st.get("type") == Some(&json!("RollingUpdate")) {
                        rolling_update(st, &[("maxUnavailable", json!(1)), ("maxSurge", json!(0))]);
                    }
                }
            }
        }
        ("apps", "ReplicaSet") => workload(obj, &[("replicas", json!(1))]),
        ("apps", "StatefulSet") => stateful_set(obj),
        ("batch", "CronJob") => cron_job(obj),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => binding(obj),
        ("batch", "Job") => job(obj),
        _ => {}
    }
}

/// SetDefaults_Job (1.33, JobPodReplacementPolicy on): completions and parallelism 1 when
/// both are unset, else parallelism 1; the Job's labels from its template when it has none.
fn job(obj: &mut Value) {
    workload(obj, &[]);
    let template_labels = obj.pointer("/spec/template/metadata/labels").cloned();
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if !spec.contains_key("completions") && !spec.contains_key("parallelism") {
        spec.insert("completions".into(), json!(1));
    }
    spec.entry("parallelism").or_insert(json!(1));
    let per_index = spec.get("backoffLimitPerIndex").is_some_and(|v| !v.is_null());
    spec.entry("backoffLimit")
        .or_insert(if per_index { json!(i32::MAX) } else { json!(6) });
    spec.entry("completionMode").or_insert(json!("NonIndexed"));
    spec.entry("suspend").or_insert(json!(false));
    let failure_policy = spec.get("podFailurePolicy").is_some_and(|v| !v.is_null());
    spec.entry("podReplacementPolicy").or_insert(if failure_policy {
        json!("Failed")
    } else {
        json!("TerminatingOrFailed")
    });
    spec.entry("manualSelector").or_insert(json!(false));
    let has_labels = obj
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .is_some_and(|l| !l.is_empty());
    if !has_labels && let Some(labels) = template_labels.filter(|l| l.as_object().is_some_and(|m| !m.is_empty())) {
        meta::set(obj, "labels", labels);
    }
}

/// What a registry sets once the new object has its uid: a Job's generated selector and pod
/// labels (`generateSelector` in the Job strategy, unless `manualSelector`), which the real
/// apiserver then copies to a Job without labels when it defaults the stored object.
pub fn with_uid(group: &str, kind: &str, obj: &mut Value) {
    if (group, kind) != ("batch", "Job") || obj.pointer("/spec/manualSelector") == Some(&json!(true)) {
        return;
    }
    let uid = meta::uid(obj).to_string();
    let name = meta::name(obj).to_string();
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let template = spec.entry("template").or_insert_with(|| json!({}));
    if !template["metadata"].is_object() {
        template["metadata"] = json!({});
    }
    if !template["metadata"]["labels"].is_object() {
        template["metadata"]["labels"] = json!({});
    }
    // A label the client set is kept (a conflicting one is refused by validation).
    for (k, v) in [
        ("batch.kubernetes.io/controller-uid", &uid),
        ("batch.kubernetes.io/job-name", &name),
        ("controller-uid", &uid),
        ("job-name", &name),
    ] {
        if template["metadata"]["labels"].get(k).is_none() {
            template["metadata"]["labels"][k] = json!(v);
        }
    }
    let labels = template["metadata"]["labels"].clone();
    // The selector gets the controller-uid label unless it has one already.
    let selector = spec.entry("selector").or_insert_with(|| json!({}));
    if !selector.is_object() {
        *selector = json!({});
    }
    if !selector["matchLabels"].is_object() {
        selector["matchLabels"] = json!({});
    }
    if selector["matchLabels"]
        .get("batch.kubernetes.io/controller-uid")
        .is_none()
    {
        selector["matchLabels"]["batch.kubernetes.io/controller-uid"] = json!(uid);
    }
    let has_labels = obj
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .is_some_and(|l| !l.is_empty());
    if !has_labels {
        meta::set(obj, "labels", labels);
    }
}

/// Status a registry sets on create for kinds with a status subresource (the client's is dropped).
pub fn initial_status(group: &str, kind: &str, obj: &Value) -> Option<Value> {
    match (group, kind) {
        ("", "Pod") => Some(json!({ "phase": "Pending", "qosClass": qos_class(obj) })),
        ("", "Namespace") => Some(json!({ "phase": "Active" })),
        ("", "Service") => Some(json!({ "loadBalancer": {} })),
        _ => None,
    }
}

fn workload(obj: &mut Value, defaults: &[(&str, Value)]) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for (k, v) in defaults {
        spec.entry(k.to_string()).or_insert_with(|| v.clone());
    }
    if let Some(pod) = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        pod_spec(pod);
    }
}

/// An empty or missing string field gets `value`.
fn default_str(m: &mut Map<String, Value>, key: &str, value: &str) {
    let v = m.entry(key).or_insert(json!(value));
    if v == "" || v.is_null() {
        *v = json!(value);
    }
}

/// A strategy's `rollingUpdate`, created when missing, with each unset field defaulted.
fn rolling_update(strategy: &mut Map<String, Value>, defaults: &[(&str, Value)]) {
    let ru = strategy.entry("rollingUpdate").or_insert_with(|| json!({}));
    if ru.is_null() {
        *ru = json!({});
    }
    if let Value::Object(ru) = ru {
        for (k, v) in defaults {
            let field = ru.entry(k.to_string()).or_insert_with(|| v.clone());
            if field.is_null() {
                *field = v.clone();
            }
        }
    }
}

/// `SetDefaults_StatefulSet` (1.37: MaxUnavailableStatefulSet is on, so `maxUnavailable` is 1).
fn stateful_set(obj: &mut Value) {
    workload(obj, &[("replicas", json!(1)), ("revisionHistoryLimit", json!(10))]);
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    default_str(spec, "podManagementPolicy", "OrderedReady");
    let strategy = spec.entry("updateStrategy").or_insert_with(|| json!({}));
    if let Value::Object(st) = strategy {
        if st.get("type").and_then(Value::as_str).unwrap_or("").is_empty() {
            st.insert("type".into(), json!("RollingUpdate"));
            st.entry("rollingUpdate").or_insert_with(|| json!({}));
        }
        if st.get("type") == Some(&json!("RollingUpdate"))
            && let Some(Value::Object(ru)) = st.get_mut("rollingUpdate")
        {
            ru.entry("partition").or_insert(json!(0));
            ru.entry("maxUnavailable").or_insert(json!(1));
        }
    }
    let policy = spec
        .entry("persistentVolumeClaimRetentionPolicy")
        .or_insert_with(|| json!({}));
    if let Value::Object(p) = policy {
        default_str(p, "whenDeleted", "Retain");
        default_str(p, "whenScaled", "Retain");
    }
}

/// `SetDefaults_RoleBinding` and `SetDefaults_Subject`: the RBAC group where it goes without saying.
fn binding(obj: &mut Value) {
    const GROUP: &str = "rbac.authorization.k8s.io";
    if let Some(Value::Object(role_ref)) = obj.get_mut("roleRef") {
        default_str(role_ref, "apiGroup", GROUP);
    }
    if let Some(Value::Array(subjects)) = obj.get_mut("subjects") {
        for s in subjects.iter_mut().filter_map(Value::as_object_mut) {
            let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
            if matches!(kind, "User" | "Group") {
                default_str(s, "apiGroup", GROUP);
            }
        }
    }
}

/// `SetDefaults_CronJob`, and the pod defaults of its job template.
fn cron_job(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    default_str(spec, "concurrencyPolicy", "Allow");
    spec.entry("suspend").or_insert(json!(false));
    spec.entry("successfulJobsHistoryLimit").or_insert(json!(3));
    spec.entry("failedJobsHistoryLimit").or_insert(json!(1));
    if let Some(pod) = spec
        .get_mut("jobTemplate")
        .and_then(|t| t.pointer_mut("/spec/template/spec"))
        .and_then(Value::as_object_mut)
    {
        pod_spec(pod);
    }
}

fn pod_spec(spec: &mut Map<String, Value>) {
    for (k, v) in [
        ("restartPolicy", json!("Always")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("dnsPolicy", json!("ClusterFirst")),
        ("securityContext", json!({})),
        ("schedulerName", json!("default-scheduler")),
        ("enableServiceLinks", json!(true)),
    ] {
        spec.entry(k).or_insert(v);
    }
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(containers)) = spec.get_mut(list) {
            for c in containers.iter_mut().filter_map(Value::as_object_mut) {
                container(c);
            }
        }
    }
    // SetDefaults_PodSpec: the deprecated `serviceAccount` follows `serviceAccountName`.
    let account = match spec.get("serviceAccountName").and_then(Value::as_str) {
        Some(name) if !name.is_empty() => Some(name.to_string()),
        _ => spec.get("serviceAccount").and_then(Value::as_str).map(str::to_string),
    };
    if let Some(account) = account.filter(|a| !a.is_empty()) {
        spec.insert("serviceAccountName".into(), json!(account));
        spec.insert("serviceAccount".into(), json!(account));
    }
    if let Some(Value::Array(volumes)) = spec.get_mut("volumes") {
        for v in volumes.iter_mut().filter_map(Value::as_object_mut) {
            // SetDefaults_Volume (1.37): a volume without a source is an emptyDir.
            if !v.iter().any(|(k, source)| k != "name" && !source.is_null()) {
                v.insert("emptyDir".into(), json!({}));
            }
            for source in ["configMap", "secret", "downwardAPI", "projected"] {
                if let Some(src) = v.get_mut(source).and_then(Value::as_object_mut) {
                    src.entry("defaultMode").or_insert(json!(420));
                }
            }
            if let Some(src) = v.get_mut("hostPath").and_then(Value::as_object_mut) {
                src.entry("type").or_insert(json!(""));
            }
        }
    }
}

/// SetDefaults_Pod, what applies to Pods and not to pod templates: requests from limits (for
/// every resource with a limit and no request), a negative grace period becomes 1, and with
/// `hostNetwork` an unset host port is the container port.
fn pod_only(spec: &mut Map<String, Value>) {
    if spec
        .get("terminationGracePeriodSeconds")
        .and_then(Value::as_i64)
        .is_some_and(|g| g < 0)
    {
        spec.insert("terminationGracePeriodSeconds".into(), json!(1));
    }
    let host_network = spec.get("hostNetwork").and_then(Value::as_bool) == Some(true);
    for list in ["containers", "initContainers"] {
        let Some(Value::Array(containers)) = spec.get_mut(list) else {
            continue;
        };
        for c in containers.iter_mut().filter_map(Value::as_object_mut) {
            if let Some(Value::Object(resources)) = c.get_mut("resources")
                && let Some(Value::Object(limits)) = resources.get("limits").cloned()
            {
                let requests = resources.entry("requests").or_insert_with(|| json!({}));
                if requests.is_null() {
                    *requests = json!({});
                }
                if let Value::Object(requests) = requests {
                    for (name, limit) in limits {
                        requests.entry(name).or_insert(limit);
                    }
                }
            }
            if host_network && let Some(Value::Array(ports)) = c.get_mut("ports") {
                for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                    let host = p.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
                    if host == 0
                        && let Some(port) = p.get("containerPort").cloned()
                    {
                        p.insert("hostPort".into(), port);
                    }
                }
            }
        }
    }
}

/// SetDefaults_Probe and SetDefaults_HTTPGetAction: zero (or unset) timeouts, periods and
/// thresholds become 1, 10, 1 and 3; an `httpGet` gets path `/` and scheme `HTTP`.
fn probe(p: &mut Map<String, Value>) {
    for (field, default) in [
        ("timeoutSeconds", 1),
        ("periodSeconds", 10),
        ("successThreshold", 1),
        ("failureThreshold", 3),
    ] {
        let v = p.entry(field).or_insert(json!(default));
        if v.as_i64() == Some(0) || v.is_null() {
            *v = json!(default);
        }
    }
    http_get(p);
}

fn http_get(handler: &mut Map<String, Value>) {
    if let Some(Value::Object(get)) = handler.get_mut("httpGet") {
        for (field, default) in [("path", "/"), ("scheme", "HTTP")] {
            let v = get.entry(field).or_insert(json!(default));
            if v.as_str() == Some("") || v.is_null() {
                *v = json!(default);
            }
        }
    }
}

fn container(c: &mut Map<String, Value>) {
    c.entry("terminationMessagePath")
        .or_insert(json!("/dev/termination-log"));
    c.entry("terminationMessagePolicy").or_insert(json!("File"));
    c.entry("resources").or_insert(json!({}));
    if !c.contains_key("imagePullPolicy") {
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        // `:latest` or no tag (and no digest) means Always, as in SetDefaults_Container.
        let last = image.rsplit('/').next().unwrap_or(image);
        let policy = if image.contains('@') {
            "IfNotPresent"
        } else {
            match last.split_once(':') {
                Some((_, "latest")) | None => "Always",
                Some(_) => "IfNotPresent",
            }
        };
        c.insert("imagePullPolicy".into(), json!(policy));
    }
    if let Some(Value::Array(ports)) = c.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("protocol").or_insert(json!("TCP"));
        }
    }
    for kind in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(Value::Object(p)) = c.get_mut(kind) {
            probe(p);
        }
    }
    if let Some(Value::Object(lifecycle)) = c.get_mut("lifecycle") {
        for hook in ["postStart", "preStop"] {
            if let Some(Value::Object(h)) = lifecycle.get_mut(hook) {
                http_get(h);
            }
        }
    }
}

/// Guaranteed when every container has equal requests and limits for cpu and memory,
/// BestEffort when none sets any, Burstable otherwise.
fn qos_class(pod: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|l| pod.pointer(&format!("/spec/{l}")).and_then(Value::as_array))
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in &containers {
        let requests = c.pointer("/resources/requests").and_then(Value::as_object);
        let limits = c.pointer("/resources/limits").and_then(Value::as_object);
        let relevant =
            |m: Option<&Map<String, Value>>| m.is_some_and(|m| m.contains_key("cpu") || m.contains_key("memory"));
        if relevant(requests) || relevant(limits) {
            any = true;
        }
        for res in ["cpu", "memory"] {
            let limit = limits.and_then(|l| l.get(res));
            let request = requests.and_then(|r| r.get(res)).or(limit);
            if limit.is_none() || request != limit {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// `SetDefaults_Service` (1.37).
fn service(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let affinity = spec.entry("sessionAffinity").or_insert(json!("None"));
    if affinity == "" {
        *affinity = json!("None");
    }
    match spec.get("sessionAffinity").and_then(Value::as_str) {
        Some("None") => {
            spec.remove("sessionAffinityConfig");
        }
        Some("ClientIP")
            if spec
                .get("sessionAffinityConfig")
                .and_then(|c| c.pointer("/clientIP/timeoutSeconds"))
                .is_none_or(Value::is_null) =>
        {
            spec.insert(
                "sessionAffinityConfig".into(),
                json!({ "clientIP": { "timeoutSeconds": 10800 } }),
            );
        }
        _ => {}
    }
    let ty = spec.entry("type").or_insert(json!("ClusterIP"));
    if ty == "" {
        *ty = json!("ClusterIP");
    }
    if let Some(Value::Array(ports)) = spec.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("protocol").or_insert(json!("TCP"));
            // A missing, 0 or "" targetPort is the port.
            let unset = match p.get("targetPort") {
                None | Some(Value::Null) => true,
                Some(v) => v.as_i64() == Some(0) || v.as_str() == Some(""),
            };
            if unset {
                let port = p.get("port").cloned().unwrap_or(json!(0));
                p.insert("targetPort".into(), port);
            }
        }
    }
    let ty = spec.get("type").and_then(Value::as_str).unwrap_or("").to_string();
    let has_external_ips = spec
        .get("externalIPs")
        .and_then(Value::as_array)
        .is_some_and(|l| !l.is_empty());
    let externally_accessible =
        matches!(ty.as_str(), "LoadBalancer" | "NodePort") || (ty == "ClusterIP" && has_external_ips);
    if externally_accessible
        && spec
            .get("externalTrafficPolicy")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
    {
        spec.insert("externalTrafficPolicy".into(), json!("Cluster"));
    }
    if matches!(ty.as_str(), "NodePort" | "LoadBalancer" | "ClusterIP") {
        spec.entry("internalTrafficPolicy").or_insert(json!("Cluster"));
    }
    if ty == "LoadBalancer" {
        spec.entry("allocateLoadBalancerNodePorts").or_insert(json!(true));
    }
}

/// Why a Service's cluster IP could not be allocated, as kube-apiserver's registry reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterIpError {
    /// A field error: the Service is Invalid (422).
    #[error("{}: {}", .0.field, .0.message)]
    Invalid(crate::status::FieldCause),
    /// Every address of the range is in use: an internal error (500), as the registry's.
    #[error("failed to allocate a serviceIP: range is full")]
    RangeFull,
}

/// Allocates a cluster IP for a new Service from `range` (kube-apiserver's
/// `--service-cluster-ip-range`; the registry does this, not the defaulter). A requested
/// `clusterIP` must be in the range and free; without one, a free address is picked, from the
/// upper part of the range first (KEP-3070: the lower band is left for static addresses such as
/// the `kubernetes` and `kube-dns` Services'). `taken` says whether another Service holds an IP.
pub fn allocate_service_ip(
    obj: &mut Value,
    range: &crate::network::Ipv4Cidr,
    taken: &dyn Fn(&str) -> bool,
) -> Result<(), ClusterIpError> {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if spec.get("type").and_then(Value::as_str) == Some("ExternalName") {
        return Ok(());
    }
    let first_of_list = spec
        .get("clusterIPs")
        .and_then(Value::as_array)
        .and_then(|l| l.first())
        .and_then(Value::as_str)
        .unwrap_or("");
    let requested = match spec.get("clusterIP").and_then(Value::as_str).unwrap_or("") {
        "" => first_of_list,
        ip => ip,
    }
    .to_string();
    let ip = if requested.is_empty() {
        pick_free(range, taken).ok_or(ClusterIpError::RangeFull)?
    } else if requested == "None" {
        requested
    } else {
        let invalid = |detail: String| {
            ClusterIpError::Invalid(crate::status::FieldCause {
                reason: "FieldValueInvalid".into(),
                field: "spec.clusterIPs".into(),
                message: format!("Invalid value: []string{{{requested:?}}}: {detail}"),
            })
        };
        let Ok(parsed) = requested.parse::<std::net::Ipv4Addr>() else {
            return Err(ClusterIpError::Invalid(crate::status::FieldCause::invalid(
                "spec.clusterIPs[0]",
                &json!(requested),
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            )));
        };
        // The network and broadcast addresses are not part of the allocator's range.
        let usable = range.offset_of(parsed).is_some_and(|o| o != 0 && o != range.size() - 1);
        if !usable {
            return Err(invalid(format!(
                "failed to allocate IP {requested}: the provided IP ({requested}) is not in the valid range. The range of valid IPs is {range}"
            )));
        }
        if taken(&requested) {
            return Err(invalid(format!(
                "failed to allocate IP {requested}: provided IP is already allocated"
            )));
        }
        requested
    };
    spec.insert("clusterIP".into(), json!(ip));
    spec.insert("clusterIPs".into(), json!([ip]));
    spec.entry("ipFamilies").or_insert(json!(["IPv4"]));
    spec.entry("ipFamilyPolicy").or_insert(json!("SingleStack"));
    Ok(())
}

/// On update, a Service that does not say its cluster IP keeps the one it has (the registry's
/// `patchAllocatedValues`: a PUT built without reading the object must not drop it), then its
/// `clusterIPs` follow a changed `clusterIP` (`normalizeClusterIPs`).
pub fn keep_service_ip(old: &Value, new: &mut Value) {
    keep_allocated(old, new);
    normalize_cluster_ips(old, new);
}

/// `patchAllocatedValues`: what the registry allocated stays when a client leaves it out.
fn keep_allocated(old: &Value, new: &mut Value) {
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec.get("type").and_then(Value::as_str) == Some("ExternalName") {
        return;
    }
    for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        let missing = match spec.get(field) {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            _ => false,
        };
        if missing && let Some(v) = old.pointer(&format!("/spec/{field}")) {
            spec.insert(field.into(), v.clone());
        }
    }
}

/// The service registry's `normalizeClusterIPs` on an update: `clusterIPs` follows a changed
/// `clusterIP` when the client left `clusterIPs` as it was (or cleared both), so that validation judges
/// what the client meant.
fn normalize_cluster_ips(old: &Value, new: &mut Value) {
    let text = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("").to_owned();
    let ips = |v: &Value| {
        v.pointer("/spec/clusterIPs")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (old_ip, new_ip) = (text(old, "/spec/clusterIP"), text(new, "/spec/clusterIP"));
    let (old_ips, mut new_ips) = (ips(old), ips(new));
    if !old_ips.is_empty() && new_ips.is_empty() && old_ip == new_ip {
        new_ips = old_ips.clone();
    }
    if old_ip != new_ip && new_ips == old_ips {
        new_ips = if !old_ip.is_empty() && new_ip.is_empty() {
            Vec::new()
        } else {
            vec![Value::String(new_ip)]
        };
    }
    if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
        if new_ips.is_empty() {
            spec.remove("clusterIPs");
        } else {
            spec.insert("clusterIPs".into(), Value::Array(new_ips));
        }
    }
}

/// A free address of `range`: a random one of the upper band, else the first free one of the
/// lower band (network and broadcast addresses excluded).
fn pick_free(range: &crate::network::Ipv4Cidr, taken: &dyn Fn(&str) -> bool) -> Option<String> {
    let size = range.size();
    if size < 4 {
        return None;
    }
    // kube-apiserver's static band: min(max(16, size/16), 256) addresses after the network one.
    let band = (size / 16).clamp(16, 256).min(size - 2);
    let first_dynamic = 1 + band;
    let dynamic = (size - 1).saturating_sub(first_dynamic);
    let random = u64::from_be_bytes(uuid::Uuid::new_v4().as_bytes()[..8].try_into().unwrap_or([0; 8]));
    let upper = (0..dynamic).map(|i| first_dynamic + (random % dynamic.max(1) + i) % dynamic);
    let lower = 1..first_dynamic.min(size - 1);
    upper
        .chain(lower)
        .filter_map(|o| range.nth(o))
        .map(|ip| ip.to_string())
        .find(|ip| !taken(ip))
}

/// `stringData` is write-only: the apiserver merges it into `data` (base64) and drops it.
fn secret(obj: &mut Value) {
    use base64::Engine as _;
    let Value::Object(root) = obj else { return };
    root.entry("type").or_insert(json!("Opaque"));
    if let Some(Value::Object(string_data)) = root.remove("stringData") {
        let data = root.entry("data").or_insert_with(|| json!({}));
        if let Value::Object(data) = data {
            for (k, v) in string_data {
                let s = v.as_str().unwrap_or_default();
                data.insert(k, json!(base64::engine::general_purpose::STANDARD.encode(s)));
            }
        }
    }
}

fn namespace(obj: &mut Value) {
    let name = meta::name(obj).to_string();
    if !name.is_empty() {
        // The NamespaceDefaultLabelName feature: always equal to the name.
        let labels = meta::metadata_mut(obj).entry("labels").or_insert_with(|| json!({}));
        if let Value::Object(l) = labels {
            l.insert("kubernetes.io/metadata.name".into(), json!(name));
        }
    }
    let Value::Object(root) = obj else { return };
    let spec = root.entry("spec").or_insert_with(|| json!({}));
    if let Value::Object(spec) = spec {
        spec.entry("finalizers").or_insert(json!(["kubernetes"]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_defaults() {
        let mut pod = json!({ "spec": { "containers": [
            { "name": "a", "image": "busybox" },
            { "name": "b", "image": "reg:5000/x/y:1.2", "ports": [{ "containerPort": 80 }] }
        ] } });
        apply("", "Pod", &mut pod);
        assert_eq!(pod["spec"]["restartPolicy"], "Always");
        assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(pod["spec"]["containers"][1]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(pod["spec"]["containers"][1]["ports"][0]["protocol"], "TCP");
        assert_eq!(initial_status("", "Pod", &pod).unwrap()["qosClass"], "BestEffort");
    }

    #[test]
    fn qos_classes() {
        let g = json!({ "spec": { "containers": [{ "resources": { "limits": { "cpu": "1", "memory": "1Gi" } } }] } });
        assert_eq!(qos_class(&g), "Guaranteed");
        let b = json!({ "spec": { "containers": [{ "resources": { "requests": { "cpu": "1" } } }] } });
        assert_eq!(qos_class(&b), "Burstable");
    }

    #[test]
    fn secret_string_data_becomes_data() {
        let mut s = json!({ "stringData": { "k": "v" }, "data": { "a": "Yg==" } });
        apply("", "Secret", &mut s);
        assert_eq!(s, json!({ "type": "Opaque", "data": { "a": "Yg==", "k": "dg==" } }));
    }

    #[test]
    fn service_gets_an_ip_and_target_port() {
        let range: crate::network::Ipv4Cidr = "127.9.0.0/18".parse().unwrap();
        let mut s = json!({ "spec": { "ports": [{ "port": 80 }] } });
        apply("", "Service", &mut s);
        allocate_service_ip(&mut s, &range, &|_| false).unwrap();
        assert_eq!(s["spec"]["ports"][0]["targetPort"], 80);
        let ip: std::net::Ipv4Addr = s["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
        // Dynamic addresses come from above the static band (the first 256 addresses).
        assert!(range.offset_of(ip).is_some_and(|o| o > 256), "{ip}");
        assert_eq!(s["spec"]["clusterIPs"], json!([ip.to_string()]));
    }

    #[test]
    fn requested_cluster_ips_in_range_free_or_refused() {
        let range: crate::network::Ipv4Cidr = "127.9.0.0/18".parse().unwrap();
        let svc = |ip: &str| json!({ "spec": { "clusterIP": ip, "ports": [{ "port": 80 }] } });
        let mut ok = svc("127.9.0.20");
        allocate_service_ip(&mut ok, &range, &|_| false).unwrap();
        assert_eq!(ok["spec"]["clusterIPs"], json!(["127.9.0.20"]));
        let message = |ip: &str, taken: bool| match allocate_service_ip(&mut svc(ip), &range, &|_| taken) {
            Err(ClusterIpError::Invalid(c)) => format!("{}: {}", c.field, c.message),
            other => format!("{other:?}"),
        };
        assert_eq!(
            message("127.9.0.20", true),
            r#"spec.clusterIPs: Invalid value: []string{"127.9.0.20"}: failed to allocate IP 127.9.0.20: provided IP is already allocated"#
        );
        assert_eq!(
            message("10.96.0.5", false),
            r#"spec.clusterIPs: Invalid value: []string{"10.96.0.5"}: failed to allocate IP 10.96.0.5: the provided IP (10.96.0.5) is not in the valid range. The range of valid IPs is 127.9.0.0/18"#
        );
        assert!(message("127.9.0.0", false).contains("not in the valid range"));
        assert!(
            message("x", false).starts_with("spec.clusterIPs[0]: Invalid value: \"x\": must be a valid IP address")
        );
        let mut headless = svc("None");
        allocate_service_ip(&mut headless, &range, &|_| true).unwrap();
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
    }

    #[test]
    fn an_update_without_the_cluster_ip_keeps_it() {
        let old = json!({ "spec": { "clusterIP": "127.9.1.2", "clusterIPs": ["127.9.1.2"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack" } });
        let mut new = json!({ "spec": { "ports": [{ "port": 80 }] } });
        keep_service_ip(&old, &mut new);
        assert_eq!(new["spec"]["clusterIP"], "127.9.1.2");
        assert_eq!(new["spec"]["clusterIPs"], json!(["127.9.1.2"]));
    }

    #[test]
    fn a_full_range_is_reported() {
        let range: crate::network::Ipv4Cidr = "127.9.0.0/30".parse().unwrap();
        let mut s = json!({ "spec": { "ports": [{ "port": 80 }] } });
        assert_eq!(
            allocate_service_ip(&mut s, &range, &|_| true),
            Err(ClusterIpError::RangeFull)
        );
        let mut s = json!({ "spec": { "ports": [{ "port": 80 }] } });
        allocate_service_ip(&mut s, &range, &|ip| ip == "127.9.0.1").unwrap();
        assert_eq!(s["spec"]["clusterIP"], "127.9.0.2");
    }
}
