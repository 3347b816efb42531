//! Keeps the controller crate's layout as `docs/architecture.md` draws it:
//!
//! - no import cycle among the files of `controller/src` (an arrow is a `use` of, or a path into, another
//!   file's module; a parent module's declarations and re-exports of its own children are structure, not
//!   arrows);
//! - no file longer than [`MAX_LINES`] before its test module (test files, `tests.rs` and `*_tests.rs`,
//!   aside).
//!
//! The files are read as text: paths that start with `crate::`, `super::` or `self::`, in `use` trees and
//! in code, with comments, strings and `#[cfg(test)]` modules left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Lines a file of `controller/src` may have before its test module.
const MAX_LINES: usize = 800;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The source files under `dir`, test-only files (`tests.rs`, `*_tests.rs`) aside.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs")
                && !path.file_name().is_some_and(|n| {
                    let name = n.to_string_lossy();
                    name == "tests.rs" || name.ends_with("_tests.rs")
                })
            {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The module path of a file: `lib.rs` is `[]`, `app/mod.rs` is `[app]`, `app/state.rs` is `[app, state]`.
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(root).unwrap_or(file);
    let mut segments: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(segments.last().map(String::as_str), Some("mod" | "lib")) {
        segments.pop();
    }
    segments
}

/// The text with comments, string and char literals blanked, so that only code is searched.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
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
                    if chars[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !prev_is_ident(&chars, i) {
            // A raw string: r"…" or r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                match chars.get(j) {
                    None => break,
                    Some('"') if (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) => {
                        j += 1 + hashes;
                        break;
                    }
                    Some('\n') => out.push('\n'),
                    _ => {}
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if chars.get(i) == Some(&'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            out.push_str("\"\"");
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}'), or a lifetime ('a), which stays.
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                out.push_str("' '");
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                out.push_str("' '");
                i += 3;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn prev_is_ident(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// The code without `#[cfg(test)]` modules (inline ones are skipped to their closing brace).
fn without_test_modules(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        let is_module = trimmed.starts_with("mod ") || trimmed.starts_with("pub mod ") || trimmed.starts_with('#');
        if !is_module {
            rest = after;
            continue;
        }
        // Skip to the module's `;` (a file module) or past its braces.
        let mut depth = 0usize;
        let mut end = after.len();
        for (index, ch) in after.char_indices() {
            match ch {
                ';' if depth == 0 => {
                    end = index + 1;
                    break;
                }
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = index + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Paths named by `use` trees (expanded: `use crate::a::{b, c::D}` gives `crate::a::b` and
/// `crate::a::c::D`), and the code with those `use` items removed.
fn use_paths(code: &str) -> (Vec<Vec<String>>, String) {
    let mut paths = Vec::new();
    let mut rest_code = String::with_capacity(code.len());
    let mut rest = code;
    loop {
        let Some(at) = find_keyword(rest, "use") else {
            rest_code.push_str(rest);
            break;
        };
        rest_code.push_str(&rest[..at]);
        let after = &rest[at + 3..];
        let end = after.find(';').unwrap_or(after.len());
        expand_tree(&after[..end], &mut Vec::new(), &mut paths);
        rest = after.get(end + 1..).unwrap_or("");
    }
    (paths, rest_code)
}

/// The byte index of `word` as a whole word in `text`.
fn find_keyword(text: &str, word: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(found) = text[from..].find(word) {
        let at = from + found;
        let before = at.checked_sub(1).map(|b| bytes[b]);
        let after = bytes.get(at + word.len()).copied();
        let boundary = |b: Option<u8>| b.is_none_or(|b| !(b.is_ascii_alphanumeric() || b == b'_'));
        if boundary(before) && boundary(after) {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

fn expand_tree(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    // Split at top-level commas of a `{…}` group.
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = segments(&tree[..open]);
        let close = tree.rfind('}').unwrap_or(tree.len());
        let inner = &tree[open + 1..close];
        let depth_before = prefix.len();
        prefix.extend(head);
        let mut depth = 0;
        let mut start = 0;
        for (index, ch) in inner.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_tree(&inner[start..index], prefix, out);
                    start = index + 1;
                }
                _ => {}
            }
        }
        expand_tree(&inner[start..], prefix, out);
        prefix.truncate(depth_before);
    } else {
        let item = tree.split(" as ").next().unwrap_or("");
        let mut path = prefix.clone();
        path.extend(segments(item));
        // `{self, …}` names the module the group is in.
        if path.len() > 1 && path.last().is_some_and(|s| s == "self") {
            path.pop();
        }
        if !path.is_empty() {
            out.push(path);
        }
    }
}

fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .map(str::trim)
        .filter(|s| !s.is_empty() && *s != "*")
        .map(str::to_owned)
        .collect()
}

/// Paths in code that start with `crate::`, `super::` or `self::`.
fn code_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if (chars[i].is_alphabetic() || chars[i] == '_') && !prev_is_ident(&chars, i) {
            let mut j = i;
            let mut path = Vec::new();
            loop {
                let start = j;
                while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
                    j += 1;
                }
                path.push(chars[start..j].iter().collect::<String>());
                if chars.get(j) == Some(&':') && chars.get(j + 1) == Some(&':') {
                    let after = j + 2;
                    if chars.get(after).is_some_and(|c| c.is_alphabetic() || *c == '_') {
                        j = after;
                        continue;
                    }
                }
                break;
            }
            if path.len() > 1 && matches!(path[0].as_str(), "crate" | "super" | "self") {
                paths.push(path);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    paths
}

/// A path made absolute (from the crate root) as seen from the module `here`.
fn absolute(path: &[String], here: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = match path.first()?.as_str() {
        "crate" => Vec::new(),
        "self" => here.to_vec(),
        "super" => here.to_vec(),
        _ => return None,
    };
    let mut rest = &path[1..];
    if path[0] == "super" {
        base.pop()?;
    }
    while rest.first().is_some_and(|s| s == "super") {
        base.pop()?;
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

struct Graph {
    /// file → (target file → names taken).
    arrows: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
}

fn graph(root: &Path) -> Graph {
    let files = sources(root);
    let modules: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|f| {
            let name = f.strip_prefix(root).unwrap_or(f).to_string_lossy().into_owned();
            (module_of(root, f), name)
        })
        .collect();
    let mut arrows: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in &files {
        let here = module_of(root, file);
        let name = file.strip_prefix(root).unwrap_or(file).to_string_lossy().into_owned();
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let code = without_test_modules(&code_only(&text));
        let (mut paths, rest) = use_paths(&code);
        paths.extend(code_paths(&rest));
        let entry = arrows.entry(name.clone()).or_default();
        for path in paths {
            let Some(target) = absolute(&path, &here) else {
                continue;
            };
            // The longest prefix of the path that is a file's module.
            let Some(len) = (0..=target.len())
                .rev()
                .find(|len| modules.contains_key(&target[..*len]))
            else {
                continue;
            };
            let module = &target[..len];
            // A module's own items, or a parent naming its children: not an arrow.
            if module.starts_with(&here) {
                continue;
            }
            let item = target.get(len).cloned().unwrap_or_else(|| "(module)".into());
            entry.entry(modules[module].clone()).or_default().insert(item);
        }
    }
    Graph { arrows }
}

/// The strongly connected components with more than one file (Tarjan).
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a str) {
        state.index.insert(node, state.next);
        state.low.insert(node, state.next);
        state.next += 1;
        state.stack.push(node);
        state.on_stack.insert(node);
        let targets: Vec<&'a str> = state
            .graph
            .arrows
            .get(node)
            .map(|t| t.keys().map(String::as_str).collect())
            .unwrap_or_default();
        for target in targets {
            if !state.index.contains_key(target) {
                visit(state, target);
                let low = state.low[target].min(state.low[node]);
                state.low.insert(node, low);
            } else if state.on_stack.contains(target) {
                let low = state.index[target].min(state.low[node]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(top) = state.stack.pop() {
                state.on_stack.remove(top);
                component.push(top.to_owned());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for node in graph.arrows.keys() {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.found
}

fn describe(graph: &Graph, cycle: &[String]) -> String {
    let mut lines = Vec::new();
    for from in cycle {
        for (to, names) in graph.arrows.get(from).into_iter().flatten() {
            if cycle.contains(to) {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                lines.push(format!("  {from} -> {to}: {}", names.join(", ")));
            }
        }
    }
    lines.join("\n")
}

#[test]
fn the_controller_crate_has_no_import_cycle() {
    let graph = graph(&src());
    assert!(graph.arrows.len() > 30, "too few files read from {}", src().display());
    let found = cycles(&graph);
    let report: Vec<String> = found
        .iter()
        .map(|cycle| format!("a cycle of {} files:\n{}", cycle.len(), describe(&graph, cycle)))
        .collect();
    assert!(
        found.is_empty(),
        "controller/src has import cycles; move what both sides need below them:\n{}",
        report.join("\n")
    );
}

#[test]
fn no_controller_file_is_longer_than_the_limit_before_its_tests() {
    let root = src();
    let mut long = Vec::new();
    for file in sources(&root) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        // The test module: `#[cfg(test)]` on a `mod` (perhaps with a `#[path]` between).
        let lines = (0..all.len())
            .find(|&i| {
                all[i].trim() == "#[cfg(test)]"
                    && all[i + 1..]
                        .iter()
                        .map(|l| l.trim())
                        .find(|l| !l.starts_with("#[path"))
                        .is_some_and(|l| l.starts_with("mod ") || l.starts_with("pub mod "))
            })
            .unwrap_or(all.len());
        if lines > MAX_LINES {
            long.push(format!(
                "{} ({lines} lines)",
                file.strip_prefix(&root).unwrap_or(&file).display()
            ));
        }
    }
    assert!(
        long.is_empty(),
        "files of controller/src longer than {MAX_LINES} lines before their tests; cut them by concern: {}",
        long.join(", ")
    );
}

// The reader itself, on cases it must see (a cycle through `super::`, grouped `use` trees, paths in code)
// and cases it must not (comments, strings, test modules, a parent naming its children).
#[cfg(test)]
mod reader {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn finds_a_cycle_through_grouped_uses_and_super_paths() {
        let dir = tree(&[
            ("lib.rs", "pub mod a;\npub mod b;\n"),
            ("a/mod.rs", "pub mod x;\npub use x::X;\n"),
            ("a/x.rs", "use crate::{b::{self, y::Y as Why}};\npub struct X;\n"),
            ("b/mod.rs", "pub mod y;\n"),
            ("b/y.rs", "pub struct Y;\nfn f() { let _ = super::super::a::x::X; }\n"),
        ]);
        let graph = graph(dir.path());
        let found = cycles(&graph);
        assert_eq!(
            found,
            vec![vec!["a/x.rs".to_owned(), "b/y.rs".to_owned()]],
            "{:?}",
            graph.arrows
        );
    }

    #[test]
    fn ignores_comments_strings_test_modules_and_children() {
        let dir = tree(&[
            ("lib.rs", "pub mod a;\npub mod b;\npub use a::A;\n"),
            ("a.rs", "use crate::b::B;\npub struct A;\n"),
            (
                "b.rs",
                "// crate::a::A\nconst S: &str = \"crate::a::A\";\n/* crate::a::A */\npub struct B;\n\
                 #[cfg(test)]\nmod tests { use crate::a::A; }\n",
            ),
        ]);
        let graph = graph(dir.path());
        assert!(cycles(&graph).is_empty(), "{:?}", graph.arrows);
        assert!(graph.arrows["a.rs"].contains_key("b.rs"));
        assert!(graph.arrows["b.rs"].is_empty(), "{:?}", graph.arrows["b.rs"]);
    }
}
