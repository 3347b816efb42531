//! The bounds of user-set values, shared by the CRD schema and [`crate::validation`] so that the API
//! server and `spark-operator validate` refuse the same things. `docs/validation.md` lists each with where
//! it comes from.

/// The largest int32: every count and port is an int32 in Kubernetes and Spark (Java `Int`).
pub const MAX_INT32: i64 = i32::MAX as i64;
/// The smallest int32.
pub const MIN_INT32: i64 = i32::MIN as i64;

/// The longest duration in seconds a spec may hold (TTL, retry intervals): an int32 of seconds (68 years),
/// as Kubernetes bounds Job `ttlSecondsAfterFinished`. Far below what a timestamp can hold, so adding it to
/// a clock can never overflow.
pub const MAX_SECONDS: i64 = MAX_INT32;
/// TTLs of 0 or less mean "delete as soon as it ends" (Kubeflow); bounded to the int32 range too.
pub const MIN_TTL_SECONDS: i64 = -MAX_INT32;

/// Kubernetes `PullPolicy` values.
pub const IMAGE_PULL_POLICIES: [&str; 3] = ["Always", "IfNotPresent", "Never"];
/// Kubernetes `Protocol` values.
pub const PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];
/// Kubernetes `ServiceType` values.
pub const SERVICE_TYPES: [&str; 4] = ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];

/// Ports, as Kubernetes checks them (`validation.IsValidPortNum`).
pub const MIN_PORT: i32 = 1;
pub const MAX_PORT: i32 = 65535;

/// The largest Spark memory size: Spark converts memory strings to whole MiB in an `Int`
/// (`Utils.memoryStringToMb`), so 2^31 - 1 MiB (just under 2 PiB).
pub const MAX_SPARK_MEMORY_MIB: u64 = i32::MAX as u64;

/// Memory overhead factors: Spark requires more than 0 (`checkValue(_ > 0)`) and documents "between 0 and
/// 1.0"; more than 1 gives more overhead than heap, which we accept with a warning up to this bound. Above
/// it the value is certainly a mistake (and 1e300 would overflow the container's memory).
pub const MAX_MEMORY_OVERHEAD_FACTOR: f64 = 10.0;
/// Above this factor a warning says the overhead exceeds the heap.
pub const WARN_MEMORY_OVERHEAD_FACTOR: f64 = 1.0;
