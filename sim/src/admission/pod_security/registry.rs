//! Which checks a level and version run, and in which order (`policy/registry.go`).
//!
//! Every check has versions starting at a policy minor version; a level at version `v1.N` runs
//! each check's newest version with a minimum at or below N. Versions above the newest minimum
//! any check has (1.32) and `latest` run the newest checks, so `latest` is the 1.33 policy.
//! Baseline checks run first, then restricted ones, each group sorted by check ID (Go's byte
//! order); restricted runs every baseline check except those a restricted check overrides.

use super::checks::{self, PodView};
use super::levels::{Level, LevelVersion, Version};
use super::messages::CheckResult;

type CheckFn = fn(&PodView) -> CheckResult;

/// One version of a check.
struct Versioned {
    min_minor: u32,
    check: CheckFn,
    /// Baseline checks this (restricted) version replaces.
    overrides: &'static [&'static str],
}

struct Check {
    id: &'static str,
    level: Level,
    versions: &'static [Versioned],
}

const fn v(min_minor: u32, check: CheckFn) -> Versioned {
    Versioned {
        min_minor,
        check,
        overrides: &[],
    }
}

const fn v_over(min_minor: u32, check: CheckFn, overrides: &'static [&'static str]) -> Versioned {
    Versioned {
        min_minor,
        check,
        overrides,
    }
}

/// The default checks of kube-apiserver 1.33.
const CHECKS: &[Check] = &[
    Check {
        id: "allowPrivilegeEscalation",
        level: Level::Restricted,
        versions: &[
            v(8, checks::allow_privilege_escalation_1_8),
            v(25, checks::allow_privilege_escalation_1_25),
        ],
    },
    Check {
        id: "appArmorProfile",
        level: Level::Baseline,
        versions: &[v(0, checks::app_armor_profile_1_0)],
    },
    Check {
        id: "capabilities_baseline",
        level: Level::Baseline,
        versions: &[v(0, checks::capabilities_baseline_1_0)],
    },
    Check {
        id: "capabilities_restricted",
        level: Level::Restricted,
        versions: &[
            v_over(22, checks::capabilities_restricted_1_22, &["capabilities_baseline"]),
            v_over(25, checks::capabilities_restricted_1_25, &["capabilities_baseline"]),
        ],
    },
    Check {
        id: "hostNamespaces",
        level: Level::Baseline,
        versions: &[v(0, checks::host_namespaces_1_0)],
    },
    Check {
        id: "hostPathVolumes",
        level: Level::Baseline,
        versions: &[v(0, checks::host_path_volumes_1_0)],
    },
    Check {
        id: "hostPorts",
        level: Level::Baseline,
        versions: &[v(0, checks::host_ports_1_0)],
    },
    Check {
        id: "privileged",
        level: Level::Baseline,
        versions: &[v(0, checks::privileged_1_0)],
    },
    Check {
        id: "procMount",
        level: Level::Baseline,
        versions: &[v(0, checks::proc_mount_1_0)],
    },
    Check {
        id: "restrictedVolumes",
        level: Level::Restricted,
        versions: &[v_over(0, checks::restricted_volumes_1_0, &["hostPathVolumes"])],
    },
    Check {
        id: "runAsNonRoot",
        level: Level::Restricted,
        versions: &[v(0, checks::run_as_non_root_1_0)],
    },
    Check {
        id: "runAsUser",
        level: Level::Restricted,
        versions: &[v(23, checks::run_as_user_1_23)],
    },
    Check {
        id: "seLinuxOptions",
        level: Level::Baseline,
        versions: &[v(0, checks::se_linux_options_1_0), v(31, checks::se_linux_options_1_31)],
    },
    Check {
        id: "seccompProfile_baseline",
        level: Level::Baseline,
        versions: &[
            v(0, checks::seccomp_profile_baseline_1_0),
            v(19, checks::seccomp_profile_baseline_1_19),
        ],
    },
    Check {
        id: "seccompProfile_restricted",
        level: Level::Restricted,
        versions: &[
            v_over(
                19,
                checks::seccomp_profile_restricted_1_19,
                &["seccompProfile_baseline"],
            ),
            v_over(
                25,
                checks::seccomp_profile_restricted_1_25,
                &["seccompProfile_baseline"],
            ),
        ],
    },
    Check {
        id: "sysctls",
        level: Level::Baseline,
        versions: &[
            v(0, checks::sysctls_1_0),
            v(27, checks::sysctls_1_27),
            v(29, checks::sysctls_1_29),
            v(32, checks::sysctls_1_32),
        ],
    },
    Check {
        id: "windowsHostProcess",
        level: Level::Baseline,
        versions: &[v(0, checks::windows_host_process_1_0)],
    },
];

/// The newest minimum version of any check: later versions evaluate as this one.
fn max_minor() -> u32 {
    CHECKS
        .iter()
        .filter_map(|c| c.versions.last())
        .map(|v| v.min_minor)
        .max()
        .unwrap_or(0)
}

/// The version of `check` in force at `minor`, if the check exists there yet.
fn at(check: &Check, minor: u32) -> Option<&Versioned> {
    check.versions.iter().rev().find(|v| v.min_minor <= minor)
}

