//! OpenAPI documents: `/openapi/v2` (kubectl asks for protobuf; an empty document, so kubectl's
//! client-side validation finds nothing to check) and `/openapi/v3` with one document per
//! group/version: paths with `x-kubernetes-group-version-kind` and the schemas of the built-in
//! kinds (from k8s-openapi) and of CRDs (their `openAPIV3Schema`), which `kubectl explain` reads.

use serde_json::{Map, Value, json};

use crate::discovery::GIT_VERSION;
use crate::registry::{Registry, api_version};

/// The media type of the protobuf `/openapi/v2` response (clients ask with `...v2@v1.0+protobuf`,
/// which Go's mime parser cannot read back, so the apiserver answers with this spelling).
pub const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// A minimal OpenAPI v2 document: `swagger: "2.0"` and `info`, nothing else.
pub fn v2_json() -> Value {
    json!({ "swagger": "2.0", "info": { "title": "Kubernetes", "version": GIT_VERSION }, "paths": {}, "definitions": {} })
}

/// The same document as gnostic's `openapi_v2.Document` protobuf (field 1 `swagger`, field 2
/// `info` with `title` = 1 and `version` = 2).
pub fn v2_protobuf() -> Vec<u8> {
    fn field(out: &mut Vec<u8>, number: u8, bytes: &[u8]) {
        out.push((number << 3) | 2);
        let mut len = bytes.len();
        loop {
            let b = (len & 0x7f) as u8;
            len >>= 7;
            if len == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        }
        out.extend_from_slice(bytes);
    }
    let mut info = Vec::new();
    field(&mut info, 1, b"Kubernetes");
    field(&mut info, 2, GIT_VERSION.as_bytes());
    let mut doc = Vec::new();
    field(&mut doc, 1, b"2.0");
    field(&mut doc, 2, &info);
    doc
}

fn reversed_group(group: &str) -> String {
    if group.is_empty() {
        return "io.k8s.api.core".into();
    }
    group.split('.').rev().collect::<Vec<_>>().join(".")
}

/// The document of one group/version, or None if nothing is served there.
pub fn v3_group_version(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let infos = reg.in_group_version(group, version);
    if infos.is_empty() {
        return None;
    }
    let mut schemas: Map<String, Value> = crate::openapi_builtin::schemas_for(group, version)
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for info in infos {
        let Some(schema) = info.crd.as_ref().and_then(|c| c.schemas.get(version)) else {
            continue;
        };
        let mut s = schema.clone();
        if let Value::Object(m) = &mut s {
            m.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{ "group": group, "version": version, "kind": info.kind }]),
            );
            if let Some(Value::Object(props)) = m.get_mut("properties") {
                props.entry("apiVersion").or_insert(json!({ "type": "string", "description": "APIVersion defines the versioned schema of this representation of an object." }));
                props.entry("kind").or_insert(json!({ "type": "string", "description": "Kind is a string value representing the REST resource this object represents." }));
                props.insert("metadata".into(), json!({ "type": "object", "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata" }));
            }
        }
        schemas.insert(format!("{}.{}.{}", reversed_group(group), version, info.kind), s);
    }
    let mut paths = Map::new();
    for info in reg.in_group_version(group, version) {
        let schema_name = schemas
            .iter()
            .find(|(_, s)| {
                s.get("x-kubernetes-group-version-kind")
                    .and_then(Value::as_array)
                    .is_some_and(|a| a.iter().any(|g| g["kind"] == info.kind.as_str()))
            })
            .map(|(n, _)| n.clone())
            .unwrap_or_default();
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let scope = if info.namespaced {
            format!("{prefix}/namespaces/{{namespace}}")
        } else {
            prefix
        };
        let gvk = json!({ "group": group, "version": version, "kind": info.kind });
        let response = if schemas.contains_key(&schema_name) {
            json!({ "200": { "description": "OK", "content": { "application/json": { "schema": { "$ref": format!("#/components/schemas/{schema_name}") } } } } })
        } else {
            json!({ "200": { "description": "OK" } })
        };
        // kubectl reads `fieldValidation` here to decide that the server checks unknown fields.
        let write_params = vec![
            json!({ "name": "dryRun", "in": "query", "schema": { "type": "string", "uniqueItems": true } }),
            json!({ "name": "fieldValidation", "in": "query", "schema": { "type": "string", "uniqueItems": true } }),
        ];
        let op = |action: &str, params: &[Value]| json!({ "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk, "parameters": params, "responses": response });
        paths.insert(
            format!("{scope}/{}", info.resource),
            json!({ "get": op("list", &[]), "post": op("post", &write_params) }),
        );
        paths.insert(
            format!("{scope}/{}/{{name}}", info.resource),
            json!({ "get": op("get", &[]), "put": op("put", &write_params), "patch": op("patch", &write_params), "delete": op("delete", &[]) }),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": { "title": "Kubernetes", "version": GIT_VERSION },
        "paths": paths,
        "components": { "schemas": schemas }
    }))
}

/// A stable hash for `serverRelativeURL`s, so clients re-fetch a document when it changes.
fn hash(v: &Value) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in v.to_string().bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016X}")
}

/// `/openapi/v3`: the list of group/version documents.
pub fn v3_root(reg: &Registry) -> Value {
    let mut paths = Map::new();
    for (group, versions) in reg.groups() {
        for v in versions {
            let Some(doc) = v3_group_version(reg, &group, &v) else {
                continue;
            };
            let key = if group.is_empty() {
                format!("api/{v}")
            } else {
                format!("apis/{}", api_version(&group, &v))
            };
            paths.insert(
                key.clone(),
                json!({ "serverRelativeURL": format!("/openapi/v3/{key}?hash={}", hash(&doc)) }),
            );
        }
    }
    json!({ "paths": paths })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_protobuf_encodes_swagger_and_info() {
        let pb = v2_protobuf();
        assert_eq!(&pb[..5], &[0x0a, 3, b'2', b'.', b'0']);
        assert_eq!(pb[5], 0x12);
    }

    #[test]
    fn v3_root_lists_core() {
        let root = v3_root(&Registry::builtin());
        assert!(
            root["paths"]["api/v1"]["serverRelativeURL"]
                .as_str()
                .unwrap()
                .starts_with("/openapi/v3/api/v1?hash=")
        );
        assert!(root["paths"].get("apis/apps/v1").is_some());
    }
}
