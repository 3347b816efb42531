//! Volcano's gang scheduling for pods with `schedulerName: volcano`, as Volcano's default
//! configuration does it (actions `enqueue, allocate`; plugins priority, gang, overcommit,
//! proportion) for PodGroups of one queue. One "session" runs whenever a pod, PodGroup or node
//! changes (Volcano opens one every second):
//!
//! 1. **enqueue**: a `Pending` PodGroup becomes `Inqueue` when its `spec.minResources` fit, on
//!    the resources it names, both what the overcommit plugin allows (reserved + min ≤ 1.2 ×
//!    allocatable − used) and what the proportion plugin allows the queue (min + allocated to
//!    Volcano's pods + reserved ≤ allocatable). A group reserves what it has not been allocated
//!    yet of its `minResources` while it is `Inqueue`, or `Running` with at least `minMember`
//!    pods allocated: this is what keeps room for the executors a Spark driver creates later.
//!    Groups without `minResources` are enqueued at once. A rejected group gets the plugin's
//!    `Unschedulable` event and is tried again in the next session; later groups are still tried.
//! 2. **allocate**: the pending pods of each enqueued group are placed (the default scheduler's
//!    filters and node choice) and bound only if, with the group's pods already bound or
//!    finished, at least `minMember` are placed; otherwise the placements are taken back.
//! 3. **close**: the group's status (`phase` Pending → Inqueue → Running → Completed, or Unknown
//!    when running pods' gang is not ready; `running`, `succeeded`, `failed`; the `Unschedulable`
//!    or `Scheduled` condition), the `PodScheduled=False` condition and `FailedScheduling` event of
//!    every pod still pending, with Volcano's messages.
//!
//! Pods whose PodGroup does not exist (or that name none) are left alone: they stay Pending with
//! no condition, as Volcano ignores a job without its PodGroup.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{Scheduler, scheduler_name};
use crate::meta;
use crate::node::hub::{PodEvent, SchedEvent, node_name, podgroups_key, pods_key};
use crate::node::placement::{self, Misfit, Resources};
use crate::node::quantity::{parse_milli, parse_units};
use crate::node::volcano::{GROUP_NAME_ANNOTATION, SCHEDULER_NAME};
use crate::registry::{Gvr, ResourceKey};
use crate::status::ApiError;
use crate::store::WriteOptions;

/// Volcano's default `overcommit-factor` (1.2), as a ratio.
const OVERCOMMIT: (i128, i128) = (6, 5);

const MANAGER: &str = "volcano";

/// What the stand-in follows between sessions.
#[derive(Default)]
pub(super) struct Gang {
    /// Something changed since the last session.
    pub dirty: bool,
    /// PodGroups by namespace/name → the order they were first seen in (Volcano orders jobs of
    /// equal priority by creation time).
    groups: HashMap<(String, String), u64>,
    /// Pods for `volcano`: uid → (namespace, name, order first seen).
    pods: HashMap<String, (String, String, u64)>,
    seen: u64,
    /// The last event message per group and kind, so a state is reported once (Volcano repeats
    /// it every second and the apiserver folds the repeats into one event's count).
    reported: HashMap<(String, &'static str), String>,
}

impl Gang {
    pub fn observe(&mut self, ev: &SchedEvent) {
        match ev {
            SchedEvent::NodeUpsert(_) | SchedEvent::NodeDeleted(_) => self.dirty = true,
            SchedEvent::PodGroup(PodEvent::Upsert(pg)) => {
                let key = (meta::namespace(pg).to_string(), meta::name(pg).to_string());
                if !self.groups.contains_key(&key) {
                    self.seen += 1;
                    self.groups.insert(key, self.seen);
                }
                self.dirty = true;
            }
            SchedEvent::PodGroup(PodEvent::Deleted(pg)) => {
                self.groups
                    .remove(&(meta::namespace(pg).to_string(), meta::name(pg).to_string()));
                let uid = meta::uid(pg).to_string();
                self.reported.retain(|(u, _), _| *u != uid);
                self.dirty = true;
            }
            SchedEvent::Pod(PodEvent::Upsert(pod)) if scheduler_name(pod) == SCHEDULER_NAME => {
                let uid = meta::uid(pod).to_string();
                if !self.pods.contains_key(&uid) {
                    self.seen += 1;
                    self.pods.insert(
                        uid,
                        (meta::namespace(pod).to_string(), meta::name(pod).to_string(), self.seen),
                    );
                }
                self.dirty = true;
            }
            SchedEvent::Pod(PodEvent::Deleted(pod)) => {
                if self.pods.remove(meta::uid(pod)).is_some() {
                    self.dirty = true;
                }
            }
            SchedEvent::Pod(_) => {}
        }
    }

