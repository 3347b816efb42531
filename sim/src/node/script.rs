//! What a simulated container does, from pod annotations and per-image defaults.
//!
//! Keys are read from (lowest to highest precedence): the built-in default for the container's
//! role, the longest matching per-image default, the pod annotation `sim.spark-operator.dev/<key>`,
//! an executor-scoped one `sim.spark-operator.dev/exec-<id>.<key>` (executor pods whose
//! `spark-exec-id` label is `<id>`), and a container-scoped one
//! `sim.spark-operator.dev/<container>.<key>`. The keys are documented in `sim/README.md`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

/// The annotation prefix of every script key.
pub const PREFIX: &str = "sim.spark-operator.dev/";

/// Every key a script understands.
pub const KEYS: &[&str] = &[
    "program",
    "run-time",
    "exit-code",
    "oom-kill",
    "termination-message",
    "log",
    "log-lines",
    "exit-log",
    "image-pull",
    "image-pull-message",
    "pull-time",
    "sigterm",
    "sigterm-exit-code",
    "churn-executors",
    "churn-rate",
    "executor-lifetime",
];

/// A script value that cannot be used; the container fails to start with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    #[error("invalid {PREFIX}{key} {value:?}: {expected}")]
    Invalid {
        key: String,
        value: String,
        expected: &'static str,
    },
    #[error("unknown script key {PREFIX}{key}; known keys: {}", KEYS.join(", "))]
    UnknownKey { key: String },
}

/// What the container's process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// Runs for `run-time`, then exits with `exit-code` (or is OOM-killed).
    Script,
    /// The fake Spark driver (see `spark_driver.rs`).
    SparkDriver,
    /// A Spark executor: runs until its driver shuts it down, or as scripted.
    SparkExecutor,
}

/// How long a container runs by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunTime {
    For(Duration),
    Forever,
}

/// What the process does on SIGTERM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sigterm {
    /// Exits at once with `sigterm-exit-code` (a JVM's shutdown hooks, most servers).
    Exit,
    /// Exits after this long (shutdown work); SIGKILL wins if the grace period ends first.
    After(Duration),
    /// Ignores it (a shell as PID 1): only SIGKILL at the end of the grace period stops it.
    Ignore,
}

/// An image pull that fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullFailure {
    pub message: Option<String>,
}

/// The resolved behaviour of one container.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    pub program: Program,
    /// None: the program's own default (drivers: 1 s of work; executors and scripts: forever).
    pub run_time: Option<RunTime>,
    /// Exit code of each run (restart N uses entry N, the last one repeats).
    pub exit_codes: Vec<i32>,
    pub oom_kill: bool,
    pub termination_message: Option<String>,
    pub log: Vec<String>,
    pub exit_log: Vec<String>,
    pub image_pull: Option<PullFailure>,
    pub pull_time: Duration,
    pub sigterm: Sigterm,
    pub sigterm_exit_code: i32,
    pub churn_executors: Option<u64>,
    /// Executors created per second; None: as fast as the limit allows.
    pub churn_rate: Option<f64>,
    pub executor_lifetime: Duration,
}

impl Script {
    /// The exit code of run number `restart` (0 for the first run).
    pub fn exit_code(&self, restart: u32) -> i32 {
        let i = (restart as usize).min(self.exit_codes.len().saturating_sub(1));
        self.exit_codes.get(i).copied().unwrap_or(0)
    }
}

/// Per-image defaults: every image whose reference starts with `image` gets these keys (without
/// the prefix), unless the pod overrides them. The longest matching prefix wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageScript {
    pub image: String,
    pub settings: BTreeMap<String, String>,
}

