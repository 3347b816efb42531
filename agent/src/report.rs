//! A settled container end as the `TerminationReport` the operator receives: the identity from the CRI
//! labels, the runtime's exit code, reason and times, the container's termination-log file and the tail of
//! its log. [`termination_report`] is pure; [`build`] adds the two file reads, done at once while the files
//! still exist.

use std::fs::File;
use std::io::{self, Read as _};
use std::path::Path;

use spark_operator_api::labels::SparkRole;
use spark_operator_proto::agent::v1::{Role, TerminationReport};
use spark_operator_proto::cri::v1::ContainerStatus;

use crate::cri::ContainerEnd;
use crate::cri_log;
use crate::identity::KUBE_TERMINATION_MESSAGE_PATH;

/// kubelet's `MaxContainerTerminationMessageLength`: it reads no more of the file than this.
pub const TERMINATION_MESSAGE_MAX_BYTES: u64 = 4096;

/// How much of a container's log a report carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailLimits {
    pub lines: usize,
    pub bytes: usize,
}

impl TailLimits {
    /// How far back from the end of the log file to read: the tail's bytes plus room for each line's CRI
    /// prefix (timestamp, stream, tag), doubled for partial records, and at least 64 KiB.
    pub fn window(&self) -> u64 {
        let per_line_prefix = 48usize;
        let wanted = self
            .bytes
            .saturating_add(self.lines.saturating_mul(per_line_prefix))
            .saturating_mul(2);
        (wanted as u64).max(64 * 1024)
    }
}

/// What the runtime left unsaid, said as kubelet would: a container that exited without a reason
/// `Completed` (code 0) or `Error`.
fn reason(status: &ContainerStatus) -> String {
    if !status.reason.is_empty() {
        status.reason.clone()
    } else if status.exit_code == 0 {
        "Completed".to_owned()
    } else {
        "Error".to_owned()
    }
}

/// The report of an end, with the termination message and log tail already read.
pub fn termination_report(
    end: &ContainerEnd,
    node_name: &str,
    termination_message: String,
    log_tail: String,
) -> TerminationReport {
    let c = &end.container;
    TerminationReport {
        namespace: c.namespace.clone(),
        app_name: c.app_name.clone(),
        submission_id: c.submission_id.clone(),
        spark_app_id: c.spark_app_id.clone().unwrap_or_default(),
        pod_name: c.pod_name.clone(),
        pod_uid: c.pod_uid.clone(),
        role: match c.role {
            SparkRole::Driver => Role::Driver,
            SparkRole::Executor => Role::Executor,
        } as i32,
        executor_id: c.executor_id,
        container_name: c.container_name.clone(),
        container_id: c.container_id.clone(),
        attempt: c.attempt,
        exit_code: end.status.exit_code,
        reason: reason(&end.status),
        message: end.status.message.clone(),
        termination_message,
        started_at: end.status.started_at,
        finished_at: end.status.finished_at,
        node_name: node_name.to_owned(),
        log_tail,
    }
}

/// The host path of the container's termination-log file: the mount whose container path is kubelet's
/// `terminationMessagePath` annotation (kubelet's `getTerminationMessage` does the same). None when the
/// runtime reports no such mount.
pub fn termination_message_path(status: &ContainerStatus) -> Option<&str> {
    let inside = status.annotations.get(KUBE_TERMINATION_MESSAGE_PATH)?;
    status
        .mounts
        .iter()
        .find(|m| &m.container_path == inside)
        .map(|m| m.host_path.as_str())
        .filter(|p| !p.is_empty())
}

