//! How the simulated nodes are set up: which nodes, the kubelet's timings, the node lifecycle
//! controller's timeouts and the terminated-pod GC.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use super::local_images::LocalImage;
use super::script::ImageScript;

/// Everything about the nodes of a sim.
#[derive(Debug, Clone)]
pub struct NodesConfig {
    /// The nodes registered at start (more can be added with `NodeCluster::add_node`).
    pub nodes: Vec<NodeSpec>,
    pub pod_gc: PodGc,
    pub kubelet: KubeletConfig,
    pub lifecycle: LifecycleConfig,
    /// Record Normal events (Scheduled, Pulled, Created, Started, Killing). Warnings are always
    /// recorded. Big churn runs switch this off: it triples the writes per pod.
    pub normal_events: bool,
    /// The Volcano stand-in for pods with `schedulerName: volcano` (see `volcano.rs`).
    pub volcano: Volcano,
}

impl Default for NodesConfig {
    fn default() -> Self {
        Self {
            nodes: Vec::new(),
            pod_gc: PodGc::Off,
            kubelet: KubeletConfig::default(),
            lifecycle: LifecycleConfig::default(),
            normal_events: true,
            volcano: Volcano::Off,
        }
    }
}

impl NodesConfig {
    /// `count` identical nodes `sim-node-1` .. `sim-node-<count>`.
    pub fn with_nodes(count: usize) -> Self {
        Self {
            nodes: (1..=count).map(NodeSpec::numbered).collect(),
            ..Self::default()
        }
    }
}

/// One node: its name, what it offers, its labels and taints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    /// Capacity (= allocatable: the sim reserves nothing for system daemons).
    pub cpu: String,
    pub memory: String,
    pub pods: u32,
    /// Extra labels; `kubernetes.io/hostname`, `kubernetes.io/os` and `kubernetes.io/arch` are
    /// always set.
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
}

impl NodeSpec {
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            cpu: "8".into(),
            memory: "32Gi".into(),
            pods: 110,
            labels: BTreeMap::new(),
            taints: Vec::new(),
        }
    }

    /// `sim-node-<i>` with the default size (8 CPUs, 32Gi, 110 pods).
    pub fn numbered(i: usize) -> Self {
        Self::new(format!("sim-node-{i}"))
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.taints.push(Taint {
            key: key.into(),
            value: value.into(),
            effect: effect.into(),
        });
        self
    }

    pub fn capacity(mut self, cpu: &str, memory: &str, pods: u32) -> Self {
        self.cpu = cpu.into();
        self.memory = memory.into();
        self.pods = pods;
        self
    }
}

/// A node taint (`effect`: NoSchedule, PreferNoSchedule or NoExecute).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

/// The kubelet's timings.
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    /// How often the node lease is renewed (the kubelet renews every 10 s).
    pub heartbeat_interval: Duration,
    /// First CrashLoopBackOff delay; doubles per restart up to `crash_loop_backoff_max`.
    pub crash_loop_backoff: Duration,
    pub crash_loop_backoff_max: Duration,
    /// First ImagePullBackOff delay; doubles per failed pull up to `image_pull_backoff_max`.
    pub image_pull_backoff: Duration,
    pub image_pull_backoff_max: Duration,
    /// How long the containers (and logs) of a deleted pod stay on the node before container
    /// GC removes them (the kubelet's GC runs every minute).
    pub container_gc_delay: Duration,
    /// How often a running process pod's ConfigMap, Secret, projected and downward API volumes are
    /// synced again (the kubelet's `syncFrequency`, 1 minute).
    pub sync_frequency: Duration,
    /// Per-image script defaults.
    pub image_scripts: Vec<ImageScript>,
    /// Images that run a real process: the executable standing for each image's entrypoint.
    pub local_images: Vec<LocalImage>,
    /// `containerLogMaxSize`: a container's log file is rotated once it is larger (10Mi).
    pub container_log_max_size: u64,
    /// `containerLogMaxFiles`: log files kept per container, the current one included (5).
    pub container_log_max_files: usize,
}