impl ImageScript {
    pub fn new(image: impl Into<String>, settings: &[(&str, &str)]) -> Self {
        Self {
            image: image.into(),
            settings: settings.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }
}

/// The role a container plays, from its pod's `spark-role` label and its name.
fn role_program(pod: &Value, container: &str) -> Program {
    let role = pod
        .pointer("/metadata/labels/spark-role")
        .and_then(Value::as_str)
        .unwrap_or("");
    let first = pod
        .pointer("/spec/containers/0/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let has = |name: &str| {
        pod.pointer("/spec/containers")
            .and_then(Value::as_array)
            .is_some_and(|cs| cs.iter().any(|c| c.get("name").and_then(Value::as_str) == Some(name)))
    };
    // Spark names its container spark-kubernetes-<role>; a pod template may rename it, and then
    // Spark uses the first container.
    let is_main = |default: &str| {
        if has(default) {
            container == default
        } else {
            container == first
        }
    };
    match role {
        "driver" if is_main("spark-kubernetes-driver") => Program::SparkDriver,
        "executor" if is_main("spark-kubernetes-executor") => Program::SparkExecutor,
        _ => Program::Script,
    }
}

/// Resolves the script of `container` (a container spec) in `pod`.
pub fn resolve(pod: &Value, container: &Value, images: &[ImageScript]) -> Result<Script, ScriptError> {
    let name = container.get("name").and_then(Value::as_str).unwrap_or("");
    let image = container.get("image").and_then(Value::as_str).unwrap_or("");
    let mut settings: BTreeMap<String, String> = BTreeMap::new();
    if let Some(best) = images
        .iter()
        .filter(|i| image.starts_with(&i.image))
        .max_by_key(|i| i.image.len())
    {
        settings.extend(best.settings.clone());
    }
    let annotations = pod.pointer("/metadata/annotations").and_then(Value::as_object);
    let exec_scope = pod
        .pointer("/metadata/labels/spark-exec-id")
        .and_then(Value::as_str)
        .filter(|_| pod.pointer("/metadata/labels/spark-role").and_then(Value::as_str) == Some("executor"))
        .map(|id| format!("exec-{id}."));
    let container_scope = format!("{name}.");
    let mut pod_wide = BTreeMap::new();
    let mut exec_wide = BTreeMap::new();
    let mut container_wide = BTreeMap::new();
    for (k, v) in annotations.into_iter().flatten() {
        let Some(key) = k.strip_prefix(PREFIX) else { continue };
        let Some(v) = v.as_str() else { continue };
        if KEYS.contains(&key) || !key.contains('.') {
            // Unknown unscoped keys are kept so that a typo is reported, not ignored.
            pod_wide.insert(key.to_string(), v.to_string());
        } else if let Some(rest) = exec_scope.as_deref().and_then(|s| key.strip_prefix(s)) {
            exec_wide.insert(rest.to_string(), v.to_string());
        } else if let Some(rest) = key.strip_prefix(&container_scope) {
            container_wide.insert(rest.to_string(), v.to_string());
        }
        // Keys scoped to other containers or executors are not this container's business.
    }
    settings.extend(pod_wide);
    settings.extend(exec_wide);
    settings.extend(container_wide);
    from_settings(&settings, role_program(pod, name))
}

fn from_settings(s: &BTreeMap<String, String>, role: Program) -> Result<Script, ScriptError> {
    for key in s.keys() {
        if !KEYS.contains(&key.as_str()) {
            return Err(ScriptError::UnknownKey { key: key.clone() });
        }
    }
    let bad = |key: &str, expected: &'static str| ScriptError::Invalid {
        key: key.to_string(),
        value: s.get(key).cloned().unwrap_or_default(),
        expected,
    };
    let get = |key: &str| s.get(key).map(|v| v.trim());
    let duration = |key: &str| -> Result<Option<Duration>, ScriptError> {
        get(key)
            .map(|v| parse_duration(v).ok_or_else(|| bad(key, "a duration such as 500ms, 2s or 1m")))
            .transpose()
    };
    let boolean = |key: &str| -> Result<bool, ScriptError> {
        match get(key) {
            None | Some("false") => Ok(false),
            Some("true") => Ok(true),
            Some(_) => Err(bad(key, "true or false")),
        }
    };
    let program = match get("program") {
        None => role,
        Some("script") => Program::Script,
        Some("spark-driver") => Program::SparkDriver,
        Some("spark-executor") => Program::SparkExecutor,
        Some(_) => return Err(bad("program", "script, spark-driver or spark-executor")),
    };
    let run_time = match get("run-time") {
        None => None,
        Some("forever") => Some(RunTime::Forever),
        Some(v) => Some(RunTime::For(
            parse_duration(v).ok_or_else(|| bad("run-time", "a duration such as 2s, or forever"))?,
        )),
    };
    let exit_codes = match get("exit-code") {
        None => vec![0],
        Some(v) => v
            .split(',')
            .map(|c| c.trim().parse::<i32>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| bad("exit-code", "an exit code such as 1, or one per run such as 1,1,0"))?,
    };
    let lines = |key: &str| -> Vec<String> {
        get(key)
            .map(|v| v.lines().map(str::to_string).collect())
            .unwrap_or_default()
    };
    let mut log = lines("log");
    if let Some(n) = get("log-lines") {
        let n: u64 = n.parse().map_err(|_| bad("log-lines", "a number of lines"))?;
        log.extend((1..=n).map(|i| format!("log line {i}")));
    }
    let image_pull = match get("image-pull") {
        None | Some("ok") => None,
        Some("fail") => Some(PullFailure {
            message: get("image-pull-message").map(str::to_string),
        }),
        Some(_) => return Err(bad("image-pull", "ok or fail")),
    };
    let sigterm = match get("sigterm") {
        None | Some("exit") => Sigterm::Exit,
        Some("ignore") => Sigterm::Ignore,
        Some(v) => {
            Sigterm::After(parse_duration(v).ok_or_else(|| bad("sigterm", "exit, ignore, or a duration such as 3s"))?)
        }
    };
    let sigterm_exit_code = match get("sigterm-exit-code") {
        None => 143,
        Some(v) => v.parse().map_err(|_| bad("sigterm-exit-code", "an exit code"))?,
    };
    let churn_executors = get("churn-executors")
        .map(|v| {
            v.parse::<u64>()
                .map_err(|_| bad("churn-executors", "a number of executors"))
        })
        .transpose()?;
    let churn_rate = match get("churn-rate") {
        None => None,
        Some(v) => {
            let r: f64 = v
                .parse()
                .map_err(|_| bad("churn-rate", "executors per second, such as 500"))?;
            if !(r.is_finite() && r > 0.0) {
                return Err(bad("churn-rate", "a positive number of executors per second"));
            }
            Some(r)
        }
    };
    Ok(Script {
        program,
        run_time,
        exit_codes,
        oom_kill: boolean("oom-kill")?,
        termination_message: get("termination-message").map(str::to_string),
        log,
        exit_log: lines("exit-log"),
        image_pull,
        pull_time: duration("pull-time")?.unwrap_or(Duration::ZERO),
        sigterm,
        sigterm_exit_code,
        churn_executors,
        churn_rate,
        executor_lifetime: duration("executor-lifetime")?.unwrap_or(Duration::ZERO),
    })
}

