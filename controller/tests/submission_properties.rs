//! Property test: the pure submission builders never panic on an application that decodes, whatever
//! values it holds (i64 extremes, 1e300 factors, arbitrary JSON under the preserved-unknown-fields paths,
//! arbitrary sparkConf). They may refuse it with an error; that is what errors are for.
//!
//! Deterministic: a fixed ChaCha seed, a bounded case count, no persisted regressions.

// Test helpers may unwrap: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Value, json};
use spark_operator_api::SparkApplication;
use spark_operator_controller::app::submit;
use spark_operator_controller::submission::{SubmissionIds, SubmissionInput, SubmissionOptions, build_submission};

const SEED: [u8; 32] = *b"spark-operator-submission-props!";

fn base() -> Value {
    json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": "spark-pi", "namespace": "jobs", "uid": "6f1c7a2e-0000-4000-8000-000000000001"},
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

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        prop_oneof![Just(i64::MAX), Just(i64::MIN), Just(0), Just(-1), any::<i64>()].prop_map(Value::from),
        prop_oneof![Just(i32::MAX), Just(i32::MIN), any::<i32>()].prop_map(Value::from),
        prop_oneof![Just(1e300), Just(-0.0), any::<f64>()]
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop_oneof![
            Just("1e300".to_owned()),
            Just("0".to_owned()),
            Just("99999999999999p".to_owned()),
            Just("1.7976931348623157e308".to_owned()),
            Just("x:y".to_owned()),
            "[a-z0-9.:/=-]{0,10}",
            any::<String>()
        ]
        .prop_map(Value::from),
    ]
}

fn any_json() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// sparkConf keys the builders read, with arbitrary values.
const CONF_KEYS: &[&str] = &[
    "spark.driver.memory",
    "spark.driver.memoryOverhead",
    "spark.driver.memoryOverheadFactor",
    "spark.driver.minMemoryOverhead",
    "spark.kubernetes.memoryOverheadFactor",
    "spark.executor.memory",
    "spark.driver.cores",
    "spark.driver.port",
    "spark.driver.blockManager.port",
    "spark.ui.port",
    "spark.kubernetes.driver.pod.name",
    "spark.kubernetes.driver.secretKeyRef.X",
    "spark.kubernetes.driver.volumes.emptyDir.v.mount.path",
    "spark.kubernetes.driver.volumes.emptyDir.v.options.sizeLimit",
    "spark.kubernetes.driver.label.team",
    "spark.driver.resource.gpu.amount",
    "spark.driver.resource.gpu.vendor",
    "spark.kubernetes.local.dirs.tmpfs",
    "spark.app.name",
];

const PATHS: &[&str] = &[
    "/spec/memoryOverheadFactor",
    "/spec/timeToLiveSeconds",
    "/spec/driver/cores",
    "/spec/driver/memory",
    "/spec/driver/memoryOverhead",
    "/spec/driver/memoryLimit",
    "/spec/driver/coreLimit",
    "/spec/driver/coreRequest",
    "/spec/driver/gpu",
    "/spec/driver/ports",
    "/spec/driver/env",
    "/spec/driver/envFrom",
    "/spec/driver/envVars",
    "/spec/driver/envSecretKeyRefs",
    "/spec/driver/labels",
    "/spec/driver/annotations",
    "/spec/driver/volumeMounts",
    "/spec/driver/affinity",
    "/spec/driver/tolerations",
    "/spec/driver/sidecars",
    "/spec/driver/initContainers",
    "/spec/driver/template",
    "/spec/driver/configMaps",
    "/spec/driver/secrets",
    "/spec/driver/podName",
    "/spec/executor/instances",
    "/spec/executor/template",
    "/spec/executor/memory",
    "/spec/volumes",
    "/spec/monitoring",
    "/spec/dynamicAllocation",
    "/spec/sparkUIOptions",
    "/spec/driverIngressOptions",
    "/spec/deps",
    "/spec/arguments",
    "/spec/hadoopConf",
];

fn set(value: &mut Value, pointer: &str, new: Value) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    if let Some(Value::Object(object)) = value.pointer_mut(parent) {
        object.insert(key.to_owned(), new);
    }
}

fn build(app: &SparkApplication) {
    let ids = SubmissionIds::from_random(
        [0xab; 16],
        [0x2c; 16],
        [[1, 2, 3], [4, 5, 6], [7, 8, 9]],
        0xa2_0165_ad86,
    );
    let options = SubmissionOptions::default();
    let input = SubmissionInput {
        app,
        submission_id: "00000000-1111-2222-3333-444444444444",
        ids: &ids,
        submit_time: jiff::Timestamp::from_millisecond(1_795_316_792_140).unwrap(),
        spark_master_url: "k8s://https://10.0.0.1:443",
        spark_user: "spark",
        options: &options,
    };
    // Both the raw builder and the defaulting entry point the reconciler uses.
    let _ = build_submission(&input);
    if let Ok(mut submission) = submit::objects(&input) {
        submission.set_driver_owner("d1e2f3a4-0000-4000-8000-000000000001");
    }
}

#[test]
fn the_builders_never_panic_on_a_decodable_application() {
    let config = Config {
        cases: 1500,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &SEED));
    let strategy = (
        prop::collection::vec((prop::sample::select(PATHS), any_json()), 0..4),
        prop::collection::btree_map(prop::sample::select(CONF_KEYS), scalar(), 0..4),
    );
    let decoded = std::cell::Cell::new(0u32);
    runner
        .run(&strategy, |(changes, conf)| {
            let mut manifest = base();
            for (path, value) in changes {
                set(&mut manifest, path, value);
            }
            let conf: serde_json::Map<String, Value> = conf
                .into_iter()
                .map(|(k, v)| {
                    (
                        k.to_owned(),
                        Value::from(v.as_str().map_or_else(|| v.to_string(), str::to_owned)),
                    )
                })
                .collect();
            set(&mut manifest, "/spec/sparkConf", Value::Object(conf));
            if let Ok(app) = serde_json::from_value::<SparkApplication>(manifest) {
                decoded.set(decoded.get() + 1);
                build(&app);
            }
            Ok(())
        })
        .unwrap();
    // The property must be about applications that decode, not vacuously true.
    assert!(decoded.get() > 300, "only {} cases decoded", decoded.get());
}