/// At most `max` bytes of a file, as text (invalid UTF-8 replaced).
pub fn read_bounded(path: &Path, max: u64) -> io::Result<String> {
    let mut bytes = Vec::new();
    File::open(path)?.take(max).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The report of an end, reading the termination-log file and the log's tail now. A file that cannot be
/// read leaves its field empty: the exit code and reason matter more than either, and must go.
pub fn build(end: &ContainerEnd, node_name: &str, tail: TailLimits) -> TerminationReport {
    let termination_message = match termination_message_path(&end.status) {
        Some(path) => read_bounded(Path::new(path), TERMINATION_MESSAGE_MAX_BYTES).unwrap_or_else(|error| {
            tracing::debug!(container_id = %end.container.container_id, path, %error, "cannot read the termination-log file");
            String::new()
        }),
        None => String::new(),
    };
    let log_tail = if end.status.log_path.is_empty() {
        String::new()
    } else {
        cri_log::tail(Path::new(&end.status.log_path), tail.lines, tail.bytes, tail.window()).unwrap_or_else(
            |error| {
                tracing::debug!(container_id = %end.container.container_id, log_path = %end.status.log_path, %error, "cannot read the container's log");
                String::new()
            },
        )
    };
    termination_report(end, node_name, termination_message, log_tail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::SparkContainer;
    use spark_operator_proto::cri::v1::{ContainerState, Mount};
    use std::io::Write as _;

    fn end(dir: &Path) -> ContainerEnd {
        let log = dir.join("0.log");
        let mut file = File::create(&log).unwrap();
        for i in 0..10 {
            writeln!(file, "2026-11-26T09:00:0{i}.000000000Z stdout F line {i}").unwrap();
        }
        writeln!(file, "2026-11-26T09:00:10.000000000Z stderr P part one ").unwrap();
        writeln!(file, "2026-11-26T09:00:10.100000000Z stderr F part two").unwrap();
        let message = dir.join("termination-log");
        std::fs::write(&message, "x".repeat(5000)).unwrap();
        let mut status = ContainerStatus {
            id: "c1".into(),
            state: ContainerState::ContainerExited as i32,
            started_at: 100,
            finished_at: 200,
            exit_code: 137,
            reason: "OOMKilled".into(),
            message: "killed".into(),
            log_path: log.display().to_string(),
            mounts: vec![
                Mount {
                    container_path: "/opt/spark/work-dir".into(),
                    host_path: "/nowhere".into(),
                    ..Default::default()
                },
                Mount {
                    container_path: "/dev/termination-log".into(),
                    host_path: message.display().to_string(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        status
            .annotations
            .insert(KUBE_TERMINATION_MESSAGE_PATH.into(), "/dev/termination-log".into());
        ContainerEnd {
            container: SparkContainer {
                namespace: "jobs".into(),
                app_name: "pi".into(),
                submission_id: "s1".into(),
                spark_app_id: Some("spark-1".into()),
                pod_name: "pi-exec-2".into(),
                pod_uid: "u2".into(),
                role: SparkRole::Executor,
                executor_id: Some(2),
                container_name: "spark-kubernetes-executor".into(),
                container_id: "c1".into(),
                attempt: 1,
            },
            status,
        }
    }

    #[test]
    fn a_report_carries_identity_exit_termination_message_and_a_bounded_tail() {
        let dir = tempfile::tempdir().unwrap();
        let end = end(dir.path());
        let report = build(&end, "node-a", TailLimits { lines: 3, bytes: 4096 });
        assert_eq!(
            (
                report.namespace.as_str(),
                report.app_name.as_str(),
                report.submission_id.as_str()
            ),
            ("jobs", "pi", "s1")
        );
        assert_eq!(report.role, Role::Executor as i32);
        assert_eq!(report.executor_id, Some(2));
        assert_eq!((report.exit_code, report.reason.as_str()), (137, "OOMKilled"));
        assert_eq!((report.started_at, report.finished_at, report.attempt), (100, 200, 1));
        assert_eq!(report.node_name, "node-a");
        assert_eq!(report.spark_app_id, "spark-1");
        assert_eq!(report.termination_message.len(), 4096, "bounded as kubelet reads it");
        // The last three lines, the partial records joined.
        assert_eq!(report.log_tail, "line 8\nline 9\npart one part two\n");
        let bytes_bounded = build(&end, "node-a", TailLimits { lines: 100, bytes: 20 });
        assert!(bytes_bounded.log_tail.len() <= 20, "{:?}", bytes_bounded.log_tail);
        assert!(bytes_bounded.log_tail.ends_with("part one part two\n"));
    }

    #[test]
    fn missing_files_and_reasons_leave_what_kubelet_would() {
        let dir = tempfile::tempdir().unwrap();
        let mut end = end(dir.path());
        end.status.mounts.clear();
        end.status.log_path = dir.path().join("gone.log").display().to_string();
        end.status.reason = String::new();
        end.status.exit_code = 0;
        let report = build(&end, "n", TailLimits { lines: 10, bytes: 100 });
        assert_eq!(report.termination_message, "");
        assert_eq!(report.log_tail, "");
        assert_eq!(report.reason, "Completed");
        end.status.exit_code = 3;
        assert_eq!(
            termination_report(&end, "n", String::new(), String::new()).reason,
            "Error"
        );
        end.container.role = SparkRole::Driver;
        end.container.executor_id = None;
        let driver = termination_report(&end, "n", String::new(), String::new());
        assert_eq!((driver.role, driver.executor_id), (Role::Driver as i32, None));
    }
}
