//! The PodGroup a gang scheduler needs before the driver is created (Kubeflow's `Schedule` of its Volcano
//! and kube-scheduler integrations): Volcano's `scheduling.volcano.sh/v1beta1` `spark-<app>-pg`, or the
//! coscheduling plugin's `scheduling.x-k8s.io/v1alpha1` `<app>-pg`; `minMember` 1 (the driver first),
//! `minResources` the driver and its initial executors, the queue and priority class of
//! `batchSchedulerOptions`. Owned by the SparkApplication, deleted when it ends.
//!
//! Where Kubeflow differs: it reads `spec.driver.memory` ("512m") as a Kubernetes quantity (0.512 bytes)
//! and leaves out Spark's memory overhead, so its groups reserve next to no memory; here `minResources` is
//! what the pods will request: the built driver pod's requests and Spark's executor requests
//! (`BasicExecutorFeatureStep`: memory, overhead, PySpark and off-heap memory; request cores).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta};
use serde_json::{Value, json};
use spark_operator_api::batch_scheduler::{
    BatchSchedulerKind, coscheduling_pod_group_name, named_batch_scheduler, volcano_pod_group_name,
};
use spark_operator_api::quantity::KubernetesQuantity;

use super::driver_conf::DriverConf;
use super::driver_pod::{memory_mib, overhead_mib};
use super::{DriverPodError, application_owner};

/// Volcano's PodGroup resource.
pub fn volcano_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("scheduling.volcano.sh", "v1beta1", "PodGroup"),
        "podgroups",
    )
}

/// The coscheduling plugin's PodGroup resource.
pub fn coscheduling_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("scheduling.x-k8s.io", "v1alpha1", "PodGroup"),
        "podgroups",
    )
}

/// Which PodGroup an application of `app_name` has under `scheduler`: its resource and name; None for
/// YuniKorn, which has none.
pub fn identity(app_name: &str, scheduler: &str) -> Option<(ApiResource, String)> {
    match BatchSchedulerKind::of(scheduler) {
        BatchSchedulerKind::Volcano => Some((volcano_resource(), volcano_pod_group_name(app_name))),
        BatchSchedulerKind::Coscheduling => Some((coscheduling_resource(), coscheduling_pod_group_name(app_name))),
        BatchSchedulerKind::Yunikorn => None,
    }
}

/// A PodGroup with the resource it is of.
#[derive(Clone, Debug, PartialEq)]
pub struct PodGroup {
    pub resource: ApiResource,
    pub object: DynamicObject,
}

