//! `spark-operator validate -f FILE...`: offline checks for users' CI pipelines. Prints every error with
//! its file, object and field path, and unknown fields (which the API server would drop silently) as
//! warnings; exits 1 when anything is wrong, 0 otherwise.

use std::fmt;
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use spark_operator_api::manifest::{ManifestCheck, check_manifest};
use spark_operator_api::validation::{ValidationContext, namespace_errors};
use spark_operator_runtime::error_chain::ErrorChain;

use super::documents::{self, Document};

/// Writes one line with control characters escaped: names, keys and values come from the manifest, and
/// a raw escape sequence would drive the user's terminal.
macro_rules! emit {
    ($out:expr, $($arg:tt)*) => {
        writeln!($out, "{}", escape_controls(&format!($($arg)*)))
    };
}

/// `text` with control characters (and Unicode's bidirectional overrides, which reorder what is shown)
/// replaced by their `\u{..}` escapes.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    let hidden = |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !text.chars().any(hidden) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(
        text.chars()
            .map(|c| {
                if hidden(c) {
                    c.escape_unicode().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// Manifests to check: files, directories (their .yaml, .yml and .json files), or - for standard input.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE",
        required = true,
        num_args = 1..,
        value_delimiter = ','
    )]
    pub files: Vec<PathBuf>,
    /// Namespace of the objects whose metadata names none, as kubectl's --namespace.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    #[error("could not write to standard output")]
    Stdout(#[source] io::Error),
}

/// What was checked, for the closing line and the exit code.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub objects: usize,
    pub invalid_objects: usize,
    pub warnings: usize,
    pub skipped: usize,
    /// Files or documents that could not be read as Kubernetes objects at all.
    pub unreadable: usize,
    /// `--namespace` is one the API server would refuse.
    pub invalid_namespace_flag: bool,
}

impl Summary {
    pub fn failed(&self) -> bool {
        self.invalid_objects > 0 || self.unreadable > 0 || self.invalid_namespace_flag
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} object(s) checked: {} invalid, {} warning(s)",
            self.objects, self.invalid_objects, self.warnings
        )?;
        if self.skipped > 0 {
            write!(f, "; {} other object(s) skipped", self.skipped)?;
        }
        if self.unreadable > 0 {
            write!(f, "; {} unreadable file(s) or document(s)", self.unreadable)?;
        }
        if self.invalid_namespace_flag {
            write!(f, "; invalid --namespace")?;
        }
        Ok(())
    }
}

fn object_label(check: &ManifestCheck, document: &Document) -> String {
    match (&check.namespace, &check.name) {
        (Some(namespace), Some(name)) => format!("{} {namespace}/{name}", check.kind.as_str()),
        (None, Some(name)) => format!("{} {name}", check.kind.as_str()),
        _ => format!("{} (document {})", check.kind.as_str(), document.index),
    }
}

fn check_document(
    source: &str,
    document: &Document,
    context: &ValidationContext<'_>,
    summary: &mut Summary,
    out: &mut impl Write,
) -> io::Result<()> {
    let check = match check_manifest(&document.value, context) {
        Ok(Some(check)) => check,
        Ok(None) => {
            summary.skipped += 1;
            return Ok(());
        }
        Err(error) => {
            summary.unreadable += 1;
            return emit!(
                out,
                "{source}: document {}: error: {}",
                document.index,
                ErrorChain(&error)
            );
        }
    };
    summary.objects += 1;
    let label = object_label(&check, document);
    for error in &check.report.errors {
        emit!(out, "{source}: {label}: error: {error}")?;
    }
    for warning in &check.report.warnings {
        emit!(out, "{source}: {label}: warning: {warning}")?;
    }
    for unknown in &check.unknown_fields {
        emit!(
            out,
            "{source}: {label}: warning: {}: {}",
            unknown.path,
            unknown.message()
        )?;
    }
    summary.warnings += check.report.warnings.len() + check.unknown_fields.len();
    if check.report.errors.is_empty() {
        emit!(out, "{source}: {label}: valid")?;
    } else {
        summary.invalid_objects += 1;
    }
    Ok(())
}