    /// Whether `message` is new for this group and kind (and remembers it).
    fn report(&mut self, group_uid: &str, kind: &'static str, message: &str) -> bool {
        let key = (group_uid.to_string(), kind);
        if self.reported.get(&key).is_some_and(|m| m == message) {
            return false;
        }
        self.reported.insert(key, message.to_string());
        true
    }
}

/// A pod's state as Volcano's scheduler cache classifies it (`getTaskStatus`); `Binding` is a
/// pod bound in this session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskStatus {
    Pending,
    Binding,
    Bound,
    Running,
    Releasing,
    Succeeded,
    Failed,
    Unknown,
}

impl TaskStatus {
    fn of(pod: &Value) -> Self {
        let deleting = meta::is_deleting(pod);
        match pod
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("Pending")
        {
            "Running" if deleting => Self::Releasing,
            "Running" => Self::Running,
            "Pending" if deleting => Self::Releasing,
            "Pending" if node_name(pod).is_empty() => Self::Pending,
            "Pending" => Self::Bound,
            "Succeeded" => Self::Succeeded,
            "Failed" => Self::Failed,
            _ => Self::Unknown,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Binding => "Binding",
            Self::Bound => "Bound",
            Self::Running => "Running",
            Self::Releasing => "Releasing",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Unknown => "Unknown",
        }
    }

    /// `AllocatedStatus`: holds resources on a node.
    fn allocated(self) -> bool {
        matches!(self, Self::Binding | Self::Bound | Self::Running)
    }

    /// `ReadyTaskNum`: counts toward `minMember`.
    fn ready(self) -> bool {
        self.allocated() || self == Self::Succeeded
    }

    /// `ScheduledStatus`.
    fn scheduled(self) -> bool {
        matches!(self, Self::Running | Self::Bound | Self::Failed | Self::Succeeded)
    }
}

struct Task {
    uid: String,
    pod: Arc<Value>,
    status: TaskStatus,
    seq: u64,
    req: Resources,
    /// Where a gang allocation that was taken back would have put it.
    would_fit: Option<String>,
    /// Why no node fits it, in Volcano's words.
    fit_error: Option<String>,
}

struct Job {
    obj: Arc<Value>,
    seq: u64,
    priority: i64,
    min_member: usize,
    /// `spec.minResources` and the resource names it has.
    min: Option<(Resources, Vec<String>)>,
    phase: String,
    tasks: Vec<Task>,
    /// Why the enqueue action turned it down in this session.
    enqueue_rejected: Option<String>,
}

impl Job {
    fn is_pending(&self) -> bool {
        matches!(self.phase.as_str(), "" | "Pending")
    }

    fn count(&self, f: impl Fn(TaskStatus) -> bool) -> usize {
        self.tasks.iter().filter(|t| f(t.status)).count()
    }

    fn allocated(&self) -> Resources {
        let mut r = Resources::default();
        for t in self.tasks.iter().filter(|t| t.status.allocated()) {
            r.add(&t.req);
        }
        r
    }

    /// What the group holds back for pods it has not been allocated yet (`GetInqueueResource`),
    /// counted for `Inqueue` groups and for `Running` ones with `minMember` pods allocated.
    fn reserved(&self) -> Option<Resources> {
        let (min, _) = self.min.as_ref()?;
        let holds = self.phase == "Inqueue"
            || (self.phase == "Running" && self.count(TaskStatus::allocated) >= self.min_member);
        if !holds {
            return None;
        }
        let allocated = self.allocated();
        let left = |m: i128, a: i128| (m - a).max(0);
        let mut r = Resources {
            cpu: left(min.cpu, allocated.cpu),
            memory: left(min.memory, allocated.memory),
            pods: left(min.pods, allocated.pods),
            other: BTreeMap::new(),
        };
        for (k, m) in &min.other {
            r.other
                .insert(k.clone(), left(*m, allocated.other.get(k).copied().unwrap_or(0)));
        }
        Some(r)
    }
}

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")?.get(key)?.as_str()
}

