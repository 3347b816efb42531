//! Every check of the baseline and restricted Pod Security Standards, one function per version
//! of a check (`k8s.io/pod-security-admission/policy/check_*.go` as of v1.33), worded exactly as
//! the plugin words its reasons and details.
//!
//! Checks read the v1 JSON of a pod's metadata and spec. A field that is absent, `null` or of the
//! wrong JSON type counts as unset, as it would after Go decoding (which the real apiserver does
//! before admission, refusing wrong types outright).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::messages::{CheckResult, go_quote, join_quote, pluralize};

/// The metadata and spec of a pod or of a workload's pod template.
#[derive(Debug, Clone, Copy)]
pub struct PodView<'a> {
    pub metadata: &'a Value,
    pub spec: &'a Value,
}

impl<'a> PodView<'a> {
    fn annotations(&self) -> impl Iterator<Item = (&'a str, &'a str)> {
        self.metadata
            .get("annotations")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| v.as_str().map(|v| (k.as_str(), v)))
    }

    fn annotation(&self, key: &str) -> Option<&'a str> {
        self.metadata
            .get("annotations")
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
    }

    /// Init containers, containers, then ephemeral containers (`visitContainers`).
    fn containers(&self) -> impl Iterator<Item = &'a Value> {
        ["initContainers", "containers", "ephemeralContainers"]
            .into_iter()
            .filter_map(|list| self.spec.get(list).and_then(Value::as_array))
            .flatten()
    }

    fn pod_security_context(&self) -> Option<&'a Map<String, Value>> {
        self.spec.get("securityContext").and_then(Value::as_object)
    }

    fn bool_field(&self, field: &str) -> bool {
        self.spec.get(field).and_then(Value::as_bool).unwrap_or(false)
    }

    /// `spec.os.name == "windows"`: some restricted checks do not apply to Windows pods.
    fn is_windows(&self) -> bool {
        self.spec.pointer("/os/name").and_then(Value::as_str) == Some("windows")
    }
}

fn name(container: &Value) -> &str {
    container.get("name").and_then(Value::as_str).unwrap_or("")
}

fn security_context(container: &Value) -> Option<&Map<String, Value>> {
    container.get("securityContext").and_then(Value::as_object)
}

/// An object-valued field of a security context (a present, non-null struct pointer in Go).
fn sub_object<'a>(sc: Option<&'a Map<String, Value>>, field: &str) -> Option<&'a Map<String, Value>> {
    sc.and_then(|m| m.get(field)).and_then(Value::as_object)
}

fn str_of<'a>(m: &'a Map<String, Value>, field: &str) -> &'a str {
    m.get(field).and_then(Value::as_str).unwrap_or("")
}

fn bool_of(sc: Option<&Map<String, Value>>, field: &str) -> Option<bool> {
    sc.and_then(|m| m.get(field)).and_then(Value::as_bool)
}

fn strings_of<'a>(m: &'a Map<String, Value>, field: &str) -> impl Iterator<Item = &'a str> {
    m.get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// `container "a"` / `containers "a", "b"`.
fn containers_phrase(names: &[&str]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

fn sorted(set: &BTreeSet<String>) -> Vec<&str> {
    set.iter().map(String::as_str).collect()
}

// --- baseline ---------------------------------------------------------------------------------

/// `appArmorProfile` 1.0: annotations and `appArmorProfile.type` other than RuntimeDefault/Localhost.
pub fn app_armor_profile_1_0(pod: &PodView) -> CheckResult {
    const ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
    let allowed_type = |t: &str| matches!(t, "RuntimeDefault" | "Localhost");
    let allowed_annotation = |v: &str| v.is_empty() || v == "runtime/default" || v.starts_with("localhost/");
    let mut bad_setters = Vec::new();
    let mut bad_values = BTreeSet::new();
    if let Some(profile) = sub_object(pod.pod_security_context(), "appArmorProfile") {
        let t = str_of(profile, "type");
        if !allowed_type(t) {
            bad_setters.push("pod".to_string());
            bad_values.insert(t.to_string());
        }
    }
    let mut bad_containers = Vec::new();
    for c in pod.containers() {
        if let Some(profile) = sub_object(security_context(c), "appArmorProfile") {
            let t = str_of(profile, "type");
            if !allowed_type(t) {
                bad_containers.push(name(c));
                bad_values.insert(t.to_string());
            }
        }
    }
    if !bad_containers.is_empty() {
        bad_setters.push(containers_phrase(&bad_containers));
    }
    let mut forbidden_annotations: Vec<String> = pod
        .annotations()
        .filter(|(k, v)| k.starts_with(ANNOTATION_PREFIX) && !allowed_annotation(v))
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect();
    let mut bad_value_list: Vec<String> = bad_values.into_iter().collect();
    if !forbidden_annotations.is_empty() {
        forbidden_annotations.sort();
        let n = forbidden_annotations.len();
        bad_value_list.extend(forbidden_annotations);
        bad_setters.push(pluralize("annotation", "annotations", n).to_string());
    }
    if bad_setters.is_empty() {
        return CheckResult::allowed();
    }
    CheckResult::forbidden(
        pluralize(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            bad_value_list.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            bad_setters.join(" and "),
            join_quote(&bad_value_list)
        ),
    )
}

/// The capabilities a baseline container may add.
const CAPABILITIES_ALLOWED_1_0: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// `capabilities_baseline` 1.0: only the default set may be added.
pub fn capabilities_baseline_1_0(pod: &PodView) -> CheckResult {
    let mut bad_containers = Vec::new();
    let mut non_default = BTreeSet::new();
    for c in pod.containers() {
        let Some(caps) = sub_object(security_context(c), "capabilities") else {
            continue;
        };
        let mut valid = true;
        for cap in strings_of(caps, "add") {
            if !CAPABILITIES_ALLOWED_1_0.contains(&cap) {
                valid = false;
                non_default.insert(cap.to_string());
            }
        }
        if !valid {
            bad_containers.push(name(c));
        }
    }
    if bad_containers.is_empty() {
        return CheckResult::allowed();
    }
    CheckResult::forbidden(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad_containers),
            join_quote(&sorted(&non_default))
        ),
    )
}

