//! `ValidateVolumes` and the checks of the common volume sources (`validateVolumeSource`).

use std::collections::HashSet;

use serde_json::Value;

use super::{array_of, dns1123_label_errors, duplicate, set, str_of, string};
use crate::status::FieldCause;

/// Every volume source of `core.VolumeSource` in `validateVolumeSource`'s order: the JSON key, and
/// the path kube-apiserver names in "may not specify more than 1 volume type" (a few differ).
const VOLUME_SOURCES: &[(&str, &str)] = &[
    ("emptyDir", "emptyDir"),
    ("hostPath", "hostPath"),
    ("gitRepo", "gitRepo"),
    ("gcePersistentDisk", "gcePersistentDisk"),
    ("awsElasticBlockStore", "awsElasticBlockStore"),
    ("secret", "secret"),
    ("nfs", "nfs"),
    ("iscsi", "iscsi"),
    ("glusterfs", "glusterfs"),
    ("flocker", "flocker"),
    ("persistentVolumeClaim", "persistentVolumeClaim"),
    ("rbd", "rbd"),
    ("cinder", "cinder"),
    ("cephfs", "cephFS"),
    ("quobyte", "quobyte"),
    ("downwardAPI", "downwarAPI"),
    ("fc", "fc"),
    ("flexVolume", "flexVolume"),
    ("configMap", "configMap"),
    ("azureFile", "azureFile"),
    ("vsphereVolume", "vsphereVolume"),
    ("photonPersistentDisk", "photonPersistentDisk"),
    ("portworxVolume", "portworxVolume"),
    ("azureDisk", "azureDisk"),
    ("storageos", "storageos"),
    ("projected", "projected"),
    ("scaleIO", "scaleIO"),
    ("csi", "csi"),
    ("ephemeral", "ephemeral"),
    ("image", "image"),
];

/// `sets.List(supportedHostPathTypes)`.
const HOST_PATH_TYPES: &[&str] = &[
    "",
    "BlockDevice",
    "CharDevice",
    "Directory",
    "DirectoryOrCreate",
    "File",
    "FileOrCreate",
    "Socket",
];

const FILE_MODE_MSG: &str = "must be a number between 0 and 0777 (octal), both inclusive";

/// `ValidateVolumes`: the names of the valid volumes (only those can be mounted). A volume
/// without a source was defaulted to an `emptyDir` (`SetDefaults_Volume`); one still without a
/// source here (validation called on an undefaulted spec) is refused as kube-apiserver's
/// validation would.
pub(super) fn volumes<'a>(path: &str, spec: Option<&'a Value>, causes: &mut Vec<FieldCause>) -> HashSet<&'a str> {
    let mut valid = HashSet::new();
    for (i, v) in array_of(spec, "volumes").iter().enumerate() {
        let at = format!("{path}[{i}]");
        let name = str_of(v, "name");
        let mut errs = Vec::new();
        let mut sources = 0;
        for (key, shown) in VOLUME_SOURCES {
            if let Some(source) = set(v, key) {
                if sources > 0 {
                    errs.push(FieldCause::forbidden(
                        format!("{at}.{shown}"),
                        "may not specify more than 1 volume type",
                    ));
                } else {
                    source_contents(&format!("{at}.{key}"), key, source, &mut errs);
                }
                sources += 1;
            }
        }
        if sources == 0 {
            errs.push(super::required(at.clone(), "must specify a volume type"));
        }
        if name.is_empty() {
            errs.push(FieldCause::required(format!("{at}.name")));
        } else {
            for msg in dns1123_label_errors(name) {
                errs.push(FieldCause::invalid(format!("{at}.name"), &string(name), msg));
            }
        }
        if valid.contains(name) {
            errs.push(duplicate(format!("{at}.name"), name));
        }
        if errs.is_empty() {
            valid.insert(name);
        } else {
            causes.extend(errs);
        }
    }
    valid
}

/// The checks of one source (`validateEmptyDir...`, `validateHostPathVolumeSource`, ...).
fn source_contents(at: &str, key: &str, source: &Value, errs: &mut Vec<FieldCause>) {
    match key {
        "emptyDir" => {
            let negative = source
                .get("sizeLimit")
                .and_then(super::resources::quantity_of)
                .is_some_and(|q| q.is_negative());
            if negative {
                errs.push(FieldCause::forbidden(
                    format!("{at}.sizeLimit"),
                    "SizeLimit field must be a valid resource quantity",
                ));
            }
            if let Some(mode) = set(source, "mode")
                && !mode.as_i64().is_some_and(|m| (0..=0o1777).contains(&m))
            {
                errs.push(FieldCause::invalid(
                    format!("{at}.mode"),
                    mode,
                    "must be a number between 0 and 01777 (octal), both inclusive",
                ));
            }
        }
        "hostPath" => {
            let path = str_of(source, "path");
            if path.is_empty() {
                errs.push(FieldCause::required(format!("{at}.path")));
                return;
            }
            if path.split('/').any(|p| p == "..") {
                errs.push(FieldCause::invalid(
                    format!("{at}.path"),
                    &string(path),
                    "must not contain '..'",
                ));
            }
            super::check_enum(format!("{at}.type"), set(source, "type"), HOST_PATH_TYPES, errs);
        }
        "secret" | "configMap" => {
            let name_field = if key == "secret" { "secretName" } else { "name" };
            if str_of(source, name_field).is_empty() {
                errs.push(FieldCause::required(format!("{at}.{name_field}")));
            }
            file_mode(format!("{at}.defaultMode"), set(source, "defaultMode"), errs);
            for (i, item) in array_of(Some(source), "items").iter().enumerate() {
                key_to_path(&format!("{at}.items[{i}]"), item, errs);
            }
        }
        "persistentVolumeClaim" if str_of(source, "claimName").is_empty() => {
            errs.push(FieldCause::required(format!("{at}.claimName")));
        }
        _ => {}
    }
}

fn file_mode(field: String, mode: Option<&Value>, errs: &mut Vec<FieldCause>) {
    if let Some(mode) = mode
        && !mode.as_i64().is_some_and(|m| (0..=0o777).contains(&m))
    {
        errs.push(FieldCause::invalid(field, mode, FILE_MODE_MSG));
    }
}

/// `validateKeyToPath`.
fn key_to_path(at: &str, item: &Value, errs: &mut Vec<FieldCause>) {
    if str_of(item, "key").is_empty() {
        errs.push(FieldCause::required(format!("{at}.key")));
    }
    let path = str_of(item, "path");
    if path.is_empty() {
        errs.push(FieldCause::required(format!("{at}.path")));
    }
    // ValidateLocalNonReservedPath.
    let field = format!("{at}.path");
    if path.starts_with('/') {
        errs.push(FieldCause::invalid(&field, &string(path), "must be a relative path"));
    }
    if path.split('/').any(|p| p == "..") {
        errs.push(FieldCause::invalid(&field, &string(path), "must not contain '..'"));
    } else if path.starts_with("..") {
        errs.push(FieldCause::invalid(&field, &string(path), "must not start with '..'"));
    }
    file_mode(format!("{at}.mode"), set(item, "mode"), errs);
}
