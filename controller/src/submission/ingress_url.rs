//! Ingress URL formats (`--ingress-url-format`, `driverIngressOptions[].ingressURLFormat`), read exactly as
//! Kubeflow reads them (`getDriverIngressURL` in `driveringress.go`): the `{{$appName}}`, `{{$appNamespace}}`
//! and `{{$appId}}` placeholders substituted (spaces inside the braces allowed), the result parsed with Go's
//! `net/url.Parse`, and parsed again with `http://` in front when it has no scheme.
//!
//! The host becomes the Ingress rule's host, the path its path (and `spark.ui.proxyBase`), the URL as Go
//! prints it (`URL.String`) `status.driverInfo.webUIIngressAddress`. Go's parser is followed where it
//! decides those three, its quirks included: `host:8080/path` without a scheme reads `host` as the scheme
//! and gives no host at all, as in Kubeflow.

/// A parsed ingress URL: what Kubeflow reads from Go's `url.URL`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IngressUrl {
    /// `URL.Scheme`, lower-cased.
    pub scheme: String,
    /// `URL.Host`: the host, with its port if one was given.
    pub host: String,
    /// `URL.Path`, unescaped.
    pub path: String,
    /// `URL.String()`.
    pub address: String,
}

/// Why a URL format gives no URL for an application: Go's `url.Parse` error, as Go words it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("parse {url:?}: {reason}")]
pub struct UrlError {
    pub url: String,
    pub reason: String,
}

/// The URL of `format` for an application (Kubeflow's `getDriverIngressURL`).
pub fn ingress_url(format: &str, app_name: &str, app_namespace: &str, app_id: &str) -> Result<IngressUrl, UrlError> {
    let url = substitute(format, app_name, app_namespace, app_id);
    let parsed = parse(&url)?;
    if !parsed.scheme.is_empty() {
        return Ok(parsed.finish());
    }
    // No scheme: `http://` in front, "so url.Parse can function correctly".
    Ok(parse(&format!("http://{url}"))?.finish())
}

