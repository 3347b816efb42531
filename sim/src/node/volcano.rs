//! Volcano's PodGroup CRD (`scheduling.volcano.sh/v1beta1`), as Volcano's chart installs it, for
//! clusters that run the sim's Volcano stand-in (`NodesConfig::volcano`). The stand-in itself is
//! `scheduler/gang.rs`.

use serde_json::Value;

/// Volcano's `podgroups.scheduling.volcano.sh` CRD, copied unchanged from Volcano's chart (the
/// file's header says from where).
pub const PODGROUP_CRD_YAML: &str = include_str!("../../crds/volcano/scheduling.volcano.sh_podgroups.yaml");

/// The name of the PodGroup CRD.
pub const PODGROUP_CRD_NAME: &str = "podgroups.scheduling.volcano.sh";

/// The pod annotation naming the pod's PodGroup (Volcano's `KubeGroupNameAnnotationKey`).
pub const GROUP_NAME_ANNOTATION: &str = "scheduling.k8s.io/group-name";

/// The scheduler name Volcano's pods carry.
pub const SCHEDULER_NAME: &str = "volcano";

/// The committed CRD file is not YAML (it is checked by this module's tests).
#[derive(Debug, thiserror::Error)]
#[error("parsing Volcano's PodGroup CRD")]
pub struct CrdError(#[source] serde_yaml::Error);

/// The PodGroup CRD as a JSON object, to create or apply.
pub fn podgroup_crd() -> Result<Value, CrdError> {
    serde_yaml::from_str(PODGROUP_CRD_YAML).map_err(CrdError)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crd_is_volcanos_podgroup() {
        let crd = podgroup_crd().expect("the committed CRD parses");
        assert_eq!(crd["metadata"]["name"], PODGROUP_CRD_NAME);
        assert_eq!(crd["spec"]["group"], "scheduling.volcano.sh");
        assert_eq!(crd["spec"]["versions"][0]["name"], "v1beta1");
        // No status subresource: Volcano writes status with the object.
        assert_eq!(crd["spec"]["versions"][0]["subresources"], serde_json::json!({}));
    }
}
