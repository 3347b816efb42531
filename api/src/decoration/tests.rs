//! Decoration: each setting, idempotence (also across API-server defaulting), pods that already carry
//! some of the settings, and what differs between drivers and executors.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, PodSpec, Volume, VolumeMount};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;

use super::*;
use crate::labels::SparkRole::{Driver, Executor};

/// Every setting decoration knows, different for the driver and the executors.
const RICH: &str = r#"
apiVersion: sparkoperator.k8s.io/v1beta2
kind: SparkApplication
metadata: {name: rich, namespace: jobs, uid: 0b9f1a34-0000-4000-8000-000000000001}
spec:
  type: Scala
  sparkVersion: 4.0.0
  mainApplicationFile: local:///app.jar
  sparkConfigMap: spark-cm
  hadoopConfigMap: hadoop-cm
  volumes:
  - {name: data, persistentVolumeClaim: {claimName: data-pvc}}
  - {name: scratch, emptyDir: {}}
  - {name: spark-local-dir-1, emptyDir: {}}
  monitoring:
    exposeDriverMetrics: true
    exposeExecutorMetrics: true
    prometheus: {jmxExporterJar: /prometheus/jmx.jar, port: 8091}
  driver:
    env: [{name: ROLE, value: driver}, {name: SPARK_USER, value: overridden}]
    envFrom: [{configMapRef: {name: driver-env}}]
    configMaps: [{name: extra, path: /etc/extra}]
    volumeMounts:
    - {name: data, mountPath: /data}
    - {name: spark-local-dir-1, mountPath: /tmp/local}
    ports: [{name: debug, protocol: TCP, containerPort: 5005}]
    hostNetwork: true
    hostAliases: [{ip: 10.0.0.1, hostnames: [db]}]
    initContainers: [{name: init, image: busybox}]
    sidecars: [{name: proxy, image: envoy}]
    dnsConfig: {nameservers: [1.1.1.1]}
    priorityClassName: high
    schedulerName: custom
    nodeSelector: {pool: drivers}
    affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [a]}]}]}}}
    tolerations: [{key: dedicated, operator: Equal, value: spark, effect: NoSchedule}]
    memoryLimit: 2g
    gpu: {name: nvidia.com/gpu, quantity: 1}
    securityContext: {runAsNonRoot: true}
    podSecurityContext: {fsGroup: 185}
    terminationGracePeriodSeconds: 30
    lifecycle: {preStop: {exec: {command: [sleep, "5"]}}}
    shareProcessNamespace: true
  executor:
    instances: 2
    env: [{name: ROLE, value: executor}]
    volumeMounts: [{name: scratch, mountPath: /scratch}]
    ports: [{name: shuffle, protocol: TCP, containerPort: 7337}]
    sidecars: [{name: logs, image: fluent-bit}]
    priorityClassName: low
    nodeSelector: {pool: executors}
    tolerations: [{key: spot, operator: Exists}]
    memoryLimit: 3Gi
    lifecycle: {preStop: {exec: {command: [sleep, "1"]}}}
"#;

fn app(yaml: &str) -> SparkApplication {
    serde_yaml::from_str(yaml).unwrap()
}

fn rich() -> SparkApplication {
    app(RICH)
}

