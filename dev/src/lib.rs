//! One way to set up the simulated cluster the operator runs in: kube-sim with nodes, kubelets and the
//! fake Spark driver, and the operator's CRDs installed. `spark-operator dev` and the end-to-end tests
//! both start their cluster here, so what a newcomer tries is what the tests prove. Unless switched off,
//! the cluster runs the sim's Volcano stand-in with gang admission and has Volcano's PodGroup CRD, so
//! `batchScheduler: volcano` works as on a cluster with Volcano installed.
//!
//! This crate is only linked with the `dev` feature of the binary (on by default, off in the image).

pub mod agents;
pub mod identity;

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube_sim::auth::{AuthorizationMode, spark};
use kube_sim::node::{KubeletConfig, LocalImage, NodeSpec, NodesConfig, PodGc, Volcano};
use kube_sim::registry::Gvr;
use kube_sim::status::ApiError;
use kube_sim::store::WriteOptions;
use kube_sim::{Sim, SimConfig};
use serde_json::json;

/// Why the cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("starting the simulated cluster")]
    Start(#[source] kube_sim::SimError),
    #[error("connecting to the simulated cluster")]
    Connect(#[source] kube_sim::SimError),
    #[error("installing the CRD {name}")]
    InstallCrd {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("reading Volcano's PodGroup CRD")]
    VolcanoCrd(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("making {namespace} a Spark job namespace")]
    JobNamespace {
        namespace: String,
        #[source]
        source: ApiError,
    },
}

/// How the cluster is made.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    pub nodes: usize,
    /// CPUs of each node (big nodes let hundreds of applications run at once).
    pub node_cpu: String,
    pub node_memory: String,
    pub node_pods: u32,
    pub pod_gc: PodGc,
    /// Record the kubelets' Normal events (off for big churn runs: they triple the writes per pod).
    pub normal_events: bool,
    /// API server port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// Where to write the kubeconfig; default: `<data-dir>/kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// Images whose pods run a local executable as a real process.
    pub local_images: Vec<LocalImage>,
    /// How the API server authorizes requests (RBAC by default, as a real cluster).
    pub authorization: AuthorizationMode,
    /// Namespaces Spark jobs run in: each gets the Spark ServiceAccount, Role and RoleBinding the
    /// Kubeflow chart creates there (`spark-operator-spark`), so drivers may create executors.
    pub job_namespaces: Vec<String>,
    /// How long a deleted pod's exited containers and log files stay on the node (kubelet's container GC).
    pub container_gc_delay: Duration,
    /// Size at which kubelet rotates a container's log (`containerLogMaxSize`).
    pub container_log_max_size: u64,
    /// The sim's Volcano stand-in for pods with `schedulerName: volcano`: gang admission (default),
    /// each pod on its own (`NoGang`), or no Volcano (`Off`: its pods stay Pending and the PodGroup CRD
    /// is not installed).
    pub volcano: Volcano,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        let node = NodeSpec::numbered(1);
        Self {
            nodes: 3,
            node_cpu: node.cpu,
            node_memory: node.memory,
            node_pods: node.pods,
            pod_gc: PodGc::Off,
            normal_events: true,
            port: 0,
            kubeconfig: None,
            local_images: Vec::new(),
            authorization: AuthorizationMode::Rbac,
            job_namespaces: vec!["default".into()],
            container_gc_delay: KubeletConfig::default().container_gc_delay,
            container_log_max_size: KubeletConfig::default().container_log_max_size,
            volcano: Volcano::Gang,
        }
    }
}

impl ClusterOptions {
    /// Nodes big enough for a few hundred small applications at once.
    pub fn big() -> Self {
        Self {
            node_cpu: "1000".into(),
            node_memory: "4000Gi".into(),
            node_pods: 5000,
            ..Self::default()
        }
    }
}

/// A running simulated cluster with the operator's CRDs.
pub struct Cluster {
    pub sim: Sim,
    /// An administrator's client.
    pub client: kube::Client,
}

impl Cluster {
    /// Starts the cluster with its files under `data_dir` and installs the CRDs.
    pub async fn start(data_dir: &Path, options: &ClusterOptions) -> Result<Cluster, Error> {
        let mut config = SimConfig::new(data_dir);
        config.kubeconfig_path = options.kubeconfig.clone();
        config.port = options.port;
        // As OpenShift runs it: an operator whose RBAC lacks what blockOwnerDeletion needs fails here as it
        // would there, not only in production.
        config.owner_references_permission_enforcement = true;
        config.nodes = NodesConfig {
            nodes: (1..=options.nodes)
                .map(|i| NodeSpec::numbered(i).capacity(&options.node_cpu, &options.node_memory, options.node_pods))
                .collect(),
            pod_gc: options.pod_gc,
            normal_events: options.normal_events,
            kubelet: KubeletConfig {
                local_images: options.local_images.clone(),
                container_gc_delay: options.container_gc_delay,
                container_log_max_size: options.container_log_max_size,
                ..KubeletConfig::default()
            },
            volcano: options.volcano,
            ..NodesConfig::default()
        };
        // Pods mount kube-root-ca.crt through their API-access volume, as in a real cluster.
        config.root_ca_configmap = options.nodes > 0;
        config.authorization = options.authorization;
        let sim = Sim::start(config).await.map_err(Error::Start)?;
        let client = sim.client().await.map_err(Error::Connect)?;
        install_crds(&client).await?;
        if options.volcano != Volcano::Off {
            install_volcano_crd(&client).await?;
        }
        for namespace in &options.job_namespaces {
            create_job_namespace(&sim, namespace).await?;
        }
        Ok(Cluster { sim, client })
    }