/// Replaces each `{{ $name }}` placeholder (any spaces inside the braces) as Kubeflow's regular expressions
/// `{{\s*[$]appName\s*}}` etc. do; anything else is left as written.
fn substitute(format: &str, app_name: &str, app_namespace: &str, app_id: &str) -> String {
    let mut out = String::with_capacity(format.len() + 32);
    let mut rest = format;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let replaced = after.find("}}").and_then(|end| {
            let value = match after[..end].trim_matches(is_go_space) {
                "$appName" => app_name,
                "$appNamespace" => app_namespace,
                "$appId" => app_id,
                _ => return None,
            };
            Some((value, end))
        });
        match replaced {
            Some((value, end)) => {
                out.push_str(value);
                rest = &after[end + 2..];
            }
            None => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Go's regexp `\s`: `[\t\n\f\r ]`.
fn is_go_space(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\x0c' | '\r' | ' ')
}

/// What `url.Parse` gives, before `String()`.
struct Parsed {
    scheme: String,
    opaque: String,
    user: Option<String>,
    host: String,
    omit_host: bool,
    path: String,
    raw_path: String,
    force_query: bool,
    raw_query: String,
    fragment: String,
}

impl Parsed {
    fn finish(self) -> IngressUrl {
        let address = self.string();
        IngressUrl {
            scheme: self.scheme,
            host: self.host,
            path: self.path,
            address,
        }
    }

    /// `URL.String()`.
    fn string(&self) -> String {
        let mut buf = String::new();
        if !self.scheme.is_empty() {
            buf.push_str(&self.scheme);
            buf.push(':');
        }
        if !self.opaque.is_empty() {
            buf.push_str(&self.opaque);
        } else {
            let authority = !self.scheme.is_empty() || !self.host.is_empty() || self.user.is_some();
            // Go: "Omit empty host" for a scheme with an absolute path and nothing before it.
            let omitted = self.omit_host && self.host.is_empty() && self.user.is_none();
            if authority && !omitted {
                if !self.host.is_empty() || !self.path.is_empty() || self.user.is_some() {
                    buf.push_str("//");
                }
                if let Some(user) = &self.user {
                    buf.push_str(user);
                    buf.push('@');
                }
                buf.push_str(&self.host);
            }
            let path = self.escaped_path();
            if !path.is_empty() && !path.starts_with('/') && !self.host.is_empty() {
                buf.push('/');
            }
            if buf.is_empty() && path.split('/').next().is_some_and(|s| s.contains(':')) {
                buf.push_str("./");
            }
            buf.push_str(&path);
        }
        if self.force_query || !self.raw_query.is_empty() {
            buf.push('?');
            buf.push_str(&self.raw_query);
        }
        if !self.fragment.is_empty() {
            buf.push('#');
            buf.push_str(&self.fragment);
        }
        buf
    }

    /// `URL.EscapedPath()`.
    fn escaped_path(&self) -> String {
        if !self.raw_path.is_empty()
            && valid_encoded_path(&self.raw_path)
            && unescape(&self.raw_path, Mode::Path).as_deref() == Ok(self.path.as_str())
        {
            return self.raw_path.clone();
        }
        if self.path == "*" {
            return "*".to_owned();
        }
        escape_path(&self.path)
    }
}

/// `url.Parse`.
fn parse(raw: &str) -> Result<Parsed, UrlError> {
    let error = |reason: &str| UrlError {
        url: raw.to_owned(),
        reason: reason.to_owned(),
    };
    let (without_fragment, fragment) = raw.split_once('#').unwrap_or((raw, ""));
    if without_fragment.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(error("net/url: invalid control character in URL"));
    }
    let mut url = Parsed {
        scheme: String::new(),
        opaque: String::new(),
        user: None,
        host: String::new(),
        omit_host: false,
        path: String::new(),
        raw_path: String::new(),
        force_query: false,
        raw_query: String::new(),
        fragment: fragment.to_owned(),
    };
    if without_fragment == "*" {
        url.path = "*".to_owned();
        return Ok(url);
    }
    let (scheme, rest) = scheme_of(without_fragment).map_err(error)?;
    url.scheme = scheme.to_ascii_lowercase();
    let mut rest = rest;
    if rest.ends_with('?') && rest.matches('?').count() == 1 {
        url.force_query = true;
        rest = &rest[..rest.len() - 1];
    } else if let Some((before, query)) = rest.split_once('?') {
        url.raw_query = query.to_owned();
        rest = before;
    }
    if !rest.starts_with('/') {
        if !url.scheme.is_empty() {
            url.opaque = rest.to_owned();
            return Ok(url);
        }
        if rest.split('/').next().is_some_and(|s| s.contains(':')) {
            return Err(error("first path segment in URL cannot contain colon"));
        }
    }
    if (!url.scheme.is_empty() || !rest.starts_with("///")) && rest.starts_with("//") {
        let authority_and_path = &rest[2..];
        let (authority, path) = match authority_and_path.find('/') {
            Some(i) => authority_and_path.split_at(i),
            None => (authority_and_path, ""),
        };
        let (user, host) = match authority.rfind('@') {
            Some(i) => (Some(authority[..i].to_owned()), &authority[i + 1..]),
            None => (None, authority),
        };
        url.user = user;
        url.host = parse_host(host).map_err(|reason| error(&reason))?;
        rest = path;
    } else if !url.scheme.is_empty() && rest.starts_with('/') {
        url.omit_host = true;
    }
    url.path = unescape(rest, Mode::Path).map_err(|reason| error(&reason))?;
    if escape_path(&url.path) != rest {
        url.raw_path = rest.to_owned();
    }
    Ok(url)
}

/// Go's `getScheme`: letters, then digits, `+`, `-`, `.` (not first), up to a `:`. Anything else before a
/// colon means no scheme.
fn scheme_of(raw: &str) -> Result<(&str, &str), &'static str> {
    for (i, c) in raw.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i == 0 => return Ok(("", raw)),
            b'0'..=b'9' | b'+' | b'-' | b'.' => {}
            b':' if i == 0 => return Err("missing protocol scheme"),
            b':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

/// Go's `parseHost` for the forms an ingress URL can have: a port must be digits, and the name only
/// characters a host may hold.
fn parse_host(host: &str) -> Result<String, String> {
    if host.starts_with('[') {
        let Some(end) = host.rfind(']') else {
            return Err("missing ']' in host".to_owned());
        };
        let port = &host[end + 1..];
        if !valid_optional_port(port) {
            return Err(format!("invalid port {port:?} after host"));
        }
        return unescape(host, Mode::Host);
    }
    if let Some(i) = host.rfind(':') {
        let port = &host[i..];
        if !valid_optional_port(port) {
            return Err(format!("invalid port {port:?} after host"));
        }
    }
    unescape(host, Mode::Host)
}

fn valid_optional_port(port: &str) -> bool {
    port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Path,
    Host,
}

/// Go's `shouldEscape` for paths and hosts.
fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() {
        return false;
    }
    if mode == Mode::Host
        && matches!(
            c,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'['
                | b']'
                | b'<'
                | b'>'
                | b'"'
        )
    {
        return false;
    }
    match c {
        b'-' | b'_' | b'.' | b'~' => false,
        b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'?' | b'@' => mode != Mode::Path || c == b'?',
        _ => true,
    }
}