/// The smallest app: decoration must change nothing but the owner reference on a driver.
fn bare() -> SparkApplication {
    app(r#"
apiVersion: sparkoperator.k8s.io/v1beta2
kind: SparkApplication
metadata: {name: bare, namespace: jobs, uid: 0b9f1a34-0000-4000-8000-000000000002}
spec: {type: Scala, sparkVersion: 4.0.0, driver: {}, executor: {}}
"#)
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

/// A pod as Spark builds it: one Spark container with Spark's env, mounts and memory request.
fn spark_pod(role: SparkRole) -> Pod {
    let name = match role {
        Driver => crate::labels::DRIVER_CONTAINER_NAME,
        Executor => crate::labels::EXECUTOR_CONTAINER_NAME,
    };
    let container = Container {
        name: name.into(),
        image: Some("spark:4.0.0".into()),
        env: Some(vec![
            env("SPARK_USER", "root"),
            env("SPARK_CONF_DIR", "/opt/spark/conf"),
        ]),
        volume_mounts: Some(vec![VolumeMount {
            name: "spark-conf-volume-driver".into(),
            mount_path: "/opt/spark/conf".into(),
            ..Default::default()
        }]),
        resources: Some(k8s_openapi::api::core::v1::ResourceRequirements {
            requests: Some(BTreeMap::from([("memory".to_owned(), Quantity("1408Mi".into()))])),
            limits: Some(BTreeMap::from([("memory".to_owned(), Quantity("1408Mi".into()))])),
            ..Default::default()
        }),
        ..Default::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("rich-{role}")),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![container],
            volumes: Some(vec![Volume {
                name: "spark-conf-volume-driver".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn decorate(pod: &Pod, app: &SparkApplication, role: SparkRole) -> Pod {
    decorate_pod(pod, app, role).unwrap_or_else(|e| panic!("decoration failed: {e}"))
}

fn spec(pod: &Pod) -> &PodSpec {
    pod.spec.as_ref().unwrap()
}

fn spark(pod: &Pod) -> &Container {
    &spec(pod).containers[0]
}

fn env_value<'a>(container: &'a Container, name: &str) -> Vec<&'a str> {
    container
        .env
        .iter()
        .flatten()
        .filter(|e| e.name == name)
        .map(|e| e.value.as_deref().unwrap_or(""))
        .collect()
}

fn mount_paths(container: &Container) -> Vec<(&str, &str)> {
    container
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.as_str(), m.mount_path.as_str()))
        .collect()
}

fn volume_names(pod: &Pod) -> Vec<&str> {
    spec(pod).volumes.iter().flatten().map(|v| v.name.as_str()).collect()
}

#[test]
fn driver_gets_a_controller_reference_to_its_application() {
    let pod = decorate(&spark_pod(Driver), &rich(), Driver);
    let owners = pod.metadata.owner_references.unwrap();
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].kind, "SparkApplication");
    assert_eq!(owners[0].api_version, "sparkoperator.k8s.io/v1beta2");
    assert_eq!(owners[0].name, "rich");
    assert_eq!(owners[0].uid, "0b9f1a34-0000-4000-8000-000000000001");
    assert_eq!(owners[0].controller, Some(true));
    assert_eq!(owners[0].block_owner_deletion, Some(true));
}

#[test]
fn executors_are_not_owned_by_the_application() {
    // Spark makes the driver pod their controller; a second owner would keep them alive (Kubeflow #2961).
    let pod = decorate(&spark_pod(Executor), &rich(), Executor);
    assert!(pod.metadata.owner_references.unwrap_or_default().is_empty());
}

#[test]
fn a_driver_with_another_controller_is_refused() {
    let mut pod = spark_pod(Driver);
    let plain = OwnerReference {
        controller: Some(false),
        ..pod::application_owner_reference("plain", "plain-uid")
    };
    pod.metadata.owner_references = Some(vec![plain, pod::application_owner_reference("other", "other-uid")]);
    let err = decorate_pod(&pod, &rich(), Driver).unwrap_err();
    assert_eq!(
        err.path().map(FieldPath::as_str),
        Some("spec.driver.template.metadata.ownerReferences[1]")
    );
    assert!(err.to_string().contains("set controller: false"), "{err}");
    // A plain owner stays, beside the application as controller.
    let mut pod = spark_pod(Driver);
    pod.metadata.owner_references = Some(vec![OwnerReference {
        controller: None,
        ..pod::application_owner_reference("plain", "plain-uid")
    }]);
    let owners = decorate(&pod, &rich(), Driver).metadata.owner_references.unwrap();
    assert_eq!(owners.len(), 2);
    assert_eq!(owners[1].uid, "0b9f1a34-0000-4000-8000-000000000001");
    assert_eq!(owners[1].controller, Some(true));
}

