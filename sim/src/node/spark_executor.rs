//! Executor pods exactly as Spark's driver builds them (`KubernetesExecutorBuilder`): the pod
//! template when there is one (`KubernetesUtils.loadPodFromTemplate` / `selectSparkContainer`),
//! then `BasicExecutorFeatureStep`, `ExecutorKubernetesCredentialsFeatureStep`,
//! `MountSecretsFeatureStep`, `EnvSecretsFeatureStep` and `LocalDirsFeatureStep` on top, the Spark
//! container appended last (`ExecutorPodsAllocator`); and the executor ConfigMap
//! `KubernetesClusterSchedulerBackend.setUpExecutorConfigMap` creates. What each step keeps of the
//! template, overrides or appends to is listed in `docs/executor-template.md`.

use serde_json::{Value, json};

use super::spark_conf::{SparkConf, memory_mib};

/// The Spark version the fake driver reports when its pod does not say.
pub const SPARK_VERSION: &str = "4.3.0";
pub const EXECUTOR_CONTAINER: &str = "spark-kubernetes-executor";
const DEFAULT_DRIVER_PORT: &str = "7078";
const DEFAULT_BLOCKMANAGER_PORT: &str = "7079";

/// `KubernetesUtils.uniqueID()`: 6 random hex digits and the low 40 bits of the time in ms.
pub fn unique_id() -> String {
    let random = &uuid::Uuid::new_v4().simple().to_string()[..6];
    let ms = jiff::Timestamp::now().as_millisecond() as u64 & 0xFF_FFFF_FFFF;
    format!("{random}{ms:x}")
}

/// `KubernetesConf.getResourceNamePrefix`.
pub fn resource_name_prefix(app_name: &str) -> String {
    dns_label_chars(&format!("{app_name}-{}", unique_id()))
}

/// `KubernetesConf.getAppNameLabel`: at most 63 characters.
pub fn app_name_label(app_name: &str) -> String {
    dns_label_chars(app_name).chars().take(63).collect()
}

fn dns_label_chars(s: &str) -> String {
    let lowered: String = s
        .trim()
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut out = String::with_capacity(lowered.len());
    for c in lowered.chars() {
        if !(c == '-' && out.ends_with('-')) {
            out.push(c);
        }
    }
    out
}

/// `Utils.substituteAppNExecIds`.
fn substitute(v: &str, app_id: &str, exec_id: &str) -> String {
    v.replace("{{APP_ID}}", app_id).replace("{{EXECUTOR_ID}}", exec_id)
}

/// Everything an executor pod is built from.
pub struct ExecutorInput<'a> {
    pub conf: &'a SparkConf,
    pub app_id: &'a str,
    pub exec_id: u64,
    pub driver_pod: &'a Value,
    pub name_prefix: &'a str,
    pub config_map: &'a str,
    pub spark_user: &'a str,
    /// The executor pod template (`spark.kubernetes.executor.podTemplateFile`), parsed.
    pub template: Option<&'a Value>,
}

/// `KubernetesUtils.selectSparkContainer`: the template without its Spark container, and that
/// container: the one named `podTemplateContainerName` when exactly one has the name, else the
/// first, else an empty one.
fn select_spark_container(template: Option<&Value>, name: Option<&str>) -> (Value, Value) {
    let mut pod = template.cloned().unwrap_or_else(|| json!({}));
    if !pod.is_object() {
        pod = json!({});
    }
    let containers = pod
        .pointer_mut("/spec/containers")
        .and_then(Value::as_array_mut)
        .map(std::mem::take)
        .unwrap_or_default();
    let named: Vec<usize> = name
        .map(|n| {
            containers
                .iter()
                .enumerate()
                .filter(|(_, c)| c["name"] == n)
                .map(|(i, _)| i)
                .collect()
        })
        .unwrap_or_default();
    let index = match named.as_slice() {
        [one] => Some(*one),
        _ if containers.is_empty() => None,
        _ => Some(0),
    };
    let mut rest = containers;
    let container = index.map(|i| rest.remove(i)).unwrap_or_else(|| json!({}));
    obj(&mut pod, "spec").insert("containers".into(), Value::Array(rest));
    (pod, container)
}

