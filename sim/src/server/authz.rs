//! The request attributes the authorizer decides on, derived from the request as
//! kube-apiserver's `RequestInfoFactory` does.

use http::Method;

use super::proxy;
use super::request::{Query, Route};
use crate::auth::Attributes;

/// The attributes of a request: resource requests under `/api/v1/...` and
/// `/apis/<group>/<version>/...`; everything else (discovery, `/version`, health, OpenAPI) is a
/// non-resource request whose verb is the lower-cased method.
pub(crate) fn attributes(method: &Method, path: &str, route: &Route, query: &Query) -> Attributes {
    let Route::Resource(p) = route else {
        return Attributes::non_resource(&method.as_str().to_ascii_lowercase(), path);
    };
    let mut name = p.name.clone().unwrap_or_default();
    let verb = if p.subresource.as_deref() == Some(proxy::SUBRESOURCE) {
        proxy::verb(method)
    } else if p.legacy_watch {
        "watch"
    } else {
        match (method.as_str(), name.is_empty()) {
            ("GET" | "HEAD", true) if query.flag("watch") => "watch",
            ("GET" | "HEAD", true) => "list",
            ("GET" | "HEAD", false) => "get",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", false) => "delete",
            ("DELETE", true) => "deletecollection",
            _ => "",
        }
    };
    // A list or watch of one name by field selector is about that name.
    if name.is_empty()
        && matches!(verb, "list" | "watch")
        && let Some(fs) = query.get("fieldSelector")
        && let Some(n) = fs.split(',').find_map(|t| {
            t.trim()
                .strip_prefix("metadata.name==")
                .or_else(|| t.trim().strip_prefix("metadata.name="))
        })
        && !n.is_empty()
        && !n.contains('/')
    {
        name = n.to_string();
    }
    // A namespace's own namespace is itself.
    let namespace = match (&p.namespace, p.group.is_empty() && p.resource == "namespaces") {
        (Some(ns), _) => ns.clone(),
        (None, true) => name.clone(),
        (None, false) => String::new(),
    };
    Attributes {
        verb: verb.to_string(),
        resource_request: true,
        api_group: p.group.clone(),
        api_version: p.version.clone(),
        resource: p.resource.clone(),
        subresource: p.subresource.clone().unwrap_or_default(),
        namespace,
        name,
        path: path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::request::route;

    fn attrs(method: Method, path: &str, query: Option<&str>) -> Attributes {
        attributes(&method, path, &route(path), &Query::parse(query))
    }

    #[test]
    fn request_info_as_kube_apiserver() {
        let a = attrs(Method::GET, "/api/v1/namespaces/ns/pods", Some("watch=true"));
        assert_eq!((a.verb.as_str(), a.namespace.as_str()), ("watch", "ns"));
        let a = attrs(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            Some("fieldSelector=metadata.name%3Dp"),
        );
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("list", "p"));
        let a = attrs(Method::GET, "/api/v1/namespaces/ns/pods/p/log", None);
        assert_eq!((a.verb.as_str(), a.subresource.as_str()), ("get", "log"));
        let a = attrs(Method::DELETE, "/apis/apps/v1/namespaces/ns/deployments", None);
        assert_eq!((a.verb.as_str(), a.api_group.as_str()), ("deletecollection", "apps"));
        let a = attrs(Method::GET, "/api/v1/namespaces/foo", None);
        assert_eq!(
            (a.resource.as_str(), a.namespace.as_str(), a.name.as_str()),
            ("namespaces", "foo", "foo")
        );
        let a = attrs(Method::GET, "/apis/apps/v1", None);
        assert!(!a.resource_request);
        assert_eq!((a.verb.as_str(), a.path.as_str()), ("get", "/apis/apps/v1"));
        let a = attrs(Method::POST, "/api/v1/namespaces/ns/serviceaccounts/sa/token", None);
        assert_eq!(
            (a.verb.as_str(), a.resource.as_str(), a.subresource.as_str()),
            ("create", "serviceaccounts", "token")
        );
    }
}
