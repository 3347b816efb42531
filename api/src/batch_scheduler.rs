//! Batch schedulers as Kubeflow integrates them: which one an application names, and the marks its pods
//! carry so that scheduler treats them as one group (`kubeflow-study.md` §3.2). Pure: the operator's
//! configuration (which schedulers are enabled) is the controller's; the PodGroup objects are built there.

use crate::application::SparkApplication;
use crate::labels::SparkRole;

/// `spec.batchScheduler` for Volcano.
pub const VOLCANO: &str = "volcano";
/// `spec.batchScheduler` for Apache YuniKorn.
pub const YUNIKORN: &str = "yunikorn";

/// The annotation that puts a pod in a Volcano PodGroup (`v1beta1.KubeGroupNameAnnotationKey`).
pub const ANNOTATION_VOLCANO_GROUP_NAME: &str = "scheduling.k8s.io/group-name";
/// The label that puts a pod in a coscheduling PodGroup (scheduler-plugins' `PodGroupLabel`).
pub const LABEL_COSCHEDULING_POD_GROUP: &str = "scheduling.x-k8s.io/pod-group";
/// YuniKorn's task group of a pod.
pub const ANNOTATION_YUNIKORN_TASK_GROUP_NAME: &str = "yunikorn.apache.org/task-group-name";
/// YuniKorn's task groups of an application, on its driver (JSON).
pub const ANNOTATION_YUNIKORN_TASK_GROUPS: &str = "yunikorn.apache.org/task-groups";
/// YuniKorn's queue label.
pub const LABEL_YUNIKORN_QUEUE: &str = "queue";
/// YuniKorn task group names, Kubeflow's.
pub const YUNIKORN_DRIVER_TASK_GROUP: &str = "spark-driver";
pub const YUNIKORN_EXECUTOR_TASK_GROUP: &str = "spark-executor";

/// Which kind of batch scheduler a name is. Any other name is a kube-scheduler running the
/// coscheduling plugin (Kubeflow's `--kube-scheduler-names`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchSchedulerKind {
    Volcano,
    Yunikorn,
    Coscheduling,
}

impl BatchSchedulerKind {
    pub fn of(name: &str) -> Self {
        match name {
            VOLCANO => Self::Volcano,
            YUNIKORN => Self::Yunikorn,
            _ => Self::Coscheduling,
        }
    }
}

/// The application's batch scheduler: `spec.batchScheduler` when set and not empty.
pub fn named_batch_scheduler(app: &SparkApplication) -> Option<&str> {
    app.spec.batch_scheduler.as_deref().filter(|s| !s.is_empty())
}

/// The Volcano PodGroup of an application: `spark-<app>-pg`, as Kubeflow names it.
pub fn volcano_pod_group_name(app_name: &str) -> String {
    format!("spark-{app_name}-pg")
}

/// The coscheduling PodGroup of an application: `<app>-pg`, as Kubeflow names it.
pub fn coscheduling_pod_group_name(app_name: &str) -> String {
    format!("{app_name}-pg")
}

/// The labels and annotations a pod of `role` gets for the application's batch scheduler, as Kubeflow
/// writes them into the driver's and executor's spec before submission. The driver's YuniKorn
/// `task-groups` annotation needs both roles' resources and is added by the controller.
pub fn pod_marks(app: &SparkApplication, role: SparkRole) -> Marks {
    let mut marks = Marks::default();
    let Some(name) = named_batch_scheduler(app) else {
        return marks;
    };
    let app_name = app.metadata.name.clone().unwrap_or_default();
    match BatchSchedulerKind::of(name) {
        BatchSchedulerKind::Volcano => {
            marks.annotations.push((
                ANNOTATION_VOLCANO_GROUP_NAME.to_owned(),
                volcano_pod_group_name(&app_name),
            ));
        }
        BatchSchedulerKind::Yunikorn => {
            let group = match role {
                SparkRole::Driver => YUNIKORN_DRIVER_TASK_GROUP,
                SparkRole::Executor => YUNIKORN_EXECUTOR_TASK_GROUP,
            };
            marks
                .annotations
                .push((ANNOTATION_YUNIKORN_TASK_GROUP_NAME.to_owned(), group.to_owned()));
            if let Some(queue) = app.spec.batch_scheduler_options.as_ref().and_then(|o| o.queue.clone()) {
                marks.labels.push((LABEL_YUNIKORN_QUEUE.to_owned(), queue));
            }
        }
        BatchSchedulerKind::Coscheduling => {
            marks.labels.push((
                LABEL_COSCHEDULING_POD_GROUP.to_owned(),
                coscheduling_pod_group_name(&app_name),
            ));
        }
    }
    marks
}

/// Labels and annotations for a pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Marks {
    pub labels: Vec<(String, String)>,
    pub annotations: Vec<(String, String)>,
}