fn min_resources(pg: &Value) -> Option<(Resources, Vec<String>)> {
    let m = pg.pointer("/spec/minResources")?.as_object()?;
    let mut r = Resources::default();
    let mut names = Vec::new();
    for (k, v) in m {
        let s = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => continue,
        };
        match k.as_str() {
            "cpu" => r.cpu = parse_milli(&s).unwrap_or(0),
            "memory" => r.memory = parse_units(&s).unwrap_or(0),
            "pods" => r.pods = parse_units(&s).unwrap_or(0),
            other => {
                r.other.insert(other.to_string(), parse_units(&s).unwrap_or(0));
            }
        }
        names.push(k.clone());
    }
    Some((r, names))
}

fn dimension(r: &Resources, name: &str) -> i128 {
    match name {
        "cpu" => r.cpu,
        "memory" => r.memory,
        "pods" => r.pods,
        other => r.other.get(other).copied().unwrap_or(0),
    }
}

/// The resources among `names` where `want` exceeds `have`.
fn exceeding(want: &Resources, have: &Resources, names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| dimension(want, n) > dimension(have, n))
        .cloned()
        .collect()
}

/// Volcano's `FormatResourceNames`.
fn format_resource_names(prefix: &str, verb: &str, names: &[String]) -> String {
    if names.is_empty() {
        return prefix.to_string();
    }
    let parts: Vec<String> = names.iter().map(|n| format!("{verb} {n}")).collect();
    format!("{prefix}: {}", parts.join(", "))
}

fn histogram(items: impl IntoIterator<Item = (String, usize)>) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (k, n) in items {
        *counts.entry(k).or_default() += n;
    }
    let mut out: Vec<String> = counts.into_iter().map(|(k, n)| format!("{n} {k}")).collect();
    out.sort();
    out.join(", ")
}

/// `FitErrors.Error()`: `0/3 nodes are unavailable: 3 Insufficient cpu.` Volcano checks
/// resources first and names only the first one short (cpu, memory, then the others).
fn fit_error(nodes: usize, misfits: &[Misfit]) -> String {
    let head = format!("0/{nodes} nodes are unavailable");
    if misfits.is_empty() {
        return head;
    }
    let reason = |m: &Misfit| -> String {
        if !m.resolvable {
            return m.reasons.first().cloned().unwrap_or_default();
        }
        for first in ["Insufficient cpu", "Insufficient memory"] {
            if m.reasons.iter().any(|r| r == first) {
                return first.to_string();
            }
        }
        match m.reasons.iter().find(|r| r.as_str() != "Too many pods") {
            Some(r) => r.clone(),
            None => "Insufficient pods".to_string(),
        }
    };
    format!("{head}: {}.", histogram(misfits.iter().map(|m| (reason(m), 1))))
}

/// `JobInfo.FitError()`: `pod group is not ready, 1 Pending, 1 minAvailable; Pending: 1
/// Unschedulable. Origin reason is ...`.
fn job_fit_error(job: &Job, ready: bool) -> String {
    let mut counts: Vec<(String, usize)> = job.tasks.iter().map(|t| (t.status.name().to_string(), 1)).collect();
    counts.push(("minAvailable".to_string(), job.min_member));
    let state = if ready {
        "pod group is ready"
    } else {
        "pod group is not ready"
    };
    let mut msg = format!("{state}, {}", histogram(counts));
    let pending: Vec<(String, usize)> = job
        .tasks
        .iter()
        .filter(|t| t.status == TaskStatus::Pending)
        .map(|t| {
            let reason = if t.would_fit.is_some() {
                "Schedulable"
            } else {
                "Unschedulable"
            };
            (reason.to_string(), 1)
        })
        .collect();
    if !pending.is_empty() {
        msg.push_str(&format!("; Pending: {}", histogram(pending)));
    }
    if let Some(t) = job.tasks.iter().find(|t| t.fit_error.is_some()) {
        msg.push_str(&format!(
            ". Origin reason is {}: {}",
            meta::name(&t.pod),
            t.fit_error.as_deref().unwrap_or_default()
        ));
    }
    msg
}

