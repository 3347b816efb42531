//! Schemas of embedded core/v1 objects (affinity, volumes, sidecars, pod templates, ...).
//!
//! Kubeflow's CRD inlines the full core/v1 schemas and weighs 836 KB, too big for a plain `kubectl apply`.
//! Ours declares these fields as `x-kubernetes-preserve-unknown-fields` objects, and our validation decodes
//! them into the k8s-openapi types instead, reporting the exact path of anything wrong.
//!
//! The helpers below emit both at once: the compact CRD schema, plus the full k8s-openapi schema under
//! [`FULL_SCHEMA_KEY`]. kube drops that unknown key when it turns the schema into the CRD's
//! `JSONSchemaProps`, so the CRD stays small, while [`crate::structural`] reads it from the schema it
//! generates itself to check the embedded objects field by field.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{Map, Value};

/// Key under which the full schema of an embedded object travels.
pub(crate) const FULL_SCHEMA_KEY: &str = "x-spark-operator-full-schema";
/// Marks an embedded object whose required fields are not enforced (pod templates: Spark fills them in).
pub(crate) const PARTIAL_KEY: &str = "x-spark-operator-partial";

fn preserved_object(full: Schema, partial: bool) -> Schema {
    let mut map = Map::new();
    map.insert("type".into(), Value::from("object"));
    map.insert("x-kubernetes-preserve-unknown-fields".into(), Value::Bool(true));
    map.insert(FULL_SCHEMA_KEY.into(), full.to_value());
    if partial {
        map.insert(PARTIAL_KEY.into(), Value::Bool(true));
    }
    Schema::from(map)
}

fn list_of(items: Schema) -> Schema {
    let mut map = Map::new();
    map.insert("type".into(), Value::from("array"));
    map.insert("items".into(), items.to_value());
    Schema::from(map)
}

/// One embedded core/v1 object.
pub(crate) fn object<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    preserved_object(generator.subschema_for::<T>(), false)
}

/// A list of embedded core/v1 objects.
pub(crate) fn list<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    list_of(object::<T>(generator))
}

/// A pod template: its required fields are not enforced, since Spark merges it with the pod it builds.
pub(crate) fn pod_template<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    preserved_object(generator.subschema_for::<T>(), true)
}

/// A map of Kubernetes quantities (a ResourceList), with a one-line description instead of the Quantity
/// type's page-long one, which would be repeated in the CRD.
pub(crate) fn quantity_map(_: &mut SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "type": "object",
        "additionalProperties": {
            "x-kubernetes-int-or-string": true,
            "description": "A Kubernetes quantity, e.g. 500m, 2 or 4Gi."
        }
    })
}