    /// `spark.master` for drivers in this cluster.
    pub fn spark_master_url(&self) -> String {
        format!("k8s://{}", self.sim.url())
    }
}

/// Makes `namespace` a Spark job namespace as the Kubeflow chart does: the namespace (if missing)
/// with the `spark-operator-spark` ServiceAccount, its Role and RoleBinding.
pub async fn create_job_namespace(sim: &Sim, namespace: &str) -> Result<(), Error> {
    let store = sim.store();
    let ns = json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": namespace } });
    let opts = WriteOptions::default();
    match store.create(&Gvr::new("", "v1", "namespaces"), "", ns, &opts).await {
        Ok(_) | Err(ApiError::AlreadyExists(_)) => {}
        Err(source) => {
            return Err(Error::JobNamespace {
                namespace: namespace.to_string(),
                source,
            });
        }
    }
    spark::create_spark_job_rbac(store, namespace, spark::SPARK_SERVICE_ACCOUNT)
        .await
        .map_err(|source| Error::JobNamespace {
            namespace: namespace.to_string(),
            source,
        })
}

/// Installs (or updates) the operator's CRDs by server-side apply, as `kubectl apply --server-side`.
pub async fn install_crds(client: &kube::Client) -> Result<(), Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in spark_operator_api::crd::all_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(
            &name,
            &PatchParams::apply("spark-operator").force(),
            &Patch::Apply(&crd),
        )
        .await
        .map_err(|source| Error::InstallCrd { name, source })?;
    }
    Ok(())
}

/// Installs Volcano's PodGroup CRD (`podgroups.scheduling.volcano.sh`, a copy of the one Volcano's chart
/// installs) by server-side apply, as Volcano's installation does before its scheduler runs.
pub async fn install_volcano_crd(client: &kube::Client) -> Result<(), Error> {
    let name = kube_sim::node::volcano::PODGROUP_CRD_NAME.to_string();
    let crd = kube_sim::node::volcano::podgroup_crd().map_err(|e| Error::VolcanoCrd(Box::new(e)))?;
    let crd: CustomResourceDefinition = serde_json::from_value(crd).map_err(|e| Error::VolcanoCrd(Box::new(e)))?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(&name, &PatchParams::apply("volcano").force(), &Patch::Apply(&crd))
        .await
        .map_err(|source| Error::InstallCrd { name, source })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use super::*;

    fn podgroups() -> Gvr {
        Gvr::new("scheduling.volcano.sh", "v1beta1", "podgroups")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_cluster_has_volcano_unless_switched_off() {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = ClusterOptions {
            nodes: 1,
            job_namespaces: Vec::new(),
            ..ClusterOptions::default()
        };
        let cluster = Cluster::start(&dir.path().join("on"), &options)
            .await
            .expect("cluster starts");
        let store = cluster.sim.store();
        let group = json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": { "name": "spark-pi-pg" },
            "spec": { "minMember": 1, "minResources": { "cpu": "1", "memory": "1Gi" } },
        });
        store
            .create(&podgroups(), "default", group, &WriteOptions::default())
            .await
            .expect("the PodGroup CRD is installed");
        // The stand-in admits it: its minResources fit the node.
        let mut phase = String::new();
        for _ in 0..500 {
            phase = store
                .get(&podgroups(), "default", "spark-pi-pg")
                .ok()
                .and_then(|g| g.pointer("/status/phase").and_then(|p| p.as_str()).map(str::to_string))
                .unwrap_or_default();
            if phase == "Inqueue" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(phase, "Inqueue");
        cluster.sim.shutdown().await;

        let off = ClusterOptions {
            volcano: Volcano::Off,
            ..options
        };
        let cluster = Cluster::start(&dir.path().join("off"), &off)
            .await
            .expect("cluster starts");
        let crds = Gvr::new("apiextensions.k8s.io", "v1", "customresourcedefinitions");
        assert!(
            cluster
                .sim
                .store()
                .get(&crds, "", kube_sim::node::volcano::PODGROUP_CRD_NAME)
                .is_err(),
            "no Volcano, no PodGroup CRD"
        );
        cluster.sim.shutdown().await;
    }
}