/// `v` as an object, made one if it is not.
fn as_obj(v: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !v.is_object() {
        *v = json!({});
    }
    match v {
        Value::Object(m) => m,
        _ => unreachable!("made an object just above"),
    }
}

/// The object under `key`, made one if absent (fabric8's `editOrNew...`).
fn obj<'v>(v: &'v mut Value, key: &str) -> &'v mut serde_json::Map<String, Value> {
    as_obj(as_obj(v).entry(key.to_string()).or_insert_with(|| json!({})))
}

/// The list under `key`, made one if absent (fabric8's `addTo...` appends to it).
fn arr<'v>(v: &'v mut Value, key: &str) -> &'v mut Vec<Value> {
    let e = as_obj(v).entry(key.to_string()).or_insert_with(|| json!([]));
    if !e.is_array() {
        *e = json!([]);
    }
    match e {
        Value::Array(a) => a,
        _ => unreachable!("made a list just above"),
    }
}

/// Whether the driver's Spark is at least `major.minor` (its `spark-version` label).
fn at_least(version: &str, major: u32, minor: u32) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (a, b) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

/// The executor memory in MiB and its overhead (`ResourceProfile.getResourcesForClusterManager`).
fn memory(conf: &SparkConf) -> Result<(i64, i64), String> {
    let mem_str = conf.get_or("spark.executor.memory", "1g");
    let mem = memory_mib(mem_str).ok_or_else(|| format!("Failed to parse spark.executor.memory: {mem_str}"))?;
    let factor: f64 = conf
        .get("spark.executor.memoryOverheadFactor")
        .or_else(|| conf.get("spark.kubernetes.memoryOverheadFactor"))
        .and_then(|f| f.parse().ok())
        .unwrap_or(0.1);
    let min_overhead = conf
        .get("spark.executor.minMemoryOverhead")
        .and_then(memory_mib)
        .unwrap_or(384);
    let overhead = match conf.get("spark.executor.memoryOverhead") {
        Some(o) => memory_mib(o).ok_or_else(|| format!("Failed to parse spark.executor.memoryOverhead: {o}"))?,
        None => ((mem as f64 * factor) as i64).max(min_overhead),
    };
    Ok((mem, overhead))
}

