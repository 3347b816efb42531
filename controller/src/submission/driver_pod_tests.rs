//! The driver pod and its companions beyond the captured variants. Expected values come from Spark 4.3
//! itself: a further spark-submit run through the capture tool with the confs below (volumes of every
//! type, proxy user, ports, GPU, Python interpreters), and Spark's sources for older versions.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use serde_json::{Value, json};
use spark_operator_api::SparkApplication;

use crate::submission::{
    ExistingDriverPod, NetworkPolicyMode, Submission, SubmissionError, SubmissionIds, SubmissionInput,
    SubmissionOptions, application_owner, build_submission, classify_existing_driver_pod,
};

fn app(spark_conf: &[(&str, &str)], extra_spec: Value) -> SparkApplication {
    let mut spec = json!({
        "type": "Scala",
        "sparkVersion": "4.3.0",
        "image": "spark:4.0.0",
        "mainClass": "org.apache.spark.examples.SparkPi",
        "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
        "arguments": ["1000", "two words"],
        "sparkConf": spark_conf.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "driver": {"serviceAccount": "spark"},
        "executor": {"instances": 2},
    });
    if let (Value::Object(spec), Value::Object(extra)) = (&mut spec, extra_spec) {
        spec.extend(extra);
    }
    serde_json::from_value(json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": "sink", "namespace": "jobs", "uid": "app-uid"},
        "spec": spec,
    }))
    .unwrap()
}

fn submit_with(app: &SparkApplication, options: SubmissionOptions) -> Result<Submission, SubmissionError> {
    let ids = SubmissionIds::from_random(
        [0xab; 16],
        [0x2c; 16],
        [[1, 2, 3], [4, 5, 6], [7, 8, 9]],
        0xa2_0165_ad86,
    );
    let input = SubmissionInput {
        app,
        submission_id: "sub-1",
        ids: &ids,
        submit_time: jiff::Timestamp::from_millisecond(1_795_319_770_368).unwrap(),
        spark_master_url: "k8s://https://10.0.0.1:443",
        spark_user: "spark",
        options: &options,
    };
    build_submission(&input)
}

