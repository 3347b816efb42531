//! core/v1 Events as the kubelet, scheduler and node controllers record them (what
//! `kubectl describe` shows). Normal events can be switched off for big churn runs; warnings
//! are always recorded.

use serde_json::{Value, json};

use crate::registry::Gvr;
use crate::store::{Store, WriteOptions};

#[derive(Debug, Clone)]
pub(crate) struct Recorder {
    store: Store,
    component: String,
    host: Option<String>,
    normal: bool,
}

impl Recorder {
    pub fn new(store: Store, component: &str, host: Option<&str>, normal: bool) -> Self {
        Self {
            store,
            component: component.into(),
            host: host.map(str::to_string),
            normal,
        }
    }

    /// Records an event about `obj` (any object with apiVersion/kind/metadata).
    pub async fn record(
        &self,
        obj: &Value,
        kind: &str,
        field_path: Option<&str>,
        type_: &str,
        reason: &str,
        message: &str,
    ) {
        if type_ == "Normal" && !self.normal {
            return;
        }
        let name = crate::meta::name(obj);
        let namespace = match crate::meta::namespace(obj) {
            "" => "default",
            ns => ns,
        };
        let now = jiff::Timestamp::now();
        let mut involved = json!({
            "kind": kind,
            "name": name,
            "uid": crate::meta::uid(obj),
            // Objects of other groups (a Volcano PodGroup) keep theirs.
            "apiVersion": obj.get("apiVersion").and_then(Value::as_str).unwrap_or("v1"),
            "resourceVersion": crate::meta::resource_version(obj),
        });
        if !crate::meta::namespace(obj).is_empty() {
            involved["namespace"] = json!(namespace);
        }
        if let Some(fp) = field_path {
            involved["fieldPath"] = json!(fp);
        }
        let mut source = json!({ "component": self.component });
        if let Some(h) = &self.host {
            source["host"] = json!(h);
        }
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": { "name": format!("{name}.{:x}", now.as_nanosecond()), "namespace": namespace },
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "source": source,
            "firstTimestamp": crate::meta::rfc3339(now),
            "lastTimestamp": crate::meta::rfc3339(now),
            "count": 1,
            "type": type_,
            "eventTime": null,
            "reportingComponent": self.component,
            "reportingInstance": self.host.clone().unwrap_or_default(),
        });
        let opts = WriteOptions {
            field_manager: Some(self.component.clone()),
            ..Default::default()
        };
        if let Err(e) = self
            .store
            .create(&Gvr::new("", "v1", "events"), namespace, event, &opts)
            .await
        {
            // A namespace being deleted refuses new events; the real recorders drop them too.
            tracing::debug!(%reason, error = %e, "recording an event");
        }
    }
}