/// The executor pod, ready to create. Errors are Spark's messages for bad configuration.
pub fn executor_pod(input: &ExecutorInput<'_>) -> Result<Value, String> {
    let conf = input.conf;
    let exec_id = input.exec_id.to_string();
    let app_id = input.app_id;
    let image = conf
        .get("spark.kubernetes.executor.container.image")
        .or_else(|| conf.get("spark.kubernetes.container.image"))
        .ok_or_else(|| "org.apache.spark.SparkException: Must specify the executor container image".to_string())?;
    let name = format!("{}-exec-{exec_id}", input.name_prefix);
    let tail: String = name.chars().skip(name.chars().count().saturating_sub(63)).collect();
    let hostname: String = tail
        .trim_start_matches(|c: char| !(c.is_alphanumeric() || c == '_'))
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let (mem, overhead) = memory(conf)?;
    let cores = conf.get_or("spark.executor.cores", "1");
    let cpu_request = conf.get("spark.kubernetes.executor.request.cores").unwrap_or(cores);
    let spark_version = super::hub::label(input.driver_pod, "spark-version").unwrap_or(SPARK_VERSION);
    // Spark 4.1 added `spark.kubernetes.executor.useDriverPodIP` (default true, read from 4.3's jar):
    // executors reach the driver at its bind address (the pod's IP) instead of its Service.
    let pod_ip = at_least(spark_version, 4, 1) && conf.bool_or("spark.kubernetes.executor.useDriverPodIP", true);
    let driver_host = match conf.get("spark.driver.bindAddress").filter(|a| pod_ip && !a.is_empty()) {
        Some(address) => address,
        None => conf.get_or("spark.driver.host", ""),
    };
    let driver_port = conf.get_or("spark.driver.port", DEFAULT_DRIVER_PORT);
    let block_port = conf.get_or("spark.blockManager.port", DEFAULT_BLOCKMANAGER_PORT);
    let app_name = conf.get_or("spark.app.name", "spark");

    let mut labels = serde_json::Map::new();
    for (k, v) in conf.with_prefix("spark.kubernetes.executor.label.") {
        labels.insert(k, json!(substitute(&v, app_id, &exec_id)));
    }
    let preset = [
        ("spark-version", spark_version.to_string()),
        ("spark-exec-id", exec_id.clone()),
        ("spark-app-selector", app_id.to_string()),
        ("spark-app-name", app_name_label(app_name)),
        ("spark-role", "executor".to_string()),
        ("spark-exec-resourceprofile-id", "0".to_string()),
    ];
    for (k, _) in &preset {
        if labels.contains_key(*k) {
            return Err(format!(
                "java.lang.IllegalArgumentException: requirement failed: Custom executor labels cannot contain {k} as it is reserved for Spark."
            ));
        }
    }
    for (k, v) in preset {
        labels.insert(k.to_string(), json!(v));
    }
    let annotations: serde_json::Map<String, Value> = conf
        .with_prefix("spark.kubernetes.executor.annotation.")
        .into_iter()
        .map(|(k, v)| (k, json!(substitute(&v, app_id, &exec_id))))
        .collect();

    let mut env = vec![
        json!({ "name": "SPARK_USER", "value": input.spark_user }),
        json!({ "name": "SPARK_DRIVER_URL", "value": format!("spark://CoarseGrainedScheduler@{driver_host}:{driver_port}") }),
        json!({ "name": "SPARK_EXECUTOR_CORES", "value": cores }),
        json!({ "name": "SPARK_EXECUTOR_MEMORY", "value": format!("{mem}m") }),
        json!({ "name": "SPARK_APPLICATION_ID", "value": app_id }),
        json!({ "name": "SPARK_CONF_DIR", "value": "/opt/spark/conf" }),
        json!({ "name": "SPARK_EXECUTOR_ID", "value": exec_id }),
        json!({ "name": "SPARK_RESOURCE_PROFILE_ID", "value": "0" }),
    ];
    for (k, v) in conf.with_prefix("spark.executorEnv.") {
        env.push(json!({ "name": k, "value": v }));
    }
    // `Utils.sparkJavaOpts(conf, SparkConf.isExecutorStartupConf)`.
    let startup = conf.0.iter().filter(|(k, _)| {
        (k.starts_with("spark.auth") && k.as_str() != "spark.authenticate.secret")
            || k.starts_with("spark.rpc")
            || k.starts_with("spark.network")
            || (k.starts_with("spark.") && k.ends_with(".port"))
            || k.starts_with("spark.port.")
    });
    for (i, (k, v)) in startup.enumerate() {
        env.push(json!({ "name": format!("SPARK_JAVA_OPT_{i}"), "value": format!("-D{k}={v}") }));
    }
    env.push(json!({ "name": "SPARK_EXECUTOR_POD_IP", "valueFrom": { "fieldRef": { "apiVersion": "v1", "fieldPath": "status.podIP" } } }));
    env.push(json!({ "name": "SPARK_EXECUTOR_POD_NAME", "valueFrom": { "fieldRef": { "apiVersion": "v1", "fieldPath": "metadata.name" } } }));

    // The template, without its Spark container, and that container; no template: empty ones.
    let (mut pod, mut container) = select_spark_container(
        input.template,
        conf.get("spark.kubernetes.executor.podTemplateContainerName"),
    );

    // BasicExecutorFeatureStep, on the container: name kept, image and pull policy replaced,
    // memory request and limit and cpu request put over the template's (other resources stay),
    // env, ports and args appended.
    if container.get("name").and_then(Value::as_str).is_none() {
        as_obj(&mut container).insert("name".into(), json!(EXECUTOR_CONTAINER));
    }
    let c = as_obj(&mut container);
    c.insert("image".into(), json!(image));
    c.insert(
        "imagePullPolicy".into(),
        json!(conf.get_or("spark.kubernetes.container.image.pullPolicy", "IfNotPresent")),
    );
    let total = format!("{}Mi", mem + overhead);
    let mut resources = Value::Object(std::mem::take(obj(&mut container, "resources")));
    obj(&mut resources, "requests").insert("memory".into(), json!(total));
    obj(&mut resources, "limits").insert("memory".into(), json!(total));
    obj(&mut resources, "requests").insert("cpu".into(), json!(cpu_request));
    if let Some(limit) = conf.get("spark.kubernetes.executor.limit.cores") {
        obj(&mut resources, "limits").insert("cpu".into(), json!(limit));
    }
    as_obj(&mut container).insert("resources".into(), resources);
    let spark_4_3 = at_least(spark_version, 4, 3);
    if spark_4_3 {
        arr(&mut container, "resizePolicy").extend([
            json!({ "resourceName": "cpu", "restartPolicy": "NotRequired" }),
            json!({ "resourceName": "memory", "restartPolicy": "NotRequired" }),
        ]);
    }
    arr(&mut container, "env").extend(env);
    if block_port != "0" {
        arr(&mut container, "ports")
            .push(json!({ "name": "blockmanager", "containerPort": block_port.parse::<i64>().unwrap_or(7079) }));
    }
    arr(&mut container, "args").push(json!("executor"));
    if spark_4_3 {
        // spark.kubernetes.{executor.,}securityContext.allowPrivilegeEscalation, false by default:
        // set over the template's, the rest of its securityContext kept.
        let allow = conf
            .get("spark.kubernetes.executor.securityContext.allowPrivilegeEscalation")
            .or_else(|| conf.get("spark.kubernetes.securityContext.allowPrivilegeEscalation"))
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        obj(&mut container, "securityContext").insert("allowPrivilegeEscalation".into(), json!(allow));
    }
    arr(&mut container, "volumeMounts")
        .push(json!({ "name": "spark-conf-volume-exec", "mountPath": "/opt/spark/conf" }));

    // BasicExecutorFeatureStep, on the pod: name replaced, labels and annotations put over the
    // template's, the owner appended; hostname and restartPolicy replaced, node selectors put,
    // pull secrets and the conf volume appended, the scheduler replaced when configured.
    let meta = obj(&mut pod, "metadata");
    meta.insert("name".into(), json!(name));
    let mut meta = Value::Object(std::mem::take(meta));
    obj(&mut meta, "labels").extend(labels);
    if !annotations.is_empty() {
        obj(&mut meta, "annotations").extend(annotations);
    }
    arr(&mut meta, "ownerReferences").push(owner_reference(input.driver_pod));
    as_obj(&mut pod).insert("metadata".into(), meta);
    let mut node_selector = conf.with_prefix("spark.kubernetes.node.selector.");
    node_selector.extend(conf.with_prefix("spark.kubernetes.executor.node.selector."));
    let mut spec = Value::Object(std::mem::take(obj(&mut pod, "spec")));
    as_obj(&mut spec).insert("hostname".into(), json!(hostname));
    as_obj(&mut spec).insert("restartPolicy".into(), json!("Never"));
    if !node_selector.is_empty() {
        obj(&mut spec, "nodeSelector").extend(node_selector.into_iter().map(|(k, v)| (k, json!(v))));
    }
    let pull_secrets = conf
        .get("spark.kubernetes.container.image.pullSecrets")
        .into_iter()
        .flat_map(|s| s.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| json!({ "name": s }));
    let pull_secrets: Vec<Value> = pull_secrets.collect();
    if !pull_secrets.is_empty() {
        arr(&mut spec, "imagePullSecrets").extend(pull_secrets);
    }
    // Spark gives the volume the conf files' items; fabric8 leaves an empty list out, as with no files.
    arr(&mut spec, "volumes")
        .push(json!({ "name": "spark-conf-volume-exec", "configMap": { "name": input.config_map } }));
    if let Some(s) = conf
        .get("spark.kubernetes.executor.scheduler.name")
        .or_else(|| conf.get("spark.kubernetes.scheduler.name"))
    {
        as_obj(&mut spec).insert("schedulerName".into(), json!(s));
    }

    // ExecutorKubernetesCredentialsFeatureStep: a template's service account is kept.
    if spec.get("serviceAccount").and_then(Value::as_str).is_none() {
        let account = conf
            .get("spark.kubernetes.authenticate.executor.serviceAccountName")
            .or_else(|| conf.get("spark.kubernetes.authenticate.driver.serviceAccountName"));
        if let Some(sa) = account {
            as_obj(&mut spec).insert("serviceAccountName".into(), json!(sa));
            as_obj(&mut spec).insert("serviceAccount".into(), json!(sa));
        }
    }

    // MountSecretsFeatureStep and EnvSecretsFeatureStep: appended.
    for (secret, path) in conf.with_prefix("spark.kubernetes.executor.secrets.") {
        let volume = format!("{secret}-volume");
        arr(&mut spec, "volumes").push(json!({ "name": volume, "secret": { "secretName": secret } }));
        arr(&mut container, "volumeMounts").push(json!({ "name": volume, "mountPath": path }));
    }
    for (var, reference) in conf.with_prefix("spark.kubernetes.executor.secretKeyRef.") {
        let Some((secret, key)) = reference.split_once(':') else {
            return Err(
                "java.lang.IllegalArgumentException: requirement failed: SecretKeyRef must be in the form name:key."
                    .into(),
            );
        };
        arr(&mut container, "env")
            .push(json!({ "name": var, "valueFrom": { "secretKeyRef": { "key": key, "name": secret } } }));
    }

    // LocalDirsFeatureStep: the template's `spark-local-dir-*` mounts are the local dirs; without
    // any, one emptyDir.
    let mut local_dirs: Vec<String> = arr(&mut container, "volumeMounts")
        .iter()
        .filter(|m| m["name"].as_str().is_some_and(|n| n.starts_with("spark-local-dir-")))
        .filter_map(|m| m["mountPath"].as_str().map(str::to_string))
        .collect();
    if local_dirs.is_empty() {
        let local_dir = format!("/var/data/spark-{}", uuid::Uuid::new_v4());
        let medium = if conf.bool_or("spark.kubernetes.local.dirs.tmpfs", false) {
            json!({ "medium": "Memory" })
        } else {
            json!({})
        };
        arr(&mut spec, "volumes").push(json!({ "name": "spark-local-dir-1", "emptyDir": medium }));
        arr(&mut container, "volumeMounts").push(json!({ "name": "spark-local-dir-1", "mountPath": local_dir }));
        local_dirs.push(local_dir);
    }
    arr(&mut container, "env").push(json!({ "name": "SPARK_LOCAL_DIRS", "value": local_dirs.join(",") }));

    // ExecutorPodsAllocator: the Spark container goes after the template's other containers.
    arr(&mut spec, "containers").push(container);
    as_obj(&mut pod).insert("spec".into(), spec);
    as_obj(&mut pod).insert("apiVersion".into(), json!("v1"));
    as_obj(&mut pod).insert("kind".into(), json!("Pod"));
    Ok(pod)
}

