//! Defaulting of built-in kinds, as the apiserver's scheme defaulters do when decoding a request,
//! plus the few values registries set on create (pod phase, service cluster IP, namespace phase).
//!
//! Only the defaults clients commonly observe are here; each one is what Kubernetes 1.33 sets.

use serde_json::{Map, Value, json};

use crate::meta;

/// Applies scheme defaults to an object of `group`/`kind` (stored form). Runs on create and update.
pub fn apply(group: &str, kind: &str, obj: &mut Value) {
    match (group, kind) {
        ("", "Pod") => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                pod_spec(spec);
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
                // SetDefaults_Deployment: an empty strategy type is RollingUpdate with 25%/25%.
                let strategy = spec.entry("strategy").or_insert_with(|| json!({}));
                if let Value::Object(st) = strategy {
                    let t = st.entry("type").or_insert(json!("RollingUpdate"));
                    if t == "" {
                        *t = json!("RollingUpdate");
                    }
                    if st.get("type") == Some(&json!("RollingUpdate")) {
                        st.entry("rollingUpdate")
                            .or_insert(json!({ "maxUnavailable": "25%", "maxSurge": "25%" }));
                    }
                }
            }
        }
        ("apps", "DaemonSet") => {
            workload(obj, &[("revisionHistoryLimit", json!(10))]);
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                spec.entry("updateStrategy").or_insert_with(
                    || json!({ "type": "RollingUpdate", "rollingUpdate": { "maxUnavailable": 1, "maxSurge": 0 } }),
                );
            }
        }
        ("apps", "ReplicaSet" | "StatefulSet") => workload(obj, &[("replicas", json!(1))]),
        ("batch", "Job") => workload(
            obj,
            &[("backoffLimit", json!(6)), ("completionMode", json!("NonIndexed"))],
        ),
        _ => {}
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
    if let Some(Value::Array(volumes)) = spec.get_mut("volumes") {
        for v in volumes.iter_mut() {
            for (source, mode_field) in [("configMap", "defaultMode"), ("secret", "defaultMode")] {
                if let Some(src) = v.get_mut(source).and_then(Value::as_object_mut) {
                    src.entry(mode_field).or_insert(json!(420));
                }
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

fn service(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("type").or_insert(json!("ClusterIP"));
    spec.entry("sessionAffinity").or_insert(json!("None"));
    let is_external_name = spec.get("type").and_then(Value::as_str) == Some("ExternalName");
    if !is_external_name {
        spec.entry("internalTrafficPolicy").or_insert(json!("Cluster"));
    }
    if let Some(Value::Array(ports)) = spec.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("protocol").or_insert(json!("TCP"));
            if let Some(port) = p.get("port").cloned() {
                p.entry("targetPort").or_insert(port);
            }
        }
    }
}

/// Allocates a cluster IP for a new Service (the registry does this, not the defaulter).
pub fn allocate_service_ip(obj: &mut Value, taken: &dyn Fn(&str) -> bool) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec.get("type").and_then(Value::as_str) == Some("ExternalName") {
        return;
    }
    let requested = spec.get("clusterIP").and_then(Value::as_str).unwrap_or("").to_string();
    let ip = if requested.is_empty() {
        // 10.96.0.0/12, skipping .0.0 and .0.1 (the kubernetes service).
        let mut n = u32::from_be_bytes(uuid::Uuid::new_v4().as_bytes()[..4].try_into().unwrap_or([0; 4])) % (1 << 20);
        let mut candidate = String::new();
        for _ in 0..(1 << 20) {
            if n >= 2 {
                candidate = format!("10.{}.{}.{}", 96 + (n >> 16), (n >> 8) & 0xff, n & 0xff);
                if !taken(&candidate) {
                    break;
                }
            }
            n = (n + 1) % (1 << 20);
        }
        candidate
    } else {
        requested
    };
    spec.insert("clusterIP".into(), json!(ip));
    spec.insert("clusterIPs".into(), json!([ip]));
    spec.entry("ipFamilies").or_insert(json!(["IPv4"]));
    spec.entry("ipFamilyPolicy").or_insert(json!("SingleStack"));
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
        let mut s = json!({ "spec": { "ports": [{ "port": 80 }] } });
        apply("", "Service", &mut s);
        allocate_service_ip(&mut s, &|_| false);
        assert_eq!(s["spec"]["ports"][0]["targetPort"], 80);
        assert!(s["spec"]["clusterIP"].as_str().unwrap().starts_with("10."));
    }
}