/// `hostNamespaces` 1.0: hostNetwork, hostPID, hostIPC.
pub fn host_namespaces_1_0(pod: &PodView) -> CheckResult {
    let found: Vec<&str> = [
        ("hostNetwork", "hostNetwork=true"),
        ("hostPID", "hostPID=true"),
        ("hostIPC", "hostIPC=true"),
    ]
    .into_iter()
    .filter(|(field, _)| pod.bool_field(field))
    .map(|(_, shown)| shown)
    .collect();
    if found.is_empty() {
        return CheckResult::allowed();
    }
    CheckResult::forbidden("host namespaces", found.join(", "))
}

fn volumes<'a>(pod: &PodView<'a>) -> impl Iterator<Item = &'a Value> {
    pod.spec.get("volumes").and_then(Value::as_array).into_iter().flatten()
}

fn has_source(volume: &Value, source: &str) -> bool {
    volume.get(source).is_some_and(|v| !v.is_null())
}

/// `hostPathVolumes` 1.0.
pub fn host_path_volumes_1_0(pod: &PodView) -> CheckResult {
    let host: Vec<&str> = volumes(pod).filter(|v| has_source(v, "hostPath")).map(name).collect();
    if host.is_empty() {
        return CheckResult::allowed();
    }
    CheckResult::forbidden(
        "hostPath volumes",
        format!("{} {}", pluralize("volume", "volumes", host.len()), join_quote(&host)),
    )
}

/// `hostPorts` 1.0: any non-zero hostPort (ports listed as sorted strings, as the plugin does).
pub fn host_ports_1_0(pod: &PodView) -> CheckResult {
    let mut bad_containers = Vec::new();
    let mut ports = BTreeSet::new();
    for c in pod.containers() {
        let mut valid = true;
        for p in c.get("ports").and_then(Value::as_array).into_iter().flatten() {
            let host_port = p.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
            if host_port != 0 {
                valid = false;
                ports.insert(host_port.to_string());
            }
        }
        if !valid {
            bad_containers.push(name(c));
        }
    }
    if bad_containers.is_empty() {
        return CheckResult::allowed();
    }
    CheckResult::forbidden(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad_containers),
            pluralize("uses", "use", bad_containers.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            sorted(&ports).join(", ")
        ),
    )
}

/// `privileged` 1.0.
pub fn privileged_1_0(pod: &PodView) -> CheckResult {
    let bad: Vec<&str> = pod
        .containers()
        .filter(|c| bool_of(security_context(c), "privileged") == Some(true))
        .map(name)
        .collect();
    if bad.is_empty() {
        return CheckResult::allowed();
    }
    CheckResult::forbidden(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_phrase(&bad)
        ),
    )
}

/// `procMount` 1.0: only `Default`. (The relaxation for user-namespaced pods sits behind the
/// UserNamespacesPodSecurityStandards feature gate, off in 1.33.)
pub fn proc_mount_1_0(pod: &PodView) -> CheckResult {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for c in pod.containers() {
        if let Some(pm) = security_context(c)
            .and_then(|sc| sc.get("procMount"))
            .and_then(Value::as_str)
            && pm != "Default"
        {
            bad.push(name(c));
            types.insert(pm.to_string());
        }
    }
    if bad.is_empty() {
        return CheckResult::allowed();
    }
    CheckResult::forbidden(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_phrase(&bad),
            join_quote(&sorted(&types))
        ),
    )
}

