//! CustomResourceDefinitions: what an established CRD serves, the status the apiextensions
//! controllers give it, and the cleanup of its instances when it is deleted.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::meta;
use crate::registry::{CrdInfo, PrinterColumn, ResourceInfo, ResourceKey, compare_versions};
use crate::schema;
use crate::status::{ApiError, FieldCause};

/// The finalizer the apiserver puts on every CRD so its instances are removed first.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

pub fn is_crd(info: &ResourceInfo) -> bool {
    info.group == "apiextensions.k8s.io" && info.resource == "customresourcedefinitions"
}

fn names(crd: &Value) -> (String, String, String, String) {
    let n = |f: &str| {
        crd.pointer(&format!("/spec/names/{f}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let kind = n("kind");
    let singular = if n("singular").is_empty() {
        kind.to_lowercase()
    } else {
        n("singular")
    };
    let list_kind = if n("listKind").is_empty() {
        format!("{kind}List")
    } else {
        n("listKind")
    };
    (n("plural"), singular, kind, list_kind)
}

/// Sets what the apiextensions controllers keep on a CRD: accepted names, the Established
/// condition and stored versions.
pub fn establish(crd: &mut Value, now: &str) {
    let (plural, singular, kind, list_kind) = names(crd);
    let mut accepted = json!({ "plural": plural, "singular": singular, "kind": kind, "listKind": list_kind });
    for f in ["shortNames", "categories"] {
        if let Some(v) = crd.pointer(&format!("/spec/names/{f}")) {
            accepted[f] = v.clone();
        }
    }
    let storage: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    let mut stored = crd
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for v in storage {
        if !stored.contains(&v) {
            stored.push(v);
        }
    }
    let conditions = json!([
        { "type": "NamesAccepted", "status": "True", "lastTransitionTime": now, "reason": "NoConflicts", "message": "no conflicts found" },
        { "type": "Established", "status": "True", "lastTransitionTime": now, "reason": "InitialNamesAccepted", "message": "the initial names have been accepted" }
    ]);
    if let Value::Object(root) = crd {
        root.insert(
            "status".into(),
            json!({ "acceptedNames": accepted, "conditions": conditions, "storedVersions": stored }),
        );
    }
    let defaults = crd.pointer_mut("/spec/conversion").is_none();
    if defaults && let Some(spec) = crd.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("conversion".into(), json!({ "strategy": "None" }));
    }
}

/// A new CRD gets the cleanup finalizer, so its instances are removed before it goes.
pub fn add_cleanup_finalizer(crd: &mut Value) {
    let mut finalizers = meta::finalizers(crd);
    if !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
        finalizers.push(CLEANUP_FINALIZER.into());
        meta::set(crd, "finalizers", json!(finalizers));
    }
}

/// The resource a CRD serves, or None if it serves no version.
pub fn resource_info(crd: &Value) -> Option<ResourceInfo> {
    let group = crd.pointer("/spec/group").and_then(Value::as_str)?.to_string();
    let (plural, singular, kind, list_kind) = names(crd);
    if plural.is_empty() || kind.is_empty() {
        return None;
    }
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array)?;
    let mut served: Vec<String> = versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(false))
        .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_string))
        .collect();
    if served.is_empty() {
        return None;
    }
    served.sort_by(|a, b| compare_versions(b, a));
    let storage_version = versions
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .and_then(|v| v.get("name").and_then(Value::as_str))
        .unwrap_or(&served[0])
        .to_string();
    let mut schemas = BTreeMap::new();
    let mut printer_columns = BTreeMap::new();
    let mut selectable = BTreeMap::new();
    let mut status_subresource = false;
    let mut scale = false;
    for v in versions {
        let Some(name) = v.get("name").and_then(Value::as_str) else {
            continue;
        };
        if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
            schemas.insert(name.to_string(), schema.clone());
        }
        let cols: Vec<PrinterColumn> = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .map(|cols| {
                cols.iter()
                    .map(|c| {
                        let s = |f: &str| c.get(f).and_then(Value::as_str).unwrap_or("").to_string();
                        PrinterColumn {
                            name: s("name"),
                            type_: s("type"),
                            format: s("format"),
                            description: s("description"),
                            priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                            json_path: s("jsonPath"),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        printer_columns.insert(name.to_string(), cols);
        let fields: Vec<String> = v
            .get("selectableFields")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                    .map(|p| p.trim_start_matches('.').to_string())
                    .collect()
            })
            .unwrap_or_default();
        selectable.insert(name.to_string(), fields);
        if v.pointer("/subresources/status").is_some() {
            status_subresource = true;
        }
        if v.pointer("/subresources/scale").is_some() {
            scale = true;
        }
    }
    let list = |f: &str| -> Vec<String> {
        crd.pointer(&format!("/spec/names/{f}"))
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default()
    };
    Some(ResourceInfo {
        group: group.clone(),
        versions: served,
        storage_version,
        resource: plural.clone(),
        singular,
        kind,
        list_kind,
        namespaced: crd.pointer("/spec/scope").and_then(Value::as_str) == Some("Namespaced"),
        short_names: list("shortNames"),
        categories: list("categories"),
        status_subresource,
        extra_subresources: if scale { vec!["scale".into()] } else { Vec::new() },
        has_generation: true,
        return_deleted_object: false,
        storage: ResourceKey {
            group,
            resource: plural,
        },
        crd: Some(CrdInfo {
            name: meta::name(crd).to_string(),
            schemas,
            printer_columns,
            selectable_fields: selectable,
        }),
    })
}

/// `selectableFields` of a CRD version, as field selector names (`spec.foo`).
pub fn selectable_fields(info: &ResourceInfo, version: &str) -> Vec<String> {
    info.crd
        .as_ref()
        .and_then(|c| c.selectable_fields.get(version))
        .cloned()
        .unwrap_or_default()
}

fn schema_of<'a>(info: &'a ResourceInfo, version: &str) -> Option<&'a Value> {
    info.crd.as_ref().and_then(|c| c.schemas.get(version))
}