fn submit(app: &SparkApplication) -> Submission {
    submit_with(app, SubmissionOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

fn spec(pod: &Pod) -> &PodSpec {
    pod.spec.as_ref().unwrap()
}

fn spark(pod: &Pod) -> &Container {
    spec(pod).containers.last().unwrap()
}

fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap()
}

fn env(container: &Container) -> BTreeMap<String, Value> {
    container
        .env
        .iter()
        .flatten()
        .map(|e| {
            (
                e.name.clone(),
                e.value.clone().map_or_else(|| to_json(&e.value_from), Value::from),
            )
        })
        .collect()
}

fn properties(submission: &Submission) -> BTreeMap<String, String> {
    let text = &submission.config_map.data.as_ref().unwrap()["spark.properties"];
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The confs of the extra capture (`x-sink`): every volume type Spark mounts, ports, GPU, overhead.
const SINK: &[(&str, &str)] = &[
    (
        "spark.kubernetes.driver.volumes.emptyDir.spark-local-dir-1.mount.path",
        "/tmp/spark-local",
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
        "spark.kubernetes.driver.volumes.hostPath.spark-local-dir-2.mount.path",
        "/mnt/disk",
    ),
    (
        "spark.kubernetes.driver.volumes.hostPath.spark-local-dir-2.options.path",
        "/data/disk",
    ),
    (
        "spark.kubernetes.driver.volumes.hostPath.spark-local-dir-2.options.type",
        "Directory",
    ),
    ("spark.kubernetes.driver.volumes.nfs.shared.mount.path", "/shared"),
    ("spark.kubernetes.driver.volumes.nfs.shared.mount.readOnly", "true"),
    ("spark.kubernetes.driver.volumes.nfs.shared.mount.subPath", "sub"),
    ("spark.kubernetes.driver.volumes.nfs.shared.options.path", "/export"),
    (
        "spark.kubernetes.driver.volumes.nfs.shared.options.server",
        "nfs.example.com",
    ),
    (
        "spark.kubernetes.driver.volumes.persistentVolumeClaim.ro.mount.path",
        "/ro",
    ),
    (
        "spark.kubernetes.driver.volumes.persistentVolumeClaim.ro.mount.readOnly",
        "true",
    ),
    (
        "spark.kubernetes.driver.volumes.persistentVolumeClaim.ro.options.claimName",
        "ro-pvc",
    ),
    ("spark.kubernetes.memoryOverheadFactor", "0.2"),
    ("spark.driver.cores", "2"),
    ("spark.driver.memory", "2g"),
    (
        "spark.kubernetes.driver.annotation.note",
        "app {{APP_ID}} exec {{EXECUTOR_ID}}",
    ),
    ("spark.kubernetes.driver.node.selector.zone", "a"),
    ("spark.kubernetes.node.selector.disk", "ssd"),
    ("spark.kubernetes.driver.secrets.gcp", "/etc/gcp"),
    ("spark.driver.port", "7100"),
    ("spark.ui.port", "4050"),
    ("spark.kubernetes.container.image.pullSecrets", "s1,s2"),
    ("spark.kubernetes.driver.container.image", "spark:driver"),
    ("spark.driver.resource.gpu.amount", "1"),
    ("spark.driver.resource.gpu.vendor", "nvidia.com"),
];

#[test]
fn spark_volume_confs_build_the_volumes_spark_builds() {
    let submission = submit(&app(SINK, json!({"proxyUser": "alice"})));
    let pod = &submission.driver_pod;
    let volumes: BTreeMap<String, Value> = spec(pod)
        .volumes
        .iter()
        .flatten()
        .map(|v| (v.name.clone(), to_json(v)))
        .collect();
    assert_eq!(
        volumes["gcp-volume"],
        json!({"name": "gcp-volume", "secret": {"secretName": "gcp"}})
    );
    assert_eq!(
        volumes["shared"],
        json!({"name": "shared", "nfs": {"path": "/export", "server": "nfs.example.com"}})
    );
    assert_eq!(
        volumes["ro"],
        json!({"name": "ro", "persistentVolumeClaim": {"claimName": "ro-pvc", "readOnly": true}})
    );
    assert_eq!(
        volumes["spark-local-dir-2"],
        json!({"name": "spark-local-dir-2", "hostPath": {"path": "/data/disk", "type": "Directory"}})
    );
    assert_eq!(
        volumes["spark-local-dir-1"],
        json!({"name": "spark-local-dir-1", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}})
    );
    let mounts: BTreeMap<String, Value> = spark(pod)
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.clone(), to_json(m)))
        .collect();
    assert_eq!(
        mounts["shared"],
        json!({"mountPath": "/shared", "name": "shared", "readOnly": true, "subPath": "sub", "subPathExpr": ""})
    );
    assert_eq!(
        mounts["gcp-volume"],
        json!({"mountPath": "/etc/gcp", "name": "gcp-volume"})
    );
    // The local-dir volumes are the local dirs: no default emptyDir is added.
    assert!(
        !mounts
            .values()
            .any(|m| m["mountPath"].as_str().unwrap().starts_with("/var/data"))
    );
    let dirs = env(spark(pod))["SPARK_LOCAL_DIRS"].clone();
    let mut dirs: Vec<&str> = dirs.as_str().unwrap().split(',').collect();
    dirs.sort_unstable();
    assert_eq!(dirs, ["/mnt/disk", "/tmp/spark-local"]);
}