const SELINUX_TYPES_1_0: &[&str] = &["", "container_t", "container_init_t", "container_kvm_t"];
const SELINUX_TYPES_1_31: &[&str] = &[
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

pub fn se_linux_options_1_0(pod: &PodView) -> CheckResult {
    se_linux_options(pod, SELINUX_TYPES_1_0)
}

pub fn se_linux_options_1_31(pod: &PodView) -> CheckResult {
    se_linux_options(pod, SELINUX_TYPES_1_31)
}

/// `seLinuxOptions`: only the container types; no user, no role.
fn se_linux_options(pod: &PodView, allowed_types: &[&str]) -> CheckResult {
    let mut bad_types = BTreeSet::new();
    let mut set_user = false;
    let mut set_role = false;
    let mut valid = |opts: &Map<String, Value>| {
        let mut ok = true;
        let t = str_of(opts, "type");
        if !allowed_types.contains(&t) {
            ok = false;
            bad_types.insert(t.to_string());
        }
        if !str_of(opts, "user").is_empty() {
            ok = false;
            set_user = true;
        }
        if !str_of(opts, "role").is_empty() {
            ok = false;
            set_role = true;
        }
        ok
    };
    let mut bad_setters = Vec::new();
    if let Some(opts) = sub_object(pod.pod_security_context(), "seLinuxOptions")
        && !valid(opts)
    {
        bad_setters.push("pod".to_string());
    }
    let mut bad_containers = Vec::new();
    for c in pod.containers() {
        if let Some(opts) = sub_object(security_context(c), "seLinuxOptions")
            && !valid(opts)
        {
            bad_containers.push(name(c));
        }
    }
    if !bad_containers.is_empty() {
        bad_setters.push(containers_phrase(&bad_containers));
    }
    if bad_setters.is_empty() {
        return CheckResult::allowed();
    }
    let mut bad_data = Vec::new();
    if !bad_types.is_empty() {
        bad_data.push(format!(
            "{} {}",
            pluralize("type", "types", bad_types.len()),
            join_quote(&sorted(&bad_types))
        ));
    }
    if set_user {
        bad_data.push("user may not be set".to_string());
    }
    if set_role {
        bad_data.push("role may not be set".to_string());
    }
    CheckResult::forbidden(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            bad_setters.join(" and "),
            bad_data.join("; ")
        ),
    )
}

const SECCOMP_POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
const SECCOMP_CONTAINER_ANNOTATION_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";

fn valid_seccomp_type(t: &str) -> bool {
    matches!(t, "Localhost" | "RuntimeDefault")
}

/// `seccompProfile_baseline` 1.0 (policy versions before 1.19 look at the alpha annotations).
pub fn seccomp_profile_baseline_1_0(pod: &PodView) -> CheckResult {
    let valid = |v: &str| v == "runtime/default" || v == "docker/default" || v.starts_with("localhost/");
    let mut forbidden = BTreeSet::new();
    if let Some(v) = pod.annotation(SECCOMP_POD_ANNOTATION)
        && !valid(v)
    {
        forbidden.insert(format!("{SECCOMP_POD_ANNOTATION}={}", go_quote(v)));
    }
    for c in pod.containers() {
        let key = format!("{SECCOMP_CONTAINER_ANNOTATION_PREFIX}{}", name(c));
        if let Some(v) = pod.annotation(&key)
            && !valid(v)
        {
            forbidden.insert(format!("{key}={}", go_quote(v)));
        }
    }
    if forbidden.is_empty() {
        return CheckResult::allowed();
    }
    CheckResult::forbidden(
        "seccompProfile",
        format!(
            "forbidden {} {}",
            pluralize("annotation", "annotations", forbidden.len()),
            sorted(&forbidden).join(", ")
        ),
    )
}

/// Who set `seccompProfile.type` to a bad value, the bad values, and the containers that leave it
/// unset while the pod does not set a valid one.
struct SeccompFindings<'a> {
    bad_setters: Vec<String>,
    bad_values: BTreeSet<String>,
    implicitly_bad: Vec<&'a str>,
}

fn seccomp_findings<'a>(pod: &PodView<'a>) -> SeccompFindings<'a> {
    let mut bad_setters = Vec::new();
    let mut bad_values = BTreeSet::new();
    let mut pod_set = false;
    if let Some(profile) = sub_object(pod.pod_security_context(), "seccompProfile") {
        let t = str_of(profile, "type");
        if valid_seccomp_type(t) {
            pod_set = true;
        } else {
            bad_setters.push("pod".to_string());
            bad_values.insert(t.to_string());
        }
    }
    let mut explicitly_bad = Vec::new();
    let mut implicitly_bad = Vec::new();
    for c in pod.containers() {
        match sub_object(security_context(c), "seccompProfile") {
            Some(profile) => {
                let t = str_of(profile, "type");
                if !valid_seccomp_type(t) {
                    explicitly_bad.push(name(c));
                    bad_values.insert(t.to_string());
                }
            }
            None if !pod_set => implicitly_bad.push(name(c)),
            None => {}
        }
    }
    if !explicitly_bad.is_empty() {
        bad_setters.push(containers_phrase(&explicitly_bad));
    }
    SeccompFindings {
        bad_setters,
        bad_values,
        implicitly_bad,
    }
}

