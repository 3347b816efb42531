//! `spark-operator permissions`: the RBAC rules of `api::permissions` as the chart reads them
//! (`charts/spark-operator/files/permissions.yaml`), or as the Markdown table of `docs/permissions.md`.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use spark_operator_api::permissions::{RULES, render_markdown, render_yaml};

#[derive(Debug, clap::Args)]
pub struct PermissionsArgs {
    /// Write to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// The Markdown table of docs/permissions.md instead of the chart's YAML.
    #[arg(long)]
    pub markdown: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum PermissionsError {
    #[error("could not write {}", path.display())]
    WriteFile {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("could not write to standard output")]
    Stdout(#[source] io::Error),
}

/// What the command prints.
pub fn render(args: &PermissionsArgs) -> String {
    if args.markdown {
        render_markdown(RULES)
    } else {
        render_yaml(RULES)
    }
}

pub fn run(args: &PermissionsArgs, out: &mut impl Write) -> Result<ExitCode, PermissionsError> {
    let text = render(args);
    match &args.output {
        Some(path) => {
            std::fs::write(path, text).map_err(|source| PermissionsError::WriteFile {
                path: path.clone(),
                source,
            })?;
            writeln!(out, "wrote {}", path.display()).map_err(PermissionsError::Stdout)?;
        }
        None => out.write_all(text.as_bytes()).map_err(PermissionsError::Stdout)?,
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// The commands that regenerate the committed copies; the drift tests point at them.
    const REGENERATE_YAML: &str = "cargo run -- permissions --output charts/spark-operator/files/permissions.yaml";
    const REGENERATE_MARKDOWN: &str = "cargo run -- permissions --markdown --output docs/permissions.md";

    fn committed(relative: &str, regenerate: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} is missing ({e}); regenerate it with: {regenerate}", path.display()))
    }

    #[test]
    fn the_charts_permissions_file_matches_the_code() {
        let args = PermissionsArgs {
            output: None,
            markdown: false,
        };
        assert!(
            committed("charts/spark-operator/files/permissions.yaml", REGENERATE_YAML) == render(&args),
            "charts/spark-operator/files/permissions.yaml has drifted from api/src/permissions.rs; regenerate it with: {REGENERATE_YAML}"
        );
    }

    #[test]
    fn the_permissions_doc_matches_the_code() {
        let args = PermissionsArgs {
            output: None,
            markdown: true,
        };
        assert!(
            committed("docs/permissions.md", REGENERATE_MARKDOWN) == render(&args),
            "docs/permissions.md has drifted from api/src/permissions.rs; regenerate it with: {REGENERATE_MARKDOWN}"
        );
    }

    #[test]
    fn output_writes_the_file_and_says_so() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("permissions.yaml");
        let mut out = Vec::new();
        run(
            &PermissionsArgs {
                output: Some(path.clone()),
                markdown: false,
            },
            &mut out,
        )
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# Generated from api/src/permissions.rs"));
        assert!(text.contains("\nsparkDriver:\n"));
        assert_eq!(String::from_utf8(out).unwrap(), format!("wrote {}\n", path.display()));
    }
}