#[test]
fn the_applications_own_reference_is_refreshed_as_controller() {
    let uid = "0b9f1a34-0000-4000-8000-000000000001";
    let mut pod = spark_pod(Driver);
    pod.metadata.owner_references = Some(vec![OwnerReference {
        controller: Some(false),
        block_owner_deletion: None,
        ..pod::application_owner_reference("rich", uid)
    }]);
    let owners = decorate(&pod, &rich(), Driver).metadata.owner_references.unwrap();
    assert_eq!(owners, [pod::application_owner_reference("rich", uid)]);
}

#[test]
fn an_application_without_uid_cannot_own_its_driver() {
    let mut app = rich();
    app.metadata.uid = None;
    let err = decorate_pod(&spark_pod(Driver), &app, Driver).unwrap_err();
    assert_eq!(err.path().map(FieldPath::as_str), Some("metadata.uid"));
    // Executors need no owner, so they decorate fine.
    assert!(decorate_pod(&spark_pod(Executor), &app, Executor).is_ok());
}

#[test]
fn env_is_added_per_role_and_same_names_are_replaced_in_place() {
    let driver = decorate(&spark_pod(Driver), &rich(), Driver);
    assert_eq!(env_value(spark(&driver), "ROLE"), ["driver"]);
    assert_eq!(
        env_value(spark(&driver), "SPARK_USER"),
        ["overridden"],
        "no second SPARK_USER"
    );
    assert_eq!(
        spark(&driver).env.as_ref().unwrap()[0].name,
        "SPARK_USER",
        "replaced where it was"
    );

    // Kubeflow skips executor env when the driver has none.
    let mut app = rich();
    app.spec.driver.pod.env.clear();
    let executor = decorate(&spark_pod(Executor), &app, Executor);
    assert_eq!(env_value(spark(&executor), "ROLE"), ["executor"]);
}

#[test]
fn env_from_sources_are_not_repeated() {
    let mut pod = spark_pod(Driver);
    pod.spec.as_mut().unwrap().containers[0].env_from = Some(rich().spec.driver.pod.env_from.clone());
    let pod = decorate(&pod, &rich(), Driver);
    assert_eq!(spark(&pod).env_from.as_ref().map(Vec::len), Some(1));
}

#[test]
fn spark_and_hadoop_config_maps_are_mounted_with_their_env() {
    let pod = decorate(&spark_pod(Driver), &rich(), Driver);
    let container = spark(&pod);
    assert_eq!(env_value(container, "SPARK_CONF_DIR"), ["/etc/spark/conf"]);
    assert_eq!(env_value(container, "HADOOP_CONF_DIR"), ["/etc/hadoop/conf"]);
    let mounts = mount_paths(container);
    assert!(mounts.contains(&("spark-configmap-volume", "/etc/spark/conf")));
    assert!(mounts.contains(&("hadoop-configmap-volume", "/etc/hadoop/conf")));
    let volume = spec(&pod)
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "hadoop-configmap-volume")
        .unwrap();
    assert_eq!(volume.config_map.as_ref().unwrap().name, "hadoop-cm");
    let mount = container
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "spark-configmap-volume")
        .unwrap();
    assert_eq!(mount.read_only, Some(true));
}

#[test]
fn config_maps_get_a_volume_and_a_read_only_mount() {
    let mut app = rich();
    app.spec.driver.pod.config_maps.push(crate::application::NamePath {
        name: "team.settings".into(),
        path: "/etc/team".into(),
    });
    let pod = decorate(&spark_pod(Driver), &app, Driver);
    assert!(volume_names(&pod).contains(&"extra-vol"));
    let dotted = config_map_volume_name("team.settings");
    assert!(!dotted.contains('.'));
    assert!(mount_paths(spark(&pod)).contains(&(dotted.as_str(), "/etc/team")));
}

#[test]
fn volume_mounts_bring_their_volume_except_spark_local_dirs() {
    let pod = decorate(&spark_pod(Driver), &rich(), Driver);
    assert!(volume_names(&pod).contains(&"data"));
    assert!(
        !volume_names(&pod).contains(&"spark-local-dir-1"),
        "Spark mounts local dirs itself"
    );
    assert!(!volume_names(&pod).contains(&"scratch"), "mounted by executors only");
    assert!(mount_paths(spark(&pod)).contains(&("data", "/data")));
    let executor = decorate(&spark_pod(Executor), &rich(), Executor);
    assert!(mount_paths(spark(&executor)).contains(&("scratch", "/scratch")));
}

