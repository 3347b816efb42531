//! Wire compatibility with upstream CRI: the mirrors below are written by hand with the field
//! numbers of upstream `k8s.io/cri-api/pkg/apis/runtime/v1/api.proto`, independently of our
//! `.proto`. A renumbered or retyped field in `proto/cri/runtime_v1.proto` fails here.

use std::collections::HashMap;

use prost::Message;
use spark_operator_proto::cri::v1::{
    Container, ContainerEventResponse, ContainerEventType, ContainerFilter, ContainerState, ContainerStateValue,
    ContainerStatus, PodSandboxState, PodSandboxStatus,
};

/// Upstream `runtime.v1.ContainerMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
struct UpstreamContainerMetadata {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(uint32, tag = "2")]
    attempt: u32,
}

/// Upstream `runtime.v1.IDMapping`, only to build a `Mount` that we do not model.
#[derive(Clone, PartialEq, prost::Message)]
struct UpstreamIdMapping {
    #[prost(uint32, tag = "1")]
    host_id: u32,
}

/// Upstream `runtime.v1.Mount` (partial), carried by `ContainerStatus.mounts = 14`, with
/// `uidMappings = 6`, which our subset leaves out: a real runtime sends it and we must skip it.
#[derive(Clone, PartialEq, prost::Message)]
struct UpstreamMount {
    #[prost(string, tag = "1")]
    container_path: String,
    #[prost(string, tag = "2")]
    host_path: String,
    #[prost(message, repeated, tag = "6")]
    uid_mappings: Vec<UpstreamIdMapping>,
}

/// Upstream `runtime.v1.ContainerStatus`, every scalar field plus `mounts` (with fields of `Mount` we leave out).
#[derive(Clone, PartialEq, prost::Message)]
struct UpstreamContainerStatus {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(message, optional, tag = "2")]
    metadata: Option<UpstreamContainerMetadata>,
    #[prost(int32, tag = "3")]
    state: i32,
    #[prost(int64, tag = "4")]
    created_at: i64,
    #[prost(int64, tag = "5")]
    started_at: i64,
    #[prost(int64, tag = "6")]
    finished_at: i64,
    #[prost(int32, tag = "7")]
    exit_code: i32,
    #[prost(string, tag = "9")]
    image_ref: String,
    #[prost(string, tag = "10")]
    reason: String,
    #[prost(string, tag = "11")]
    message: String,
    #[prost(map = "string, string", tag = "12")]
    labels: HashMap<String, String>,
    #[prost(map = "string, string", tag = "13")]
    annotations: HashMap<String, String>,
    #[prost(message, repeated, tag = "14")]
    mounts: Vec<UpstreamMount>,
    #[prost(string, tag = "15")]
    log_path: String,
    #[prost(string, tag = "17")]
    image_id: String,
    #[prost(string, tag = "19")]
    image_source: String,
}

/// Upstream `runtime.v1.PodSandboxStatus` (partial, with the left-out `linux = 6` as raw bytes).
#[derive(Clone, PartialEq, prost::Message)]
struct UpstreamPodSandboxStatus {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(int32, tag = "3")]
    state: i32,
    #[prost(int64, tag = "4")]
    created_at: i64,
    #[prost(bytes = "vec", tag = "6")]
    linux: Vec<u8>,
    #[prost(map = "string, string", tag = "7")]
    labels: HashMap<String, String>,
    #[prost(map = "string, string", tag = "8")]
    annotations: HashMap<String, String>,
    #[prost(string, tag = "9")]
    runtime_handler: String,
}

/// Upstream `runtime.v1.ContainerEventResponse`.
#[derive(Clone, PartialEq, prost::Message)]
struct UpstreamContainerEventResponse {
    #[prost(string, tag = "1")]
    container_id: String,
    #[prost(int32, tag = "2")]
    container_event_type: i32,
    #[prost(int64, tag = "3")]
    created_at: i64,
    #[prost(message, optional, tag = "4")]
    pod_sandbox_status: Option<UpstreamPodSandboxStatus>,
    #[prost(message, repeated, tag = "5")]
    containers_statuses: Vec<UpstreamContainerStatus>,
}

const VARINT: u8 = 0;
const LEN: u8 = 2;

/// Reads a base-128 varint at `*pos`.
fn read_varint(bytes: &[u8], pos: &mut usize) -> u64 {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = bytes[*pos];
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return value;
        }
    }
    panic!("varint longer than 10 bytes");
}