fn priority_of_class(s: &Scheduler, class: &str) -> i64 {
    if class.is_empty() {
        return 0;
    }
    let key = ResourceKey {
        group: "scheduling.k8s.io".into(),
        resource: "priorityclasses".into(),
    };
    s.store
        .get_stored(&key, "", class)
        .and_then(|pc| pc.get("value").and_then(Value::as_i64))
        .unwrap_or(0)
}

/// The groups with their pods, as the store has them now, in Volcano's job order: higher
/// priority first, then older first.
fn collect(s: &Scheduler, gang: &Gang) -> Vec<Job> {
    let mut tasks: HashMap<(String, String), Vec<Task>> = HashMap::new();
    for (uid, (ns, name, seq)) in &gang.pods {
        let Some(pod) = s.store.get_stored(&pods_key(), ns, name) else {
            continue;
        };
        if meta::uid(&pod) != uid {
            continue;
        }
        let Some(group) = annotation(&pod, GROUP_NAME_ANNOTATION).filter(|g| !g.is_empty()) else {
            continue;
        };
        tasks.entry((ns.clone(), group.to_string())).or_default().push(Task {
            uid: uid.clone(),
            status: TaskStatus::of(&pod),
            req: placement::pod_requests(&pod, false),
            seq: *seq,
            pod,
            would_fit: None,
            fit_error: None,
        });
    }
    let mut jobs = Vec::new();
    for ((ns, name), seq) in &gang.groups {
        let Some(obj) = s.store.get_stored(&podgroups_key(), ns, name) else {
            continue;
        };
        let mut tasks = tasks.remove(&(ns.clone(), name.clone())).unwrap_or_default();
        // Volcano's task order: higher pod priority first, then older first.
        let pod_priority = |t: &Task| t.pod.pointer("/spec/priority").and_then(Value::as_i64).unwrap_or(0);
        tasks.sort_by(|a, b| pod_priority(b).cmp(&pod_priority(a)).then(a.seq.cmp(&b.seq)));
        let class = obj
            .pointer("/spec/priorityClassName")
            .and_then(Value::as_str)
            .unwrap_or("");
        jobs.push(Job {
            priority: priority_of_class(s, class),
            min_member: obj.pointer("/spec/minMember").and_then(Value::as_u64).unwrap_or(0) as usize,
            min: min_resources(&obj),
            phase: obj
                .pointer("/status/phase")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            seq: *seq,
            tasks,
            obj,
            enqueue_rejected: None,
        });
    }
    jobs.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.seq.cmp(&b.seq)));
    jobs
}

/// The enqueue action with the overcommit and proportion plugins' admission.
fn enqueue(s: &Scheduler, jobs: &mut [Job]) {
    let mut total = Resources::default();
    for info in s.nodes.values() {
        total.add(&info.allocatable);
    }
    let mut used = Resources::default();
    for (requests, _) in s.used.values() {
        used.add(requests);
    }
    let scale = |x: i128| x * OVERCOMMIT.0 / OVERCOMMIT.1;
    let mut idle = Resources {
        cpu: scale(total.cpu),
        memory: scale(total.memory),
        pods: scale(total.pods),
        other: total.other.iter().map(|(k, v)| (k.clone(), scale(*v))).collect(),
    };
    idle.sub(&used);
    let mut allocated = Resources::default();
    let mut reserved = Resources::default();
    for job in jobs.iter() {
        allocated.add(&job.allocated());
        if let Some(r) = job.reserved() {
            reserved.add(&r);
        }
    }
    for job in jobs.iter_mut().filter(|j| j.is_pending()) {
        let Some((min, names)) = &job.min else {
            job.phase = "Inqueue".into();
            continue;
        };
        let mut want = reserved.clone();
        want.add(min);
        let over = exceeding(&want, &idle, names);
        if !over.is_empty() {
            job.enqueue_rejected = Some(format_resource_names(
                "resource in cluster is overused",
                "overused",
                &over,
            ));
            continue;
        }
        want.add(&allocated);
        let over = exceeding(&want, &total, names);
        if !over.is_empty() {
            job.enqueue_rejected = Some(format_resource_names(
                "queue resource quota insufficient",
                "insufficient",
                &over,
            ));
            continue;
        }
        job.phase = "Inqueue".into();
        reserved.add(min);
    }
}