#[test]
fn a_mount_of_a_template_volume_is_kept_and_of_a_missing_volume_is_skipped() {
    let mut app = bare();
    let mount = |name: &str, path: &str| VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        ..Default::default()
    };
    app.spec.executor.pod.volume_mounts = vec![mount("from-template", "/t"), mount("nowhere", "/n")];
    let mut pod = spark_pod(Executor);
    pod.spec.as_mut().unwrap().volumes.as_mut().unwrap().push(Volume {
        name: "from-template".into(),
        ..Default::default()
    });
    let pod = decorate(&pod, &app, Executor);
    let mounts = mount_paths(spark(&pod));
    assert!(mounts.contains(&("from-template", "/t")));
    assert!(!mounts.iter().any(|(name, _)| *name == "nowhere"));
}

#[test]
fn a_different_volume_of_the_same_name_is_a_conflict() {
    let mut pod = spark_pod(Driver);
    pod.spec.as_mut().unwrap().volumes.as_mut().unwrap().push(Volume {
        name: "data".into(),
        host_path: Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
            path: "/srv".into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    let err = decorate_pod(&pod, &rich(), Driver).unwrap_err();
    assert!(
        matches!(err, DecorationError::VolumeConflict { ref name, .. } if name == "data"),
        "{err}"
    );
    assert_eq!(err.path().map(FieldPath::as_str), Some("spec.volumes[0]"));
}

#[test]
fn two_volumes_at_one_mount_path_are_a_conflict() {
    let mut app = rich();
    app.spec.driver.pod.config_maps[0].path = "/opt/spark/conf".into();
    let err = decorate_pod(&spark_pod(Driver), &app, Driver).unwrap_err();
    assert!(
        matches!(err, DecorationError::MountPathConflict { ref existing, .. } if existing == "spark-conf-volume-driver"),
        "{err}"
    );
    assert_eq!(err.path().map(FieldPath::as_str), Some("spec.driver.configMaps[0]"));
}

#[test]
fn ports_are_added_once_and_a_renumbered_name_is_a_conflict() {
    let pod = decorate(&spark_pod(Driver), &rich(), Driver);
    let ports = spark(&pod).ports.as_ref().unwrap();
    let debug = ports.iter().find(|p| p.name.as_deref() == Some("debug")).unwrap();
    assert_eq!((debug.container_port, debug.protocol.as_deref()), (5005, Some("TCP")));
    let jmx = ports
        .iter()
        .find(|p| p.name.as_deref() == Some("jmx-exporter"))
        .unwrap();
    assert_eq!(jmx.container_port, 8091);

    let mut app = rich();
    app.spec.driver.ports[0].name = "jmx-exporter".into();
    let err = decorate_pod(&spark_pod(Driver), &app, Driver).unwrap_err();
    assert!(matches!(err, DecorationError::PortConflict { .. }), "{err}");
    assert_eq!(
        err.path().map(FieldPath::as_str),
        Some("spec.monitoring.prometheus.port")
    );
}

#[test]
fn host_network_sets_the_dns_policy_and_false_is_applied() {
    let pod = decorate(&spark_pod(Driver), &rich(), Driver);
    assert_eq!(spec(&pod).host_network, Some(true));
    assert_eq!(spec(&pod).dns_policy.as_deref(), Some("ClusterFirstWithHostNet"));

    let mut app = bare();
    app.spec.executor.pod.host_network = Some(false);
    let mut template_pod = spark_pod(Executor);
    template_pod.spec.as_mut().unwrap().host_network = Some(true);
    let pod = decorate(&template_pod, &app, Executor);
    assert_eq!(spec(&pod).host_network, Some(false));
}

#[test]
fn pod_level_settings_of_the_driver() {
    let pod = decorate(&spark_pod(Driver), &rich(), Driver);
    let spec = spec(&pod);
    assert_eq!(spec.host_aliases.as_ref().unwrap()[0].ip, "10.0.0.1");
    assert_eq!(
        spec.dns_config.as_ref().unwrap().nameservers,
        Some(vec!["1.1.1.1".to_owned()])
    );
    assert_eq!(spec.priority_class_name.as_deref(), Some("high"));
    assert_eq!(spec.scheduler_name.as_deref(), Some("custom"));
    assert_eq!(spec.node_selector.as_ref().unwrap()["pool"], "drivers");
    assert!(spec.affinity.as_ref().unwrap().node_affinity.is_some());
    assert_eq!(spec.tolerations.as_ref().unwrap()[0].key.as_deref(), Some("dedicated"));
    assert_eq!(spec.security_context.as_ref().unwrap().fs_group, Some(185));
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    assert_eq!(spec.share_process_namespace, Some(true));
    assert_eq!(spec.init_containers.as_ref().unwrap()[0].name, "init");
    assert_eq!(
        spec.containers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        ["spark-kubernetes-driver", "proxy"]
    );
    let container = &spec.containers[0];
    assert_eq!(container.security_context.as_ref().unwrap().run_as_non_root, Some(true));
    assert!(container.lifecycle.as_ref().unwrap().pre_stop.is_some());
}

#[test]
fn batch_scheduler_wins_over_the_role_scheduler() {
    let mut app = rich();
    app.spec.batch_scheduler = Some("volcano".into());
    let pod = decorate(&spark_pod(Driver), &app, Driver);
    assert_eq!(spec(&pod).scheduler_name.as_deref(), Some("volcano"));
}

#[test]
fn batch_schedulers_mark_their_groups_as_kubeflow_does() {
    let mut app = rich();
    let name = app.metadata.name.clone().unwrap_or_default();
    let annotation = |pod: &Pod, key: &str| pod.metadata.annotations.as_ref().and_then(|a| a.get(key)).cloned();
    let label = |pod: &Pod, key: &str| pod.metadata.labels.as_ref().and_then(|l| l.get(key)).cloned();

    app.spec.batch_scheduler = Some("volcano".into());
    for role in [Driver, Executor] {
        let pod = decorate(&spark_pod(role), &app, role);
        assert_eq!(
            annotation(&pod, "scheduling.k8s.io/group-name"),
            Some(format!("spark-{name}-pg"))
        );
    }
    // A group the spec names itself is kept.
    let mut own = spark_pod(Driver);
    own.metadata.annotations = Some([("scheduling.k8s.io/group-name".to_owned(), "mine".to_owned())].into());
    let pod = decorate(&own, &app, Driver);
    assert_eq!(
        annotation(&pod, "scheduling.k8s.io/group-name").as_deref(),
        Some("mine")
    );

    app.spec.batch_scheduler = Some("yunikorn".into());
    app.spec.batch_scheduler_options = Some(spark_operator_api_batch_options("root.default"));
    let driver = decorate(&spark_pod(Driver), &app, Driver);
    let executor = decorate(&spark_pod(Executor), &app, Executor);
    assert_eq!(
        annotation(&driver, "yunikorn.apache.org/task-group-name").as_deref(),
        Some("spark-driver")
    );
    assert_eq!(
        annotation(&executor, "yunikorn.apache.org/task-group-name").as_deref(),
        Some("spark-executor")
    );
    assert_eq!(label(&executor, "queue").as_deref(), Some("root.default"));
    assert_eq!(spec(&executor).scheduler_name.as_deref(), Some("yunikorn"));

    app.spec.batch_scheduler = Some("scheduler-plugins-scheduler".into());
    let pod = decorate(&spark_pod(Executor), &app, Executor);
    assert_eq!(label(&pod, "scheduling.x-k8s.io/pod-group"), Some(format!("{name}-pg")));
    assert_eq!(decorate(&pod, &app, Executor), pod, "idempotent");
}

fn spark_operator_api_batch_options(queue: &str) -> crate::application::BatchSchedulerConfiguration {
    crate::application::BatchSchedulerConfiguration {
        queue: Some(queue.to_owned()),
        ..Default::default()
    }
}

#[test]
fn priority_is_dropped_only_when_the_class_changes() {
    let mut pod = spark_pod(Driver);
    let pod_spec = pod.spec.as_mut().unwrap();
    pod_spec.priority_class_name = Some("template-class".into());
    pod_spec.priority = Some(5);
    let changed = decorate(&pod, &rich(), Driver);
    assert_eq!(spec(&changed).priority, None);

    // The API server resolved our class to a number before the webhook saw the pod: keep it.
    let mut resolved = changed.clone();
    resolved.spec.as_mut().unwrap().priority = Some(1000);
    let again = decorate(&resolved, &rich(), Driver);
    assert_eq!(spec(&again).priority, Some(1000));
}

#[test]
fn node_selectors_merge_with_the_pods() {
    let mut pod = spark_pod(Executor);
    pod.spec.as_mut().unwrap().node_selector = Some(BTreeMap::from([("disk".to_owned(), "ssd".to_owned())]));
    let pod = decorate(&pod, &rich(), Executor);
    let selector = spec(&pod).node_selector.as_ref().unwrap();
    assert_eq!(selector.len(), 2);
    assert_eq!(selector["pool"], "executors");
}

#[test]
fn memory_limit_converts_spark_units_and_keeps_kubernetes_units() {
    let driver = decorate(&spark_pod(Driver), &rich(), Driver);
    let limits = spark(&driver).resources.as_ref().unwrap().limits.as_ref().unwrap();
    assert_eq!(limits["memory"].0, "2Gi");
    assert_eq!(limits["nvidia.com/gpu"].0, "1");
    let executor = decorate(&spark_pod(Executor), &rich(), Executor);
    let limits = spark(&executor).resources.as_ref().unwrap().limits.as_ref().unwrap();
    assert_eq!(limits["memory"].0, "3Gi");
    assert_eq!(containers::memory_limit_quantity("1536m").as_deref(), Some("1536Mi"));
    assert_eq!(containers::memory_limit_quantity("2G").as_deref(), Some("2Gi"));
    assert_eq!(containers::memory_limit_quantity("2500M ").as_deref(), Some("2500Mi"));
    assert_eq!(containers::memory_limit_quantity("1.5Gi").as_deref(), Some("1.5Gi"));
    assert_eq!(containers::memory_limit_quantity("lots"), None);
}

#[test]
fn a_memory_limit_that_cannot_be_applied_names_its_field() {
    let mut app = rich();
    app.spec.executor.pod.memory_limit = Some("lots".into());
    let err = decorate_pod(&spark_pod(Executor), &app, Executor).unwrap_err();
    assert_eq!(err.path().map(FieldPath::as_str), Some("spec.executor.memoryLimit"));
    assert!(err.to_string().contains("2Gi"), "says what is accepted: {err}");

    app.spec.executor.pod.memory_limit = Some("1g".into());
    let err = decorate_pod(&spark_pod(Executor), &app, Executor).unwrap_err();
    assert!(matches!(err, DecorationError::MemoryLimitBelowRequest { .. }), "{err}");
}

#[test]
fn a_gpu_that_cannot_be_applied_is_an_error_not_a_pod_without_gpu() {
    let mut app = rich();
    app.spec.driver.pod.gpu = Some(crate::application::GpuSpec {
        name: "nvidia.com/gpu".into(),
        quantity: 0,
    });
    let err = decorate_pod(&spark_pod(Driver), &app, Driver).unwrap_err();
    assert_eq!(err.path().map(FieldPath::as_str), Some("spec.driver.gpu.quantity"));
    app.spec.driver.pod.gpu = Some(Default::default());
    let err = decorate_pod(&spark_pod(Driver), &app, Driver).unwrap_err();
    assert_eq!(err.path().map(FieldPath::as_str), Some("spec.driver.gpu.name"));
}

#[test]
fn prometheus_mounts_its_config_map_opens_its_port_and_annotates() {
    let pod = decorate(&spark_pod(Executor), &rich(), Executor);
    assert!(mount_paths(spark(&pod)).contains(&("rich-prom-conf-vol", "/etc/metrics/conf")));
    let annotations = pod.metadata.annotations.unwrap();
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], "8091");
    assert_eq!(annotations["prometheus.io/path"], "/metrics");

    let mut app = rich();
    app.spec.monitoring.as_mut().unwrap().expose_executor_metrics = false;
    let pod = decorate(&spark_pod(Executor), &app, Executor);
    assert!(pod.metadata.annotations.is_none());
    assert!(!volume_names(&pod).contains(&"rich-prom-conf-vol"));

    // Both files in the image: no ConfigMap to mount, but the exporter still listens on its port.
    let monitoring = app.spec.monitoring.as_mut().unwrap();
    monitoring.expose_executor_metrics = true;
    monitoring.metrics_properties_file = Some("/opt/metrics.properties".into());
    monitoring.prometheus.as_mut().unwrap().config_file = Some("/opt/prometheus.yaml".into());
    let pod = decorate(&spark_pod(Executor), &app, Executor);
    assert!(!volume_names(&pod).contains(&"rich-prom-conf-vol"));
    assert!(spark(&pod).ports.iter().flatten().any(|p| p.container_port == 8091));
}