#[test]
fn proxy_user_ports_resources_and_pod_settings() {
    let submission = submit(&app(SINK, json!({"proxyUser": "alice"})));
    let pod = &submission.driver_pod;
    let container = spark(pod);
    assert_eq!(
        container.args.as_deref().unwrap(),
        [
            "driver",
            "--proxy-user",
            "alice",
            "--properties-file",
            "/opt/spark/conf/spark.properties",
            "--class",
            "org.apache.spark.examples.SparkPi",
            "local:///opt/spark/examples/jars/spark-examples.jar",
            "1000",
            "two words"
        ]
    );
    assert_eq!(env(container)["SPARK_USER"], "alice");
    assert_eq!(container.image.as_deref(), Some("spark:driver"));
    let ports: Vec<(String, i32)> = container
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap(), p.container_port))
        .collect();
    assert_eq!(
        ports[..3],
        [
            ("driver-rpc-port".to_owned(), 7100),
            ("blockmanager".to_owned(), 7079),
            ("spark-ui".to_owned(), 4050)
        ]
    );
    let resources = to_json(&container.resources);
    // 2g plus 0.2 × 2048 MiB = 409 MiB (truncated).
    assert_eq!(
        resources,
        json!({"limits": {"memory": "2457Mi", "nvidia.com/gpu": "1"}, "requests": {"cpu": "2", "memory": "2457Mi"}})
    );
    let annotations = pod.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations["note"], format!("app spark-{} exec ", "ab".repeat(16)));
    let pod_spec = spec(pod);
    assert_eq!(to_json(&pod_spec.node_selector), json!({"disk": "ssd", "zone": "a"}));
    assert_eq!(
        to_json(&pod_spec.image_pull_secrets),
        json!([{"name": "s1"}, {"name": "s2"}])
    );
    let properties = properties(&submission);
    assert_eq!(properties["spark.driver.port"], "7100");
    assert_eq!(properties["spark.kubernetes.memoryOverheadFactor"], "0.2");
    assert!(properties["spark.driver.host"].ends_with("-driver-svc.jobs.svc"));
    let service_ports: Vec<i32> = submission
        .service
        .spec
        .as_ref()
        .unwrap()
        .ports
        .iter()
        .flatten()
        .map(|p| p.port)
        .collect();
    assert_eq!(service_ports, [7100, 7079, 4050, 15002]);
}

#[test]
fn python_drivers_get_their_interpreters_and_their_factor() {
    let python = app(
        &[
            ("spark.pyspark.python", "python3"),
            ("spark.pyspark.driver.python", "python3.11"),
            ("spark.kubernetes.driver.request.cores", "0.5"),
            ("spark.driver.memoryOverheadFactor", "0.3"),
            ("spark.driver.memory", "512m"),
        ],
        json!({"type": "Python", "mainClass": null, "mainApplicationFile": "local:///pi.py", "arguments": ["7"]}),
    );
    let submission = submit(&python);
    let container = spark(&submission.driver_pod);
    let env = env(container);
    assert_eq!(env["PYSPARK_PYTHON"], "python3");
    assert_eq!(env["PYSPARK_DRIVER_PYTHON"], "python3.11");
    assert_eq!(
        to_json(&container.resources),
        json!({"limits": {"memory": "896Mi"}, "requests": {"cpu": "0.5", "memory": "896Mi"}})
    );
    assert_eq!(
        container.args.as_ref().unwrap()[4],
        "org.apache.spark.deploy.PythonRunner"
    );
    let properties = properties(&submission);
    assert_eq!(properties["spark.kubernetes.memoryOverheadFactor"], "0.4");
    assert_eq!(properties["spark.kubernetes.resource.type"], "python");
}

#[test]
fn the_driver_pod_is_decorated_protected_and_placed() {
    let decorated = app(
        &[],
        json!({
            "driver": {
                "serviceAccount": "spark",
                "env": [{"name": "TYPED", "value": "1"}],
                "tolerations": [{"key": "spot", "operator": "Exists"}],
                "sidecars": [{"name": "proxy", "image": "envoy"}]
            }
        }),
    );
    let pod = submit(&decorated).driver_pod;
    assert_eq!(pod.metadata.namespace.as_deref(), Some("jobs"));
    assert_eq!(
        pod.metadata.finalizers.as_deref(),
        Some(&["sparkoperator.k8s.io/driver-protection".to_owned()][..])
    );
    let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("SparkApplication", "app-uid")
    );
    assert_eq!(env(&spec(&pod).containers[0])["TYPED"], "1");
    assert_eq!(spec(&pod).containers[1].name, "proxy");
    assert_eq!(spec(&pod).tolerations.as_ref().unwrap().len(), 1);
    let labels = pod.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["sparkoperator.k8s.io/app-name"], "sink");
    assert_eq!(labels["sparkoperator.k8s.io/submission-id"], "sub-1");
    assert_eq!(labels["sparkoperator.k8s.io/launched-by-spark-operator"], "true");
    // Decorating the built pod again (as the webhook will) changes nothing.
    let again =
        spark_operator_api::decoration::decorate_pod(&pod, &decorated, spark_operator_api::labels::SparkRole::Driver)
            .unwrap();
    assert_eq!(again, pod);
}

