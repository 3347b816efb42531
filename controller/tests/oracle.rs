//! The oracle test: for every variant Spark 4.3's spark-submit was captured with
//! (`tests/oracle/captured/<variant>/`, copied from the reference folder's
//! `shared/design/reference/spark-submit/captured/`), the equivalent SparkApplication
//! (`tests/oracle/<variant>.yaml`) must give the same objects, field by field, after the capture
//! tool's normalization, except for the differences listed with their reasons in `oracle/allowed.rs`.
//! The same for Spark 3.5.3 (`tests/oracle/captured-3.5/<variant>/`, committed here): the same
//! SparkApplications with `sparkVersion: 3.5.3` and the image the capture named.
//!
//! The objects are made by `submit::objects`, the function `submit` creates from, with the default
//! options, and the driver pod's uid added as `submit` adds it: exactly what the controller creates
//! (owner and finalizer included), only the random ids fixed.

// Test helpers may unwrap: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "oracle/allowed.rs"]
mod allowed;
#[path = "oracle/compare.rs"]
mod compare;
#[path = "oracle/normalize.rs"]
mod normalize;

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;
use spark_operator_api::SparkApplication;
use spark_operator_api::decoration::decorate_pod;
use spark_operator_api::labels::{EXECUTOR_CONTAINER_NAME, FINALIZER_DRIVER_PROTECTION, SparkRole};
use spark_operator_controller::app::submit;
use spark_operator_controller::submission::{
    ExistingDriverPod, Submission, SubmissionIds, SubmissionInput, SubmissionOptions, application_owner,
    classify_existing_driver_pod,
};

use allowed::{ALLOWED, Allowed};
use compare::Diff;

/// The Spark release whose spark-submit a capture was made with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spark {
    /// Spark 4.3.0, captured in `shared/` (the capture tool's own variants) and copied here
    /// (`tests/oracle/captured/README.md`).
    V4_3,
    /// Spark 3.5.3, captured into this repository (`tests/oracle/captured-3.5/README.md`).
    V3_5,
}

impl Spark {
    fn captures(self) -> PathBuf {
        match self {
            Spark::V4_3 => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/oracle/captured")),
            Spark::V3_5 => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/oracle/captured-3.5")),
        }
    }

    /// The differences allowed with this release: those of every release, then its own.
    fn allowed(self) -> impl Iterator<Item = &'static Allowed> {
        let own = match self {
            Spark::V4_3 => &[][..],
            Spark::V3_5 => allowed::SPARK_3_5,
        };
        ALLOWED.iter().chain(own)
    }
}

fn captured(spark: Spark, variant: &str) -> PathBuf {
    spark.captures().join(variant)
}