#[test]
fn sidecars_and_init_containers_are_added_once_and_never_clash() {
    let app = rich();
    let mut pod = spark_pod(Driver);
    // The pod template already carries the same sidecar.
    pod.spec
        .as_mut()
        .unwrap()
        .containers
        .push(app.spec.driver.pod.sidecars[0].clone());
    let decorated = decorate(&pod, &app, Driver);
    assert_eq!(spec(&decorated).containers.len(), 2);

    let mut other = app.clone();
    other.spec.driver.pod.sidecars[0].image = Some("envoy:other".into());
    let err = decorate_pod(&pod, &other, Driver).unwrap_err();
    assert_eq!(err.path().map(FieldPath::as_str), Some("spec.driver.sidecars[0].name"));

    other.spec.driver.pod.sidecars[0].name = "spark-kubernetes-driver".into();
    let err = decorate_pod(&spark_pod(Driver), &other, Driver).unwrap_err();
    assert!(matches!(err, DecorationError::SparkContainerName { .. }), "{err}");
}

#[test]
fn the_spark_container_is_found_by_name_then_first() {
    let mut pod = spark_pod(Executor);
    let pod_spec = pod.spec.as_mut().unwrap();
    pod_spec.containers[0].name = LEGACY_EXECUTOR_CONTAINER_NAME.into();
    pod_spec.containers.insert(
        0,
        Container {
            name: "sidecar-first".into(),
            ..Default::default()
        },
    );
    let decorated = decorate(&pod, &rich(), Executor);
    assert_eq!(env_value(&spec(&decorated).containers[1], "ROLE"), ["executor"]);
    assert!(env_value(&spec(&decorated).containers[0], "ROLE").is_empty());

    let mut unnamed = spark_pod(Driver);
    unnamed.spec.as_mut().unwrap().containers[0].name = "main".into();
    let decorated = decorate(&unnamed, &rich(), Driver);
    assert_eq!(env_value(&spec(&decorated).containers[0], "ROLE"), ["driver"]);

    let empty = Pod::default();
    assert_eq!(
        decorate_pod(&empty, &rich(), Driver).unwrap_err(),
        DecorationError::NoContainer { role: Driver }
    );
}