#[test]
fn a_template_sidecar_stays_beside_the_spark_container() {
    let sidecar = json!({"name": "proxy", "image": "envoy"});
    let named = app(
        &[],
        json!({"driver": {"template": {"spec": {"containers": [sidecar, {"name": "spark-kubernetes-driver"}]}}}}),
    );
    let pod = submit(&named).driver_pod;
    let names: Vec<&str> = spec(&pod).containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["proxy", "spark-kubernetes-driver"],
        "Spark's order: the Spark container last"
    );
    assert_eq!(spec(&pod).containers[1].image.as_deref(), Some("spark:4.0.0"));

    // Without the name, Spark takes the first container; it must stay the one decoration configures.
    let unnamed = app(
        &[],
        json!({"driver": {"env": [{"name": "TYPED", "value": "1"}], "template": {"spec": {"containers": [{"name": "main"}, sidecar]}}}}),
    );
    let pod = submit(&unnamed).driver_pod;
    let main = &spec(&pod).containers[0];
    assert_eq!(
        (main.name.as_str(), main.image.as_deref()),
        ("main", Some("spark:4.0.0"))
    );
    assert_eq!(env(main)["TYPED"], "1");
    assert!(spec(&pod).containers[1].env.is_none());
}

#[test]
fn spark_3_builds_what_spark_3_built() {
    let old = app(&[], json!({"sparkVersion": "3.0.2"}));
    let submission = submit(&old);
    let pod = &submission.driver_pod;
    let conf_volume = spec(pod).volumes.iter().flatten().last().unwrap();
    assert_eq!(conf_volume.name, "spark-conf-volume");
    let prefix = format!(
        "sink-{}",
        submission
            .service
            .metadata
            .name
            .as_ref()
            .unwrap()
            .trim_start_matches("sink-")
            .trim_end_matches("-driver-svc")
    );
    assert_eq!(
        submission.config_map.metadata.name.as_deref(),
        Some(format!("{prefix}-driver-conf-map").as_str())
    );
    assert_eq!(submission.config_map.immutable, None);
    assert!(!pod.metadata.labels.as_ref().unwrap().contains_key("spark-version"));
    assert!(spark(pod).security_context.is_none());
    assert!(
        spark(pod)
            .ports
            .iter()
            .flatten()
            .all(|p| p.name.as_deref() != Some("spark-connect"))
    );
    assert!(submission.network_policy.is_none());
    let service = submission.service.spec.as_ref().unwrap();
    assert_eq!(service.ip_families, None);
    assert_eq!(service.publish_not_ready_addresses, None);

    let three_five = submit(&app(&[], json!({"sparkVersion": "3.5.3"})));
    assert_eq!(
        spec(&three_five.driver_pod)
            .volumes
            .iter()
            .flatten()
            .last()
            .unwrap()
            .name,
        "spark-conf-volume-driver"
    );
    assert!(three_five.network_policy.is_none());
    assert!(three_five.service.spec.as_ref().unwrap().ip_families.is_some());
}

/// The `spark-version` label came with Spark 3.3.0 (SPARK-37339): 3.2.4, the last 3.2, has none, 3.3.0
/// has it (both checked in their `spark-kubernetes` jars), and it is then a label no user may set.
#[test]
fn the_version_label_comes_with_spark_3_3() {
    let labels = |version: &str| {
        let submission = submit(&app(&[], json!({"sparkVersion": version})));
        let selector = submission.service.spec.unwrap().selector.unwrap();
        let labels = submission.driver_pod.metadata.labels.unwrap();
        assert_eq!(labels.get("spark-version"), selector.get("spark-version"));
        labels.get("spark-version").cloned()
    };
    assert_eq!(labels("3.2.4"), None);
    assert_eq!(labels("3.3.0").as_deref(), Some("3.3.0"));
    assert_eq!(labels("3.5.3").as_deref(), Some("3.5.3"));
    assert_eq!(labels("4.3.0").as_deref(), Some("4.3.0"));
    let user_label = [("spark.kubernetes.driver.label.spark-version", "mine")];
    assert!(
        submit_with(
            &app(&user_label, json!({"sparkVersion": "3.2.4"})),
            SubmissionOptions::default()
        )
        .is_ok()
    );
    let refused = submit_with(
        &app(&user_label, json!({"sparkVersion": "3.5.3"})),
        SubmissionOptions::default(),
    );
    assert!(refused.is_err(), "{refused:?}");
}

