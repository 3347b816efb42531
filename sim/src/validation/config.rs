//! ConfigMap and Secret validation as kube-apiserver 1.37 runs it (`ValidateConfigMap`,
//! `ValidateSecret` and their updates): keys, sizes, the keys each Secret type needs, and
//! `immutable`.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::fields::immutable;
use super::max_len_error;
use crate::status::FieldCause;

const CONFIG_KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";
/// `core.MaxSecretSize`, also the limit of a ConfigMap's data.
const MAX_SIZE: usize = 1024 * 1024;
const IMMUTABLE: &str = "field is immutable when `immutable` is set";

/// `validation.IsConfigMapKey`.
pub(super) fn config_key_errors(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if key.len() > 253 {
        errs.push(max_len_error(253));
    }
    if key.is_empty()
        || !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        errs.push(CONFIG_KEY_MSG.into());
    }
    if key == "." {
        errs.push("must not be '.'".into());
    } else if key == ".." {
        errs.push("must not be '..'".into());
    } else if key.starts_with("..") {
        errs.push("must not start with '..'".into());
    }
    errs
}

fn map_at<'a>(obj: &'a Value, key: &str) -> Option<&'a Map<String, Value>> {
    obj.get(key).and_then(Value::as_object)
}

/// The decoded size of a base64 value (what Go's `[]byte` holds).
fn decoded_len(v: &Value) -> usize {
    let s = v.as_str().unwrap_or_default();
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_or(s.len() * 3 / 4, |b| b.len())
}

fn too_long(field: &str) -> FieldCause {
    FieldCause {
        reason: "FieldValueTooLong".into(),
        field: field.into(),
        message: format!("Too long: may not be more than {MAX_SIZE} bytes"),
    }
}

/// `ValidateConfigMap`, without the metadata.
pub(super) fn config_map(obj: &Value, causes: &mut Vec<FieldCause>) {
    let data = map_at(obj, "data");
    let binary = map_at(obj, "binaryData");
    let mut total = 0;
    for (k, v) in data.into_iter().flatten() {
        for msg in config_key_errors(k) {
            causes.push(FieldCause::invalid(format!("data[{k}]"), &json!(k), msg));
        }
        if binary.is_some_and(|b| b.contains_key(k)) {
            causes.push(FieldCause::invalid(
                format!("data[{k}]"),
                &json!(k),
                "duplicate of key present in binaryData",
            ));
        }
        total += v.as_str().map_or(0, str::len);
    }
    for (k, v) in binary.into_iter().flatten() {
        for msg in config_key_errors(k) {
            causes.push(FieldCause::invalid(format!("binaryData[{k}]"), &json!(k), msg));
        }
        total += decoded_len(v);
    }
    if total > MAX_SIZE {
        // kube-apiserver's path for the whole object is empty.
        causes.push(too_long(""));
    }
}

/// `ValidateConfigMapUpdate`: an immutable ConfigMap keeps its data and stays immutable.
pub(super) fn config_map_update(old: &Value, new: &Value, causes: &mut Vec<FieldCause>) {
    if old.get("immutable") == Some(&json!(true)) {
        if new.get("immutable") != Some(&json!(true)) {
            causes.push(FieldCause::forbidden("immutable", IMMUTABLE));
        }
        for field in ["data", "binaryData"] {
            if normalized_map(old, field) != normalized_map(new, field) {
                causes.push(FieldCause::forbidden(field, IMMUTABLE));
            }
        }
    }
    config_map(new, causes);
}

/// A map field with a missing map and an empty one alike.
fn normalized_map(obj: &Value, key: &str) -> Map<String, Value> {
    map_at(obj, key).cloned().unwrap_or_default()
}

/// `ValidateSecret`, without the metadata. `stringData` is already folded into `data`.
pub(super) fn secret(obj: &Value, causes: &mut Vec<FieldCause>) {
    let data = map_at(obj, "data");
    let mut total = 0;
    for (k, v) in data.into_iter().flatten() {
        for msg in config_key_errors(k) {
            causes.push(FieldCause::invalid(format!("data[{k}]"), &json!(k), msg));
        }
        total += decoded_len(v);
    }
    if total > MAX_SIZE {
        causes.push(too_long("data"));
    }
    let has = |k: &str| data.is_some_and(|d| d.contains_key(k));
    let value = |k: &str| data.and_then(|d| d.get(k));
    match obj.get("type").and_then(Value::as_str).unwrap_or("") {
        "kubernetes.io/service-account-token" => {
            let sa = obj
                .pointer("/metadata/annotations/kubernetes.io~1service-account.name")
                .and_then(Value::as_str)
                .unwrap_or("");
            if sa.is_empty() {
                causes.push(FieldCause::required(
                    "metadata.annotations[kubernetes.io/service-account.name]",
                ));
            }
        }
        "kubernetes.io/dockercfg" => json_key(".dockercfg", value(".dockercfg"), causes),
        "kubernetes.io/dockerconfigjson" => json_key(".dockerconfigjson", value(".dockerconfigjson"), causes),
        // Either may be empty, but one must be there.
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            causes.push(FieldCause::required("data[username]"));
            causes.push(FieldCause::required("data[password]"));
        }
        "kubernetes.io/ssh-auth" if value("ssh-privatekey").is_none_or(|v| decoded_len(v) == 0) => {
            causes.push(FieldCause::required("data[ssh-privatekey]"));
        }
        "kubernetes.io/tls" => {
            for k in ["tls.crt", "tls.key"] {
                if !has(k) {
                    causes.push(FieldCause::required(format!("data[{k}]")));
                }
            }
        }
        _ => {}
    }
}

/// A Docker config key: present, and a JSON object once decoded.
fn json_key(key: &str, value: Option<&Value>, causes: &mut Vec<FieldCause>) {
    let field = format!("data[{key}]");
    let Some(v) = value else {
        causes.push(FieldCause::required(field));
        return;
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(v.as_str().unwrap_or_default())
        .unwrap_or_default();
    if let Err(e) = serde_json::from_slice::<Map<String, Value>>(&bytes) {
        causes.push(FieldCause::invalid(
            field,
            &json!("<secret contents redacted>"),
            e.to_string(),
        ));
    }
}

/// `ValidateSecretUpdate`: the type never changes; an immutable Secret keeps its data.
pub(super) fn secret_update(old: &Value, new: &Value, causes: &mut Vec<FieldCause>) {
    immutable("type", old.get("type"), new.get("type"), causes);
    if old.get("immutable") == Some(&json!(true)) {
        if new.get("immutable") != Some(&json!(true)) {
            causes.push(FieldCause::forbidden("immutable", IMMUTABLE));
        }
        if normalized_map(old, "data") != normalized_map(new, "data") {
            causes.push(FieldCause::forbidden("data", IMMUTABLE));
        }
    }
    secret(new, causes);
}