fn fixture(variant: &str) -> SparkApplication {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/oracle")).join(format!("{variant}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The variant's SparkApplication for this release: the 3.5 captures ran the same command lines with
/// the image `apache/spark:3.5.3` (`captured-3.5/capture.py`), so the spec names that image and version.
fn fixture_for(spark: Spark, variant: &str) -> SparkApplication {
    let mut app = fixture(variant);
    if spark == Spark::V3_5 {
        app.spec.spark_version = "3.5.3".to_owned();
        app.spec.image = Some("apache/spark:3.5.3".to_owned());
    }
    app
}

/// Objects spark-submit never sent because it failed first: nothing to compare them with.
const NOT_SENT: &[(&str, &[&str], &str)] = &[
    (
        "scala-pi-pod-exists",
        &["service", "networkpolicy", "configmap"],
        "the driver pod already existed (409) and spark-submit stopped (either release)",
    ),
    (
        "scala-pi-netpol-forbidden",
        &["configmap"],
        "the NetworkPolicy was forbidden (403); spark-submit deleted the driver pod and stopped",
    ),
];

/// Random inputs, fixed; the normalization turns them into the same placeholders as Spark's.
fn build(app: &SparkApplication) -> Submission {
    let ids = SubmissionIds::from_random(
        *b"\x5f\x1e\x0c\x2d\x9a\x8b\x4c\x7d\x8e\x9f\x0a\x1b\x2c\x3d\x4e\x5f",
        *b"\x2a\xb4\x8c\xac\x88\x01\x43\x7b\x86\x36\x2c\x0c\x95\x2e\x1a\xfb",
        [[0x9b, 0x5e, 0x8a], [0x33, 0x0c, 0x9f], [0x74, 0xac, 0x75]],
        0xa2_0138_403b,
    );
    let options = SubmissionOptions::default();
    let input = SubmissionInput {
        app,
        submission_id: "00000000-1111-2222-3333-444444444444",
        ids: &ids,
        submit_time: jiff::Timestamp::from_millisecond(1_795_316_792_140).unwrap(),
        spark_master_url: "k8s://http://127.0.0.1:34023",
        spark_user: "root",
        options: &options,
    };
    let mut submission = submit::objects(&input).unwrap_or_else(|e| panic!("{e}"));
    submission.set_driver_owner("d1e2f3a4-0000-4000-8000-000000000001");
    submission
}

/// What the allow-list lets differ from Spark on every driver pod, checked for exactly what it must be:
/// the application as the only owner and controller, and the driver-protection finalizer.
fn check_owner_and_finalizer(app: &SparkApplication, submission: &Submission) {
    let metadata = &submission.driver_pod.metadata;
    assert_eq!(
        metadata.owner_references.as_deref(),
        Some(&[application_owner(app).unwrap()][..])
    );
    assert_eq!(
        metadata.finalizers.as_deref(),
        Some(&[FINALIZER_DRIVER_PROTECTION.to_owned()][..])
    );
}

/// What the allow-list lets differ for the executor pod template the operator always writes, checked
/// for exactly what it must be: a pod manifest holding Spark's executor container with the application's
/// executor settings applied (decoration), in a ConfigMap the driver mounts where `spark.properties`
/// tells Spark to read it, with the container named for Spark to select.
fn check_executor_template(app: &SparkApplication, submission: &Submission) {
    let config_map = submission
        .executor_pod_template
        .as_ref()
        .expect("every submission writes an executor pod template");
    let yaml = &config_map.data.as_ref().unwrap()["podspec-configmap-key"];
    let template: k8s_openapi::api::core::v1::Pod = serde_yaml::from_str(yaml).unwrap();
    assert!(
        template
            .spec
            .as_ref()
            .unwrap()
            .containers
            .iter()
            .any(|c| c.name == EXECUTOR_CONTAINER_NAME),
        "{yaml}"
    );
    let mut defaulted = app.clone();
    spark_operator_api::defaults::apply_defaults(&mut defaulted.spec);
    assert_eq!(
        decorate_pod(&template, &defaulted, SparkRole::Executor).unwrap(),
        template,
        "the template carries the application's executor settings (decorating it again changes nothing)"
    );
    let properties = &submission.config_map.data.as_ref().unwrap()["spark.properties"];
    assert!(
        properties
            .contains("\nspark.kubernetes.executor.podTemplateFile=/opt/spark/pod-template/pod-spec-template.yml\n")
    );
    assert!(properties.contains(&format!(
        "\nspark.kubernetes.executor.podTemplateContainerName={EXECUTOR_CONTAINER_NAME}\n"
    )));
    let spec = submission.driver_pod.spec.as_ref().unwrap();
    let volume = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "pod-template-volume")
        .expect("the driver mounts the template");
    let source = volume.config_map.as_ref().unwrap();
    assert_eq!(Some(&source.name), config_map.metadata.name.as_ref());
    let items = source.items.as_ref().unwrap();
    assert_eq!(
        (items[0].key.as_str(), items[0].path.as_str()),
        ("podspec-configmap-key", "pod-spec-template.yml")
    );
    let driver = spec
        .containers
        .iter()
        .find(|c| c.name == "spark-kubernetes-driver")
        .unwrap();
    assert!(
        driver
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "pod-template-volume" && m.mount_path == "/opt/spark/pod-template")
    );
}