/// Before 4.0 (SPARK-49731) Spark reads neither `mount.subPathExpr` nor hostPath `options.type`: its
/// mounts have no `subPathExpr` and its hostPath volumes an empty type, whatever the conf says
/// (Spark 3.5.3's `MountVolumesFeatureStep`, and the `python-deps` and `scala-pi-rich` 3.5 captures).
#[test]
fn spark_3_5_ignores_sub_path_expr_and_the_host_path_type() {
    let conf = [
        ("spark.kubernetes.driver.volumes.hostPath.cache.mount.path", "/cache"),
        (
            "spark.kubernetes.driver.volumes.hostPath.cache.mount.subPathExpr",
            "$(POD_NAME)",
        ),
        (
            "spark.kubernetes.driver.volumes.hostPath.cache.options.path",
            "/mnt/cache",
        ),
        (
            "spark.kubernetes.driver.volumes.hostPath.cache.options.type",
            "Directory",
        ),
    ];
    let cache = |version: &str| {
        let submission = submit(&app(&conf, json!({"sparkVersion": version})));
        let pod = &submission.driver_pod;
        let volume = spec(pod)
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "cache")
            .map(to_json);
        let mount = spark(pod)
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == "cache")
            .map(to_json);
        (volume.unwrap(), mount.unwrap())
    };
    assert_eq!(
        cache("3.5.3"),
        (
            json!({"name": "cache", "hostPath": {"path": "/mnt/cache", "type": ""}}),
            json!({"mountPath": "/cache", "name": "cache", "readOnly": false, "subPath": ""})
        )
    );
    assert_eq!(
        cache("4.0.0"),
        (
            json!({"name": "cache", "hostPath": {"path": "/mnt/cache", "type": "Directory"}}),
            json!({"mountPath": "/cache", "name": "cache", "readOnly": false, "subPath": "", "subPathExpr": "$(POD_NAME)"})
        )
    );
}

#[test]
fn the_network_policy_follows_the_option_and_opens_exposed_executor_ports() {
    let monitored = app(
        &[],
        json!({
            "monitoring": {"exposeDriverMetrics": false, "exposeExecutorMetrics": true, "prometheus": {"jmxExporterJar": "/j.jar"}},
            "executor": {"instances": 2, "ports": [{"name": "debug", "protocol": "TCP", "containerPort": 5005}]}
        }),
    );
    let policy = submit(&monitored).network_policy.unwrap();
    let ingress = to_json(&policy.spec.as_ref().unwrap().ingress);
    assert_eq!(
        ingress[1],
        json!({"ports": [{"port": 5005, "protocol": "TCP"}, {"port": 8090, "protocol": "TCP"}]})
    );
    let never = SubmissionOptions {
        network_policy: NetworkPolicyMode::Never,
        ..SubmissionOptions::default()
    };
    assert!(submit_with(&monitored, never).unwrap().network_policy.is_none());
}

#[test]
fn the_driver_finalizer_is_an_option_of_the_build() {
    let protection = "sparkoperator.k8s.io/driver-protection";
    let templated = app(
        &[],
        json!({"driver": {"serviceAccount": "spark", "template": {"metadata": {"finalizers": ["keep", protection]}}}}),
    );
    let with = submit(&templated).driver_pod.metadata.finalizers.unwrap();
    assert_eq!(
        with,
        [protection],
        "added once; the template's own finalizers are not copied"
    );
    let off = SubmissionOptions {
        driver_finalizer: false,
        ..SubmissionOptions::default()
    };
    let without = submit_with(&templated, off)
        .unwrap()
        .driver_pod
        .metadata
        .finalizers
        .unwrap();
    assert!(
        without.is_empty(),
        "off means off, even when the template names it: {without:?}"
    );
    assert!(SubmissionOptions::default().driver_finalizer);
}

