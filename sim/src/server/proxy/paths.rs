//! URL path handling as the apiserver's proxy does it in Go: the sub-path after `/proxy`
//! (`getRequestOptions`), `path.Clean`/`path.Join`, `JoinPreservingTrailingSlash`, the
//! escaping of `url.URL.EscapedPath`, and the `Location` rewriting of `proxy.Transport`.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// What Go's `shouldEscape(c, encodePath)` escapes: everything but unreserved characters and
/// `$&+,/:;=@`.
const PATH_ESCAPE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'$')
    .remove(b'&')
    .remove(b'+')
    .remove(b',')
    .remove(b'/')
    .remove(b':')
    .remove(b';')
    .remove(b'=')
    .remove(b'@');

/// The decoded sub-path after the first `prefix_segments` segments of a (raw) request path, with
/// a leading `/` when non-empty and the request's trailing `/` kept.
pub fn sub_path(raw_path: &str, prefix_segments: usize) -> String {
    let decoded = percent_decode_str(raw_path).decode_utf8_lossy();
    let trimmed = decoded.trim_matches('/');
    let parts: Vec<&str> = if trimmed.is_empty() {
        Vec::new()
    } else {
        trimmed.split('/').collect()
    };
    let mut p = parts.get(prefix_segments..).unwrap_or_default().join("/");
    if !p.is_empty() && !p.starts_with('/') {
        p.insert(0, '/');
    }
    if decoded.ends_with('/') && !p.ends_with('/') {
        p.push('/');
    }
    p
}

/// Go's `path.Clean`.
pub fn clean(p: &str) -> String {
    if p.is_empty() {
        return ".".into();
    }
    let rooted = p.starts_with('/');
    let mut out: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if out.last().is_some_and(|s| *s != "..") {
                    out.pop();
                } else if !rooted {
                    out.push("..");
                }
            }
            s => out.push(s),
        }
    }
    let joined = out.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

/// Go's `path.Join`: the non-empty elements joined by `/` and cleaned; empty if all are empty.
pub fn join(elems: &[&str]) -> String {
    let non_empty: Vec<&str> = elems.iter().copied().filter(|e| !e.is_empty()).collect();
    if non_empty.is_empty() {
        return String::new();
    }
    clean(&non_empty.join("/"))
}

/// `net.JoinPreservingTrailingSlash`.
pub fn join_preserving_trailing_slash(elems: &[&str]) -> String {
    let mut result = join(elems);
    if let Some(last) = elems.iter().rev().find(|e| !e.is_empty())
        && last.ends_with('/')
        && !result.ends_with('/')
    {
        result.push('/');
    }
    result
}

/// The escaped form of a decoded path (Go's `EscapedPath` without a `RawPath`).
pub fn escape(path: &str) -> String {
    utf8_percent_encode(path, PATH_ESCAPE).to_string()
}

/// `proxy.Transport.rewriteURL` for a `Location` answered by the backend: an absolute path on
/// the backend (or on the apiserver's own host) is put under the proxy prefix, so clients
/// following the redirect stay on the proxy. The transport's scheme and host are always empty
/// in the apiserver (a server request's URL has none), which this relies on.
pub fn rewrite_location(target: &str, backend_host: &str, request_host: &str, prepend: &str) -> String {
    let (scheme, host, rest) = split_url(target);
    let path_end = rest.find(['?', '#']).unwrap_or(rest.len());
    let (path, suffix) = rest.split_at(path_end);
    let different_host = !host.is_empty() && host != backend_host && host != request_host;
    if different_host || !path.starts_with('/') {
        return target.to_string();
    }
    let keep_origin = host == request_host;
    let origin = match (keep_origin, scheme) {
        (true, Some(s)) => format!("{s}://{host}"),
        (true, None) if !host.is_empty() => format!("//{host}"),
        _ => String::new(),
    };
    if path.starts_with(prepend) {
        return format!("{origin}{path}{suffix}");
    }
    let mut new_path = join(&[prepend, path]);
    if path.ends_with('/') && !new_path.ends_with('/') {
        new_path.push('/');
    }
    format!("{origin}{new_path}{suffix}")
}

/// (scheme, host, path-and-rest) of an absolute, scheme-relative or path-only URL.
fn split_url(target: &str) -> (Option<&str>, &str, &str) {
    let scheme_end = target.find("://").filter(|i| {
        let s = &target[..*i];
        !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    let (scheme, after) = match scheme_end {
        Some(i) => (Some(&target[..i]), &target[i + 3..]),
        None => match target.strip_prefix("//") {
            Some(after) => (None, after),
            None => return (None, "", target),
        },
    };
    let host_end = after.find(['/', '?', '#']).unwrap_or(after.len());
    (scheme, &after[..host_end], &after[host_end..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_paths() {
        let p = "/api/v1/namespaces/d/pods/p:80/proxy/some/path";
        assert_eq!(sub_path(p, 7), "/some/path");
        assert_eq!(sub_path("/api/v1/namespaces/d/pods/p/proxy", 7), "");
        assert_eq!(sub_path("/api/v1/namespaces/d/pods/p/proxy/", 7), "/");
        assert_eq!(sub_path("/api/v1/nodes/n/proxy/a/b/", 5), "/a/b/");
        assert_eq!(sub_path("/api/v1/nodes/n/proxy/a%20b", 5), "/a b");
    }

    #[test]
    fn go_paths() {
        assert_eq!(clean("/a//b/./c/.."), "/a/b");
        assert_eq!(clean("/../x"), "/x");
        assert_eq!(clean("a/../.."), "..");
        assert_eq!(join(&["", ""]), "");
        assert_eq!(join(&["", "/"]), "/");
        assert_eq!(join_preserving_trailing_slash(&["", "/a/b/"]), "/a/b/");
        assert_eq!(join_preserving_trailing_slash(&["", ""]), "");
        assert_eq!(escape("/a b/c?d/é"), "/a%20b/c%3Fd/%C3%A9");
    }

    #[test]
    fn locations_are_rewritten_under_the_proxy() {
        let prepend = "/api/v1/namespaces/d/pods/p:80/proxy";
        let host = "127.0.0.9:80";
        let api = "127.0.0.1:6443";
        assert_eq!(
            rewrite_location("/login?x=1", host, api, prepend),
            format!("{prepend}/login?x=1")
        );
        assert_eq!(
            rewrite_location("http://127.0.0.9:80/a/", host, api, prepend),
            format!("{prepend}/a/")
        );
        assert_eq!(
            rewrite_location("https://example.com/a", host, api, prepend),
            "https://example.com/a"
        );
        assert_eq!(rewrite_location("relative/x", host, api, prepend), "relative/x");
        assert_eq!(
            rewrite_location(&format!("{prepend}/b"), host, api, prepend),
            format!("{prepend}/b")
        );
        assert_eq!(
            rewrite_location("https://127.0.0.1:6443/c", host, api, prepend),
            format!("https://127.0.0.1:6443{prepend}/c")
        );
    }
}