/// The controller reference Spark sets on what the driver creates.
pub fn owner_reference(driver_pod: &Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "name": crate::meta::name(driver_pod),
        "uid": crate::meta::uid(driver_pod),
        "controller": true,
    })
}

/// The executors' ConfigMap (`spark-exec-<id>-conf-map`).
pub fn executor_config_map(name: &str, namespace: &str, app_id: &str, driver_pod: &Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": { "spark-app-selector": app_id, "spark-role": "executor" },
            "ownerReferences": [owner_reference(driver_pod)],
        },
        "immutable": true,
        "data": { "spark.kubernetes.namespace": namespace },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn executor_pod_like_spark() {
        let conf = SparkConf(BTreeMap::from([
            ("spark.app.name".to_string(), "Spark Pi".to_string()),
            ("spark.executor.memory".to_string(), "512m".to_string()),
            (
                "spark.kubernetes.container.image".to_string(),
                "spark:4.0.0".to_string(),
            ),
            ("spark.driver.host".to_string(), "svc.default.svc".to_string()),
            ("spark.driver.bindAddress".to_string(), "10.0.0.7".to_string()),
            (
                "spark.kubernetes.executor.label.team".to_string(),
                "a-{{EXECUTOR_ID}}".to_string(),
            ),
            (
                "spark.kubernetes.executor.annotation.note".to_string(),
                "{{APP_ID}}".to_string(),
            ),
        ]));
        let driver = json!({ "metadata": { "name": "d", "uid": "u", "labels": { "spark-version": "4.3.0" } } });
        // Executor 2 of a driver pod of Spark `version`.
        let build = |conf: &SparkConf, version: &str| {
            let driver = json!({ "metadata": { "name": "d", "uid": "u", "labels": { "spark-version": version } } });
            executor_pod(&ExecutorInput {
                conf,
                app_id: "spark-1",
                exec_id: 2,
                driver_pod: &driver,
                name_prefix: "spark-pi-abc",
                config_map: "spark-exec-x-conf-map",
                spark_user: "root",
                template: None,
            })
            .unwrap()
        };
        let pod = build(&conf, "4.3.0");
        assert_eq!(pod["metadata"]["name"], "spark-pi-abc-exec-2");
        assert_eq!(pod["metadata"]["labels"]["spark-app-name"], "spark-pi");
        assert_eq!(pod["metadata"]["labels"]["team"], "a-2");
        assert_eq!(pod["metadata"]["annotations"]["note"], "spark-1");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(pod["spec"]["containers"][0]["resources"]["requests"]["memory"], "896Mi");
        let env = pod["spec"]["containers"][0]["env"].as_array().unwrap();
        assert!(
            env.iter()
                .any(|e| e["name"] == "SPARK_EXECUTOR_ID" && e["value"] == "2")
        );
        // Spark 4.1+: the driver pod's IP (useDriverPodIP); before, or with it off: the Service.
        let driver_url = |conf: &SparkConf, version: &str| {
            let pod = build(conf, version);
            let env = pod["spec"]["containers"][0]["env"].as_array().unwrap().clone();
            env.into_iter()
                .find(|e| e["name"] == "SPARK_DRIVER_URL")
                .map(|e| e["value"].clone())
                .unwrap()
        };
        assert_eq!(
            driver_url(&conf, "4.3.0"),
            "spark://CoarseGrainedScheduler@10.0.0.7:7078"
        );
        assert_eq!(
            driver_url(&conf, "4.0.4"),
            "spark://CoarseGrainedScheduler@svc.default.svc:7078"
        );
        let mut off = conf.clone();
        off.0
            .insert("spark.kubernetes.executor.useDriverPodIP".into(), "false".into());
        assert_eq!(
            driver_url(&off, "4.3.0"),
            "spark://CoarseGrainedScheduler@svc.default.svc:7078"
        );
        let no_image = SparkConf::default();
        let err = executor_pod(&ExecutorInput {
            conf: &no_image,
            ..ExecutorInput {
                conf: &conf,
                app_id: "a",
                exec_id: 1,
                driver_pod: &driver,
                name_prefix: "p",
                config_map: "c",
                spark_user: "root",
                template: None,
            }
        })
        .unwrap_err();
        assert!(err.contains("Must specify the executor container image"));
        assert!((15..=16).contains(&unique_id().len()));
    }

    fn conf(pairs: &[(&str, &str)]) -> SparkConf {
        SparkConf(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn a_template_is_kept_where_spark_does_not_set_it() {
        let conf = conf(&[
            ("spark.executor.memory", "512m"),
            ("spark.kubernetes.container.image", "spark:4.0.0"),
            (
                "spark.kubernetes.executor.podTemplateContainerName",
                "spark-kubernetes-executor",
            ),
            ("spark.kubernetes.node.selector.zone", "a"),
            ("spark.kubernetes.executor.label.team", "t"),
            ("spark.kubernetes.authenticate.driver.serviceAccountName", "spark"),
            ("spark.kubernetes.executor.secrets.creds", "/mnt/creds"),
            ("spark.kubernetes.executor.secretKeyRef.TOKEN", "creds:token"),
        ]);
        let template = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": "ignored", "labels": { "from-template": "yes", "team": "template" },
                          "annotations": { "a": "b" } },
            "spec": {
                "nodeSelector": { "pool": "spark", "zone": "template" },
                "tolerations": [{ "key": "dedicated", "operator": "Equal", "value": "spark", "effect": "NoSchedule" }],
                "priorityClassName": "high",
                "restartPolicy": "Always",
                "volumes": [{ "name": "data", "emptyDir": {} }],
                "initContainers": [{ "name": "init", "image": "busybox" }],
                "containers": [
                    { "name": "sidecar", "image": "busybox" },
                    { "name": "spark-kubernetes-executor",
                      "env": [{ "name": "FROM_TEMPLATE", "value": "1" }],
                      "volumeMounts": [{ "name": "data", "mountPath": "/data" }],
                      "ports": [{ "name": "jmx", "containerPort": 8090 }],
                      "securityContext": { "runAsUser": 185, "allowPrivilegeEscalation": true },
                      "resources": { "limits": { "memory": "2Gi", "nvidia.com/gpu": "1" },
                                     "requests": { "cpu": "3" } } }
                ]
            }
        });
        let driver = json!({ "metadata": { "name": "d", "uid": "u", "labels": { "spark-version": "4.3.0" } } });
        let pod = executor_pod(&ExecutorInput {
            conf: &conf,
            app_id: "spark-1",
            exec_id: 1,
            driver_pod: &driver,
            name_prefix: "p",
            config_map: "c",
            spark_user: "root",
            template: Some(&template),
        })
        .unwrap();
        let meta = &pod["metadata"];
        assert_eq!(meta["name"], "p-exec-1");
        assert_eq!(meta["labels"]["from-template"], "yes");
        // Spark's labels are put over the template's.
        assert_eq!(meta["labels"]["team"], "t");
        assert_eq!(meta["annotations"]["a"], "b");
        assert_eq!(meta["ownerReferences"][0]["name"], "d");
        let spec = &pod["spec"];
        assert_eq!(spec["nodeSelector"], json!({ "pool": "spark", "zone": "a" }));
        assert_eq!(spec["tolerations"][0]["key"], "dedicated");
        assert_eq!(spec["priorityClassName"], "high");
        assert_eq!(spec["restartPolicy"], "Never");
        assert_eq!(spec["initContainers"][0]["name"], "init");
        assert_eq!(spec["serviceAccountName"], "spark");
        let volumes: Vec<&str> = spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            volumes,
            ["data", "spark-conf-volume-exec", "creds-volume", "spark-local-dir-1"]
        );
        // The Spark container goes last, after the template's sidecar.
        assert_eq!(spec["containers"][0]["name"], "sidecar");
        let spark = &spec["containers"][1];
        assert_eq!(spark["name"], "spark-kubernetes-executor");
        assert_eq!(spark["image"], "spark:4.0.0");
        // Memory request and limit are Spark's (512m + 384m overhead); the GPU limit stays.
        assert_eq!(
            spark["resources"]["limits"],
            json!({ "memory": "896Mi", "nvidia.com/gpu": "1" })
        );
        assert_eq!(spark["resources"]["requests"], json!({ "memory": "896Mi", "cpu": "1" }));
        assert_eq!(
            spark["securityContext"],
            json!({ "runAsUser": 185, "allowPrivilegeEscalation": false })
        );
        let ports: Vec<&str> = spark["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(ports, ["jmx", "blockmanager"]);
        let env: Vec<&str> = spark["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(env.first(), Some(&"FROM_TEMPLATE"));
        assert!(env.contains(&"SPARK_EXECUTOR_ID") && env.contains(&"TOKEN"));
        let mounts: Vec<&str> = spark["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["mountPath"].as_str().unwrap())
            .collect();
        assert_eq!(mounts[..3], ["/data", "/opt/spark/conf", "/mnt/creds"]);
        assert_eq!(spark["args"], json!(["executor"]));
    }

    #[test]
    fn a_template_container_is_selected_as_spark_selects_it() {
        let two = json!({ "spec": { "containers": [{ "name": "a" }, { "name": "b" }] } });
        let (pod, container) = select_spark_container(Some(&two), Some("b"));
        assert_eq!(
            (
                container["name"].as_str(),
                pod["spec"]["containers"][0]["name"].as_str()
            ),
            (Some("b"), Some("a"))
        );
        // Not found: the first container.
        let (_, container) = select_spark_container(Some(&two), Some("missing"));
        assert_eq!(container["name"], "a");
        let (_, container) = select_spark_container(Some(&two), None);
        assert_eq!(container["name"], "a");
        // No containers: an empty one, named by Spark.
        let (pod, container) = select_spark_container(Some(&json!({ "spec": {} })), None);
        assert_eq!((container, pod["spec"]["containers"].clone()), (json!({}), json!([])));
    }
}
