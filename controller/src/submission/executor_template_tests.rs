//! The executor pod template every submission writes: the application's executor settings applied, so
//! Spark carries them onto every executor it builds from it (`docs/executor-template.md`).

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use spark_operator_api::SparkApplication;

use crate::submission::{
    Submission, SubmissionError, SubmissionIds, SubmissionInput, SubmissionOptions, build_submission,
};

fn app(executor: Value, extra_spec: Value) -> SparkApplication {
    let mut spec = json!({
        "type": "Scala",
        "sparkVersion": "4.3.0",
        "image": "spark:4.0.0",
        "mainClass": "org.apache.spark.examples.SparkPi",
        "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
        "driver": {"serviceAccount": "spark"},
        "executor": executor,
    });
    if let (Value::Object(spec), Value::Object(extra)) = (&mut spec, extra_spec) {
        spec.extend(extra);
    }
    serde_json::from_value(json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": "rich", "namespace": "jobs", "uid": "app-uid"},
        "spec": spec,
    }))
    .unwrap()
}

/// An executor with every pod-level setting decoration applies.
fn rich_executor() -> Value {
    json!({
        "instances": 1,
        "memory": "512m",
        "env": [{"name": "FROM_ENV", "value": "1"}],
        "envFrom": [{"configMapRef": {"name": "env-cm"}}],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        "configMaps": [{"name": "extra-cm", "path": "/etc/extra"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["spark"]}]}]}}},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "spark", "effect": "NoSchedule"}],
        "nodeSelector": {"pool": "spark"},
        "securityContext": {"runAsUser": 185},
        "podSecurityContext": {"fsGroup": 185},
        "sidecars": [{"name": "sidecar", "image": "busybox"}],
        "initContainers": [{"name": "init", "image": "busybox"}],
        "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["db.local"]}],
        "dnsConfig": {"nameservers": ["10.0.0.10"]},
        "priorityClassName": "spark-high",
        "schedulerName": "default-scheduler",
        "memoryLimit": "2g",
        "gpu": {"name": "nvidia.com/gpu", "quantity": 1},
        "ports": [{"name": "jmx", "protocol": "TCP", "containerPort": 8090}],
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", "1"]}}},
        "terminationGracePeriodSeconds": 45,
        "shareProcessNamespace": true,
    })
}

fn submit_with(app: &SparkApplication, options: SubmissionOptions) -> Result<Submission, SubmissionError> {
    let ids = SubmissionIds::from_random(
        [0xab; 16],
        [0x2c; 16],
        [[1, 2, 3], [4, 5, 6], [7, 8, 9]],
        0xa2_0165_ad86,
    );
    build_submission(&SubmissionInput {
        app,
        submission_id: "sub-1",
        ids: &ids,
        submit_time: jiff::Timestamp::from_millisecond(1_795_319_770_368).unwrap(),
        spark_master_url: "k8s://https://10.0.0.1:443",
        spark_user: "spark",
        options: &options,
    })
}

fn template(submission: &Submission) -> Pod {
    let config_map = submission
        .executor_pod_template
        .as_ref()
        .expect("a template is written");
    serde_yaml::from_str(&config_map.data.as_ref().unwrap()["podspec-configmap-key"]).unwrap()
}

fn properties(submission: &Submission) -> &str {
    &submission.config_map.data.as_ref().unwrap()["spark.properties"]
}