fn seccomp_explicitly_bad(f: &SeccompFindings) -> CheckResult {
    CheckResult::forbidden(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            f.bad_setters.join(" and "),
            join_quote(&sorted(&f.bad_values))
        ),
    )
}

/// `seccompProfile_baseline` 1.19: if set, only RuntimeDefault or Localhost.
pub fn seccomp_profile_baseline_1_19(pod: &PodView) -> CheckResult {
    let f = seccomp_findings(pod);
    if f.bad_setters.is_empty() {
        return CheckResult::allowed();
    }
    seccomp_explicitly_bad(&f)
}

/// `sysctls`: the safe set grew in 1.27, 1.29 and 1.32.
const SYSCTLS_1_0: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
];
const SYSCTLS_ADDED_1_27: &[&str] = &["net.ipv4.ip_local_reserved_ports"];
const SYSCTLS_ADDED_1_29: &[&str] = &[
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];
const SYSCTLS_ADDED_1_32: &[&str] = &["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"];

pub fn sysctls_1_0(pod: &PodView) -> CheckResult {
    sysctls(pod, &[SYSCTLS_1_0])
}

pub fn sysctls_1_27(pod: &PodView) -> CheckResult {
    sysctls(pod, &[SYSCTLS_1_0, SYSCTLS_ADDED_1_27])
}

pub fn sysctls_1_29(pod: &PodView) -> CheckResult {
    sysctls(pod, &[SYSCTLS_1_0, SYSCTLS_ADDED_1_27, SYSCTLS_ADDED_1_29])
}

pub fn sysctls_1_32(pod: &PodView) -> CheckResult {
    sysctls(
        pod,
        &[SYSCTLS_1_0, SYSCTLS_ADDED_1_27, SYSCTLS_ADDED_1_29, SYSCTLS_ADDED_1_32],
    )
}

fn sysctls(pod: &PodView, allowed: &[&[&str]]) -> CheckResult {
    let forbidden: Vec<&str> = pod
        .pod_security_context()
        .and_then(|sc| sc.get("sysctls"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|s| s.get("name").and_then(Value::as_str).unwrap_or(""))
        .filter(|n| !allowed.iter().any(|set| set.contains(n)))
        .collect();
    if forbidden.is_empty() {
        return CheckResult::allowed();
    }
    CheckResult::forbidden("forbidden sysctls", forbidden.join(", "))
}

/// `windowsHostProcess` 1.0: `windowsOptions.hostProcess=true` on the pod or a container.
pub fn windows_host_process_1_0(pod: &PodView) -> CheckResult {
    let host_process = |sc: Option<&Map<String, Value>>| {
        sub_object(sc, "windowsOptions")
            .and_then(|w| w.get("hostProcess"))
            .and_then(Value::as_bool)
            == Some(true)
    };
    let bad: Vec<&str> = pod
        .containers()
        .filter(|c| host_process(security_context(c)))
        .map(name)
        .collect();
    let mut setters = Vec::new();
    if host_process(pod.pod_security_context()) {
        setters.push("pod".to_string());
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return CheckResult::allowed();
    }
    CheckResult::forbidden(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            setters.join(" and ")
        ),
    )
}

// --- restricted -------------------------------------------------------------------------------

/// `allowPrivilegeEscalation` 1.8: every container must set it to false.
pub fn allow_privilege_escalation_1_8(pod: &PodView) -> CheckResult {
    let bad: Vec<&str> = pod
        .containers()
        .filter(|c| bool_of(security_context(c), "allowPrivilegeEscalation") != Some(false))
        .map(name)
        .collect();
    if bad.is_empty() {
        return CheckResult::allowed();
    }
    CheckResult::forbidden(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_phrase(&bad)
        ),
    )
}

/// 1.25: not for Windows pods.
pub fn allow_privilege_escalation_1_25(pod: &PodView) -> CheckResult {
    if pod.is_windows() {
        return CheckResult::allowed();
    }
    allow_privilege_escalation_1_8(pod)
}

