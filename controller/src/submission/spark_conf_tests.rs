//! The spec → conf mapping, field by field (Kubeflow's `submission.go` is the reference); the oracle
//! test covers what Spark makes of it.

use super::*;
use crate::submission::{SubmissionIds, SubmissionOptions};

const BASE: &str = r#"
apiVersion: sparkoperator.k8s.io/v1beta2
kind: SparkApplication
metadata: {name: app, namespace: jobs, uid: u-1}
spec:
  type: Scala
  sparkVersion: 4.0.0
  image: spark:4.0.0
  mainClass: com.example.Main
  mainApplicationFile: local:///app.jar
  driver: {}
  executor: {}
"#;

fn app_with(extra: &str) -> SparkApplication {
    let mut value: serde_yaml::Value = serde_yaml::from_str(BASE).unwrap();
    let extra: serde_yaml::Value = serde_yaml::from_str(extra).unwrap();
    merge(&mut value, extra);
    serde_yaml::from_value(value).unwrap()
}

fn merge(base: &mut serde_yaml::Value, extra: serde_yaml::Value) {
    match (base, extra) {
        (serde_yaml::Value::Mapping(base), serde_yaml::Value::Mapping(extra)) => {
            for (key, value) in extra {
                match base.get_mut(&key) {
                    Some(existing) => merge(existing, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, extra) => *base = extra,
    }
}

fn conf_of(app: &SparkApplication) -> Result<SubmitConf, SparkConfError> {
    let ids = SubmissionIds::from_random([1; 16], [2; 16], [[3; 3]; 3], 1000);
    let options = SubmissionOptions::default();
    let input = SubmissionInput {
        app,
        submission_id: "sub-1",
        ids: &ids,
        submit_time: jiff::Timestamp::from_millisecond(1_700_000_000_123).unwrap(),
        spark_master_url: "k8s://https://10.0.0.1:443",
        spark_user: "spark",
        options: &options,
    };
    build(&input)
}

fn conf(extra: &str) -> BTreeMap<String, String> {
    conf_of(&app_with(extra)).unwrap_or_else(|e| panic!("{e}")).conf
}

#[test]
fn always_present_settings() {
    let conf = conf("{}");
    assert_eq!(conf["spark.master"], "k8s://https://10.0.0.1:443");
    assert_eq!(conf["spark.submit.deployMode"], "cluster");
    assert_eq!(conf["spark.app.name"], "app");
    assert_eq!(conf["spark.kubernetes.namespace"], "jobs");
    assert_eq!(conf["spark.kubernetes.submission.waitAppCompletion"], "false");
    assert_eq!(conf["spark.kubernetes.driver.pod.name"], "app-driver");
    assert_eq!(conf["spark.app.submitTime"], "1700000000123");
    assert_eq!(conf["spark.jars"], "local:///app.jar");
    assert_eq!(conf["spark.submit.pyFiles"], "");
    for role in ["driver", "executor"] {
        let label = |key: &str| conf[&format!("spark.kubernetes.{role}.label.sparkoperator.k8s.io/{key}")].clone();
        assert_eq!(label("app-name"), "app");
        assert_eq!(label("submission-id"), "sub-1");
        assert_eq!(label("launched-by-spark-operator"), "true");
    }
}

#[test]
fn typed_fields_win_over_spark_conf_and_options_over_conf() {
    let conf = conf(
        r#"
spec:
  sparkConf: {spark.driver.memory: 4g, spark.app.name: other, spark.kubernetes.driver.pod.name: conf-pod}
  driver: {memory: 2g}
"#,
    );
    assert_eq!(conf["spark.driver.memory"], "2g");
    assert_eq!(conf["spark.app.name"], "app", "--name beats --conf spark.app.name");
    assert_eq!(
        conf["spark.kubernetes.driver.pod.name"], "conf-pod",
        "Kubeflow reads the name from sparkConf"
    );
}

#[test]
fn operator_labels_cannot_be_overwritten_and_kueue_labels_stay_off_pods() {
    let conf = conf(
        r#"
metadata:
  labels: {team: data, kueue.x-k8s.io/queue-name: q, sparkoperator.k8s.io/app-name: wrong}
spec:
  driver: {labels: {sparkoperator.k8s.io/submission-id: wrong, tier: gold}}
"#,
    );
    assert_eq!(conf["spark.kubernetes.driver.label.team"], "data");
    assert_eq!(conf["spark.kubernetes.executor.label.team"], "data");
    assert_eq!(conf["spark.kubernetes.driver.label.tier"], "gold");
    assert!(!conf.contains_key("spark.kubernetes.executor.label.tier"));
    assert!(!conf.keys().any(|k| k.contains("kueue.x-k8s.io")));
    assert_eq!(
        conf["spark.kubernetes.driver.label.sparkoperator.k8s.io/app-name"],
        "app"
    );
    assert_eq!(
        conf["spark.kubernetes.driver.label.sparkoperator.k8s.io/submission-id"],
        "sub-1"
    );
}

#[test]
fn driver_and_executor_fields() {
    let conf = conf(
        r#"
spec:
  driver:
    cores: 2
    coreRequest: 1500m
    coreLimit: "3"
    memoryOverhead: 1.5g
    serviceAccount: driver-sa
    javaOptions: -Dx=1
    kubernetesMaster: https://api:6443
    annotations: {a: b}
    serviceLabels: {s: l}
    serviceAnnotations: {s: a}
    envSecretKeyRefs: {PASS: {name: db, key: pw}}
    envVars: {A: "1"}
  executor:
    instances: 3
    cores: 4
    coreRequest: "2"
    memory: 1.5g
    image: spark:exec
    deleteOnTermination: false
    javaOptions: -Dy=2
    envVars: {B: "2"}
"#,
    );
    let expected = [
        ("spark.driver.cores", "2"),
        ("spark.kubernetes.driver.request.cores", "1500m"),
        ("spark.kubernetes.driver.limit.cores", "3"),
        ("spark.driver.memoryOverhead", "1536m"),
        ("spark.kubernetes.authenticate.driver.serviceAccountName", "driver-sa"),
        ("spark.driver.extraJavaOptions", "-Dx=1"),
        ("spark.kubernetes.driver.master", "https://api:6443"),
        ("spark.kubernetes.driver.annotation.a", "b"),
        ("spark.kubernetes.driver.service.label.s", "l"),
        ("spark.kubernetes.driver.service.annotation.s", "a"),
        ("spark.kubernetes.driver.secretKeyRef.PASS", "db:pw"),
        ("spark.kubernetes.driverEnv.A", "1"),
        ("spark.executor.instances", "3"),
        ("spark.executor.cores", "4"),
        ("spark.kubernetes.executor.request.cores", "2"),
        ("spark.executor.memory", "1536m"),
        ("spark.kubernetes.executor.container.image", "spark:exec"),
        ("spark.kubernetes.executor.deleteOnTermination", "false"),
        ("spark.executor.extraJavaOptions", "-Dy=2"),
        ("spark.executorEnv.B", "2"),
    ];
    for (key, value) in expected {
        assert_eq!(conf.get(key).map(String::as_str), Some(value), "{key}");
    }
    // Same as spec.image: the generic key says it already.
    assert!(!conf.contains_key("spark.kubernetes.driver.container.image"));
}

#[test]
fn secrets_are_mounted_and_typed_ones_set_their_env() {
    let conf = conf(
        r#"
spec:
  driver: {secrets: [{name: gcp, path: /etc/gcp/, secretType: GCPServiceAccount}]}
  executor: {secrets: [{name: hdt, path: /etc/hdt, secretType: HadoopDelegationToken}, {name: plain, path: /p, secretType: Generic}]}
"#,
    );
    assert_eq!(conf["spark.kubernetes.driver.secrets.gcp"], "/etc/gcp/");
    assert_eq!(
        conf["spark.kubernetes.driverEnv.GOOGLE_APPLICATION_CREDENTIALS"],
        "/etc/gcp/key.json"
    );
    assert_eq!(
        conf["spark.executorEnv.HADOOP_TOKEN_FILE_LOCATION"],
        "/etc/hdt/hadoop.token"
    );
    assert_eq!(conf["spark.kubernetes.executor.secrets.plain"], "/p");
    assert_eq!(conf.keys().filter(|k| k.starts_with("spark.executorEnv.")).count(), 1);
}

#[test]
fn local_dir_volumes_become_spark_volume_confs() {
    let conf = conf(
        r#"
spec:
  volumes:
  - {name: spark-local-dir-1, emptyDir: {medium: Memory, sizeLimit: 1Gi}}
  - {name: spark-local-dir-2, hostPath: {path: /mnt/disk, type: Directory}}
  - {name: spark-local-dir-3, nfs: {server: nfs, path: /export, readOnly: true}}
  - {name: spark-local-dir-4, persistentVolumeClaim: {claimName: OnDemand}}
  - {name: data, persistentVolumeClaim: {claimName: data}}
  driver:
    volumeMounts: [{name: spark-local-dir-1, mountPath: /tmp/a, subPath: x}, {name: data, mountPath: /data}]
  executor:
    volumeMounts:
    - {name: spark-local-dir-2, mountPath: /tmp/b, readOnly: true}
    - {name: spark-local-dir-3, mountPath: /tmp/c}
    - {name: spark-local-dir-4, mountPath: /tmp/d}
"#,
    );
    let expected = [
        (
            "spark.kubernetes.driver.volumes.emptyDir.spark-local-dir-1.mount.path",
            "/tmp/a",
        ),
        (
            "spark.kubernetes.driver.volumes.emptyDir.spark-local-dir-1.mount.subPath",
            "x",
        ),
        (
            "spark.kubernetes.driver.volumes.emptyDir.spark-local-dir-1.options.medium",
            "Memory",
        ),
        (
            "spark.kubernetes.driver.volumes.emptyDir.spark-local-dir-1.options.sizeLimit",
            "1Gi",
        ),
        (
            "spark.kubernetes.executor.volumes.hostPath.spark-local-dir-2.mount.readOnly",
            "true",
        ),
        (
            "spark.kubernetes.executor.volumes.hostPath.spark-local-dir-2.options.path",
            "/mnt/disk",
        ),
        (
            "spark.kubernetes.executor.volumes.hostPath.spark-local-dir-2.options.type",
            "Directory",
        ),
        (
            "spark.kubernetes.executor.volumes.nfs.spark-local-dir-3.options.server",
            "nfs",
        ),
        (
            "spark.kubernetes.executor.volumes.nfs.spark-local-dir-3.options.readOnly",
            "true",
        ),
        (
            "spark.kubernetes.executor.volumes.persistentVolumeClaim.spark-local-dir-4.options.claimName",
            "OnDemand",
        ),
    ];
    for (key, value) in expected {
        assert_eq!(conf.get(key).map(String::as_str), Some(value), "{key}");
    }
    assert!(
        !conf.keys().any(|k| k.contains(".data.")),
        "other volumes are decoration's"
    );
}

#[test]
fn local_dir_mount_problems_name_the_field() {
    let missing = app_with("spec: {driver: {volumeMounts: [{name: spark-local-dir-9, mountPath: /x}]}}");
    let err = conf_of(&missing).unwrap_err();
    assert!(err.to_string().starts_with("spec.driver.volumeMounts[0].name"), "{err}");
    let unsupported = app_with(
        "spec: {volumes: [{name: spark-local-dir-1, configMap: {name: c}}], executor: {volumeMounts: [{name: spark-local-dir-1, mountPath: /x}]}}",
    );
    let err = conf_of(&unsupported).unwrap_err();
    assert!(err.to_string().starts_with("spec.volumes[0]"), "{err}");
}

#[test]
fn dynamic_allocation_tracks_shuffles_by_default() {
    let conf = conf("spec: {dynamicAllocation: {enabled: true, minExecutors: 1, maxExecutors: 9}}");
    assert_eq!(conf["spark.dynamicAllocation.enabled"], "true");
    assert_eq!(conf["spark.dynamicAllocation.minExecutors"], "1");
    assert_eq!(conf["spark.dynamicAllocation.maxExecutors"], "9");
    assert_eq!(conf["spark.dynamicAllocation.shuffleTracking.enabled"], "true");
    assert!(!conf.contains_key("spark.dynamicAllocation.initialExecutors"));
    let off = self::conf("spec: {dynamicAllocation: {enabled: false, maxExecutors: 9}}");
    assert!(!off.keys().any(|k| k.starts_with("spark.dynamicAllocation")));
}

#[test]
fn dependencies_and_the_main_resource() {
    let conf = conf(
        r#"
spec:
  sparkConf: {spark.files: local:///ignored.txt, spark.archives: local:///kept.zip#k}
  deps:
    jars: [local:///a.jar, local:///b.jar]
    files: [local:///f.txt]
    pyFiles: [local:///p.py]
    packages: [org.example:lib:1.0]
    excludePackages: [org.example:bad]
    repositories: [https://repo.example]
"#,
    );
    assert_eq!(conf["spark.jars"], "local:///a.jar,local:///b.jar,local:///app.jar");
    assert_eq!(
        conf["spark.files"], "local:///f.txt",
        "--files beats --conf spark.files"
    );
    assert_eq!(conf["spark.archives"], "local:///kept.zip#k");
    assert_eq!(conf["spark.submit.pyFiles"], "local:///p.py");
    assert_eq!(conf["spark.jars.packages"], "org.example:lib:1.0");
    assert_eq!(conf["spark.jars.excludes"], "org.example:bad");
    assert_eq!(conf["spark.jars.repositories"], "https://repo.example");

    let python = conf_of(&app_with(
        "spec: {type: Python, mainApplicationFile: local:///main.py, arguments: [a, b c], proxyUser: alice, pythonVersion: \"3\"}",
    ))
    .unwrap();
    assert!(!python.conf.contains_key("spark.jars"), "Python files are not jars");
    assert_eq!(python.conf["spark.kubernetes.pyspark.pythonVersion"], "3");
    assert_eq!(
        python.main,
        MainResource {
            kind: ResourceKind::Python,
            main_class: PYTHON_RUNNER.to_owned(),
            file: "local:///main.py".to_owned(),
            arguments: vec!["a".to_owned(), "b c".to_owned()],
            proxy_user: Some("alice".to_owned()),
        }
    );
}

#[test]
fn prometheus_sets_metrics_conf_and_the_agent_on_exposed_jvms() {
    let conf = conf(
        r#"
spec:
  monitoring:
    exposeDriverMetrics: true
    exposeExecutorMetrics: false
    prometheus: {jmxExporterJar: /jmx.jar, port: 9100}
  driver: {javaOptions: -Dx=1}
  executor: {javaOptions: -Dy=2}
"#,
    );
    assert_eq!(conf["spark.metrics.namespace"], "jobs.app");
    assert_eq!(conf["spark.metrics.conf"], "/etc/metrics/conf/metrics.properties");
    assert_eq!(
        conf["spark.driver.extraJavaOptions"],
        "-Dx=1 -javaagent:/jmx.jar=9100:/etc/metrics/conf/prometheus.yaml"
    );
    assert_eq!(conf["spark.executor.extraJavaOptions"], "-Dy=2");
}

#[test]
fn executor_templates_point_spark_at_the_mounted_file() {
    let conf = conf("spec: {executor: {template: {spec: {containers: [{name: spark-kubernetes-executor}]}}}}");
    assert_eq!(
        conf["spark.kubernetes.executor.podTemplateFile"],
        EXECUTOR_POD_TEMPLATE_FILE
    );
    assert_eq!(
        conf["spark.kubernetes.executor.podTemplateContainerName"],
        "spark-kubernetes-executor"
    );
}

#[test]
fn unsupported_specs_are_errors() {
    assert_eq!(
        conf_of(&app_with("spec: {mode: client}")),
        Err(SparkConfError::ClientMode)
    );
    let mut no_class = app_with("{}");
    no_class.spec.main_class = None;
    assert_eq!(
        conf_of(&no_class),
        Err(SparkConfError::MissingMainClass { kind: "Scala" })
    );
    let mut no_file = app_with("{}");
    no_file.spec.main_application_file = None;
    assert_eq!(conf_of(&no_file), Err(SparkConfError::MissingMainApplicationFile));
    let mut no_namespace = app_with("{}");
    no_namespace.metadata.namespace = None;
    assert_eq!(
        conf_of(&no_namespace),
        Err(SparkConfError::MissingMetadata { field: "namespace" })
    );
}