/// Checks every manifest and prints the findings; the summary decides the exit code.
pub fn check_all(args: &ValidateArgs, mut stdin: impl Read, out: &mut impl Write) -> io::Result<Summary> {
    let context = ValidationContext {
        namespace: args.namespace.as_deref(),
    };
    let mut summary = Summary::default();
    // The namespace of every object that names none, so checked as theirs would be. An empty one is none
    // (kubectl then takes the kubeconfig's). The files are still checked: their other mistakes are found
    // in the same run.
    if let Some(namespace) = args.namespace.as_deref().filter(|namespace| !namespace.is_empty()) {
        for error in namespace_errors(namespace) {
            summary.invalid_namespace_flag = true;
            emit!(out, "error: --namespace: {error}")?;
        }
    }
    let sources = match documents::expand(&args.files) {
        Ok(sources) => sources,
        Err(error) => {
            summary.unreadable += 1;
            emit!(out, "error: {}", ErrorChain(&error))?;
            return Ok(summary);
        }
    };
    for source in sources {
        let name = source.name();
        let parsed = match documents::read(&source, &mut stdin) {
            Ok(text) => documents::parse(&text),
            Err(error) => vec![Err(error)],
        };
        for document in parsed {
            match document {
                Ok(document) => check_document(&name, &document, &context, &mut summary, out)?,
                Err(error) => {
                    summary.unreadable += 1;
                    // The cause (no such file, permission denied) is what the user acts on.
                    emit!(out, "{name}: error: {}", ErrorChain(&error))?;
                }
            }
        }
    }
    emit!(out, "{summary}")?;
    Ok(summary)
}

