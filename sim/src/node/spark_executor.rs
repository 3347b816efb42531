//! Executor pods exactly as Spark's driver builds them (`BasicExecutorFeatureStep`,
//! `LocalDirsFeatureStep`, `ExecutorKubernetesCredentialsFeatureStep`), and the executor
//! ConfigMap `KubernetesClusterSchedulerBackend.setUpExecutorConfigMap` creates.

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
    let driver_host = conf.get_or("spark.driver.host", "");
    let driver_port = conf.get_or("spark.driver.port", DEFAULT_DRIVER_PORT);
    let block_port = conf.get_or("spark.blockManager.port", DEFAULT_BLOCKMANAGER_PORT);
    let app_name = conf.get_or("spark.app.name", "spark");
    let spark_version = super::hub::label(input.driver_pod, "spark-version").unwrap_or(SPARK_VERSION);

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

    let local_dir = format!("/var/data/spark-{}", uuid::Uuid::new_v4());
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
    env.push(json!({ "name": "SPARK_LOCAL_DIRS", "value": local_dir }));

    let total = format!("{}Mi", mem + overhead);
    let mut resources = json!({ "requests": { "memory": total, "cpu": cpu_request }, "limits": { "memory": total } });
    if let Some(limit) = conf.get("spark.kubernetes.executor.limit.cores") {
        resources["limits"]["cpu"] = json!(limit);
    }
    let mut container = json!({
        "name": EXECUTOR_CONTAINER,
        "image": image,
        "imagePullPolicy": conf.get_or("spark.kubernetes.container.image.pullPolicy", "IfNotPresent"),
        "resources": resources,
        "env": env,
        "args": ["executor"],
        "volumeMounts": [
            { "name": "spark-local-dir-1", "mountPath": local_dir },
            { "name": "spark-conf-volume-exec", "mountPath": "/opt/spark/conf" },
        ],
    });
    if block_port != "0" {
        container["ports"] =
            json!([{ "name": "blockmanager", "containerPort": block_port.parse::<i64>().unwrap_or(7079) }]);
    }
    let mut node_selector = conf.with_prefix("spark.kubernetes.node.selector.");
    node_selector.extend(conf.with_prefix("spark.kubernetes.executor.node.selector."));
    let mut spec = json!({
        "hostname": hostname,
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [
            { "name": "spark-local-dir-1", "emptyDir": {} },
            { "name": "spark-conf-volume-exec", "configMap": { "name": input.config_map, "items": [] } },
        ],
    });
    if !node_selector.is_empty() {
        spec["nodeSelector"] = json!(node_selector);
    }
    let pull_secrets: Vec<Value> = conf
        .get("spark.kubernetes.container.image.pullSecrets")
        .map(|s| {
            s.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| json!({ "name": s }))
                .collect()
        })
        .unwrap_or_default();
    if !pull_secrets.is_empty() {
        spec["imagePullSecrets"] = json!(pull_secrets);
    }
    let account = conf
        .get("spark.kubernetes.authenticate.executor.serviceAccountName")
        .or_else(|| conf.get("spark.kubernetes.authenticate.driver.serviceAccountName"));
    if let Some(sa) = account {
        spec["serviceAccountName"] = json!(sa);
        spec["serviceAccount"] = json!(sa);
    }
    if let Some(s) = conf
        .get("spark.kubernetes.executor.scheduler.name")
        .or_else(|| conf.get("spark.kubernetes.scheduler.name"))
    {
        spec["schedulerName"] = json!(s);
    }
    let mut metadata = json!({
        "name": name,
        "labels": labels,
        "ownerReferences": [owner_reference(input.driver_pod)],
    });
    if !annotations.is_empty() {
        metadata["annotations"] = Value::Object(annotations);
    }
    Ok(json!({ "apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec }))
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
        let pod = executor_pod(&ExecutorInput {
            conf: &conf,
            app_id: "spark-1",
            exec_id: 2,
            driver_pod: &driver,
            name_prefix: "spark-pi-abc",
            config_map: "spark-exec-x-conf-map",
            spark_user: "root",
        })
        .unwrap();
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
        assert!(
            env.iter().any(|e| e["name"] == "SPARK_DRIVER_URL"
                && e["value"] == "spark://CoarseGrainedScheduler@svc.default.svc:7078")
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
            }
        })
        .unwrap_err();
        assert!(err.contains("Must specify the executor container image"));
        assert!((15..=16).contains(&unique_id().len()));
    }
}
