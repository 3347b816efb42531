//! Property tests: no function of the api crate panics on any value a manifest can hold. Arbitrary JSON
//! (i64 and u64 extremes, 1e300, -0.0, control characters, deep-ish nesting) is put at every numeric and
//! string field the tests name and under every `x-kubernetes-preserve-unknown-fields` path, then the
//! manifest goes through structure checks, decoding, validation, defaults, decoration and naming.
//!
//! Deterministic: a fixed ChaCha seed and a bounded number of cases, no persisted regressions, so CI
//! runs the same cases every time (and stays within seconds in debug builds).

// Test helpers may unwrap: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Value, json};
use spark_operator_api::decoration::decorate_pod;
use spark_operator_api::defaults::apply_defaults;
use spark_operator_api::labels::SparkRole;
use spark_operator_api::manifest::{DecodedObject, check_manifest};
use spark_operator_api::naming;
use spark_operator_api::quantity::{KubernetesQuantity, SparkMemory, SparkMemoryUnit};
use spark_operator_api::validation::{ValidationContext, validate_spark_application};

const SEED: [u8; 32] = *b"spark-operator-issue-9-proptests";

fn runner(cases: u32) -> TestRunner {
    let config = Config {
        cases,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &SEED))
}

fn base() -> Value {
    json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": "spark-pi", "namespace": "default", "uid": "6f1c7a2e-0000-4000-8000-000000000001"},
        "spec": {
            "type": "Scala", "sparkVersion": "4.0.4", "image": "spark:4.0.4",
            "mainClass": "org.apache.spark.examples.SparkPi",
            "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
            "volumes": [{"name": "data", "emptyDir": {}}],
            "driver": {"cores": 1, "memory": "512m", "serviceAccount": "spark",
                       "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
            "executor": {"instances": 2, "cores": 1, "memory": "512m"}
        }
    })
}

/// Numbers and strings at the edges of what JSON and YAML decoders produce.
fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        prop_oneof![
            Just(i64::MAX),
            Just(i64::MIN),
            Just(i64::from(i32::MAX) + 1),
            Just(i64::from(i32::MIN) - 1),
            Just(0),
            Just(-1),
            any::<i64>()
        ]
        .prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        prop_oneof![
            Just(1e300),
            Just(-1e300),
            Just(-0.0),
            Just(f64::MAX),
            Just(5e-324),
            any::<f64>()
        ]
        .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop_oneof![
            Just("0".to_owned()),
            Just("1e300".to_owned()),
            Just("99999999999999999999p".to_owned()),
            Just("-1".to_owned()),
            Just("NaN".to_owned()),
            Just("\u{1b}[31m".to_owned()),
            Just("9223372036854775807".to_owned()),
            "[a-zA-Z0-9.:/_=-]{0,12}",
            any::<String>()
        ]
        .prop_map(Value::from),
    ]
}

/// Arbitrary JSON, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Fields set by users: every integer, number-like string and embedded (preserved) object.
const PATHS: &[&str] = &[
    "/spec/timeToLiveSeconds",
    "/spec/failureRetries",
    "/spec/retryInterval",
    "/spec/memoryOverheadFactor",
    "/spec/restartPolicy",
    "/spec/restartPolicy/onFailureRetryInterval",
    "/spec/restartPolicy/onSubmissionFailureRetryInterval",
    "/spec/restartPolicy/onFailureRetries",
    "/spec/restartPolicy/onSubmissionFailureRetries",
    "/spec/dynamicAllocation",
    "/spec/dynamicAllocation/maxExecutors",
    "/spec/dynamicAllocation/shuffleTrackingTimeout",
    "/spec/sparkConf",
    "/spec/hadoopConf",
    "/spec/sparkUIOptions",
    "/spec/driverIngressOptions",
    "/spec/monitoring",
    "/spec/batchSchedulerOptions",
    "/spec/volumes",
    "/spec/volumes/0",
    "/spec/volumes/0/emptyDir",
    "/spec/driver/cores",
    "/spec/driver/memory",
    "/spec/driver/memoryOverhead",
    "/spec/driver/memoryLimit",
    "/spec/driver/coreLimit",
    "/spec/driver/coreRequest",
    "/spec/driver/gpu",
    "/spec/driver/ports",
    "/spec/driver/podName",
    "/spec/driver/labels",
    "/spec/driver/env",
    "/spec/driver/envFrom",
    "/spec/driver/envSecretKeyRefs",
    "/spec/driver/volumeMounts",
    "/spec/driver/volumeMounts/0",
    "/spec/driver/affinity",
    "/spec/driver/tolerations",
    "/spec/driver/securityContext",
    "/spec/driver/podSecurityContext",
    "/spec/driver/lifecycle",
    "/spec/driver/dnsConfig",
    "/spec/driver/hostAliases",
    "/spec/driver/sidecars",
    "/spec/driver/initContainers",
    "/spec/driver/template",
    "/spec/driver/terminationGracePeriodSeconds",
    "/spec/executor/instances",
    "/spec/executor/cores",
    "/spec/executor/memory",
    "/spec/executor/template",
    "/spec/executor/affinity",
    "/spec/executor/sidecars",
    "/spec/executor/tolerations",
    "/spec/executor/gpu",
    "/metadata/name",
    "/metadata/labels",
];