#[test]
fn the_application_is_the_drivers_only_controller() {
    let plain = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "keep", "uid": "cm-uid"});
    let templated = app(
        &[],
        json!({"driver": {"serviceAccount": "spark", "template": {"metadata": {"ownerReferences": [plain]}}}}),
    );
    let owners = submit(&templated).driver_pod.metadata.owner_references.unwrap();
    let ours = application_owner(&templated).unwrap();
    assert_eq!(ours.controller, Some(true));
    assert_eq!(
        owners.iter().filter(|o| o.controller == Some(true)).collect::<Vec<_>>(),
        [&ours]
    );
    assert_eq!(owners.len(), 2, "the template's plain owner is kept");

    let mut controlled = templated.clone();
    let template = controlled.spec.driver.pod.template.as_mut().unwrap();
    let other = &mut template.metadata.as_mut().unwrap().owner_references.as_mut().unwrap()[0];
    other.controller = Some(true);
    let err = submit_with(&controlled, SubmissionOptions::default()).unwrap_err();
    let err = spark_operator_runtime::error_chain::ErrorChain(&err).to_string();
    assert!(
        err.starts_with("the driver pod cannot be decorated: spec.driver.template.metadata.ownerReferences[0]:"),
        "{err}"
    );
}

#[test]
fn dependents_are_owned_by_the_created_driver_pod() {
    let templated = app(
        &[],
        json!({"executor": {"template": {"spec": {"containers": [{"name": "spark-kubernetes-executor"}]}}}}),
    );
    let mut submission = submit(&templated);
    submission.set_driver_owner("driver-uid");
    let template = submission.executor_pod_template.as_ref().unwrap();
    let policy = submission.network_policy.as_ref().unwrap();
    for meta in [
        &submission.config_map.metadata,
        &submission.service.metadata,
        &template.metadata,
        &policy.metadata,
    ] {
        let owners = meta.owner_references.as_ref().unwrap();
        assert_eq!(owners.len(), 1);
        assert_eq!(
            (owners[0].kind.as_str(), owners[0].name.as_str(), owners[0].uid.as_str()),
            ("Pod", "sink-driver", "driver-uid")
        );
        assert_eq!(owners[0].controller, Some(true));
    }
    let yaml: Value = serde_yaml::from_str(&template.data.as_ref().unwrap()["podspec-configmap-key"]).unwrap();
    assert_eq!(
        yaml,
        json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "spark-kubernetes-executor"}]}})
    );
}

#[test]
fn confs_spark_refuses_or_cannot_honour_are_errors() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[("spark.driver.host", "x")], "spark.driver.host"),
        (&[("spark.driver.port", "seven")], "spark.driver.port"),
        (&[("spark.kubernetes.driver.label.spark-role", "x")], "spark-role"),
        (
            &[("spark.kubernetes.driver.volumes.configMap.c.mount.path", "/c")],
            "configMap",
        ),
        (
            &[("spark.kubernetes.driver.volumes.nfs.n.mount.path", "/n")],
            "options.path",
        ),
        (
            &[("spark.kubernetes.driver.secretKeyRef.X", "no-key")],
            "secretKeyRef.X",
        ),
        (&[("spark.driver.resource.gpu.amount", "1")], "vendor"),
        (&[("spark.driver.memory", "lots")], "spark.driver.memory"),
        (
            &[("spark.kubernetes.authenticate.driver.oauthTokenFile", "/t")],
            "oauthTokenFile",
        ),
        (
            &[
                (
                    "spark.kubernetes.driver.volumes.persistentVolumeClaim.p.mount.path",
                    "/p",
                ),
                (
                    "spark.kubernetes.driver.volumes.persistentVolumeClaim.p.options.claimName",
                    "OnDemand",
                ),
            ],
            "OnDemand",
        ),
    ];
    for (conf, needle) in cases {
        let err = submit_with(&app(conf, json!({})), SubmissionOptions::default()).unwrap_err();
        assert!(err.to_string().contains(needle), "{conf:?}: {err}");
    }
    let mut no_image = app(&[], json!({}));
    no_image.spec.image = None;
    let err = submit_with(&no_image, SubmissionOptions::default()).unwrap_err();
    assert!(err.to_string().starts_with("spec.image"), "{err}");
}