/// The (field number, wire type) of each top-level field, in wire order. Handles the two wire
/// types these messages use.
fn top_level_fields(bytes: &[u8]) -> Vec<(u64, u8)> {
    let mut fields = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let key = read_varint(bytes, &mut pos);
        let wire_type = (key & 0x7) as u8;
        match wire_type {
            VARINT => {
                read_varint(bytes, &mut pos);
            }
            LEN => {
                let len = read_varint(bytes, &mut pos) as usize;
                pos += len;
            }
            other => panic!("unexpected wire type {other}"),
        }
        fields.push((key >> 3, wire_type));
    }
    assert_eq!(pos, bytes.len(), "truncated message");
    fields
}

fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn upstream_exited_status() -> UpstreamContainerStatus {
    UpstreamContainerStatus {
        id: "c1".to_string(),
        metadata: Some(UpstreamContainerMetadata {
            name: "spark-kubernetes-executor".to_string(),
            attempt: 2,
        }),
        state: 2, // CONTAINER_EXITED upstream
        created_at: 11,
        started_at: 22,
        finished_at: 33,
        exit_code: 137,
        image_ref: "sha256:ref".to_string(),
        reason: "OOMKilled".to_string(),
        message: "out of memory".to_string(),
        labels: map(&[("spark-role", "executor"), ("spark-app-selector", "spark-123")]),
        annotations: map(&[("io.kubernetes.container.restartCount", "2")]),
        mounts: vec![UpstreamMount {
            container_path: "/opt/spark/work-dir".to_string(),
            host_path: "/var/lib/kubelet/pods/x/volumes".to_string(),
            uid_mappings: vec![UpstreamIdMapping { host_id: 1000 }],
        }],
        log_path: "/var/log/pods/ns_pod_uid/spark-kubernetes-executor/2.log".to_string(),
        image_id: "sha256:id".to_string(),
        image_source: "mirror.example/spark".to_string(),
    }
}

#[test]
fn container_status_from_upstream_bytes() {
    let bytes = upstream_exited_status().encode_to_vec();
    let status = ContainerStatus::decode(bytes.as_slice()).unwrap();

    assert_eq!(status.id, "c1");
    let metadata = status.metadata.clone().unwrap();
    assert_eq!(metadata.name, "spark-kubernetes-executor");
    assert_eq!(metadata.attempt, 2);
    assert_eq!(status.state(), ContainerState::ContainerExited);
    assert_eq!(status.created_at, 11);
    assert_eq!(status.started_at, 22);
    assert_eq!(status.finished_at, 33);
    assert_eq!(status.exit_code, 137);
    assert_eq!(status.image_ref, "sha256:ref");
    assert_eq!(status.reason, "OOMKilled");
    assert_eq!(status.message, "out of memory");
    assert_eq!(
        status.labels,
        map(&[("spark-role", "executor"), ("spark-app-selector", "spark-123")])
    );
    assert_eq!(
        status.annotations,
        map(&[("io.kubernetes.container.restartCount", "2")])
    );
    assert_eq!(
        status.log_path,
        "/var/log/pods/ns_pod_uid/spark-kubernetes-executor/2.log"
    );
    assert_eq!(status.image_id, "sha256:id");
    assert_eq!(status.image_source, "mirror.example/spark");
    // Mount (field 14): read, with upstream's uidMappings (6, left out here) skipped.
    assert_eq!(status.mounts.len(), 1);
    assert_eq!(status.mounts[0].container_path, "/opt/spark/work-dir");
    assert_eq!(status.mounts[0].host_path, "/var/lib/kubelet/pods/x/volumes");
}

#[test]
fn container_status_to_upstream_bytes() {
    let ours = ContainerStatus {
        id: "c1".to_string(),
        state: ContainerState::ContainerExited as i32,
        finished_at: 33,
        exit_code: 1,
        reason: "Error".to_string(),
        labels: map(&[("spark-role", "driver")]),
        log_path: "/var/log/pods/x/0.log".to_string(),
        ..Default::default()
    };
    let bytes = ours.encode_to_vec();

    // Read the raw wire keys, independently of prost: (field number, wire type).
    let fields = top_level_fields(&bytes);
    assert!(fields.contains(&(3, VARINT)), "state: {fields:?}");
    assert!(fields.contains(&(6, VARINT)), "finished_at: {fields:?}");
    assert!(fields.contains(&(7, VARINT)), "exit_code: {fields:?}");
    assert!(fields.contains(&(10, LEN)), "reason: {fields:?}");
    assert!(fields.contains(&(12, LEN)), "labels: {fields:?}");
    assert!(fields.contains(&(15, LEN)), "log_path: {fields:?}");
    // exit_code = 1 is the bytes (7 << 3 | 0) = 0x38, then 0x01.
    assert!(bytes.windows(2).any(|w| w == [0x38, 0x01]), "{bytes:02x?}");

    let upstream = UpstreamContainerStatus::decode(bytes.as_slice()).unwrap();
    assert_eq!(upstream.exit_code, 1);
    assert_eq!(upstream.finished_at, 33);
    assert_eq!(upstream.state, 2);
    assert_eq!(upstream.reason, "Error");
    assert_eq!(upstream.labels, map(&[("spark-role", "driver")]));
    assert_eq!(upstream.log_path, "/var/log/pods/x/0.log");
}