impl Default for KubeletConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval: Duration::from_secs(10),
            crash_loop_backoff: Duration::from_secs(10),
            crash_loop_backoff_max: Duration::from_secs(300),
            image_pull_backoff: Duration::from_secs(10),
            image_pull_backoff_max: Duration::from_secs(300),
            container_gc_delay: Duration::from_secs(60),
            sync_frequency: Duration::from_secs(60),
            image_scripts: Vec::new(),
            local_images: Vec::new(),
            container_log_max_size: 10 * 1024 * 1024,
            container_log_max_files: 5,
        }
    }
}

/// The node lifecycle controller's timeouts.
#[derive(Debug, Clone)]
pub struct LifecycleConfig {
    /// How often node leases are checked (`--node-monitor-period`, 5 s).
    pub monitor_period: Duration,
    /// How long a node may go without renewing its lease before it is NotReady
    /// (`--node-monitor-grace-period`, 40 s).
    pub grace_period: Duration,
    /// How long pods without their own toleration stay on an unreachable node before they are
    /// evicted: the `tolerationSeconds` the DefaultTolerationSeconds admission plugin adds (300).
    pub default_toleration: Duration,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self {
            monitor_period: Duration::from_secs(5),
            grace_period: Duration::from_secs(40),
            default_toleration: Duration::from_secs(300),
        }
    }
}

/// Whether pods with `schedulerName: volcano` are scheduled, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Volcano {
    /// No Volcano in the cluster: its pods stay Pending, as on a cluster without it.
    #[default]
    Off,
    /// Volcano's gang admission: a PodGroup is enqueued only when its `minResources` fit the
    /// cluster's idle capacity less what enqueued groups reserve, and only its pods are bound.
    Gang,
    /// The stand-in places each pod on its own as the default scheduler does, ignoring its
    /// PodGroup (what a burst does without gang admission).
    NoGang,
}

/// `--volcano` that is not `off`, `gang` or `no-gang`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Volcano setting {0:?}: use off, gang or no-gang")]
pub struct VolcanoParseError(String);

impl FromStr for Volcano {
    type Err = VolcanoParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "off" => Ok(Volcano::Off),
            "gang" => Ok(Volcano::Gang),
            "no-gang" => Ok(Volcano::NoGang),
            _ => Err(VolcanoParseError(s.to_string())),
        }
    }
}

impl std::fmt::Display for Volcano {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Volcano::Off => "off",
            Volcano::Gang => "gang",
            Volcano::NoGang => "no-gang",
        })
    }
}

/// The terminated-pod GC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodGc {
    /// Never deletes finished pods.
    Off,
    /// Deletes a pod the instant it reaches Succeeded or Failed.
    Instant,
    /// Deletes a finished pod this long after it finished.
    After(Duration),
}

/// `--pod-gc` that is not `instant`, `off` or a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid pod GC setting {0:?}: use instant, off, or a duration such as 30s or 5m")]
pub struct PodGcParseError(String);

impl FromStr for PodGc {
    type Err = PodGcParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "off" => Ok(PodGc::Off),
            "instant" => Ok(PodGc::Instant),
            other => super::script::parse_duration(other)
                .map(PodGc::After)
                .ok_or_else(|| PodGcParseError(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_gc_flag_values() {
        assert_eq!("instant".parse::<PodGc>(), Ok(PodGc::Instant));
        assert_eq!("off".parse::<PodGc>(), Ok(PodGc::Off));
        assert_eq!("90s".parse::<PodGc>(), Ok(PodGc::After(Duration::from_secs(90))));
        assert!(
            "sometimes"
                .parse::<PodGc>()
                .unwrap_err()
                .to_string()
                .contains("instant, off")
        );
    }

    #[test]
    fn volcano_flag_values() {
        for mode in [Volcano::Off, Volcano::Gang, Volcano::NoGang] {
            assert_eq!(mode.to_string().parse::<Volcano>(), Ok(mode));
        }
        assert!(
            "on".parse::<Volcano>()
                .unwrap_err()
                .to_string()
                .contains("off, gang or no-gang")
        );
    }
}