#[test]
fn ids_are_formatted_as_spark_makes_them() {
    let ids = SubmissionIds::from_random(
        [0x0f; 16],
        [0xa0; 16],
        [[0x1e, 0x26, 0x42], [0, 0, 1], [0xff; 3]],
        0xa2_0138_0c97,
    );
    assert_eq!(ids.app_id, format!("spark-{}", "0f".repeat(16)));
    assert_eq!(ids.prefix_id, "1e2642a201380c97");
    assert_eq!(ids.service_id, "000001a201380c97");
    assert_eq!(ids.local_dir_uuid, "a0a0a0a0-a0a0-a0a0-a0a0-a0a0a0a0a0a0");
}

#[test]
fn existing_driver_pods_are_told_apart_by_their_labels() {
    let app = app(&[], json!({}));
    let ours = submit(&app).driver_pod;
    assert_eq!(
        classify_existing_driver_pod(&ours, &app, "sub-1"),
        ExistingDriverPod::ThisSubmission
    );
    assert_eq!(
        classify_existing_driver_pod(&ours, &app, "sub-2"),
        ExistingDriverPod::EarlierSubmission {
            submission_id: Some("sub-1".to_owned())
        }
    );
    assert_eq!(
        classify_existing_driver_pod(&Pod::default(), &app, "sub-1"),
        ExistingDriverPod::Unrelated
    );
}

/// Our driver with one of its labels changed or removed.
fn relabelled(pod: &Pod, key: &str, value: Option<&str>) -> Pod {
    let mut pod = pod.clone();
    let labels = pod.metadata.labels.get_or_insert_default();
    match value {
        Some(value) => labels.insert(key.to_owned(), value.to_owned()),
        None => labels.remove(key),
    };
    pod
}

#[test]
fn a_pod_is_only_ours_with_both_the_launched_by_and_the_app_name_label() {
    // Someone's own pod that happens to carry the driver's name and app-name (and even our submission
    // id) is not ours without the launched-by label: never adopted, never deleted.
    let app = app(&[], json!({}));
    let ours = submit(&app).driver_pod;
    let launched_by = "sparkoperator.k8s.io/launched-by-spark-operator";
    let app_name = "sparkoperator.k8s.io/app-name";
    for (key, value) in [
        (launched_by, None),
        (launched_by, Some("false")),
        (app_name, None),
        (app_name, Some("other")),
    ] {
        let pod = relabelled(&ours, key, value);
        for submission_id in ["sub-1", "sub-2"] {
            assert_eq!(
                classify_existing_driver_pod(&pod, &app, submission_id),
                ExistingDriverPod::Unrelated,
                "{key}={value:?}, submission {submission_id}"
            );
        }
    }
    // Without a submission id, a pod of ours is from some other submission: it has to go.
    assert_eq!(
        classify_existing_driver_pod(
            &relabelled(&ours, "sparkoperator.k8s.io/submission-id", None),
            &app,
            "sub-1"
        ),
        ExistingDriverPod::EarlierSubmission { submission_id: None }
    );
}

#[test]
fn a_huge_overhead_factor_is_refused_not_wrapped_into_a_small_limit() {
    for factor in ["1e300", "1.7976931348623157e308", "1e19"] {
        let huge = app(
            &[("spark.driver.memoryOverheadFactor", factor)],
            json!({"driver": {"serviceAccount": "spark", "memory": "512m"}}),
        );
        let error = submit_with(&huge, SubmissionOptions::default()).unwrap_err();
        assert!(
            error.to_string().contains("does not fit a container limit"),
            "{factor}: {error}"
        );
    }
    let fine = app(
        &[("spark.driver.memoryOverheadFactor", "0.5")],
        json!({"driver": {"serviceAccount": "spark", "memory": "512g"}}),
    );
    let pod = submit(&fine).driver_pod;
    let limits = pod.spec.unwrap().containers[0]
        .resources
        .clone()
        .unwrap()
        .limits
        .unwrap();
    assert_eq!(limits["memory"].0, format!("{}Mi", 512 * 1024 + 256 * 1024));
}