/// The checks `lv` runs, in the order their results are reported.
fn checks_for(lv: LevelVersion) -> Vec<CheckFn> {
    if lv.level == Level::Privileged {
        return Vec::new();
    }
    let max = max_minor();
    let minor = match lv.version {
        Version::Minor(m) => m.min(max),
        Version::Latest => max,
    };
    let in_force = |level: Level| {
        let mut found: Vec<(&'static str, &Versioned)> = CHECKS
            .iter()
            .filter(|c| c.level == level)
            .filter_map(|c| at(c, minor).map(|v| (c.id, v)))
            .collect();
        found.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        found
    };
    let baseline = in_force(Level::Baseline);
    if lv.level == Level::Baseline {
        return baseline.into_iter().map(|(_, v)| v.check).collect();
    }
    let restricted = in_force(Level::Restricted);
    let overridden: Vec<&str> = restricted
        .iter()
        .flat_map(|(_, v)| v.overrides.iter().copied())
        .collect();
    baseline
        .into_iter()
        .filter(|(id, _)| !overridden.contains(id))
        .chain(restricted)
        .map(|(_, v)| v.check)
        .collect()
}

/// Runs the checks of `lv` on a pod (`Evaluator.EvaluatePod`).
pub fn evaluate(lv: LevelVersion, pod: &PodView) -> Vec<CheckResult> {
    checks_for(lv).into_iter().map(|check| check(pod)).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::admission::pod_security::messages::Aggregate;

    fn detail(level: Level, version: Version, metadata: serde_json::Value, spec: serde_json::Value) -> String {
        let pod = PodView {
            metadata: &metadata,
            spec: &spec,
        };
        Aggregate::of(&evaluate(LevelVersion { level, version }, &pod)).forbidden_detail()
    }

    #[test]
    fn latest_is_the_newest_policy() {
        assert_eq!(max_minor(), 32);
        let l = checks_for(LevelVersion {
            level: Level::Restricted,
            version: Version::Latest,
        })
        .len();
        let v40 = checks_for(LevelVersion {
            level: Level::Restricted,
            version: Version::Minor(40),
        })
        .len();
        // 11 baseline checks less the 3 the restricted ones override, plus 6 restricted checks.
        assert_eq!(l, 14);
        assert_eq!(v40, l);
    }

    #[test]
    fn the_bare_pod_under_restricted_reads_as_the_apiserver_says() {
        let spec = json!({ "containers": [{ "name": "c", "image": "busybox" }] });
        assert_eq!(
            detail(Level::Restricted, Version::Latest, json!({}), spec.clone()),
            "allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
             unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
             runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
             seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
        );
        assert_eq!(detail(Level::Baseline, Version::Latest, json!({}), spec.clone()), "");
        assert_eq!(detail(Level::Privileged, Version::Latest, json!({}), spec), "");
    }

    #[test]
    fn baseline_checks_come_first_sorted_by_id() {
        let spec = json!({
            "hostNetwork": true,
            "volumes": [{ "name": "h", "hostPath": { "path": "/" } }],
            "securityContext": { "seLinuxOptions": { "type": "spc_t" } },
            "containers": [{ "name": "c", "ports": [{ "hostPort": 80 }], "securityContext": { "privileged": true } }],
        });
        assert_eq!(
            detail(Level::Baseline, Version::Latest, json!({}), spec.clone()),
            "host namespaces (hostNetwork=true), hostPath volumes (volume \"h\"), \
             hostPort (container \"c\" uses hostPort 80), \
             privileged (container \"c\" must not set securityContext.privileged=true), \
             seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: type \"spc_t\")"
        );
        // Under restricted, restrictedVolumes replaces hostPathVolumes and comes with the restricted checks.
        let restricted = detail(Level::Restricted, Version::Latest, json!({}), spec);
        assert!(
            restricted.starts_with("host namespaces (hostNetwork=true), hostPort"),
            "{restricted}"
        );
        assert!(!restricted.contains("hostPath volumes"), "{restricted}");
        assert!(
            restricted.contains("restricted volume types (volume \"h\" uses restricted volume type \"hostPath\")"),
            "{restricted}"
        );
    }

    #[test]
    fn older_versions_run_the_checks_of_their_time() {
        let spec = json!({ "containers": [{ "name": "c", "securityContext": {
            "allowPrivilegeEscalation": false, "runAsNonRoot": true, "runAsUser": 0,
            "capabilities": { "add": ["SYS_ADMIN"] }
        } }] });
        // v1.18: no seccomp requirement, no capability dropping, no runAsUser check; the baseline
        // capability check still applies.
        assert_eq!(
            detail(Level::Restricted, Version::Minor(18), json!({}), spec.clone()),
            "non-default capabilities (container \"c\" must not include \"SYS_ADMIN\" in securityContext.capabilities.add)"
        );
        let latest = detail(Level::Restricted, Version::Latest, json!({}), spec);
        assert!(
            latest.contains("runAsUser=0 (container \"c\" must not set runAsUser=0)"),
            "{latest}"
        );
        assert!(latest.contains("unrestricted capabilities"), "{latest}");
        assert!(!latest.contains("non-default capabilities"), "{latest}");
    }
}
