//! The committed corpus through the built `spark-operator validate`: every bad manifest in
//! `api/tests/bad-manifests` exits 1 and names each field (or reason) its `# expect:` lines list, and
//! every tricky-but-valid one in `api/tests/valid-manifests` exits 0 with exactly the warnings its
//! `# warn:` lines list. The files are plain manifests, so other suites (e.g. through the API server) can
//! reuse them.

// Test helpers may unwrap: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn corpus(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("api/tests").join(dir);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// The values of the `# <tag>: ` header lines (read as bytes: some files are not UTF-8 on purpose).
fn header(file: &Path, tag: &str) -> Vec<String> {
    let bytes = std::fs::read(file).unwrap();
    let prefix = format!("# {tag}: ");
    String::from_utf8_lossy(&bytes)
        .lines()
        .take_while(|l| l.starts_with('#'))
        .filter_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
        .collect()
}

fn validate(file: &Path) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_spark-operator"))
        .args(["validate", "-f"])
        .arg(file)
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

#[test]
fn every_bad_manifest_is_refused_with_the_fields_it_gets_wrong() {
    let files = corpus("bad-manifests");
    assert!(files.len() >= 100, "only {} bad manifests", files.len());
    let mut failures = Vec::new();
    for file in &files {
        let expected = header(file, "expect");
        assert!(!expected.is_empty(), "{}: no '# expect:' line", file.display());
        let (code, output) = validate(file);
        if code != Some(1) {
            failures.push(format!("{}: exit {code:?}\n{output}", file.display()));
            continue;
        }
        let errors: Vec<&str> = output.lines().filter(|l| l.contains("error: ")).collect();
        for expect in &expected {
            // A field path must start an error's message; anything else (a reason) may be anywhere in one.
            let is_path = expect.starts_with("spec") || expect.starts_with("metadata");
            let found = errors.iter().any(|line| {
                if is_path {
                    line.contains(&format!("error: {expect}: "))
                } else {
                    line.contains(expect.as_str())
                }
            });
            if !found {
                failures.push(format!("{}: no error for {expect:?} in:\n{output}", file.display()));
            }
        }
        // Nothing printed may carry a raw control character (names and values are escaped).
        if output.chars().any(|c| c.is_control() && c != '\n') {
            failures.push(format!("{}: raw control character in output", file.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
}

#[test]
fn tricky_valid_manifests_pass_with_only_their_warnings() {
    let files = corpus("valid-manifests");
    assert!(files.len() >= 15, "only {} valid manifests", files.len());
    let mut failures = Vec::new();
    for file in &files {
        let (code, output) = validate(file);
        if code != Some(0) {
            failures.push(format!("{}: exit {code:?}\n{output}", file.display()));
            continue;
        }
        let mut warned: Vec<String> = output
            .lines()
            .filter_map(|l| l.split_once(": warning: ").map(|(_, w)| w.to_owned()))
            .filter_map(|w| w.split_once(": ").map(|(path, _)| path.to_owned()))
            .collect();
        warned.sort();
        let mut expected = header(file, "warn");
        expected.sort();
        if warned != expected {
            failures.push(format!(
                "{}: warnings {warned:?}, expected {expected:?}\n{output}",
                file.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
}