/// `capabilities_restricted` 1.22: drop ALL, add at most NET_BIND_SERVICE.
pub fn capabilities_restricted_1_22(pod: &PodView) -> CheckResult {
    let mut missing_drop_all = Vec::new();
    let mut adding_forbidden = Vec::new();
    let mut forbidden_caps = BTreeSet::new();
    for c in pod.containers() {
        let Some(caps) = sub_object(security_context(c), "capabilities") else {
            missing_drop_all.push(name(c));
            continue;
        };
        if !strings_of(caps, "drop").any(|d| d == "ALL") {
            missing_drop_all.push(name(c));
        }
        let mut added_forbidden = false;
        for cap in strings_of(caps, "add") {
            if cap != "NET_BIND_SERVICE" {
                added_forbidden = true;
                forbidden_caps.insert(cap.to_string());
            }
        }
        if added_forbidden {
            adding_forbidden.push(name(c));
        }
    }
    let mut details = Vec::new();
    if !missing_drop_all.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&missing_drop_all)
        ));
    }
    if !adding_forbidden.is_empty() {
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding_forbidden),
            join_quote(&sorted(&forbidden_caps))
        ));
    }
    if details.is_empty() {
        return CheckResult::allowed();
    }
    CheckResult::forbidden("unrestricted capabilities", details.join("; "))
}

/// 1.25: not for Windows pods.
pub fn capabilities_restricted_1_25(pod: &PodView) -> CheckResult {
    if pod.is_windows() {
        return CheckResult::allowed();
    }
    capabilities_restricted_1_22(pod)
}

/// Volume sources the restricted level allows.
const ALLOWED_VOLUME_SOURCES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// The other sources, in the order the plugin tests for them.
const RESTRICTED_VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

/// `restrictedVolumes` 1.0: only the allow-listed volume types. A volume without any known source
/// is an emptyDir (v1 defaulting gives it one before admission).
pub fn restricted_volumes_1_0(pod: &PodView) -> CheckResult {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for v in volumes(pod) {
        if ALLOWED_VOLUME_SOURCES.iter().any(|s| has_source(v, s)) {
            continue;
        }
        if let Some(t) = RESTRICTED_VOLUME_SOURCES.iter().find(|s| has_source(v, s)) {
            bad.push(name(v));
            types.insert((*t).to_string());
        }
    }
    if bad.is_empty() {
        return CheckResult::allowed();
    }
    CheckResult::forbidden(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", bad.len()),
            join_quote(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize("restricted volume type", "restricted volume types", types.len()),
            join_quote(&sorted(&types))
        ),
    )
}

/// `runAsNonRoot` 1.0: true at the pod (and not false in a container) or in every container.
pub fn run_as_non_root_1_0(pod: &PodView) -> CheckResult {
    let mut bad_setters = Vec::new();
    let mut pod_non_root = false;
    match bool_of(pod.pod_security_context(), "runAsNonRoot") {
        Some(false) => bad_setters.push("pod".to_string()),
        Some(true) => pod_non_root = true,
        None => {}
    }
    let mut explicitly_bad = Vec::new();
    let mut implicitly_bad = Vec::new();
    for c in pod.containers() {
        match bool_of(security_context(c), "runAsNonRoot") {
            Some(false) => explicitly_bad.push(name(c)),
            Some(true) => {}
            None if !pod_non_root => implicitly_bad.push(name(c)),
            None => {}
        }
    }
    if !explicitly_bad.is_empty() {
        bad_setters.push(containers_phrase(&explicitly_bad));
    }
    if !bad_setters.is_empty() {
        return CheckResult::forbidden(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                bad_setters.join(" and ")
            ),
        );
    }
    if !implicitly_bad.is_empty() {
        return CheckResult::forbidden(
            "runAsNonRoot != true",
            format!(
                "pod or {} must set securityContext.runAsNonRoot=true",
                containers_phrase(&implicitly_bad)
            ),
        );
    }
    CheckResult::allowed()
}

/// `runAsUser` 1.23: never 0.
pub fn run_as_user_1_23(pod: &PodView) -> CheckResult {
    let root = |sc: Option<&Map<String, Value>>| sc.and_then(|m| m.get("runAsUser")).and_then(Value::as_i64) == Some(0);
    let mut bad_setters = Vec::new();
    if root(pod.pod_security_context()) {
        bad_setters.push("pod".to_string());
    }
    let bad: Vec<&str> = pod
        .containers()
        .filter(|c| root(security_context(c)))
        .map(name)
        .collect();
    if !bad.is_empty() {
        bad_setters.push(containers_phrase(&bad));
    }
    if bad_setters.is_empty() {
        return CheckResult::allowed();
    }
    CheckResult::forbidden(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", bad_setters.join(" and ")),
    )
}

/// `seccompProfile_restricted` 1.19: RuntimeDefault or Localhost, at the pod or in every container.
pub fn seccomp_profile_restricted_1_19(pod: &PodView) -> CheckResult {
    let f = seccomp_findings(pod);
    if !f.bad_setters.is_empty() {
        return seccomp_explicitly_bad(&f);
    }
    if !f.implicitly_bad.is_empty() {
        return CheckResult::forbidden(
            "seccompProfile",
            format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                containers_phrase(&f.implicitly_bad)
            ),
        );
    }
    CheckResult::allowed()
}

