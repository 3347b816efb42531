//! `spark-operator validate` and `spark-operator crd`, run as the built binary.

// Test helpers may unwrap: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_spark-operator"))
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("api/tests/fixtures")
}

fn examples() -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(fixtures().join("kubeflow-examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 10);
    files
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn every_kubeflow_example_is_valid() {
    let scratch = tempfile::tempdir().unwrap();
    for example in examples() {
        // The Prometheus example is a template (`image: {IMAGE_REGISTRY}/...` is not YAML); substitute its
        // placeholders as Kubeflow's tooling does before applying it.
        let text = std::fs::read_to_string(&example).unwrap();
        let file = if text.contains("{IMAGE_REGISTRY}") {
            let substituted = scratch.path().join(example.file_name().unwrap());
            std::fs::write(
                &substituted,
                text.replace("{IMAGE_REGISTRY}", "registry.example.com")
                    .replace("{IMAGE_REPOSITORY}", "spark"),
            )
            .unwrap();
            substituted
        } else {
            example.clone()
        };
        let output = binary().args(["validate", "-f"]).arg(&file).output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}:\n{}",
            example.display(),
            stdout(&output)
        );
        assert!(stdout(&output).contains(": valid"), "{}", stdout(&output));
    }
}

#[test]
fn the_unsubstituted_prometheus_template_is_reported_not_accepted() {
    let output = binary()
        .args(["validate", "-f"])
        .arg(fixtures().join("kubeflow-examples/spark-pi-prometheus.yaml"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(stdout(&output).contains("template placeholders"), "{}", stdout(&output));
}

#[test]
fn five_mistakes_give_five_errors_and_exit_1() {
    let output = binary()
        .args(["validate", "-f"])
        .arg(fixtures().join("invalid/five-mistakes.yaml"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    let errors: Vec<_> = text.lines().filter(|l| l.contains(": error: ")).collect();
    assert_eq!(errors.len(), 5, "{text}");
    for path in [
        "metadata.name",
        "spec.sparkConf[spark.master]",
        "spec.nodeSelector",
        "spec.restartPolicy.onFailureRetryInterval",
        "spec.driver.memory",
    ] {
        assert!(
            errors
                .iter()
                .any(|l| l.contains(&format!("SparkApplication default/Spark_Pi: error: {path}: "))),
            "{path}:\n{text}"
        );
    }
}

#[test]
fn files_can_come_from_the_environment() {
    let valid = fixtures().join("kubeflow-examples/spark-pi.yaml");
    let invalid = fixtures().join("invalid/five-mistakes.yaml");
    let output = binary()
        .arg("validate")
        .env(
            "SPARK_OPERATOR_VALIDATE_FILENAME",
            format!("{},{}", valid.display(), invalid.display()),
        )
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stdout(&output).contains("2 object(s) checked: 1 invalid"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn json_on_standard_input() {
    use std::io::Write;
    let yaml = std::fs::read_to_string(fixtures().join("kubeflow-examples/spark-pi-ttl.yaml")).unwrap();
    let value: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
    let mut child = binary()
        .args(["validate", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string_pretty(&value).unwrap().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    assert!(stdout(&output).contains("<stdin>: SparkApplication default/spark-pi-ttl: valid"));
}

#[test]
fn crd_prints_both_crds() {
    let output = binary().arg("crd").output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let text = stdout(&output);
    assert_eq!(
        text.matches("\nkind: CustomResourceDefinition\n").count(),
        2,
        "{}",
        &text[..200.min(text.len())]
    );
    assert!(text.contains("name: sparkapplications.sparkoperator.k8s.io"));
    assert!(text.contains("name: scheduledsparkapplications.sparkoperator.k8s.io"));
}

/// Runs `validate -f` on `text` written to `name` in a scratch directory, with `extra` arguments; returns
/// the exit code, standard output and the file's path as printed.
fn validate_text(name: &str, text: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join(name);
    std::fs::write(&file, text).unwrap();
    let output = binary()
        .arg("validate")
        .args(extra)
        .arg("-f")
        .arg(&file)
        .output()
        .unwrap();
    (output.status.code(), stdout(&output), file.display().to_string())
}

fn spark_pi() -> String {
    std::fs::read_to_string(fixtures().join("kubeflow-examples/spark-pi.yaml")).unwrap()
}

#[test]
fn a_misspelt_kind_of_our_group_is_an_error_naming_the_kinds_served() {
    let typo = spark_pi().replace("kind: SparkApplication\n", "kind: SparkAplication\n");
    let (code, output, file) = validate_text("typo.yaml", &typo, &[]);
    assert_eq!(code, Some(1), "{output}");
    assert!(
        output.contains(&format!(
            "{file}: document 1: error: kind: no matches for kind \"SparkAplication\" in version \"sparkoperator.k8s.io/v1beta2\""
        )),
        "{output}"
    );
    assert!(
        output.contains("SparkApplication and ScheduledSparkApplication"),
        "{output}"
    );
    assert!(output.contains("did you mean SparkApplication?"), "{output}");
    // In any version of the group, and with no suggestion when nothing is close.
    let other = spark_pi()
        .replace("kind: SparkApplication\n", "kind: SparkJob\n")
        .replace("sparkoperator.k8s.io/v1beta2", "sparkoperator.k8s.io/v1");
    let (code, output, _) = validate_text("other.yaml", &other, &[]);
    assert_eq!(code, Some(1), "{output}");
    assert!(
        output.contains("error: kind: no matches for kind \"SparkJob\" in version \"sparkoperator.k8s.io/v1\""),
        "{output}"
    );
    assert!(!output.contains("did you mean"), "{output}");
}

#[test]
fn a_duplicated_mapping_key_is_an_error_with_its_document_line_and_key() {
    // In a nested mapping of the second document; the first and the third are still checked.
    let driver = "  driver:\n    labels:\n      version: 4.0.0\n    cores: 1\n    memory: 512m\n";
    let app = spark_pi().replace(
        driver,
        "  driver:\n    labels:\n      version: 4.0.0\n    cores: 1\n    memory: 512m\n    memory: 1g\n",
    );
    assert_ne!(app, spark_pi());
    let config_map = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata: {}\n";
    let text = format!("{config_map}---\n{app}---\n{config_map}");
    let line = text
        .lines()
        .position(|l| l == "    memory: 1g")
        .map(|index| index + 1)
        .unwrap();
    let (code, output, file) = validate_text("dup.yaml", &text, &[]);
    assert_eq!(code, Some(1), "{output}");
    assert!(
        output.contains(&format!(
            "{file}: error: document 2, line {line}: key \"memory\" already set in map at spec.driver.memory"
        )),
        "{output}"
    );
    assert!(output.contains("2 other object(s) skipped"), "{output}");
    // Any kind, at the top of the document too.
    let config_map = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  name: b\n";
    let (code, output, file) = validate_text("cm.yaml", config_map, &[]);
    assert_eq!(code, Some(1), "{output}");
    assert!(
        output.contains(&format!(
            "{file}: error: document 1, line 5: key \"name\" already set in map at metadata.name"
        )),
        "{output}"
    );
}

#[test]
fn namespaces_are_checked_as_the_api_server_checks_them() {
    let label = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'";
    let bad = spark_pi().replace("namespace: default", "namespace: Bad_NS");
    let (code, output, file) = validate_text("ns.yaml", &bad, &[]);
    assert_eq!(code, Some(1), "{output}");
    assert!(
        output.contains(&format!(
            "{file}: SparkApplication Bad_NS/spark-pi: error: metadata.namespace: Invalid value: \"Bad_NS\": {label}"
        )),
        "{output}"
    );
    let long = spark_pi().replace("namespace: default", &format!("namespace: {}", "a".repeat(64)));
    let (code, output, _) = validate_text("long.yaml", &long, &[]);
    assert_eq!(code, Some(1), "{output}");
    assert!(
        output.contains("error: metadata.namespace: Invalid value: \"aaaa")
            && output.contains("\": must be no more than 63 characters"),
        "{output}"
    );
    // The command line's namespace too, once, even when every object names its own.
    let (code, output, _) = validate_text("ok.yaml", &spark_pi(), &["-n", "Bad_NS"]);
    assert_eq!(code, Some(1), "{output}");
    assert!(
        output.contains(&format!("error: --namespace: Invalid value: \"Bad_NS\": {label}")),
        "{output}"
    );
    assert!(output.contains("SparkApplication default/spark-pi: valid"), "{output}");
    let (code, output, _) = validate_text("ok.yaml", &spark_pi(), &["-n", "jobs"]);
    assert_eq!(code, Some(0), "{output}");
}

#[test]
fn names_are_refused_in_the_api_servers_words() {
    let bad = spark_pi().replace("name: spark-pi", "name: Spark_Pi");
    let (code, output, _) = validate_text("name.yaml", &bad, &[]);
    assert_eq!(code, Some(1), "{output}");
    assert!(
        output.contains(
            "SparkApplication default/Spark_Pi: error: metadata.name: Invalid value: \"Spark_Pi\": a lowercase RFC 1123 subdomain must consist of"
        ),
        "{output}"
    );
    // A DNS-1123 subdomain the API server takes, but not a DNS-1035 label, which the Service named after it needs.
    let dotted = spark_pi().replace("name: spark-pi", "name: spark.pi");
    let (code, output, _) = validate_text("dotted.yaml", &dotted, &[]);
    assert_eq!(code, Some(1), "{output}");
    assert!(output.contains("error: metadata.name: "), "{output}");
}
