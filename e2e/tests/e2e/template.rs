//! Configuration travels with the submission: with no webhook at all, the executor pods Spark (the
//! sim's fake driver, which builds them from the pod template as Spark does) creates for a rich
//! application carry every executor setting that survives Spark's template handling, and lack exactly
//! the documented gaps (`docs/executor-template.md`), so the document stays true.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use spark_operator_api::ApplicationStateType as S;
use spark_operator_e2e::{Cluster, ClusterOptions, Poll, app_yaml, poll, state};

const LIMIT: Duration = Duration::from_secs(90);

/// Every executor setting decoration applies that a sim pod can carry (hostNetwork is left out: the
/// sim gives every pod its own IP).
const RICH_EXECUTOR: &str = r#"  volumes:
  - name: data
    emptyDir: {}
  sparkConfigMap: spark-extra-conf
  executor:
    instances: 1
    cores: 1
    memory: 512m
    annotations:
      # The init container and the sidecar are scripts: the init container ends at once.
      sim.spark-operator.dev/init.run-time: "0s"
    env:
    - {name: FROM_ENV, value: "1"}
    envFrom:
    - configMapRef: {name: env-cm}
    volumeMounts:
    - {name: data, mountPath: /data}
    configMaps:
    - {name: extra-cm, path: /etc/extra}
    secrets:
    - {name: creds, path: /mnt/creds, secretType: Generic}
    affinity:
      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
          - matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [amd64]}
    tolerations:
    - {key: dedicated, operator: Equal, value: spark, effect: NoSchedule}
    nodeSelector:
      kubernetes.io/os: linux
    securityContext: {runAsUser: 185}
    podSecurityContext: {fsGroup: 185}
    sidecars:
    - {name: sidecar, image: busybox}
    initContainers:
    - {name: init, image: busybox}
    hostAliases:
    - {ip: 10.1.2.3, hostnames: [db.local]}
    dnsConfig:
      nameservers: [10.0.0.10]
    priorityClassName: spark-high
    memoryLimit: 2g
    gpu: {name: nvidia.com/gpu, quantity: 1}
    ports:
    - {name: jmx, protocol: TCP, containerPort: 8090}
    lifecycle:
      preStop:
        exec:
          command: [sleep, "1"]
    terminationGracePeriodSeconds: 45
    shareProcessNamespace: true
"#;

/// What the application's executors need to start: the ConfigMaps and Secret they mount, the priority
/// class, and a GPU on every node, advertised as a device plugin advertises it (node status).
async fn prerequisites(cluster: &Cluster) {
    let config_maps: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    for name in ["env-cm", "extra-cm", "spark-extra-conf"] {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap();
        config_maps.create(&PostParams::default(), &cm).await.unwrap();
    }
    let secrets: Api<Secret> = Api::namespaced(cluster.client.clone(), "default");
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": "creds"}, "stringData": {"k": "v"}})).unwrap();
    secrets.create(&PostParams::default(), &secret).await.unwrap();
    let classes: Api<PriorityClass> = Api::all(cluster.client.clone());
    let class: PriorityClass =
        serde_json::from_value(json!({"metadata": {"name": "spark-high"}, "value": 1000})).unwrap();
    classes.create(&PostParams::default(), &class).await.unwrap();
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    for node in nodes.list(&ListParams::default()).await.unwrap() {
        let name = node.metadata.name.unwrap();
        let gpu = json!({"status": {"capacity": {"nvidia.com/gpu": "4"}, "allocatable": {"nvidia.com/gpu": "4"}}});
        nodes
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&gpu))
            .await
            .unwrap();
    }
}

fn names(list: &Value, key: &str) -> Vec<String> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v[key].as_str().map(str::to_owned))
        .collect()
}

/// Starts a cluster with the rich application; `webhook`: the executor template off and the webhook on,
/// else the template alone. Returns the cluster (kept alive) and its running executor pod.
async fn rich_executor(
    webhook: bool,
) -> (
    Cluster,
    Option<spark_operator_e2e::Webhook>,
    spark_operator_e2e::Controller,
    Value,
) {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    prerequisites(&cluster).await;
    let (template, webhook) = if webhook {
        ("--executor-template=false", Some(cluster.webhook().await))
    } else {
        // No webhook is registered: the template is the only way settings reach executors.
        ("--executor-template=true", None)
    };
    let controller = cluster.controller(cluster.args(&[template]));
    // The harness's application, its executor replaced by the rich one.
    let base = app_yaml("rich", "1s", 0, 1, "");
    let base = &base[..base.find("  executor:").unwrap()];
    cluster.create_app(&format!("{base}{RICH_EXECUTOR}")).await;

    // The executor, once it runs (so it scheduled with its selector, affinity and GPU, and its init
    // container, mounts and env sources were all there).
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    let executors = ListParams::default().labels("spark-role=executor,sparkoperator.k8s.io/app-name=rich");
    let running = poll(LIMIT, || async {
        let list = pods.list(&executors).await.map_err(|e| e.to_string());
        match list {
            Ok(list) => match list
                .items
                .into_iter()
                .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            {
                Some(pod) => Poll::Done(pod),
                None => Poll::Pending("no running executor".to_owned()),
            },
            Err(e) => Poll::Pending(e),
        }
    })
    .await;
    let executor = running.unwrap_or_else(|why| panic!("the executor never ran: {why}"));
    (cluster, webhook, controller, serde_json::to_value(&executor).unwrap())
}

