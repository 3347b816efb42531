//! Parsing of request paths and query strings into what the handlers act on.

use std::collections::HashMap;

use percent_encoding::percent_decode_str;

/// A path that addresses a resource (or one object, or a subresource of one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// Came in through the legacy `/watch/` prefix.
    pub legacy_watch: bool,
}

/// What a request path is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Version,
    Health(String),
    /// `/api`
    CoreVersions,
    /// `/apis`
    Groups,
    /// `/apis/<group>`
    Group(String),
    /// `/api/v1` or `/apis/<group>/<version>`
    GroupVersion {
        group: String,
        version: String,
    },
    OpenApiV2,
    OpenApiV3Root,
    OpenApiV3 {
        group: String,
        version: String,
    },
    Resource(ResourcePath),
    NotFound,
}

pub fn route(path: &str) -> Route {
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| percent_decode_str(s).decode_utf8_lossy().into_owned())
        .collect();
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    match s.as_slice() {
        ["version"] => Route::Version,
        [h @ ("healthz" | "livez" | "readyz"), ..] => Route::Health(h.to_string()),
        ["api"] => Route::CoreVersions,
        ["apis"] => Route::Groups,
        ["apis", g] => Route::Group(g.to_string()),
        ["openapi", "v2"] => Route::OpenApiV2,
        ["openapi", "v3"] => Route::OpenApiV3Root,
        ["openapi", "v3", "api", v] => Route::OpenApiV3 {
            group: String::new(),
            version: v.to_string(),
        },
        ["openapi", "v3", "apis", g, v] => Route::OpenApiV3 {
            group: g.to_string(),
            version: v.to_string(),
        },
        ["api", v] => Route::GroupVersion {
            group: String::new(),
            version: v.to_string(),
        },
        ["apis", g, v] => Route::GroupVersion {
            group: g.to_string(),
            version: v.to_string(),
        },
        ["api", v, rest @ ..] => resource_route("", v, rest),
        ["apis", g, v, rest @ ..] => resource_route(g, v, rest),
        _ => Route::NotFound,
    }
}

fn resource_route(group: &str, version: &str, rest: &[&str]) -> Route {
    let (legacy_watch, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        _ => (false, rest),
    };
    let mk = |ns: Option<&str>, resource: &str, name: Option<&str>, sub: Option<&str>| {
        Route::Resource(ResourcePath {
            group: group.to_string(),
            version: version.to_string(),
            resource: resource.to_string(),
            namespace: ns.map(str::to_string),
            name: name.map(str::to_string),
            subresource: sub.map(str::to_string),
            legacy_watch,
        })
    };
    match rest {
        // namespaces/<ns>/<resource>[/<name>[/<sub>]] — but namespaces/<ns>/status|finalize is
        // the namespace's own subresource.
        ["namespaces", ns, sub @ ("status" | "finalize")] if group.is_empty() => {
            mk(None, "namespaces", Some(ns), Some(sub))
        }
        ["namespaces", ns, resource] => mk(Some(ns), resource, None, None),
        ["namespaces", ns, resource, name] => mk(Some(ns), resource, Some(name), None),
        ["namespaces", ns, resource, name, sub] => mk(Some(ns), resource, Some(name), Some(sub)),
        [resource] => mk(None, resource, None, None),
        [resource, name] => mk(None, resource, Some(name), None),
        [resource, name, sub] => mk(None, resource, Some(name), Some(sub)),
        // `.../proxy/<any path>`: the rest is the proxied path, read from the raw URI.
        ["namespaces", ns, resource, name, "proxy", _, ..] => mk(Some(ns), resource, Some(name), Some("proxy")),
        [resource, name, "proxy", _, ..] => mk(None, resource, Some(name), Some("proxy")),
        _ => Route::NotFound,
    }
}

/// Query parameters (the last value wins, as Go's url.Values.Get returns the first; clients
/// never repeat the ones read here).
#[derive(Debug, Default, Clone)]
pub struct Query(HashMap<String, String>);

impl Query {
    pub fn parse(q: Option<&str>) -> Self {
        let mut map = HashMap::new();
        for pair in q.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let dec = |s: &str| {
                percent_decode_str(&s.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            };
            map.entry(dec(k)).or_insert_with(|| dec(v));
        }
        Self(map)
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }

    pub fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1" | "True"))
    }

    pub fn non_empty(&self, k: &str) -> Option<String> {
        self.get(k).filter(|v| !v.is_empty()).map(str::to_string)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let Route::Resource(r) = route("/api/v1/namespaces/default/pods/p/status") else {
            panic!()
        };
        assert_eq!(
            (r.resource.as_str(), r.name.as_deref(), r.subresource.as_deref()),
            ("pods", Some("p"), Some("status"))
        );
        assert_eq!(r.namespace.as_deref(), Some("default"));
        let Route::Resource(r) = route("/api/v1/namespaces/foo") else {
            panic!()
        };
        assert_eq!(
            (r.resource.as_str(), r.name.as_deref(), r.namespace),
            ("namespaces", Some("foo"), None)
        );
        let Route::Resource(r) = route("/api/v1/namespaces/foo/finalize") else {
            panic!()
        };
        assert_eq!(
            (r.resource.as_str(), r.name.as_deref(), r.subresource.as_deref()),
            ("namespaces", Some("foo"), Some("finalize"))
        );
        let Route::Resource(r) = route("/apis/apps/v1/watch/namespaces/x/deployments") else {
            panic!()
        };
        assert!(r.legacy_watch);
        assert_eq!(
            route("/apis/apps/v1"),
            Route::GroupVersion {
                group: "apps".into(),
                version: "v1".into()
            }
        );
        let Route::Resource(r) = route("/api/v1/namespaces/d/pods/http:p:80/proxy/a/b/") else {
            panic!()
        };
        assert_eq!(
            (r.resource.as_str(), r.name.as_deref(), r.subresource.as_deref()),
            ("pods", Some("http:p:80"), Some("proxy"))
        );
        let Route::Resource(r) = route("/api/v1/nodes/n/proxy/metrics") else {
            panic!()
        };
        assert_eq!(
            (r.name.as_deref(), r.subresource.as_deref()),
            (Some("n"), Some("proxy"))
        );
        let q = Query::parse(Some("labelSelector=a%3Db%2Cc+in+(d)&watch=1"));
        assert_eq!(q.get("labelSelector"), Some("a=b,c in (d)"));
        assert!(q.flag("watch"));
    }
}