/// 1.25: not for Windows pods.
pub fn seccomp_profile_restricted_1_25(pod: &PodView) -> CheckResult {
    if pod.is_windows() {
        return CheckResult::allowed();
    }
    seccomp_profile_restricted_1_19(pod)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn run(check: fn(&PodView) -> CheckResult, metadata: Value, spec: Value) -> CheckResult {
        check(&PodView {
            metadata: &metadata,
            spec: &spec,
        })
    }

    fn forbids(r: CheckResult, reason: &str, detail: &str) {
        assert!(!r.allowed, "expected {reason:?} to forbid");
        assert_eq!(r.forbidden_reason, reason);
        assert_eq!(r.forbidden_detail, detail);
    }

    fn allows(r: CheckResult) {
        assert!(r.allowed, "expected allowed, got {r:?}");
    }

    #[test]
    fn app_armor() {
        allows(run(app_armor_profile_1_0, json!({}), json!({})));
        allows(run(
            app_armor_profile_1_0,
            json!({ "annotations": { "container.apparmor.security.beta.kubernetes.io/a": "localhost/x" } }),
            json!({ "securityContext": { "appArmorProfile": { "type": "RuntimeDefault" } } }),
        ));
        forbids(
            run(
                app_armor_profile_1_0,
                json!({}),
                json!({ "securityContext": { "appArmorProfile": { "type": "Unconfined" } } }),
            ),
            "forbidden AppArmor profile",
            "pod must not set AppArmor profile type to \"Unconfined\"",
        );
        forbids(
            run(
                app_armor_profile_1_0,
                json!({ "annotations": {
                    "container.apparmor.security.beta.kubernetes.io/e": "unconfined",
                    "container.apparmor.security.beta.kubernetes.io/b": "runtime/default",
                } }),
                json!({ "containers": [{ "name": "foo", "securityContext": { "appArmorProfile": { "type": "Unconfined" } } }] }),
            ),
            "forbidden AppArmor profiles",
            "container \"foo\" and annotation must not set AppArmor profile type to \"Unconfined\", \"container.apparmor.security.beta.kubernetes.io/e=\"unconfined\"\"",
        );
    }

    #[test]
    fn capabilities_baseline() {
        allows(run(
            capabilities_baseline_1_0,
            json!({}),
            json!({ "containers": [{ "name": "a", "securityContext": { "capabilities": { "add": ["CHOWN", "KILL"] } } }] }),
        ));
        forbids(
            run(
                capabilities_baseline_1_0,
                json!({}),
                json!({
                    "initContainers": [{ "name": "i", "securityContext": { "capabilities": { "add": ["SYS_ADMIN"] } } }],
                    "containers": [{ "name": "c", "securityContext": { "capabilities": { "add": ["NET_RAW", "CHOWN"] } } }],
                }),
            ),
            "non-default capabilities",
            "containers \"i\", \"c\" must not include \"NET_RAW\", \"SYS_ADMIN\" in securityContext.capabilities.add",
        );
    }

    #[test]
    fn host_namespaces() {
        allows(run(host_namespaces_1_0, json!({}), json!({ "hostNetwork": false })));
        forbids(
            run(
                host_namespaces_1_0,
                json!({}),
                json!({ "hostNetwork": true, "hostPID": true, "hostIPC": true }),
            ),
            "host namespaces",
            "hostNetwork=true, hostPID=true, hostIPC=true",
        );
    }

    #[test]
    fn host_path_volumes() {
        allows(run(
            host_path_volumes_1_0,
            json!({}),
            json!({ "volumes": [{ "name": "e", "emptyDir": {} }] }),
        ));
        forbids(
            run(
                host_path_volumes_1_0,
                json!({}),
                json!({ "volumes": [{ "name": "a", "hostPath": { "path": "/" } }, { "name": "b", "hostPath": { "path": "/x" } }] }),
            ),
            "hostPath volumes",
            "volumes \"a\", \"b\"",
        );
    }

    #[test]
    fn host_ports() {
        allows(run(
            host_ports_1_0,
            json!({}),
            json!({ "containers": [{ "name": "a", "ports": [{ "containerPort": 80, "hostPort": 0 }] }] }),
        ));
        // Ports are sorted as strings, as the plugin sorts them.
        forbids(
            run(
                host_ports_1_0,
                json!({}),
                json!({ "containers": [{ "name": "a", "ports": [{ "containerPort": 80, "hostPort": 8080 }, { "containerPort": 81, "hostPort": 90 }] }] }),
            ),
            "hostPort",
            "container \"a\" uses hostPorts 8080, 90",
        );
        forbids(
            run(
                host_ports_1_0,
                json!({}),
                json!({ "containers": [{ "name": "a", "ports": [{ "hostPort": 80 }] }, { "name": "b", "ports": [{ "hostPort": 80 }] }] }),
            ),
            "hostPort",
            "containers \"a\", \"b\" use hostPort 80",
        );
    }

    #[test]
    fn privileged() {
        allows(run(
            privileged_1_0,
            json!({}),
            json!({ "containers": [{ "name": "a", "securityContext": { "privileged": false } }] }),
        ));
        forbids(
            run(
                privileged_1_0,
                json!({}),
                json!({ "containers": [{ "name": "a", "securityContext": { "privileged": true } }] }),
            ),
            "privileged",
            "container \"a\" must not set securityContext.privileged=true",
        );
    }

    #[test]
    fn proc_mount() {
        allows(run(
            proc_mount_1_0,
            json!({}),
            json!({ "containers": [{ "name": "a", "securityContext": { "procMount": "Default" } }] }),
        ));
        forbids(
            run(
                proc_mount_1_0,
                json!({}),
                json!({ "containers": [{ "name": "a", "securityContext": { "procMount": "Unmasked" } }] }),
            ),
            "procMount",
            "container \"a\" must not set securityContext.procMount to \"Unmasked\"",
        );
    }

    #[test]
    fn se_linux() {
        let engine =
            json!({ "securityContext": { "seLinuxOptions": { "type": "container_engine_t", "level": "s0" } } });
        allows(run(se_linux_options_1_31, json!({}), engine.clone()));
        forbids(
            run(se_linux_options_1_0, json!({}), engine),
            "seLinuxOptions",
            "pod set forbidden securityContext.seLinuxOptions: type \"container_engine_t\"",
        );
        forbids(
            run(
                se_linux_options_1_31,
                json!({}),
                json!({
                    "securityContext": { "seLinuxOptions": { "user": "u" } },
                    "containers": [{ "name": "a", "securityContext": { "seLinuxOptions": { "type": "spc_t", "role": "r" } } }],
                }),
            ),
            "seLinuxOptions",
            "pod and container \"a\" set forbidden securityContext.seLinuxOptions: type \"spc_t\"; user may not be set; role may not be set",
        );
    }

    #[test]
    fn seccomp_baseline() {
        allows(run(
            seccomp_profile_baseline_1_19,
            json!({}),
            json!({ "containers": [{ "name": "a" }] }),
        ));
        forbids(
            run(
                seccomp_profile_baseline_1_19,
                json!({}),
                json!({
                    "securityContext": { "seccompProfile": { "type": "Unconfined" } },
                    "containers": [{ "name": "a", "securityContext": { "seccompProfile": { "type": "Unconfined" } } }],
                }),
            ),
            "seccompProfile",
            "pod and container \"a\" must not set securityContext.seccompProfile.type to \"Unconfined\"",
        );
        forbids(
            run(
                seccomp_profile_baseline_1_0,
                json!({ "annotations": { "seccomp.security.alpha.kubernetes.io/pod": "unconfined" } }),
                json!({ "containers": [{ "name": "a" }] }),
            ),
            "seccompProfile",
            "forbidden annotation seccomp.security.alpha.kubernetes.io/pod=\"unconfined\"",
        );
    }

    #[test]
    fn sysctls_by_version() {
        let spec = json!({ "securityContext": { "sysctls": [{ "name": "net.ipv4.tcp_rmem", "value": "1" }, { "name": "kernel.msgmax", "value": "1" }] } });
        forbids(
            run(sysctls_1_32, json!({}), spec.clone()),
            "forbidden sysctls",
            "kernel.msgmax",
        );
        forbids(
            run(sysctls_1_29, json!({}), spec),
            "forbidden sysctls",
            "net.ipv4.tcp_rmem, kernel.msgmax",
        );
    }

    #[test]
    fn windows_host_process() {
        forbids(
            run(
                windows_host_process_1_0,
                json!({}),
                json!({
                    "securityContext": { "windowsOptions": { "hostProcess": true } },
                    "containers": [{ "name": "a", "securityContext": { "windowsOptions": { "hostProcess": true } } }],
                }),
            ),
            "hostProcess",
            "pod and container \"a\" must not set securityContext.windowsOptions.hostProcess=true",
        );
    }

    #[test]
    fn allow_privilege_escalation() {
        let spec = json!({ "containers": [{ "name": "a" }, { "name": "b", "securityContext": { "allowPrivilegeEscalation": false } }] });
        forbids(
            run(allow_privilege_escalation_1_25, json!({}), spec),
            "allowPrivilegeEscalation != false",
            "container \"a\" must set securityContext.allowPrivilegeEscalation=false",
        );
        let windows = json!({ "os": { "name": "windows" }, "containers": [{ "name": "a" }] });
        allows(run(allow_privilege_escalation_1_25, json!({}), windows.clone()));
        assert!(!run(allow_privilege_escalation_1_8, json!({}), windows).allowed);
    }

    #[test]
    fn capabilities_restricted() {
        allows(run(
            capabilities_restricted_1_25,
            json!({}),
            json!({ "containers": [{ "name": "a", "securityContext": { "capabilities": { "drop": ["ALL"], "add": ["NET_BIND_SERVICE"] } } }] }),
        ));
        forbids(
            run(
                capabilities_restricted_1_25,
                json!({}),
                json!({ "containers": [
                    { "name": "a" },
                    { "name": "b", "securityContext": { "capabilities": { "drop": ["ALL"], "add": ["CHOWN"] } } },
                ] }),
            ),
            "unrestricted capabilities",
            "container \"a\" must set securityContext.capabilities.drop=[\"ALL\"]; container \"b\" must not include \"CHOWN\" in securityContext.capabilities.add",
        );
    }

    #[test]
    fn restricted_volumes() {
        allows(run(
            restricted_volumes_1_0,
            json!({}),
            json!({ "volumes": [
                { "name": "a", "projected": {} }, { "name": "b", "configMap": { "name": "x" } },
                { "name": "c", "persistentVolumeClaim": { "claimName": "x" } }, { "name": "sourceless" },
            ] }),
        ));
        forbids(
            run(
                restricted_volumes_1_0,
                json!({}),
                json!({ "volumes": [{ "name": "h", "hostPath": { "path": "/" } }, { "name": "n", "nfs": { "server": "s", "path": "/" } }] }),
            ),
            "restricted volume types",
            "volumes \"h\", \"n\" use restricted volume types \"hostPath\", \"nfs\"",
        );
        forbids(
            run(
                restricted_volumes_1_0,
                json!({}),
                json!({ "volumes": [{ "name": "g", "gitRepo": { "repository": "r" } }] }),
            ),
            "restricted volume types",
            "volume \"g\" uses restricted volume type \"gitRepo\"",
        );
    }

    #[test]
    fn run_as_non_root() {
        allows(run(
            run_as_non_root_1_0,
            json!({}),
            json!({ "securityContext": { "runAsNonRoot": true }, "containers": [{ "name": "a" }] }),
        ));
        forbids(
            run(
                run_as_non_root_1_0,
                json!({}),
                json!({ "containers": [{ "name": "a" }, { "name": "b", "securityContext": { "runAsNonRoot": true } }] }),
            ),
            "runAsNonRoot != true",
            "pod or container \"a\" must set securityContext.runAsNonRoot=true",
        );
        forbids(
            run(
                run_as_non_root_1_0,
                json!({}),
                json!({ "securityContext": { "runAsNonRoot": false }, "containers": [{ "name": "a", "securityContext": { "runAsNonRoot": false } }] }),
            ),
            "runAsNonRoot != true",
            "pod and container \"a\" must not set securityContext.runAsNonRoot=false",
        );
    }

    #[test]
    fn run_as_user() {
        allows(run(
            run_as_user_1_23,
            json!({}),
            json!({ "securityContext": { "runAsUser": 1000 }, "containers": [{ "name": "a" }] }),
        ));
        forbids(
            run(
                run_as_user_1_23,
                json!({}),
                json!({ "securityContext": { "runAsUser": 0 }, "containers": [{ "name": "a", "securityContext": { "runAsUser": 0 } }] }),
            ),
            "runAsUser=0",
            "pod and container \"a\" must not set runAsUser=0",
        );
    }

    #[test]
    fn seccomp_restricted() {
        allows(run(
            seccomp_profile_restricted_1_25,
            json!({}),
            json!({ "securityContext": { "seccompProfile": { "type": "RuntimeDefault" } }, "containers": [{ "name": "a" }] }),
        ));
        allows(run(
            seccomp_profile_restricted_1_25,
            json!({}),
            json!({ "containers": [{ "name": "a", "securityContext": { "seccompProfile": { "type": "Localhost", "localhostProfile": "p" } } }] }),
        ));
        forbids(
            run(
                seccomp_profile_restricted_1_25,
                json!({}),
                json!({ "containers": [{ "name": "a" }, { "name": "b" }] }),
            ),
            "seccompProfile",
            "pod or containers \"a\", \"b\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
        );
        // An explicit bad value is reported instead of the missing ones.
        forbids(
            run(
                seccomp_profile_restricted_1_25,
                json!({}),
                json!({ "containers": [{ "name": "a" }, { "name": "b", "securityContext": { "seccompProfile": { "type": "Unconfined" } } }] }),
            ),
            "seccompProfile",
            "container \"b\" must not set securityContext.seccompProfile.type to \"Unconfined\"",
        );
    }
}
