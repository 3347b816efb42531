//! `$(VAR)` expansion as the kubelet applies it to `env` values, `command` and `args`
//! (Kubernetes' `third_party/forked/golang/expansion`): `$(NAME)` becomes NAME's value when NAME is
//! defined and stays as written when it is not; `$$` is an escaped `$`; anything else is literal.

/// Expands `input` with `lookup` (None: not defined).
pub(crate) fn expand<'a>(input: &str, lookup: impl Fn(&str) -> Option<&'a str>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        match after.chars().next() {
            // `$$` is one literal `$`.
            Some('$') => {
                out.push('$');
                rest = &after[1..];
            }
            Some('(') => match after.find(')') {
                Some(close) => {
                    let name = &after[1..close];
                    match lookup(name) {
                        Some(value) => out.push_str(value),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &after[close + 1..];
                }
                // Unterminated: the rest is literal.
                None => {
                    out.push('$');
                    out.push_str(after);
                    rest = "";
                }
            },
            // A lone `$` (or one before another character) is literal.
            _ => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Expands with the environment built so far, where a later entry of the same name wins.
pub(crate) fn expand_with_env(input: &str, env: &[(String, String)]) -> String {
    expand(input, |name| {
        env.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Vec<(String, String)> {
        vec![
            ("A".into(), "1".into()),
            ("B".into(), "two".into()),
            ("A".into(), "3".into()),
        ]
    }

    #[test]
    fn expands_as_the_kubelet_does() {
        let e = env();
        let x = |s: &str| expand_with_env(s, &e);
        assert_eq!(x("$(A)-$(B)"), "3-two");
        assert_eq!(x("$(UNDEFINED)"), "$(UNDEFINED)");
        assert_eq!(x("$$(A)"), "$(A)");
        assert_eq!(x("$$$(A)"), "$3");
        assert_eq!(x("cost $5"), "cost $5");
        assert_eq!(x("$(A"), "$(A");
        assert_eq!(x("end$"), "end$");
        assert_eq!(x("$()"), "$()");
        assert_eq!(x("plain"), "plain");
    }
}