/// Every setting on the list that survives Spark's template handling.
fn assert_surviving_settings(pod: &Value) {
    let spec = &pod["spec"];
    let containers = spec["containers"].as_array().unwrap();
    let spark = containers
        .iter()
        .find(|c| c["name"] == "spark-kubernetes-executor")
        .unwrap();

    // Survives Spark's template handling.
    let env = spark["env"].as_array().unwrap();
    let last = |name: &str| env.iter().rev().find(|e| e["name"] == name).map(|e| e["value"].clone());
    assert_eq!(last("FROM_ENV"), Some(json!("1")), "env");
    assert_eq!(
        spark["envFrom"],
        json!([{"configMapRef": {"name": "env-cm"}}]),
        "envFrom"
    );
    let mounts = names(&spark["volumeMounts"], "mountPath");
    for path in ["/data", "/etc/extra", "/mnt/creds", "/etc/spark/conf"] {
        assert!(mounts.contains(&path.to_owned()), "mount {path}: {mounts:?}");
    }
    let volumes = names(&spec["volumes"], "name");
    for volume in ["data", "extra-cm-vol", "creds-volume", "spark-configmap-volume"] {
        assert!(volumes.contains(&volume.to_owned()), "volume {volume}: {volumes:?}");
    }
    assert_eq!(
        spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
            [0]["key"],
        "kubernetes.io/arch",
        "affinity"
    );
    assert!(
        spec["tolerations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["key"] == "dedicated"),
        "tolerations"
    );
    assert_eq!(spec["nodeSelector"]["kubernetes.io/os"], "linux", "nodeSelector");
    assert_eq!(spark["securityContext"]["runAsUser"], 185, "securityContext");
    assert_eq!(spec["securityContext"]["fsGroup"], 185, "podSecurityContext");
    assert!(containers.iter().any(|c| c["name"] == "sidecar"), "sidecars");
    assert_eq!(names(&spec["initContainers"], "name"), ["init"], "initContainers");
    assert_eq!(spec["hostAliases"][0]["hostnames"], json!(["db.local"]), "hostAliases");
    assert_eq!(spec["dnsConfig"]["nameservers"], json!(["10.0.0.10"]), "dnsConfig");
    assert_eq!(spec["priorityClassName"], "spark-high", "priorityClassName");
    assert_eq!(spark["resources"]["limits"]["nvidia.com/gpu"], "1", "gpu");
    assert!(names(&spark["ports"], "name").contains(&"jmx".to_owned()), "ports");
    assert_eq!(
        spark["lifecycle"]["preStop"]["exec"]["command"],
        json!(["sleep", "1"]),
        "lifecycle"
    );
    assert_eq!(
        spec["terminationGracePeriodSeconds"], 45,
        "terminationGracePeriodSeconds"
    );
    assert_eq!(spec["shareProcessNamespace"], true, "shareProcessNamespace");
}

fn spark_container(pod: &Value) -> Value {
    pod["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "spark-kubernetes-executor")
        .cloned()
        .unwrap()
}

fn last_env(pod: &Value, name: &str) -> Option<Value> {
    spark_container(pod)["env"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|e| e["name"] == name)
        .map(|e| e["value"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executors_carry_their_settings_without_a_webhook() {
    let (cluster, _webhook, _controller, pod) = rich_executor(false).await;
    assert_surviving_settings(&pod);
    let spark = spark_container(&pod);
    let last = |name: &str| last_env(&pod, name);
    // The documented gaps: only the webhook can apply these.
    // memoryLimit: Spark sets the memory limit to its own request (512m + 384m overhead).
    assert_eq!(
        spark["resources"]["limits"]["memory"], "896Mi",
        "memoryLimit is the webhook's"
    );
    // sparkConfigMap: the volume and mount survive, but Spark appends its own SPARK_CONF_DIR after
    // the template's, and the last of two same-named variables wins.
    assert_eq!(
        last("SPARK_CONF_DIR"),
        Some(json!("/opt/spark/conf")),
        "SPARK_CONF_DIR is the webhook's"
    );

    // And the application runs to its end with them.
    let done = cluster
        .wait_app("default", "rich", LIMIT, |a| state(a).is_terminal())
        .await;
    assert_eq!(state(&done), S::Completed, "{:#?}", done.status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_alone_gives_executors_every_setting() {
    let (cluster, _webhook, _controller, pod) = rich_executor(true).await;
    assert_surviving_settings(&pod);
    // And what only the webhook can apply.
    let spark = spark_container(&pod);
    assert_eq!(spark["resources"]["limits"]["memory"], "2Gi", "memoryLimit (2g)");
    assert_eq!(
        last_env(&pod, "SPARK_CONF_DIR"),
        Some(json!("/etc/spark/conf")),
        "sparkConfigMap's SPARK_CONF_DIR"
    );
    let done = cluster
        .wait_app("default", "rich", LIMIT, |a| state(a).is_terminal())
        .await;
    assert_eq!(state(&done), S::Completed, "{:#?}", done.status);
}
