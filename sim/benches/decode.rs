//! What the decode step costs every write of a built-in object: `decode::builtin` (type checks and
//! unknown fields in one walk of the kind's schema) on a Spark driver pod, against a typed
//! k8s-openapi decode of the same pod for scale. `cargo bench -p kube-sim --bench decode`.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Instant;

use serde_json::{Value, json};

fn driver_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "spark-pi-driver", "namespace": "default",
            "labels": { "spark-role": "driver", "spark-app-selector": "spark-0123456789abcdef", "sparkoperator.k8s.io/app-name": "spark-pi" },
            "annotations": { "sparkoperator.k8s.io/submission-id": "0f0e0d0c" },
            "ownerReferences": [{ "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication", "name": "spark-pi", "uid": "00000000-0000-0000-0000-000000000000", "controller": true }] },
        "spec": {
            "restartPolicy": "Never", "serviceAccountName": "spark", "terminationGracePeriodSeconds": 30,
            "volumes": [
                { "name": "spark-local-dir-1", "emptyDir": {} },
                { "name": "spark-conf-volume-driver", "configMap": { "name": "spark-drv-conf-map", "defaultMode": 420,
                    "items": [{ "key": "spark.properties", "path": "spark.properties", "mode": 420 }] } }
            ],
            "containers": [{
                "name": "spark-kubernetes-driver", "image": "spark:4.0.0", "imagePullPolicy": "IfNotPresent",
                "args": ["driver", "--properties-file", "/opt/spark/conf/spark.properties", "--class", "org.apache.spark.examples.SparkPi", "local:///opt/spark/examples/jars/spark-examples.jar", "1000"],
                "ports": [
                    { "name": "driver-rpc-port", "containerPort": 7078, "protocol": "TCP" },
                    { "name": "blockmanager", "containerPort": 7079, "protocol": "TCP" },
                    { "name": "spark-ui", "containerPort": 4040, "protocol": "TCP" }
                ],
                "env": [
                    { "name": "SPARK_USER", "value": "spark" },
                    { "name": "SPARK_APPLICATION_ID", "value": "spark-0123456789abcdef" },
                    { "name": "SPARK_DRIVER_BIND_ADDRESS", "valueFrom": { "fieldRef": { "apiVersion": "v1", "fieldPath": "status.podIP" } } },
                    { "name": "SPARK_LOCAL_DIRS", "value": "/var/data/spark-1" },
                    { "name": "SPARK_CONF_DIR", "value": "/opt/spark/conf" }
                ],
                "resources": { "requests": { "cpu": "1", "memory": "1408Mi" }, "limits": { "cpu": "2", "memory": "1408Mi" } },
                "volumeMounts": [
                    { "name": "spark-local-dir-1", "mountPath": "/var/data/spark-1" },
                    { "name": "spark-conf-volume-driver", "mountPath": "/opt/spark/conf" }
                ],
                "livenessProbe": { "tcpSocket": { "port": "spark-ui" }, "periodSeconds": 10 }
            }],
            "tolerations": [{ "key": "spark", "operator": "Exists", "effect": "NoSchedule" }],
            "affinity": { "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": { "nodeSelectorTerms": [
                { "matchExpressions": [{ "key": "pool", "operator": "In", "values": ["spark"] }] }] } } }
        }
    })
}

fn time(label: &str, iterations: u32, mut f: impl FnMut()) {
    // Warm up (the schema tables are built once per process).
    for _ in 0..100 {
        f();
    }
    let start = Instant::now();
    for _ in 0..iterations {
        f();
    }
    let per = start.elapsed() / iterations;
    println!("{label}: {per:?} per pod ({iterations} iterations)");
}

fn main() {
    let pod = driver_pod();
    let body = serde_json::to_vec(&pod).unwrap();
    assert_eq!(kube_sim::decode::builtin("", "v1", "Pod", &pod), Ok(Vec::new()));
    let n = 20_000;
    time("decode::builtin (types + unknown fields)", n, || {
        black_box(kube_sim::decode::builtin("", "v1", "Pod", black_box(&pod)).unwrap());
    });
    time(
        "serde_json::from_slice::<Value> (the body parse every write does)",
        n,
        || {
            black_box(serde_json::from_slice::<Value>(black_box(&body)).unwrap());
        },
    );
    time("k8s-openapi typed decode (for scale)", n, || {
        black_box(serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(black_box(pod.clone())).unwrap());
    });
}