pub fn run(args: &ValidateArgs, stdin: impl Read, out: &mut impl Write) -> Result<ExitCode, ValidateError> {
    let summary = check_all(args, stdin, out).map_err(ValidateError::Stdout)?;
    Ok(if summary.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("api/tests/fixtures")
    }

    fn validate(files: Vec<PathBuf>, stdin: &str) -> (Summary, String) {
        validate_in(files, None, stdin)
    }

    fn validate_in(files: Vec<PathBuf>, namespace: Option<&str>, stdin: &str) -> (Summary, String) {
        let mut out = Vec::new();
        let args = ValidateArgs {
            files,
            namespace: namespace.map(str::to_owned),
        };
        let summary = check_all(&args, stdin.as_bytes(), &mut out).unwrap();
        (summary, String::from_utf8(out).unwrap())
    }

    #[test]
    fn five_mistakes_are_printed_with_file_object_and_path() {
        let file = fixtures().join("invalid/five-mistakes.yaml");
        let (summary, output) = validate(vec![file.clone()], "");
        assert!(summary.failed());
        assert_eq!(summary.invalid_objects, 1);
        let errors: Vec<_> = output.lines().filter(|l| l.contains(": error: ")).collect();
        assert_eq!(errors.len(), 5, "{output}");
        let prefix = format!("{}: SparkApplication default/Spark_Pi: error: ", file.display());
        for path in [
            "metadata.name",
            "spec.sparkConf[spark.master]",
            "spec.nodeSelector",
            "spec.restartPolicy.onFailureRetryInterval",
            "spec.driver.memory",
        ] {
            assert!(
                errors.iter().any(|l| l.starts_with(&format!("{prefix}{path}: "))),
                "{path} missing from:\n{output}"
            );
        }
    }

    #[test]
    fn unknown_fields_are_warnings_and_do_not_fail() {
        let manifest = std::fs::read_to_string(fixtures().join("kubeflow-examples/spark-pi.yaml")).unwrap();
        let typo = manifest.replace("  sparkVersion: 4.0.4", "  sparkVersion: 4.0.4\n  timeToLiveSecond: 30");
        let (summary, output) = validate(vec![PathBuf::from("-")], &typo);
        assert!(!summary.failed(), "{output}");
        assert_eq!(summary.warnings, 1);
        assert!(
            output
                .contains("<stdin>: SparkApplication default/spark-pi: warning: spec.timeToLiveSecond: unknown field"),
            "{output}"
        );
        assert!(
            output.contains("<stdin>: SparkApplication default/spark-pi: valid"),
            "{output}"
        );
    }

    #[test]
    fn other_kinds_are_skipped_and_broken_documents_fail() {
        let stdin = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\njust: a mapping\n";
        let (summary, output) = validate(vec![PathBuf::from("-")], stdin);
        assert_eq!(summary.skipped, 1);
        assert_eq!(summary.unreadable, 1);
        assert!(summary.failed());
        assert!(
            output.contains("<stdin>: document 2: error: not a Kubernetes object"),
            "{output}"
        );
    }

    #[test]
    fn missing_files_fail_with_their_name() {
        let (summary, output) = validate(vec![PathBuf::from("/nonexistent/app.yaml")], "");
        assert!(summary.failed());
        assert!(
            output.contains("/nonexistent/app.yaml: error: could not read /nonexistent/app.yaml"),
            "{output}"
        );
        // And why, from the error's source.
        let not_found = std::fs::read_to_string("/nonexistent/app.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            output.contains(&format!("could not read /nonexistent/app.yaml: {not_found}")),
            "{output}"
        );
    }

    #[test]
    fn control_characters_are_escaped() {
        let stdin = "apiVersion: sparkoperator.k8s.io/v1beta2\nkind: SparkApplication\nmetadata: {name: \"a\\e[31mred\\u202e\"}\nspec: {}\n";
        let (summary, output) = validate(vec![PathBuf::from("-")], stdin);
        assert!(summary.failed());
        assert!(!output.contains('\u{1b}') && !output.contains('\u{202e}'), "{output}");
        assert!(output.contains("a\\u{1b}[31mred\\u{202e}"), "{output}");
    }

    #[test]
    fn wrong_versions_of_our_kinds_are_errors() {
        let stdin = "apiVersion: sparkoperator.k8s.io/v1beta1\nkind: SparkApplication\nmetadata: {name: x}\n";
        let (summary, output) = validate(vec![PathBuf::from("-")], stdin);
        assert!(summary.failed());
        assert!(output.contains("change apiVersion"), "{output}");
    }

    #[test]
    fn the_namespace_flag_is_checked_as_the_api_server_checks_namespaces() {
        let manifest = std::fs::read_to_string(fixtures().join("kubeflow-examples/spark-pi.yaml")).unwrap();
        let unplaced = manifest.replace("  namespace: default\n", "");
        assert_ne!(unplaced, manifest);
        let (summary, output) = validate_in(vec![PathBuf::from("-")], Some("Bad_NS"), &unplaced);
        assert!(summary.failed(), "{output}");
        assert!(summary.invalid_namespace_flag);
        let first = output.lines().next().unwrap_or_default();
        assert!(
            first.starts_with(
                "error: --namespace: Invalid value: \"Bad_NS\": a lowercase RFC 1123 label must consist of"
            ),
            "{output}"
        );
        // Said once, and the objects are still checked.
        assert_eq!(output.matches("Bad_NS").count(), 1, "{output}");
        assert!(output.contains("<stdin>: SparkApplication spark-pi: valid"), "{output}");
        assert!(output.ends_with("; invalid --namespace\n"), "{output}");
        for good in ["jobs", ""] {
            let (summary, output) = validate_in(vec![PathBuf::from("-")], Some(good), &unplaced);
            assert!(!summary.failed(), "{good:?}: {output}");
        }
    }
}