fn set(value: &mut Value, pointer: &str, new: Value) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let Some(parent) = value.pointer_mut(parent) else {
        return;
    };
    match parent {
        Value::Object(object) => {
            object.insert(key.to_owned(), new);
        }
        Value::Array(items) => {
            if let Some(item) = key.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                *item = new;
            }
        }
        _ => {}
    }
}

/// Everything the api crate does with one manifest; panics are what is looked for.
fn exercise(manifest: &Value) {
    let context = ValidationContext {
        namespace: Some("default"),
    };
    let Ok(Some(check)) = check_manifest(manifest, &context) else {
        return;
    };
    for error in &check.report.errors {
        assert!(
            !error.path.as_str().is_empty() || error.message.contains("apiVersion"),
            "{error}"
        );
    }
    // Whatever decodes is exercised, even when the schema refuses it (bounds the Rust types do not
    // know): the controller decodes objects stored before the CRD was tightened.
    let decoded = match check.object {
        Some(DecodedObject::SparkApplication(app)) => Some(*app),
        _ => serde_json::from_value::<spark_operator_api::SparkApplication>(manifest.clone()).ok(),
    };
    if let Some(app) = decoded {
        let mut app = app;
        apply_defaults(&mut app.spec);
        let _ = validate_spark_application(&app, &context);
        for role in [SparkRole::Driver, SparkRole::Executor] {
            let _ = decorate_pod(&Pod::default(), &app, role);
        }
        let name = app.metadata.name.clone().unwrap_or_default();
        let prefix = naming::resource_name_prefix(&name, "abc123");
        let _ = naming::driver_pod_name(&name, app.spec.driver.pod_name.as_deref(), &app.spec.spark_conf);
        let _ = naming::driver_service_name(&prefix, "abc123");
        let _ = naming::spark_app_name_label(&name);
        let _ = naming::executor_pod_name(&prefix, u64::MAX);
        let _ = naming::scheduled_run_name(&name, i64::MAX);
        let _ = naming::scheduled_run_name(&name, i64::MIN);
    }
}

#[test]
fn no_value_at_any_user_field_makes_the_api_crate_panic() {
    let strategy = prop::collection::vec((prop::sample::select(PATHS), any_json()), 1..6);
    runner(2000)
        .run(&strategy, |changes| {
            let mut manifest = base();
            for (path, value) in changes {
                set(&mut manifest, path, value);
            }
            exercise(&manifest);
            Ok(())
        })
        .unwrap();
}

#[test]
fn every_single_field_takes_every_edge_value() {
    // Exhaustive over the fields for the scalar edge values, beside the random combinations above.
    runner(150)
        .run(&scalar(), |value| {
            for path in PATHS {
                let mut manifest = base();
                set(&mut manifest, path, value.clone());
                exercise(&manifest);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn quantities_and_names_never_panic() {
    runner(2000)
        .run(&(any::<String>(), "[0-9.]{0,30}[a-zA-Z]{0,3}"), |(text, numeric)| {
            for input in [&text, &numeric] {
                for unit in [SparkMemoryUnit::Bytes, SparkMemoryUnit::MiB, SparkMemoryUnit::GiB] {
                    if let Ok(memory) = SparkMemory::parse(input, unit) {
                        let _ = (
                            memory.to_spark_string(),
                            memory.to_kubernetes_quantity(),
                            memory.mebibytes(),
                        );
                    }
                }
                let _ = KubernetesQuantity::parse(input);
                let _ = naming::spark_app_name_label(input);
                let _ = naming::resource_name_prefix(input, "x");
                let _ = spark_operator_api::validation::image_reference_problem(input);
                let _ = spark_operator_api::validation::check_schedule(input);
            }
            Ok(())
        })
        .unwrap();
}