/// The allocate action with the gang plugin's `minMember`.
async fn allocate(s: &mut Scheduler, jobs: &mut [Job]) {
    let opts = WriteOptions {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    for job in jobs.iter_mut() {
        if job.is_pending() {
            continue;
        }
        // The gang plugin's JobValid: fewer pods than minMember cannot make a gang.
        let valid = job.count(|st| st.ready() || st == TaskStatus::Pending);
        if valid < job.min_member {
            continue;
        }
        let ready_before = job.count(TaskStatus::ready);
        let mut placed: Vec<(usize, String)> = Vec::new();
        for (i, task) in job.tasks.iter_mut().enumerate() {
            let gated = task
                .pod
                .pointer("/spec/schedulingGates")
                .and_then(Value::as_array)
                .is_some_and(|g| !g.is_empty());
            if task.status != TaskStatus::Pending || gated {
                continue;
            }
            let nonzero = placement::pod_requests(&task.pod, true);
            match s.choose_node(&task.pod, &task.req, &nonzero) {
                Ok(node) => {
                    s.place(&task.uid, &node, &task.pod);
                    placed.push((i, node));
                }
                Err(misfits) => task.fit_error = Some(fit_error(s.nodes.len(), &misfits)),
            }
        }
        if ready_before + placed.len() < job.min_member {
            for (i, node) in placed {
                s.unplace_quiet(&job.tasks[i].uid);
                job.tasks[i].would_fit = Some(node);
            }
            continue;
        }
        for (i, node) in placed {
            let task = &mut job.tasks[i];
            let (ns, name) = (
                meta::namespace(&task.pod).to_string(),
                meta::name(&task.pod).to_string(),
            );
            match s.store.bind_pod(&ns, &name, &node, &opts).await {
                Ok(_) => {
                    task.status = TaskStatus::Binding;
                    let msg = format!("Successfully assigned {ns}/{name} to {node}");
                    s.volcano_recorder
                        .record(&task.pod, "Pod", None, "Normal", "Scheduled", &msg)
                        .await;
                }
                Err(e) => {
                    // Someone else bound or deleted it; its next event puts the accounting right.
                    s.unplace_quiet(&task.uid);
                    if !matches!(e, ApiError::NotFound(_) | ApiError::Conflict { .. }) {
                        tracing::warn!(pod = %format!("{ns}/{name}"), %node, error = %e, "binding a pod");
                    }
                }
            }
        }
    }
}

/// Conditions equal but for their times and session id.
fn same_conditions(a: Option<&Value>, b: Option<&Value>) -> bool {
    let strip = |v: Option<&Value>| -> Vec<Value> {
        v.and_then(Value::as_array)
            .map(|l| {
                l.iter()
                    .map(|c| {
                        let mut c = c.clone();
                        if let Some(o) = c.as_object_mut() {
                            o.remove("lastTransitionTime");
                            o.remove("transitionID");
                        }
                        c
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    strip(a) == strip(b)
}

/// The session's end: group statuses, events and the pending pods' conditions.
async fn close(s: &mut Scheduler, gang: &mut Gang, jobs: &[Job]) {
    let session = uuid::Uuid::new_v4().to_string();
    let gvr = Gvr::new("scheduling.volcano.sh", "v1beta1", "podgroups");
    let opts = WriteOptions {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    for job in jobs {
        let pg = &job.obj;
        let group_uid = meta::uid(pg).to_string();
        if let Some(msg) = &job.enqueue_rejected
            && gang.report(&group_uid, "enqueue", msg)
        {
            s.volcano_recorder
                .record(pg, "PodGroup", None, "Normal", "Unschedulable", msg)
                .await;
        }
        let ready_num = job.count(TaskStatus::ready);
        let ready = ready_num >= job.min_member;
        let fit = job_fit_error(job, ready);
        let old_status = pg.get("status").cloned().unwrap_or_else(|| json!({}));
        let mut conditions: Vec<Value> = old_status
            .get("conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if !job.tasks.is_empty() {
            let cond = if ready {
                json!({ "type": "Scheduled", "status": "True", "transitionID": session,
                        "lastTransitionTime": meta::now_rfc3339(),
                        "reason": "tasks in gang are ready to be scheduled" })
            } else {
                let schedulable = job.tasks.iter().filter(|t| t.would_fit.is_some()).count();
                let unready = job.min_member.saturating_sub(schedulable + ready_num);
                json!({ "type": "Unschedulable", "status": "True", "transitionID": session,
                        "lastTransitionTime": meta::now_rfc3339(), "reason": "NotEnoughResources",
                        "message": format!("{unready}/{} tasks in gang unschedulable: {fit}", job.tasks.len()) })
            };
            match conditions.iter_mut().find(|c| c.get("type") == cond.get("type")) {
                Some(existing) => *existing = cond,
                None => conditions.push(cond),
            }
        }
        let running = job.count(|st| st == TaskStatus::Running);
        let phase = if running > 0 && !job.tasks.is_empty() && !ready {
            "Unknown"
        } else {
            let releasing_scheduled = job
                .tasks
                .iter()
                .filter(|t| t.status == TaskStatus::Releasing && !node_name(&t.pod).is_empty())
                .count();
            let scheduled = job.count(TaskStatus::scheduled) + releasing_scheduled;
            let completed = job.count(|st| matches!(st, TaskStatus::Succeeded | TaskStatus::Failed));
            if scheduled >= job.min_member {
                if scheduled == completed { "Completed" } else { "Running" }
            } else if job.phase != "Inqueue" {
                "Pending"
            } else {
                "Inqueue"
            }
        };
        let mut status = Map::new();
        status.insert("phase".into(), json!(phase));
        if !conditions.is_empty() {
            status.insert("conditions".into(), Value::Array(conditions));
        }
        for (field, n) in [
            ("running", running),
            ("succeeded", job.count(|st| st == TaskStatus::Succeeded)),
            ("failed", job.count(|st| st == TaskStatus::Failed)),
        ] {
            if n > 0 {
                status.insert(field.into(), json!(n));
            }
        }
        let status = Value::Object(status);
        let changed = {
            let without = |v: &Value| {
                let mut v = v.clone();
                if let Some(o) = v.as_object_mut() {
                    o.remove("conditions");
                }
                v
            };
            without(&status) != without(&old_status)
                || !same_conditions(status.get("conditions"), old_status.get("conditions"))
        };
        if changed {
            // Conditions that did not change keep their times.
            let mut next = status.clone();
            if let (Some(new), Some(old)) = (
                next.get_mut("conditions").and_then(Value::as_array_mut),
                old_status.get("conditions").and_then(Value::as_array),
            ) {
                for c in new.iter_mut() {
                    if let Some(o) = old
                        .iter()
                        .find(|o| same_conditions(Some(&json!([c])), Some(&json!([o]))))
                    {
                        *c = o.clone();
                    }
                }
            }
            let mut obj = (**pg).clone();
            obj["status"] = next;
            match s
                .store
                .update(&gvr, meta::namespace(pg), meta::name(pg), obj, None, &opts)
                .await
            {
                Ok(_) => {}
                // Changed meanwhile: its event brings another session.
                Err(ApiError::Conflict { .. } | ApiError::NotFound(_)) => {}
                Err(e) => {
                    tracing::warn!(podgroup = %format!("{}/{}", meta::namespace(pg), meta::name(pg)), error = %e, "updating a PodGroup's status")
                }
            }
        }
        if matches!(phase, "Pending" | "Inqueue" | "Unknown") {
            let pending = job.count(|st| st == TaskStatus::Pending);
            let msg = format!("{pending}/{} tasks in gang unschedulable: {fit}", job.tasks.len());
            if gang.report(&group_uid, "gang", &msg) {
                s.volcano_recorder
                    .record(pg, "PodGroup", None, "Warning", "Unschedulable", &msg)
                    .await;
            }
        } else if changed && gang.report(&group_uid, "gang", "pod group is ready") {
            s.volcano_recorder
                .record(pg, "PodGroup", None, "Normal", "Scheduled", "pod group is ready")
                .await;
        }
        for task in job.tasks.iter().filter(|t| t.status == TaskStatus::Pending) {
            if task
                .pod
                .pointer("/spec/schedulingGates")
                .and_then(Value::as_array)
                .is_some_and(|g| !g.is_empty())
            {
                continue;
            }
            let (ns, name) = (meta::namespace(&task.pod), meta::name(&task.pod));
            let (reason, message) = match (&task.would_fit, &task.fit_error) {
                (Some(node), _) => (
                    "Schedulable",
                    format!("Pod {ns}/{name} can possibly be assigned to {node}, once minAvailable is satisfied"),
                ),
                (None, Some(e)) => ("Unschedulable", e.clone()),
                (None, None) => ("Unschedulable", fit.clone()),
            };
            mark(s, &task.pod, reason, &message).await;
        }
    }
}

/// `PodScheduled=False` with Volcano's reason and message, and a `FailedScheduling` event, when
/// they change.
async fn mark(s: &Scheduler, pod: &Value, reason: &str, message: &str) {
    let current = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|l| l.iter().find(|c| c["type"] == "PodScheduled"));
    if current.is_some_and(|c| c["status"] == "False" && c["reason"] == reason && c["message"] == message) {
        return;
    }
    if !super::set_not_scheduled(&s.store, pod, reason, message, MANAGER).await {
        return;
    }
    s.volcano_recorder
        .record(pod, "Pod", None, "Warning", "FailedScheduling", message)
        .await;
}

/// One scheduling session over every PodGroup.
pub(super) async fn session(s: &mut Scheduler) {
    let Some(mut gang) = s.gang.take() else {
        return;
    };
    gang.dirty = false;
    let mut jobs = collect(s, &gang);
    enqueue(s, &mut jobs);
    allocate(s, &mut jobs).await;
    close(s, &mut gang, &jobs).await;
    // Placements and bindings of this session came back to `s` while the state was out.
    s.gang = Some(gang);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volcano_messages() {
        let cpu = Misfit {
            reasons: vec!["Insufficient memory".into(), "Insufficient cpu".into()],
            resolvable: true,
        };
        let taint = Misfit {
            reasons: vec!["node(s) had untolerated taint {dedicated: spark}".into()],
            resolvable: false,
        };
        assert_eq!(
            fit_error(3, &[cpu.clone(), cpu, taint]),
            "0/3 nodes are unavailable: 1 node(s) had untolerated taint {dedicated: spark}, 2 Insufficient cpu."
        );
        assert_eq!(fit_error(0, &[]), "0/0 nodes are unavailable");
        assert_eq!(
            format_resource_names("resource in cluster is overused", "overused", &["cpu".into()]),
            "resource in cluster is overused: overused cpu"
        );
    }

    #[test]
    fn reservation_is_what_the_group_has_not_been_allocated() {
        let pg = json!({ "spec": { "minMember": 1, "minResources": { "cpu": "3", "memory": "2Gi" } },
                         "status": { "phase": "Running" } });
        let bound = |cpu: &str| {
            let pod = json!({ "spec": { "nodeName": "n", "containers": [{ "name": "c",
                "resources": { "requests": { "cpu": cpu, "memory": "1Gi" } } }] },
                "status": { "phase": "Running" } });
            Task {
                uid: String::new(),
                req: placement::pod_requests(&pod, false),
                status: TaskStatus::of(&pod),
                pod: Arc::new(pod),
                seq: 0,
                would_fit: None,
                fit_error: None,
            }
        };
        let mut job = Job {
            min_member: 1,
            min: min_resources(&pg),
            phase: "Running".into(),
            tasks: vec![bound("1")],
            obj: Arc::new(pg),
            seq: 0,
            priority: 0,
            enqueue_rejected: None,
        };
        let r = job.reserved().expect("a running gang reserves");
        assert_eq!((r.cpu, r.memory), (2000, 1 << 30));
        // More allocated than the minimum: nothing is held back (never negative).
        job.tasks.extend([bound("1"), bound("2")]);
        let r = job.reserved().expect("still running");
        assert_eq!((r.cpu, r.memory), (0, 0));
        // A finished gang (its pods done) holds nothing.
        job.phase = "Completed".into();
        assert!(job.reserved().is_none());
    }
}