fn json<T: serde::Serialize>(object: &T) -> Value {
    normalize::normalize(serde_json::to_value(object).unwrap())
}

fn ours(submission: &Submission) -> Vec<(&'static str, Option<Value>)> {
    vec![
        ("pod", Some(json(&submission.driver_pod))),
        ("configmap", Some(json(&submission.config_map))),
        ("service", Some(json(&submission.service))),
        ("networkpolicy", submission.network_policy.as_ref().map(json)),
        (
            "configmap-executor-pod-template",
            submission.executor_pod_template.as_ref().map(json),
        ),
    ]
}

fn theirs(spark: Spark, variant: &str, object: &str) -> Option<Value> {
    let path = captured(spark, variant).join(format!("{object}.normalized.json"));
    let text = std::fs::read_to_string(&path).ok()?;
    Some(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// Compares every object of a variant with Spark 4.3's.
fn check(variant: &str) {
    check_release(Spark::V4_3, variant);
}

/// Compares every object of a variant with Spark 3.5's.
fn check_3_5(variant: &str) {
    check_release(Spark::V3_5, variant);
}

/// Compares every object of a variant with Spark's; fails on any difference the allow-list does not
/// explain, and on any allow-list entry for the variant that explains nothing.
fn check_release(spark: Spark, variant: &str) {
    assert!(
        captured(spark, variant).is_dir(),
        "{} is missing: the 4.3 captures are in tests/oracle/captured/, the 3.5 ones in tests/oracle/captured-3.5/",
        captured(spark, variant).display()
    );
    let app = fixture_for(spark, variant);
    let submission = build(&app);
    check_owner_and_finalizer(&app, &submission);
    check_executor_template(&app, &submission);
    let mut unexplained: Vec<String> = Vec::new();
    let mut used = BTreeSet::new();
    for (object, our) in ours(&submission) {
        let their = theirs(spark, variant, object);
        let not_sent = NOT_SENT
            .iter()
            .any(|(v, objects, _)| *v == variant && objects.contains(&object));
        let (our, their) = match (our, their) {
            (Some(our), Some(their)) => (our, their),
            (None, None) => continue,
            (Some(_), None) if not_sent => continue,
            (Some(_), None) => {
                match spark
                    .allowed()
                    .position(|a| a.matches(variant, object, allowed::WHOLE_OBJECT))
                {
                    Some(index) => {
                        used.insert(index);
                    }
                    None => unexplained.push(format!("{object}: ours built, Spark's not sent")),
                }
                continue;
            }
            (our, their) => {
                unexplained.push(format!(
                    "{object}: ours {}, Spark's {}",
                    if our.is_some() { "built" } else { "not built" },
                    if their.is_some() { "sent" } else { "not sent" }
                ));
                continue;
            }
        };
        for Diff { path, ours, theirs } in compare::diff(&our, &their) {
            match spark.allowed().position(|a| a.matches(variant, object, &path)) {
                Some(index) => {
                    used.insert(index);
                }
                None => unexplained.push(
                    Diff {
                        path: format!("{object} {path}"),
                        ours,
                        theirs,
                    }
                    .to_string(),
                ),
            }
        }
    }
    let stale: Vec<String> = spark
        .allowed()
        .enumerate()
        .filter(|(index, a)| a.applies_to(variant) && !used.contains(index))
        .filter(|(_, a)| {
            a.object == "*" || a.path == allowed::WHOLE_OBJECT || theirs(spark, variant, a.object).is_some()
        })
        .map(|(_, a)| format!("{} {} ({})", a.object, a.path, a.reason))
        .collect();
    assert!(
        unexplained.is_empty() && stale.is_empty(),
        "{variant} (Spark {spark:?}):\nunexplained differences:\n  {}\nallowed differences that did not occur:\n  {}",
        unexplained.join("\n  "),
        stale.join("\n  ")
    );
}

#[test]
fn scala_pi() {
    check("scala-pi");
}

#[test]
fn scala_pi_driverenv() {
    check("scala-pi-driverenv");
}

#[test]
fn python_pi() {
    check("python-pi");
}

#[test]
fn minimal() {
    check("minimal");
}

#[test]
fn scala_pi_longname() {
    check("scala-pi-longname");
}

#[test]
fn scala_pi_rich() {
    check("scala-pi-rich");
}

#[test]
fn scala_pi_templates() {
    check("scala-pi-templates");
}

#[test]
fn scala_pi_no_netpol() {
    check("scala-pi-no-netpol");
}

#[test]
fn scala_pi_wait() {
    // Only the objects apply: waiting for the application is not submission's business (the controller
    // watches the driver), and the conf is passed on like any other.
    check("scala-pi-wait");
}

#[test]
fn scala_pi_pod_exists() {
    check("scala-pi-pod-exists");
}

#[test]
fn scala_pi_pod_exists_is_told_apart_from_our_own_driver() {
    // The pod the capture tool preloaded under the driver's name: not this application's, so the
    // controller must not adopt it (spark-submit got 409 and failed); our own driver is adopted.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/oracle/captured/scala-pi-pod-exists/existing-driver-pod.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let existing: k8s_openapi::api::core::v1::Pod = serde_json::from_str(&text).unwrap();
    let app = fixture("scala-pi-pod-exists");
    let submission = build(&app);
    assert_eq!(existing.metadata.name, submission.driver_pod.metadata.name);
    let submission_id = "00000000-1111-2222-3333-444444444444";
    assert_eq!(
        classify_existing_driver_pod(&existing, &app, submission_id),
        ExistingDriverPod::Unrelated
    );
    assert_eq!(
        classify_existing_driver_pod(&submission.driver_pod, &app, submission_id),
        ExistingDriverPod::ThisSubmission
    );
}

#[test]
fn scala_pi_netpol_forbidden() {
    check("scala-pi-netpol-forbidden");
}

#[test]
fn scala_pi_3_5() {
    check_3_5("scala-pi");
}

#[test]
fn scala_pi_driverenv_3_5() {
    check_3_5("scala-pi-driverenv");
}

#[test]
fn python_pi_3_5() {
    check_3_5("python-pi");
}

#[test]
fn minimal_3_5() {
    check_3_5("minimal");
}

#[test]
fn scala_pi_longname_3_5() {
    check_3_5("scala-pi-longname");
}

#[test]
fn scala_pi_rich_3_5() {
    check_3_5("scala-pi-rich");
}

#[test]
fn scala_pi_templates_3_5() {
    check_3_5("scala-pi-templates");
}

#[test]
fn scala_pi_wait_3_5() {
    check_3_5("scala-pi-wait");
}

#[test]
fn scala_pi_pod_exists_3_5() {
    check_3_5("scala-pi-pod-exists");
}

#[test]
fn python_deps_3_5() {
    // Held out (issue 16): a Python application with dependencies, hadoopConf, dynamic allocation,
    // typed secrets and local-dir volumes.
    check_3_5("python-deps");
}

/// The variants captured for a release (the directories under its captures).
fn captured_variants(spark: Spark) -> BTreeSet<String> {
    let dir = spark.captures();
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.file_type().unwrap().is_dir())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn every_captured_variant_has_a_fixture_and_a_test() {
    let source = include_str!("oracle.rs");
    for (spark, call, count) in [(Spark::V4_3, "check", 11), (Spark::V3_5, "check_3_5", 10)] {
        let variants = captured_variants(spark);
        for variant in &variants {
            assert!(
                PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/oracle"))
                    .join(format!("{variant}.yaml"))
                    .is_file(),
                "no fixture for {variant}"
            );
            assert!(
                source.contains(&format!("{call}(\"{variant}\")")),
                "no test for {variant} (Spark {spark:?})"
            );
        }
        assert_eq!(variants.len(), count, "{spark:?}: {variants:?}");
    }
}