#[test]
fn decorating_twice_changes_nothing() {
    for role in [Driver, Executor] {
        let once = decorate(&spark_pod(role), &rich(), role);
        let twice = decorate(&once, &rich(), role);
        assert_eq!(once, twice, "{role}");
        assert_ne!(once, spark_pod(role), "{role}: the rich app changes the pod");
    }
}

#[test]
fn a_bare_application_changes_only_the_drivers_owner() {
    let executor = decorate(&spark_pod(Executor), &bare(), Executor);
    assert_eq!(executor, spark_pod(Executor));
    let mut driver = decorate(&spark_pod(Driver), &bare(), Driver);
    assert!(driver.metadata.owner_references.take().is_some());
    assert_eq!(driver, spark_pod(Driver));
}

/// What the API server fills in between the controller's decoration and the webhook's.
fn api_server_defaults(pod: &Pod) -> Pod {
    let mut value = serde_json::to_value(pod).unwrap();
    let spec = &mut value["spec"];
    for list in ["containers", "initContainers"] {
        for container in spec[list].as_array_mut().into_iter().flatten() {
            container["terminationMessagePath"] = json!("/dev/termination-log");
            container["terminationMessagePolicy"] = json!("File");
            container["imagePullPolicy"] = json!("IfNotPresent");
            for port in container["ports"].as_array_mut().into_iter().flatten() {
                port["protocol"] = json!("TCP");
            }
            if let Some(limits) = container.pointer_mut("/resources/limits/memory") {
                // 2Gi stays 2Gi, but a request written as 2048Mi would come back as 2Gi.
                *limits = json!(limits.as_str().unwrap().replace("2048Mi", "2Gi"));
            }
        }
    }
    for volume in spec["volumes"].as_array_mut().into_iter().flatten() {
        if let Some(config_map) = volume.get_mut("configMap") {
            config_map["defaultMode"] = json!(420);
        }
    }
    spec["schedulerName"] = json!(spec["schedulerName"].as_str().unwrap_or("default-scheduler"));
    spec["priority"] = json!(1000);
    serde_json::from_value(value).unwrap()
}