#[test]
fn volcano_gets_a_pod_group_sized_for_the_driver_and_its_executors() {
    let a = app(
        &[],
        json!({
            "batchScheduler": "volcano",
            "batchSchedulerOptions": {"queue": "etl", "priorityClassName": "nightly"},
            "driver": {"serviceAccount": "spark", "cores": 1, "memory": "512m"},
            "executor": {"instances": 2, "cores": 2, "memory": "1g"},
        }),
    );
    let s = submit(&a);
    let group = s.pod_group.expect("a PodGroup");
    assert_eq!(group.resource.group, "scheduling.volcano.sh");
    assert_eq!(group.resource.plural, "podgroups");
    assert_eq!(group.object.metadata.name.as_deref(), Some("spark-sink-pg"));
    assert_eq!(group.object.metadata.namespace.as_deref(), Some("jobs"));
    assert_eq!(
        group.object.metadata.owner_references,
        application_owner(&a).map(|o| vec![o])
    );
    // The driver: 1 core, 512 MiB + 384 MiB overhead; each executor: 2 cores, 1024 + 384 MiB.
    assert_eq!(
        group.object.data["spec"],
        json!({"minMember": 1, "minResources": {"cpu": "5", "memory": "3712Mi"},
               "queue": "etl", "priorityClassName": "nightly"})
    );
    // The pods name the group.
    let annotations = s.driver_pod.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("scheduling.k8s.io/group-name").map(String::as_str),
        Some("spark-sink-pg")
    );
    assert_eq!(spec(&s.driver_pod).scheduler_name.as_deref(), Some("volcano"));
    let template = s.executor_pod_template.expect("the executor template");
    let template = template
        .data
        .unwrap_or_default()
        .into_values()
        .next()
        .unwrap_or_default();
    assert!(
        template.contains("scheduling.k8s.io/group-name: spark-sink-pg"),
        "{template}"
    );

    // A sidecar's requests count too: the scheduler places the whole pod.
    let mut sidecar = a.clone();
    sidecar.spec.driver.pod.sidecars = serde_json::from_value(json!([{
        "name": "proxy", "image": "envoy", "resources": {"requests": {"cpu": "500m", "memory": "128Mi"}}
    }]))
    .unwrap();
    let group = submit(&sidecar).pod_group.expect("a PodGroup");
    assert_eq!(
        group.object.data["spec"]["minResources"],
        json!({"cpu": "5500m", "memory": "3840Mi"})
    );

    // batchSchedulerOptions.resources win, as in Kubeflow; YuniKorn has no PodGroup but task groups.
    let mut own = a.clone();
    own.spec.batch_scheduler_options =
        serde_json::from_value(json!({"resources": {"cpu": "8", "memory": "16Gi"}})).unwrap();
    let group = submit(&own).pod_group.expect("a PodGroup");
    assert_eq!(
        group.object.data["spec"]["minResources"],
        json!({"cpu": "8", "memory": "16Gi"})
    );

    let mut yunikorn = a.clone();
    yunikorn.spec.batch_scheduler = Some("yunikorn".into());
    let s = submit(&yunikorn);
    assert!(s.pod_group.is_none());
    let groups: Value = serde_json::from_str(
        s.driver_pod.metadata.annotations.as_ref().unwrap()["yunikorn.apache.org/task-groups"].as_str(),
    )
    .unwrap();
    assert_eq!(groups[0]["name"], "spark-driver");
    assert_eq!(groups[0]["minMember"], 1);
    assert_eq!(
        groups[1],
        json!({"name": "spark-executor", "minMember": 2, "minResource": {"cpu": "2", "memory": "1408Mi"}})
    );

    // No batch scheduler: no group.
    assert!(submit(&app(&[], json!({}))).pod_group.is_none());
}