/// Decoding: unknown fields are reported per `fieldValidation` (`Strict`: 400, or for a patch
/// (`patched`) the 422 kube-apiserver's patch handler returns on its `patch` field; `Warn`, the
/// default: warnings; `Ignore`). Custom resources are also pruned and defaulted by their schema;
/// built-in objects are checked against k8s-openapi's schemas (in their stored version) and kept
/// as sent.
pub fn decode(
    info: &ResourceInfo,
    version: &str,
    obj: &mut Value,
    field_validation: Option<&str>,
    patched: bool,
) -> Result<Vec<String>, ApiError> {
    // The patched object as sent, for a strict patch's error (only then: the copy costs).
    let sent = (patched && field_validation == Some("Strict")).then(|| obj.to_string());
    let unknown = match schema_of(info, version) {
        Some(schema) => schema::prune_and_default(obj, schema),
        // Built-in kinds decode into Go types first: a value of the wrong type is a 400.
        None if info.crd.is_none() => {
            crate::decode::builtin(&info.storage.group, &info.storage_version, &info.kind, obj).map_err(|e| {
                ApiError::BadRequest(format!(
                    "{} in version \"{version}\" cannot be handled as a {}: {e}",
                    info.kind, info.kind
                ))
            })?
        }
        None => return Ok(Vec::new()),
    };
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    let listed: Vec<String> = unknown.iter().map(|f| format!("unknown field \"{f}\"")).collect();
    match field_validation.unwrap_or("Warn") {
        "Strict" if sent.is_some() => Err(ApiError::invalid(
            "",
            "",
            "",
            vec![FieldCause::invalid(
                "patch",
                &Value::String(sent.unwrap_or_default()),
                format!("strict decoding error: {}", listed.join(", ")),
            )],
        )),
        "Strict" => Err(ApiError::BadRequest(format!(
            "{} in version \"{version}\" cannot be handled as a {}: strict decoding error: {}",
            info.kind,
            info.kind,
            listed.join(", ")
        ))),
        "Ignore" => Ok(Vec::new()),
        _ => Ok(listed),
    }
}

/// Pruning and defaulting again after mutating admission (webhooks may add anything).
pub fn prune(info: &ResourceInfo, version: &str, obj: &mut Value) {
    if let Some(schema) = schema_of(info, version) {
        schema::prune_and_default(obj, schema);
    }
}

/// The CRD's OpenAPI validation; on updates (`old`), with CRDValidationRatcheting (GA in 1.33):
/// errors in values unchanged from the old object are not reported.
pub fn validate(info: &ResourceInfo, version: &str, obj: &Value, old: Option<&Value>, causes: &mut Vec<FieldCause>) {
    if let Some(schema) = schema_of(info, version) {
        causes.extend(schema::validate_update(obj, old, schema));
    }
}
