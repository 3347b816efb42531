//! The workspace's error convention: a `thiserror` message does not print the error's source.
//!
//! Whoever renders an error walks its `source()` chain (anyhow's `{:#}`/`Caused by:`, the
//! controller's status and Events, the CLI), so a message that also interpolates its source prints
//! the cause twice. This test reads every `#[error("...")]` under the workspace members' `src/`
//! and fails, naming `file:line`, when the message interpolates a field that is the source: a field
//! named `source`, or one marked `#[source]` or `#[from]` (thiserror's own rules).
//!
//! It is a small hand-written tokenizer rather than a parser crate: the attribute and the fields
//! right after it are all it needs, and it must not add a dependency.

// Test helpers may unwrap: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// A string literal's text between the quotes (escapes left as written).
    Str(String),
    /// Integer-like literal text; `.0` in `.0.name` comes out as `Punct('.')`, `Num("0")`.
    Num(String),
    Punct(char),
    /// Char literals and lifetimes: never interesting here, kept so positions stay honest.
    Other,
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    line: usize,
}

/// Splits Rust source into tokens, dropping comments (so doc text that mentions `#[error(` is
/// not read as an attribute) and keeping string literals whole.
fn tokenize(src: &str) -> Vec<Token> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    let count_lines = |from: usize, to: usize| chars[from..to].iter().filter(|&&c| c == '\n').count();
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        let start_line = line;
        if c == '\n' {
            line += 1;
            i += 1;
            continue;
        }
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'*') {
            // Block comments nest in Rust.
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            line += count_lines(start, i);
            continue;
        }
        // Raw strings: r"..", r#".."#, br#".."#.
        let raw_at = if c == 'r' {
            Some(i + 1)
        } else if c == 'b' && chars.get(i + 1) == Some(&'r') {
            Some(i + 2)
        } else {
            None
        };
        if let Some(mut j) = raw_at {
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) == Some(&'"') {
                let body = j + 1;
                let mut k = body;
                loop {
                    if k >= chars.len() {
                        break;
                    }
                    if chars[k] == '"' && (0..hashes).all(|h| chars.get(k + 1 + h) == Some(&'#')) {
                        break;
                    }
                    k += 1;
                }
                let text: String = chars[body..k.min(chars.len())].iter().collect();
                i = (k + 1 + hashes).min(chars.len());
                line += count_lines(start, i);
                out.push(Token {
                    tok: Tok::Str(text),
                    line: start_line,
                });
                continue;
            }
        }
        if c == '"' || (c == 'b' && chars.get(i + 1) == Some(&'"')) {
            let body = if c == '"' { i + 1 } else { i + 2 };
            let mut k = body;
            while k < chars.len() && chars[k] != '"' {
                k += if chars[k] == '\\' { 2 } else { 1 };
            }
            let text: String = chars[body..k.min(chars.len())].iter().collect();
            i = (k + 1).min(chars.len());
            line += count_lines(start, i);
            out.push(Token {
                tok: Tok::Str(text),
                line: start_line,
            });
            continue;
        }
        if c == '\'' {
            // A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a).
            if chars.get(i + 1) == Some(&'\\') {
                let mut k = i + 2;
                while k < chars.len() && chars[k] != '\'' {
                    k += 1;
                }
                i = k + 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
            out.push(Token {
                tok: Tok::Other,
                line: start_line,
            });
            continue;
        }
        if c.is_alphabetic() || c == '_' || c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            let tok = if c.is_ascii_digit() {
                Tok::Num(text)
            } else {
                Tok::Ident(text.trim_start_matches("r#").to_string())
            };
            out.push(Token { tok, line: start_line });
            continue;
        }
        out.push(Token {
            tok: Tok::Punct(c),
            line: start_line,
        });
        i += 1;
    }
    out
}

fn is_punct(t: Option<&Token>, c: char) -> bool {
    matches!(t, Some(Token { tok: Tok::Punct(p), .. }) if *p == c)
}

fn is_ident(t: Option<&Token>, name: &str) -> bool {
    matches!(t, Some(Token { tok: Tok::Ident(s), .. }) if s == name)
}