#[test]
fn decorating_a_defaulted_pod_again_changes_nothing() {
    for role in [Driver, Executor] {
        let defaulted = api_server_defaults(&decorate(&spark_pod(role), &rich(), role));
        assert_eq!(decorate(&defaulted, &rich(), role), defaulted, "{role}");
    }
}

#[test]
fn a_pod_that_already_has_some_settings_gets_no_duplicates() {
    let app = rich();
    let mut pod = spark_pod(Driver);
    let pod_spec = pod.spec.as_mut().unwrap();
    pod_spec.tolerations = Some(app.spec.driver.pod.tolerations.clone());
    pod_spec.host_aliases = Some(app.spec.driver.pod.host_aliases.clone());
    pod_spec.init_containers = Some(app.spec.driver.pod.init_containers.clone());
    pod_spec.containers[0]
        .env
        .as_mut()
        .unwrap()
        .push(env("ROLE", "template"));
    pod_spec.volumes.as_mut().unwrap().push(app.spec.volumes[0].clone());
    let decorated = decorate(&pod, &app, Driver);
    let spec = spec(&decorated);
    assert_eq!(spec.tolerations.as_ref().map(Vec::len), Some(1));
    assert_eq!(spec.host_aliases.as_ref().map(Vec::len), Some(1));
    assert_eq!(spec.init_containers.as_ref().map(Vec::len), Some(1));
    assert_eq!(
        env_value(&spec.containers[0], "ROLE"),
        ["driver"],
        "the application's value wins"
    );
    assert_eq!(volume_names(&decorated).iter().filter(|n| **n == "data").count(), 1);
}

#[test]
fn drivers_and_executors_get_their_own_settings() {
    let app = rich();
    let driver = decorate(&spark_pod(Driver), &app, Driver);
    let executor = decorate(&spark_pod(Executor), &app, Executor);
    assert_eq!(spec(&driver).priority_class_name.as_deref(), Some("high"));
    assert_eq!(spec(&executor).priority_class_name.as_deref(), Some("low"));
    assert_eq!(
        spec(&executor).tolerations.as_ref().unwrap()[0].key.as_deref(),
        Some("spot")
    );
    assert_eq!(spec(&executor).containers[1].name, "logs");
    assert_eq!(spec(&executor).host_network, None, "hostNetwork is the driver's only");
    assert_eq!(spec(&executor).scheduler_name, None);
    let pre_stop =
        |pod: &Pod| serde_json::to_value(&spark(pod).lifecycle).unwrap()["preStop"]["exec"]["command"][1].clone();
    assert_eq!(pre_stop(&driver), json!("5"));
    assert_eq!(pre_stop(&executor), json!("1"));
    // Cluster-wide settings reach both.
    for pod in [&driver, &executor] {
        assert_eq!(env_value(spark(pod), "SPARK_CONF_DIR"), ["/etc/spark/conf"]);
    }
}