/// The PodGroup of the application's batch scheduler, or None for YuniKorn (task groups are annotations)
/// and for applications without one.
pub fn build(conf: &DriverConf<'_>, driver_pod: &Pod) -> Result<Option<PodGroup>, DriverPodError> {
    let app = conf.app;
    let Some(scheduler) = named_batch_scheduler(app) else {
        return Ok(None);
    };
    let app_name = app.metadata.name.clone().unwrap_or_default();
    let Some((resource, name)) = identity(&app_name, scheduler) else {
        return Ok(None);
    };
    let options = app.spec.batch_scheduler_options.as_ref();
    let min_resources: Value = match options.filter(|o| !o.resources.is_empty()) {
        Some(options) => serde_json::to_value(&options.resources).unwrap_or_default(),
        None => {
            let (cpu_millis, memory_mib) = group_requests(conf, driver_pod)?;
            json!({"cpu": cpu(cpu_millis), "memory": format!("{memory_mib}Mi")})
        }
    };
    let mut spec = json!({"minMember": 1, "minResources": min_resources});
    if let Some(queue) = options.and_then(|o| o.queue.as_deref()).filter(|q| !q.is_empty()) {
        spec["queue"] = json!(queue);
    }
    if let Some(class) = options
        .and_then(|o| o.priority_class_name.as_deref())
        .filter(|c| !c.is_empty())
    {
        spec["priorityClassName"] = json!(class);
    }
    let object = DynamicObject {
        types: Some(kube::api::TypeMeta {
            api_version: resource.api_version.clone(),
            kind: resource.kind.clone(),
        }),
        metadata: ObjectMeta {
            name: Some(name),
            namespace: app.metadata.namespace.clone(),
            owner_references: application_owner(app).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        data: json!({"spec": spec}),
    };
    Ok(Some(PodGroup { resource, object }))
}

/// Whole cores as `N`, otherwise millicores.
fn cpu(millis: u64) -> String {
    if millis.is_multiple_of(1000) {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

/// What the driver pod and its initial executors request together: (millicores, MiB).
fn group_requests(conf: &DriverConf<'_>, driver_pod: &Pod) -> Result<(u64, u64), DriverPodError> {
    let (driver_millis, driver_mib) = pod_requests(driver_pod);
    let (executor_millis, executor_mib) = executor_requests(conf)?;
    let executors = initial_executors(conf);
    Ok((
        driver_millis.saturating_add(executor_millis.saturating_mul(executors)),
        driver_mib.saturating_add(executor_mib.saturating_mul(executors)),
    ))
}

/// A pod's cpu and memory requests, its containers' summed as the scheduler sums them (sidecars
/// included; init containers run before and are left out): (millicores, MiB).
fn pod_requests(pod: &Pod) -> (u64, u64) {
    let quantity = |requests: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>, key: &str| {
        requests
            .get(key)
            .and_then(|v| KubernetesQuantity::parse(&v.0).ok())
            .map_or(0.0, KubernetesQuantity::value)
    };
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter_map(|c| c.resources.as_ref()?.requests.as_ref())
        .fold((0, 0), |(millis, mib), requests| {
            (
                // Saturating: a sidecar's request comes from the spec and may be absurd.
                millis.saturating_add((quantity(requests, "cpu") * 1000.0).ceil() as u64),
                mib.saturating_add((quantity(requests, "memory") / (1024.0 * 1024.0)).ceil() as u64),
            )
        })
}

/// One executor's requests as Spark's `BasicExecutorFeatureStep` sets them: (millicores, MiB).
fn executor_requests(conf: &DriverConf<'_>) -> Result<(u64, u64), DriverPodError> {
    let memory = memory_mib(conf, "spark.executor.memory", "1g")?;
    let overhead = overhead_mib(conf, "spark.executor", memory)?;
    let pyspark = match conf.get("spark.executor.pyspark.memory") {
        Some(_) => memory_mib(conf, "spark.executor.pyspark.memory", "0")?,
        None => 0,
    };
    let off_heap = if conf.get("spark.memory.offHeap.enabled") == Some("true") {
        memory_mib(conf, "spark.memory.offHeap.size", "0")?
    } else {
        0
    };
    let cores = conf
        .get("spark.kubernetes.executor.request.cores")
        .or(conf.get("spark.executor.cores"))
        .unwrap_or("1");
    let millis = KubernetesQuantity::parse(cores)
        .map(|q| (q.value() * 1000.0).ceil() as u64)
        .unwrap_or(1000);
    Ok((
        millis,
        memory
            .saturating_add(overhead)
            .saturating_add(pyspark)
            .saturating_add(off_heap),
    ))
}

/// Spark's initial executor target (`SchedulerBackendUtils.getInitialTargetExecutorNumber`): with
/// dynamic allocation the largest of min, initial and instances; otherwise instances, 2 by default.
fn initial_executors(conf: &DriverConf<'_>) -> u64 {
    let number = |key: &str| conf.get(key).and_then(|v| v.trim().parse::<u64>().ok());
    if conf.get("spark.dynamicAllocation.enabled") == Some("true") {
        [
            number("spark.dynamicAllocation.minExecutors"),
            number("spark.dynamicAllocation.initialExecutors"),
            number("spark.executor.instances"),
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0)
    } else {
        number("spark.executor.instances").unwrap_or(2)
    }
}

/// YuniKorn's task groups of an application, the driver's `yunikorn.apache.org/task-groups` annotation
/// (Kubeflow's `addTaskGroupAnnotations`): the driver's group of one, and the initial executors' group
/// when there are any, each with one member's requests, node selector, tolerations, affinity and labels.
pub fn yunikorn_task_groups(conf: &DriverConf<'_>, driver_pod: &Pod) -> Result<Option<String>, DriverPodError> {
    let app = conf.app;
    if named_batch_scheduler(app).map(BatchSchedulerKind::of) != Some(BatchSchedulerKind::Yunikorn) {
        return Ok(None);
    }
    let container = driver_pod.spec.as_ref().and_then(|s| {
        s.containers
            .iter()
            .find(|c| c.name == spark_operator_api::labels::DRIVER_CONTAINER_NAME)
    });
    let driver_requests: BTreeMap<String, String> = container
        .and_then(|c| c.resources.as_ref()?.requests.as_ref())
        .map(|r| r.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
        .unwrap_or_default();
    let node_selector = |role: &BTreeMap<String, String>| {
        let mut merged = app.spec.node_selector.clone();
        merged.extend(role.clone());
        merged
    };
    let group = |name: &str, members: u64, requests: Value, pod: &spark_operator_api::pod_spec::SparkPodSpec| {
        let mut group = json!({"name": name, "minMember": members, "minResource": requests});
        let selector = node_selector(&pod.node_selector);
        if !selector.is_empty() {
            group["nodeSelector"] = json!(selector);
        }
        if !pod.tolerations.is_empty() {
            group["tolerations"] = json!(pod.tolerations);
        }
        if let Some(affinity) = &pod.affinity {
            group["affinity"] = json!(affinity);
        }
        if !pod.labels.is_empty() {
            group["labels"] = json!(pod.labels);
        }
        group
    };
    let mut groups = vec![group(
        spark_operator_api::batch_scheduler::YUNIKORN_DRIVER_TASK_GROUP,
        1,
        json!(driver_requests),
        &app.spec.driver.pod,
    )];
    let executors = initial_executors(conf);
    if executors > 0 {
        let (millis, mib) = executor_requests(conf)?;
        groups.push(group(
            spark_operator_api::batch_scheduler::YUNIKORN_EXECUTOR_TASK_GROUP,
            executors,
            json!({"cpu": cpu(millis), "memory": format!("{mib}Mi")}),
            &app.spec.executor.pod,
        ));
    }
    Ok(Some(Value::Array(groups).to_string()))
}