/// Index just past the group that opens at `open` (a `(`, `[`, `{` or `<`).
fn group_end(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0i32;
    let mut i = open;
    while i < tokens.len() {
        if let Tok::Punct(p) = tokens[i].tok {
            match p {
                '(' | '[' | '{' | '<' => depth += 1,
                // `->` inside a type is not a closing angle bracket.
                '>' if i > 0 && is_punct(tokens.get(i - 1), '-') => {}
                ')' | ']' | '}' | '>' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                return i + 1;
            }
        }
        i += 1;
    }
    tokens.len()
}

/// Splits `tokens` at top-level commas.
fn split_commas(tokens: &[Token]) -> Vec<&[Token]> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, t) in tokens.iter().enumerate() {
        match t.tok {
            Tok::Punct('(' | '[' | '{' | '<') => depth += 1,
            Tok::Punct('>') if i > 0 && is_punct(tokens.get(i - 1), '-') => {}
            Tok::Punct(')' | ']' | '}' | '>') => depth -= 1,
            Tok::Punct(',') if depth == 0 => {
                parts.push(&tokens[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < tokens.len() {
        parts.push(&tokens[start..]);
    }
    parts
}

/// Skips `#[..]` attributes from `i`; returns the index after them and the idents that open them.
fn skip_attributes(tokens: &[Token], mut i: usize) -> (usize, Vec<String>) {
    let mut names = Vec::new();
    while is_punct(tokens.get(i), '#') && is_punct(tokens.get(i + 1), '[') {
        if let Some(Token {
            tok: Tok::Ident(name), ..
        }) = tokens.get(i + 2)
        {
            names.push(name.clone());
        }
        i = group_end(tokens, i + 1);
    }
    (i, names)
}

/// Skips `pub`, `pub(crate)`, `pub(in path)`.
fn skip_visibility(tokens: &[Token], mut i: usize) -> usize {
    if is_ident(tokens.get(i), "pub") {
        i += 1;
        if is_punct(tokens.get(i), '(') {
            i = group_end(tokens, i);
        }
    }
    i
}

/// A field of the variant or struct the attribute is on: its name (`"0"` for the first tuple
/// field) and whether thiserror takes it as the source.
struct Field {
    name: String,
    is_source: bool,
}

fn fields_after(tokens: &[Token], i: usize) -> (String, Vec<Field>) {
    let (mut i, _) = skip_attributes(tokens, i);
    i = skip_visibility(tokens, i);
    if is_ident(tokens.get(i), "struct") || is_ident(tokens.get(i), "enum") {
        i += 1;
    }
    let name = match tokens.get(i) {
        Some(Token { tok: Tok::Ident(n), .. }) => n.clone(),
        _ => String::from("?"),
    };
    i += 1;
    if is_punct(tokens.get(i), '<') {
        i = group_end(tokens, i);
    }
    let tuple = is_punct(tokens.get(i), '(');
    if !tuple && !is_punct(tokens.get(i), '{') {
        return (name, Vec::new());
    }
    let end = group_end(tokens, i);
    let body = &tokens[i + 1..end.saturating_sub(1)];
    let mut fields = Vec::new();
    for (index, part) in split_commas(body).into_iter().enumerate() {
        let (j, attrs) = skip_attributes(part, 0);
        let j = skip_visibility(part, j);
        let marked = attrs.iter().any(|a| a == "source" || a == "from");
        let field_name = if tuple {
            index.to_string()
        } else {
            match part.get(j) {
                Some(Token { tok: Tok::Ident(n), .. }) => n.clone(),
                _ => continue,
            }
        };
        let is_source = marked || (!tuple && field_name == "source");
        fields.push(Field {
            name: field_name,
            is_source,
        });
    }
    (name, fields)
}

/// The names a format string interpolates: `{name}`, `{name:?}`, `{0}`; `{}` refers to an
/// explicit argument, which is checked separately.
fn placeholders(format: &str) -> Vec<String> {
    let chars: Vec<char> = format.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '{' if chars.get(i + 1) == Some(&'{') => i += 2,
            '}' if chars.get(i + 1) == Some(&'}') => i += 2,
            '{' => {
                let mut k = i + 1;
                while k < chars.len() && chars[k] != '}' {
                    k += 1;
                }
                let inner: String = chars[i + 1..k.min(chars.len())].iter().collect();
                let name = inner.split(':').next().unwrap_or("").trim().to_string();
                if !name.is_empty() {
                    names.push(name);
                }
                i = k + 1;
            }
            _ => i += 1,
        }
    }
    names
}

/// Whether an extra format argument (`error_chain(source)`, `.0`, `.source.kind()`) reads `field`.
fn argument_reads(arg: &[Token], field: &str) -> bool {
    arg.iter().enumerate().any(|(i, t)| {
        let after_dot = i > 0 && is_punct(arg.get(i - 1), '.');
        // `.field` at the start of an expression, or right after `(`/`,`/operators, is thiserror's
        // shorthand for the field; `x.field` is some other value's field.
        let dot_is_shorthand = after_dot
            && (i == 1
                || !matches!(
                    arg.get(i - 2).map(|t| &t.tok),
                    Some(Tok::Ident(_) | Tok::Num(_) | Tok::Punct(')' | ']' | '?'))
                ));
        match &t.tok {
            Tok::Ident(name) if name == field => !after_dot || dot_is_shorthand,
            Tok::Num(n) if n == field => dot_is_shorthand,
            _ => false,
        }
    })
}

/// A message that prints its source.
#[derive(Debug)]
struct Finding {
    line: usize,
    item: String,
    field: String,
}

/// Every `#[error(..)]` in `src` that interpolates a source field, and how many it checked.
fn check_source(src: &str) -> Result<(usize, Vec<Finding>), String> {
    let tokens = tokenize(src);
    let mut findings = Vec::new();
    let mut checked = 0;
    let mut i = 0;
    while i + 3 < tokens.len() {
        let attribute = is_punct(tokens.get(i), '#')
            && is_punct(tokens.get(i + 1), '[')
            && is_ident(tokens.get(i + 2), "error")
            && is_punct(tokens.get(i + 3), '(');
        if !attribute {
            i += 1;
            continue;
        }
        let line = tokens[i].line;
        let args_end = group_end(&tokens, i + 3);
        let args = &tokens[i + 4..args_end.saturating_sub(1)];
        let after = group_end(&tokens, i + 1);
        i = after;
        if is_ident(args.first(), "transparent") {
            continue;
        }
        let parts = split_commas(args);
        let format = match parts.first().and_then(|p| p.first()) {
            Some(Token { tok: Tok::Str(s), .. }) if parts[0].len() == 1 => s.clone(),
            // Fail rather than skip: a form this reader does not know must not pass unchecked.
            _ => return Err(format!("line {line}: cannot read this #[error(..)] attribute")),
        };
        checked += 1;
        let (item, fields) = fields_after(&tokens, after);
        let mut explicitly_named = Vec::new();
        let mut extra_args = Vec::new();
        for part in &parts[1..] {
            match (part.first(), part.get(1)) {
                (
                    Some(Token { tok: Tok::Ident(n), .. }),
                    Some(Token {
                        tok: Tok::Punct('='), ..
                    }),
                ) if !is_punct(part.get(2), '=') => {
                    explicitly_named.push(n.clone());
                    extra_args.push(&part[2..]);
                }
                _ => extra_args.push(part),
            }
        }
        for field in fields.iter().filter(|f| f.is_source) {
            let in_format = placeholders(&format)
                .iter()
                .any(|p| *p == field.name && !explicitly_named.contains(p));
            let in_args = extra_args.iter().any(|arg| argument_reads(arg, &field.name));
            if in_format || in_args {
                findings.push(Finding {
                    line,
                    item: item.clone(),
                    field: field.name.clone(),
                });
            }
        }
    }
    Ok((checked, findings))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The root package's `src/` and every member's (`api/src`, `controller/src`, ..., and crates
/// added later such as `runtime/src`), found rather than listed so a new crate is covered too.
fn source_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![root.join("src")];
    let mut members: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            p.is_dir() && !name.starts_with('.') && name != "target" && p.join("Cargo.toml").is_file()
        })
        .map(|p| p.join("src"))
        .filter(|p| p.is_dir())
        .collect();
    members.sort();
    dirs.extend(members);
    dirs
}

#[test]
fn no_error_message_prints_its_source() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dirs = source_dirs(root);
    for expected in ["api/src", "controller/src", "proto/src", "sim/src"] {
        assert!(
            dirs.contains(&root.join(expected)),
            "{expected} is not scanned: {dirs:?}"
        );
    }
    let mut files = Vec::new();
    for dir in &dirs {
        rust_files(dir, &mut files);
    }
    files.sort();
    let mut checked = 0;
    let mut problems = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let shown = file.strip_prefix(root).unwrap_or(file).display().to_string();
        match check_source(&text) {
            Ok((n, findings)) => {
                checked += n;
                problems.extend(findings.into_iter().map(|f| {
                    format!(
                        "{shown}:{}: {} prints its source field `{}` in #[error(..)]; the source chain already carries it",
                        f.line, f.item, f.field
                    )
                }));
            }
            Err(e) => problems.push(format!("{shown}:{e}")),
        }
    }
    // Guards against a scanner that silently reads nothing (wrong directory, broken tokenizer).
    assert!(
        checked >= 100,
        "only {checked} #[error(..)] messages found in {} files",
        files.len()
    );
    assert!(
        problems.is_empty(),
        "{} error messages repeat their source (drop the interpolation; renderers walk source()):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

// The scanner itself, on inputs whose answer is known.

fn findings(src: &str) -> Vec<String> {
    let (_, found) = check_source(src).unwrap();
    found
        .into_iter()
        .map(|f| format!("{}:{}:{}", f.line, f.item, f.field))
        .collect()
}

#[test]
fn scanner_flags_every_way_of_naming_the_source() {
    let src = r##"
enum E {
    #[error("reading {path}: {source}")]
    Named { path: String, #[source] source: io::Error },
    #[error("implicit: {source:?}")]
    Implicit { source: io::Error },
    #[error("tuple: {0}")]
    Tuple(#[source] kube::Error),
    #[error("from: {0}")]
    From(#[from] serde_yaml::Error),
    #[error("marked {}: {}", path.display(), error_chain(inner))]
    Marked {
        path: PathBuf,
        #[source]
        inner: tonic::transport::Error,
    },
    /// A doc comment between the attribute and the variant.
    #[error("dot {}", .0)]
    #[allow(dead_code)]
    Dot(#[from] io::Error),
}
#[derive(thiserror::Error, Debug)]
#[error("struct: {0}")]
pub struct S(#[source] io::Error);
"##;
    assert_eq!(
        findings(src),
        [
            "3:Named:source",
            "5:Implicit:source",
            "7:Tuple:0",
            "9:From:0",
            "11:Marked:inner",
            "18:Dot:0",
            "23:S:0",
        ]
    );
}

#[test]
fn scanner_accepts_messages_that_leave_the_source_to_the_chain() {
    let src = r##"
// #[error("a comment: {source}")] is not an attribute.
enum E {
    #[error("reading the kubeconfig {path}")]
    Named { path: String, #[source] source: io::Error },
    #[error(transparent)]
    Wrapped(#[from] Inner),
    #[error("{0}")]
    Message(String),
    #[error("{} \"{}\" not found", .0.qualified(), .0.name)]
    NotFound(Target),
    #[error("invalid {PREFIX}{key} {value:?}: {}", KEYS.join(", "))]
    Invalid { key: String, value: String },
    #[error("{reason}: {}", other.source)]
    Other { reason: String, other: Thing, #[source] source: io::Error },
    #[error("{0} at {1:?}")]
    Pair(String, Box<dyn Fn() -> u8>, #[source] io::Error),
    #[error("rewrapped {source}", source = "x")]
    Renamed { source: io::Error },
}
const S: &str = "#[error(\"{source}\")] in a string";
"##;
    assert_eq!(findings(src), Vec::<String>::new());
}