#[test]
fn the_template_of_a_rich_application_holds_every_setting_spark_keeps() {
    let app = app(
        rich_executor(),
        json!({
            "volumes": [{"name": "data", "emptyDir": {}}],
            "sparkConfigMap": "spark-extra-conf",
            "hadoopConfigMap": "hadoop-conf",
        }),
    );
    let submission = submit_with(&app, SubmissionOptions::default()).unwrap();
    let pod = serde_json::to_value(template(&submission)).unwrap();
    let spec = &pod["spec"];
    let spark = &spec["containers"][0];
    assert_eq!(spark["name"], "spark-kubernetes-executor");
    let env = |name: &str| {
        spark["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
    };
    assert_eq!(env("FROM_ENV"), Some(json!("1")));
    assert_eq!(env("HADOOP_CONF_DIR"), Some(json!("/etc/hadoop/conf")));
    assert_eq!(spark["envFrom"], json!([{"configMapRef": {"name": "env-cm"}}]));
    let mounts: Vec<&str> = spark["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    for path in ["/data", "/etc/extra", "/etc/spark/conf", "/etc/hadoop/conf"] {
        assert!(mounts.contains(&path), "{path} in {mounts:?}");
    }
    let volumes: Vec<&str> = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    for name in [
        "data",
        "extra-cm-vol",
        "spark-configmap-volume",
        "hadoop-configmap-volume",
    ] {
        assert!(volumes.contains(&name), "{name} in {volumes:?}");
    }
    assert_eq!(
        spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
            [0]["key"],
        "pool"
    );
    assert_eq!(spec["tolerations"][0]["key"], "dedicated");
    assert_eq!(spec["nodeSelector"], json!({"pool": "spark"}));
    assert_eq!(spark["securityContext"]["runAsUser"], 185);
    assert_eq!(spec["securityContext"]["fsGroup"], 185);
    assert_eq!(spec["containers"][1]["name"], "sidecar");
    assert_eq!(spec["initContainers"][0]["name"], "init");
    assert_eq!(spec["hostAliases"][0]["hostnames"], json!(["db.local"]));
    assert_eq!(spec["dnsConfig"]["nameservers"], json!(["10.0.0.10"]));
    assert_eq!(spec["priorityClassName"], "spark-high");
    assert_eq!(spec["schedulerName"], "default-scheduler");
    // Written, though Spark replaces it with its own memory limit (webhook only, see the doc).
    assert_eq!(spark["resources"]["limits"]["memory"], "2Gi");
    assert_eq!(spark["resources"]["limits"]["nvidia.com/gpu"], "1");
    assert_eq!(
        spark["ports"],
        json!([{"name": "jmx", "protocol": "TCP", "containerPort": 8090}])
    );
    assert_eq!(spark["lifecycle"]["preStop"]["exec"]["command"], json!(["sleep", "1"]));
    assert_eq!(spec["terminationGracePeriodSeconds"], 45);
    assert_eq!(spec["shareProcessNamespace"], true);
    // Executors are owned by the driver (Spark sets that), never by the application.
    assert!(pod["metadata"].get("ownerReferences").is_none());
    assert!(
        properties(&submission)
            .contains("\nspark.kubernetes.executor.podTemplateFile=/opt/spark/pod-template/pod-spec-template.yml\n")
    );
}

#[test]
fn a_spec_template_is_kept_and_decorated() {
    let mut executor = json!({"env": [{"name": "FROM_ENV", "value": "1"}], "nodeSelector": {"pool": "spark"}});
    executor["template"] = json!({
        "metadata": {"labels": {"from-template": "yes"}},
        "spec": {
            "containers": [{"name": "sidecar", "image": "busybox"}, {"name": "spark-kubernetes-executor",
                "env": [{"name": "TEMPLATE_ENV", "value": "t"}]}],
            "runtimeClassName": "gvisor",
        },
    });
    let submission = submit_with(&app(executor, json!({})), SubmissionOptions::default()).unwrap();
    let pod = serde_json::to_value(template(&submission)).unwrap();
    assert_eq!(pod["metadata"]["labels"]["from-template"], "yes");
    assert_eq!(pod["spec"]["runtimeClassName"], "gvisor");
    assert_eq!(pod["spec"]["nodeSelector"]["pool"], "spark");
    // The named Spark container is decorated, not the sidecar in front of it, and Spark is told its name.
    let spark = &pod["spec"]["containers"][1];
    assert_eq!(spark["name"], "spark-kubernetes-executor");
    let names: Vec<&str> = spark["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["TEMPLATE_ENV", "FROM_ENV"]);
    assert!(pod["spec"]["containers"][0].get("env").is_none());
    assert!(
        properties(&submission)
            .contains("\nspark.kubernetes.executor.podTemplateContainerName=spark-kubernetes-executor\n")
    );
}

#[test]
fn without_the_option_only_a_spec_template_is_written() {
    let options = SubmissionOptions {
        executor_template: false,
        ..SubmissionOptions::default()
    };
    let plain = submit_with(&app(rich_executor(), json!({})), options.clone()).unwrap();
    assert!(plain.executor_pod_template.is_none());
    assert!(!properties(&plain).contains("podTemplate"));
    let volumes = plain
        .driver_pod
        .spec
        .as_ref()
        .unwrap()
        .volumes
        .clone()
        .unwrap_or_default();
    assert!(volumes.iter().all(|v| v.name != "pod-template-volume"));

    let mut executor = rich_executor();
    executor["template"] = json!({"spec": {"containers": [{"name": "spark-kubernetes-executor"}]}});
    let templated = submit_with(&app(executor, json!({})), options).unwrap();
    assert_eq!(
        template(&templated).spec.unwrap().priority_class_name.as_deref(),
        Some("spark-high")
    );
}

#[test]
fn spark_before_3_gets_no_template() {
    let mut app = app(rich_executor(), json!({}));
    app.spec.spark_version = "2.4.8".to_owned();
    let submission = submit_with(&app, SubmissionOptions::default()).unwrap();
    assert!(submission.executor_pod_template.is_none());
    assert!(!properties(&submission).contains("podTemplate"));
}

#[test]
fn a_setting_that_cannot_be_applied_fails_the_submission_with_its_field() {
    let mut executor = rich_executor();
    executor["memoryLimit"] = json!("lots");
    let error = submit_with(&app(executor, json!({})), SubmissionOptions::default()).unwrap_err();
    let SubmissionError::ExecutorDecoration(source) = &error else {
        panic!("{error:?}");
    };
    assert_eq!(error.to_string(), "the executor pod template cannot be decorated");
    assert!(
        source.to_string().starts_with("spec.executor.memoryLimit: "),
        "{source}"
    );
}