/// Parses `150ms`, `2s`, `1.5m`, `1h`, `0` (Go-style units; a bare 0 is allowed).
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "ns" => n / 1e9,
        "us" | "µs" => n / 1e6,
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(annotations: Value, labels: Value) -> Value {
        json!({
            "metadata": { "name": "p", "annotations": annotations, "labels": labels },
            "spec": { "containers": [{ "name": "main", "image": "busybox:1.36" }, { "name": "side", "image": "x" }] }
        })
    }

    #[test]
    fn precedence_image_pod_exec_container() {
        let images = vec![ImageScript::new("busybox", &[("run-time", "5s"), ("exit-code", "3")])];
        let p = pod(
            json!({ "sim.spark-operator.dev/exit-code": "4", "sim.spark-operator.dev/main.run-time": "1s" }),
            json!({}),
        );
        let c = p["spec"]["containers"][0].clone();
        let s = resolve(&p, &c, &images).unwrap();
        assert_eq!(s.run_time, Some(RunTime::For(Duration::from_secs(1))));
        assert_eq!(s.exit_code(0), 4);
        let side = resolve(&p, &p["spec"]["containers"][1], &images).unwrap();
        assert_eq!(side.run_time, None);
    }

    #[test]
    fn executor_scope_and_roles() {
        let p = json!({
            "metadata": { "labels": { "spark-role": "executor", "spark-exec-id": "2" },
                          "annotations": { "sim.spark-operator.dev/exec-2.oom-kill": "true", "sim.spark-operator.dev/exec-3.exit-code": "9" } },
            "spec": { "containers": [{ "name": "spark-kubernetes-executor", "image": "spark" }] }
        });
        let s = resolve(&p, &p["spec"]["containers"][0], &[]).unwrap();
        assert!(s.oom_kill);
        assert_eq!(s.exit_code(0), 0);
        assert_eq!(s.program, Program::SparkExecutor);
    }

    #[test]
    fn bad_values_name_the_key() {
        let p = pod(json!({ "sim.spark-operator.dev/run-time": "soon" }), json!({}));
        let err = resolve(&p, &p["spec"]["containers"][0], &[]).unwrap_err();
        assert!(err.to_string().contains("sim.spark-operator.dev/run-time"), "{err}");
        let codes = pod(json!({ "sim.spark-operator.dev/exit-code": "1,1,0" }), json!({}));
        let s = resolve(&codes, &codes["spec"]["containers"][0], &[]).unwrap();
        assert_eq!((s.exit_code(0), s.exit_code(2), s.exit_code(7)), (1, 0, 0));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("150ms"), Some(Duration::from_millis(150)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_duration("soon"), None);
        assert_eq!(parse_duration("5"), None);
    }
}