/// Go's `unescape`: `%XX` decoded; a bad escape, or in a host a character a host cannot hold, is an error.
fn unescape(s: &str, mode: Mode) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).filter(|h| h.iter().all(u8::is_ascii_hexdigit));
                let Some(hex) = hex else {
                    let bad: String = s[i..].chars().take(3).collect();
                    return Err(format!("invalid URL escape {bad:?}"));
                };
                let value = u8::from_str_radix(std::str::from_utf8(hex).unwrap_or("00"), 16).unwrap_or(0);
                out.push(value);
                i += 3;
            }
            c => {
                if mode == Mode::Host && c < 0x80 && should_escape(c, mode) {
                    return Err(format!(
                        "invalid character {:?} in host name",
                        char::from(c).to_string()
                    ));
                }
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Go's `escape(s, encodePath)`.
fn escape_path(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if should_escape(b, Mode::Path) {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

/// Go's `validEncoded(s, encodePath)`.
fn valid_encoded_path(s: &str) -> bool {
    s.bytes().all(|b| {
        matches!(
            b,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
                | b'['
                | b']'
                | b'%'
        ) || !should_escape(b, Mode::Path)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(format: &str) -> IngressUrl {
        ingress_url(format, "spark-pi", "default", "spark-0123").unwrap()
    }

    #[test]
    fn placeholders_are_kubeflows_with_spaces_allowed() {
        // driveringress_test.go's formats.
        let u = url("{{$appName}}.{{$appNamespace}}.example.com");
        assert_eq!(u.host, "spark-pi.default.example.com");
        assert_eq!(u.path, "");
        assert_eq!(u.address, "http://spark-pi.default.example.com");
        let u = url("{{ $appName }}.{{  $appNamespace }}.example.com/{{$appId}}");
        assert_eq!(u.host, "spark-pi.default.example.com");
        assert_eq!(u.path, "/spark-0123");
        // An unknown placeholder stays, and a host cannot hold braces (Go: invalid character in host name).
        let err = ingress_url("{{$other}}.example.com", "a", "b", "c").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"parse "http://{{$other}}.example.com": invalid character "{" in host name"#
        );
    }

    #[test]
    fn a_path_and_a_scheme_are_kept() {
        let u = url("ingress.example.com/{{$appNamespace}}/{{$appName}}");
        assert_eq!(u.host, "ingress.example.com");
        assert_eq!(u.path, "/default/spark-pi");
        assert_eq!(u.address, "http://ingress.example.com/default/spark-pi");
        let u = url("HTTPS://example.com/spark/{{$appName}}?x=1#top");
        assert_eq!(u.scheme, "https");
        assert_eq!(u.path, "/spark/spark-pi");
        assert_eq!(u.address, "https://example.com/spark/spark-pi?x=1#top");
        let u = url("example.com/");
        assert_eq!(u.path, "/");
        assert_eq!(u.address, "http://example.com/");
    }

    #[test]
    fn go_quirks_are_kept() {
        // `host:port/path` without a scheme: Go reads `spark-pi.example.com` as the scheme (an opaque URL,
        // no host), so Kubeflow makes a host-less rule. Same here.
        let u = url("{{$appName}}.example.com:8080/ui");
        assert_eq!(u.scheme, "spark-pi.example.com");
        assert_eq!(u.host, "");
        assert_eq!(u.path, "");
        assert_eq!(u.address, "spark-pi.example.com:8080/ui");
        // A leading digit means no scheme, and then a colon in the first segment is an error.
        let err = ingress_url("10.0.0.1:8080/{{$appName}}", "a", "b", "c").unwrap_err();
        assert_eq!(err.reason, "first path segment in URL cannot contain colon");
        // With a scheme, the port is checked.
        let err = ingress_url("http://example.com:80x/", "a", "b", "c").unwrap_err();
        assert_eq!(err.reason, r#"invalid port ":80x" after host"#);
        let u = url("http://example.com:8080/x");
        assert_eq!(u.host, "example.com:8080");
        // Escapes: the path is unescaped, the address keeps the valid encoding.
        let u = url("example.com/a%20b");
        assert_eq!(u.path, "/a b");
        assert_eq!(u.address, "http://example.com/a%20b");
        let err = ingress_url("example.com/%zz", "a", "b", "c").unwrap_err();
        assert_eq!(err.reason, r#"invalid URL escape "%zz""#);
        let err = ingress_url(":8080", "a", "b", "c").unwrap_err();
        assert_eq!(err.reason, "missing protocol scheme");
    }
}
