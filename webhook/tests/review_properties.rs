//! Property test: whatever arrives as an AdmissionReview body (bytes, JSON of any shape, reviews whose
//! object is any JSON, pods with any labels), the webhook's pure core answers with a 400-worthy parse
//! error or a reasoned answer, and never panics.
//!
//! Deterministic: a fixed ChaCha seed, a bounded case count, no persisted regressions.

// Test helpers may unwrap: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Value, json};
use spark_operator_api::SparkApplication;
use spark_operator_webhook::mutate::{self, AppView};
use spark_operator_webhook::{review, validate};

const SEED: [u8; 32] = *b"spark-operator-webhook-review!!!";

fn runner(cases: u32) -> TestRunner {
    let config = Config {
        cases,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &SEED))
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop_oneof![Just(1e300), any::<f64>()]
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop_oneof![
            Just("driver".to_owned()),
            Just("executor".to_owned()),
            Just("s-1".to_owned()),
            Just("pi".to_owned()),
            ".{0,12}"
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("metadata".to_owned()),
                    Just("labels".to_owned()),
                    Just("spec".to_owned()),
                    Just("containers".to_owned()),
                    Just("name".to_owned()),
                    Just("spark-role".to_owned()),
                    Just("sparkoperator.k8s.io/app-name".to_owned()),
                    Just("sparkoperator.k8s.io/submission-id".to_owned()),
                    Just("apiVersion".to_owned()),
                    Just("kind".to_owned()),
                    "[a-z]{1,6}"
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn app() -> SparkApplication {
    serde_json::from_value(json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
        "metadata": {"name": "pi", "namespace": "jobs", "uid": "a-1"},
        "spec": {"type": "Scala", "sparkVersion": "4.0.4", "image": "spark:4.0.4", "mainApplicationFile": "local:///x.jar",
                 "driver": {"cores": 1, "memory": "512m"}, "executor": {"instances": 1, "cores": 1, "memory": "512m"}},
        "status": {"submissionID": "s-1"}
    }))
    .unwrap()
}

/// Answers a body every way the server could; false when it is not a review (a 400).
fn answer_all(body: &[u8], app: &SparkApplication) -> bool {
    let Ok(request) = review::parse(body) else { return false };
    let answer = validate::verdict(validate::check(&request), &[]);
    if let Some(denial) = &answer.denial {
        assert!(!denial.message.is_empty(), "a denial says why");
    }
    let _ = answer.review(&request.uid);
    if let Some(pod) = &request.object
        && let Some(claims) = mutate::claims(pod)
    {
        for view in [AppView::Gone, AppView::Found(app), AppView::Unreadable("spec.x: bad")] {
            let answer = mutate::decide(pod, "jobs", &claims, view);
            if let Some(denial) = &answer.denial {
                assert!(!denial.message.is_empty(), "a denial says why");
            }
            let _ = answer.review(&request.uid);
        }
    }
    true
}

#[test]
fn arbitrary_bodies_get_a_parse_error_or_a_reasoned_answer() {
    let app = app();
    runner(1500)
        .run(&prop::collection::vec(any::<u8>(), 0..256), |bytes| {
            answer_all(&bytes, &app);
            Ok(())
        })
        .unwrap();
    let parsed = std::cell::Cell::new(0u32);
    let kinds = prop::sample::select(&["Pod", "SparkApplication", "ScheduledSparkApplication", ""][..]);
    runner(3000)
        .run(&(any_json(), any_json(), kinds), |(object, labels, kind)| {
            let mut object = object;
            if let Value::Object(map) = &mut object {
                map.insert("metadata".into(), json!({"name": "x", "labels": labels}));
                let api_version = if kind == "Pod" {
                    "v1"
                } else {
                    "sparkoperator.k8s.io/v1beta2"
                };
                map.insert("apiVersion".into(), json!(api_version));
                map.insert("kind".into(), json!(kind));
            }
            let body = json!({"request": {"uid": "u", "kind": {"kind": kind}, "operation": "CREATE",
                                          "namespace": "jobs", "object": object}});
            if answer_all(&serde_json::to_vec(&body).unwrap(), &app) {
                parsed.set(parsed.get() + 1);
            }
            Ok(())
        })
        .unwrap();
    assert!(parsed.get() > 2000, "only {} reviews parsed", parsed.get());
}