#[test]
fn container_event_from_upstream_bytes() {
    let upstream = UpstreamContainerEventResponse {
        container_id: "c1".to_string(),
        container_event_type: 2, // CONTAINER_STOPPED_EVENT upstream
        created_at: 44,
        pod_sandbox_status: Some(UpstreamPodSandboxStatus {
            id: "sb".to_string(),
            state: 1, // SANDBOX_NOTREADY upstream
            created_at: 5,
            linux: vec![0x0a, 0x00], // a nested message we do not model
            labels: map(&[("spark-role", "executor")]),
            annotations: map(&[("a", "b")]),
            runtime_handler: "runc".to_string(),
        }),
        containers_statuses: vec![upstream_exited_status()],
    };
    let event = ContainerEventResponse::decode(upstream.encode_to_vec().as_slice()).unwrap();

    assert_eq!(event.container_id, "c1");
    assert_eq!(event.container_event_type(), ContainerEventType::ContainerStoppedEvent);
    assert_eq!(event.created_at, 44);
    let sandbox: PodSandboxStatus = event.pod_sandbox_status.unwrap();
    assert_eq!(sandbox.id, "sb");
    assert_eq!(sandbox.state(), PodSandboxState::SandboxNotready);
    assert_eq!(sandbox.created_at, 5);
    assert_eq!(sandbox.labels, map(&[("spark-role", "executor")]));
    assert_eq!(sandbox.annotations, map(&[("a", "b")]));
    assert_eq!(sandbox.runtime_handler, "runc");
    assert_eq!(event.containers_statuses.len(), 1);
    assert_eq!(event.containers_statuses[0].exit_code, 137);
    assert_eq!(event.containers_statuses[0].reason, "OOMKilled");
}

#[test]
fn list_containers_wire_tags() {
    let filter = ContainerFilter {
        id: "c1".to_string(),
        state: Some(ContainerStateValue {
            state: ContainerState::ContainerExited as i32,
        }),
        pod_sandbox_id: "sb".to_string(),
        label_selector: map(&[("spark-role", "executor")]),
    };
    assert_eq!(
        top_level_fields(&filter.encode_to_vec()),
        [(1, LEN), (2, LEN), (3, LEN), (4, LEN)]
    );

    let container = Container {
        id: "c1".to_string(),
        pod_sandbox_id: "sb".to_string(),
        state: ContainerState::ContainerRunning as i32,
        created_at: 7,
        labels: map(&[("k", "v")]),
        annotations: map(&[("a", "b")]),
        image_id: "sha256:id".to_string(),
        ..Default::default()
    };
    assert_eq!(
        top_level_fields(&container.encode_to_vec()),
        [
            (1, LEN),
            (2, LEN),
            (6, VARINT),
            (7, VARINT),
            (8, LEN),
            (9, LEN),
            (10, LEN)
        ]
    );
}

#[test]
fn enum_values_match_upstream() {
    assert_eq!(ContainerState::ContainerCreated as i32, 0);
    assert_eq!(ContainerState::ContainerRunning as i32, 1);
    assert_eq!(ContainerState::ContainerExited as i32, 2);
    assert_eq!(ContainerState::ContainerUnknown as i32, 3);
    assert_eq!(PodSandboxState::SandboxReady as i32, 0);
    assert_eq!(PodSandboxState::SandboxNotready as i32, 1);
    assert_eq!(ContainerEventType::ContainerCreatedEvent as i32, 0);
    assert_eq!(ContainerEventType::ContainerStartedEvent as i32, 1);
    assert_eq!(ContainerEventType::ContainerStoppedEvent as i32, 2);
    assert_eq!(ContainerEventType::ContainerDeletedEvent as i32, 3);
    // The upstream enum value names, as the Go runtime prints them.
    assert_eq!(ContainerState::ContainerExited.as_str_name(), "CONTAINER_EXITED");
    assert_eq!(
        ContainerEventType::ContainerStoppedEvent.as_str_name(),
        "CONTAINER_STOPPED_EVENT"
    );
}
