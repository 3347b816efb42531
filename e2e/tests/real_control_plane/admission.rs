//! Admission on the real API server, with the operator's webhook (bound by the chart's RBAC) registered as the
//! chart registers it: every Kubeflow example admitted, the five-mistakes manifest refused with its paths,
//! and no warnings where the user did nothing wrong (faults 3 and 4: a real API server sends
//! `metadata.managedFields` to webhooks, and the stored `status` on every update), while the warnings the
//! webhook means reach kubectl.

use serde_json::Value;

use spark_operator_e2e::kubeflow_examples;

use crate::support::{Tier, app_in, kubectl};

pub const NAMESPACE: &str = "rcp-admission";

/// The Kubeflow examples as YAML for `namespace` (the SparkConnect example is left to the SparkConnect issue).
fn examples(namespace: &str) -> Vec<(String, String)> {
    kubeflow_examples()
        .into_iter()
        .filter(|(stem, _)| !stem.starts_with("sparkconnect"))
        .map(|(stem, docs)| {
            let docs: Vec<String> = docs
                .into_iter()
                .map(|mut doc| {
                    doc["metadata"]["namespace"] = Value::from(namespace);
                    serde_yaml::to_string(&doc).expect("YAML")
                })
                .collect();
            (stem, docs.join("---\n"))
        })
        .collect()
}

pub async fn examples_mistakes_and_warnings(tier: &'static Tier) {
    let cp = tier.control_plane;
    let operator = tier.install.start(cp, "admission-0", &[]);
    tier.install.route_webhooks_to(cp, &operator, NAMESPACE).await;

    // Both CRDs established (the install waited for it; kubectl says so again, as a user would check).
    for crd in [
        "sparkapplications.sparkoperator.k8s.io",
        "scheduledsparkapplications.sparkoperator.k8s.io",
    ] {
        let established = kubectl(
            cp,
            &[
                "get",
                "crd",
                crd,
                "-o",
                "jsonpath={.status.conditions[?(@.type=='Established')].status}",
            ],
            "",
        );
        assert_eq!(established.stdout.trim(), "True", "{crd}: {established:?}");
    }

    // Every example admitted by a server-side dry run (the webhook runs on dry runs: sideEffects None).
    let mut refused = Vec::new();
    for (stem, yaml) in examples(NAMESPACE) {
        let out = kubectl(cp, &["apply", "--dry-run=server", "-f", "-"], &yaml);
        if !out.success {
            refused.push(format!("{stem}: {}", out.stderr.trim()));
        }
    }
    assert!(
        refused.is_empty(),
        "examples refused on the real API server:\n{}",
        refused.join("\n")
    );

    // The five mistakes: refused, each with its path.
    let five = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../api/tests/fixtures/invalid/five-mistakes.yaml"),
    )
    .expect("the five-mistakes manifest")
    .replace("namespace: default", &format!("namespace: {NAMESPACE}"));
    let out = kubectl(cp, &["apply", "--dry-run=server", "-f", "-"], &five);
    assert!(!out.success, "the five mistakes were admitted: {out:?}");
    let missing: Vec<&str> = [
        "metadata.name",
        "spec.sparkConf[spark.master]",
        "spec.nodeSelector",
        "spec.restartPolicy.onFailureRetryInterval",
        "spec.driver.memory",
    ]
    .into_iter()
    .filter(|path| !out.stderr.contains(path))
    .collect();
    assert!(
        missing.is_empty(),
        "paths missing from the refusal {missing:?}:\n{}",
        out.stderr
    );

    // A valid application: client-side apply (create), server-side apply, an update: no warnings at all.
    let app = app_in(NAMESPACE, "clean", "1s", 0, 1, "");
    let created = kubectl(cp, &["apply", "-f", "-"], &app);
    assert!(
        created.success && created.warnings().is_empty(),
        "client-side apply: {created:?}"
    );
    let applied = kubectl(
        cp,
        &["apply", "--server-side", "--field-manager=platform", "-f", "-"],
        &app,
    );
    assert!(
        applied.success && applied.warnings().is_empty(),
        "server-side apply: {applied:?}"
    );
    // The update carries the stored status (the operator has written one by now, or will): change the spec.
    let changed = app.replace("executor:\n    instances: 1", "executor:\n    instances: 2");
    assert_ne!(changed, app, "the update changes the spec");
    let updated = kubectl(
        cp,
        &["apply", "--server-side", "--field-manager=platform", "-f", "-"],
        &changed,
    );
    assert!(updated.success && updated.warnings().is_empty(), "update: {updated:?}");
    // `kubectl replace` of what `get` printed: an update whose object carries the stored status. The operator
    // writes the status meanwhile: on a conflict, read again.
    let mut attempts = 0;
    let replace = loop {
        let current = kubectl(
            cp,
            &["get", "sparkapplication", "clean", "-n", NAMESPACE, "-o", "yaml"],
            "",
        );
        assert!(
            current.stdout.contains("\nstatus:"),
            "the operator wrote a status: {current:?}"
        );
        let relabelled = current
            .stdout
            .replacen("metadata:\n", "metadata:\n  labels:\n    team: data\n", 1);
        let replace = kubectl(cp, &["replace", "-f", "-"], &relabelled);
        attempts += 1;
        if replace.success || !replace.stderr.contains("Conflict") || attempts == 20 {
            break replace;
        }
    };
    assert!(
        replace.success && replace.warnings().is_empty(),
        "kubectl replace (an update with status): {replace:?}"
    );

    // A warning the webhook means reaches kubectl.
    let meant = app_in(NAMESPACE, "warned", "1s", 0, 1, "").replace(
        "    serviceAccount: spark-operator-spark\n",
        "    serviceAccount: spark-operator-spark\n    kubernetesMaster: https://127.0.0.1:6443\n",
    );
    let warned = kubectl(cp, &["apply", "--dry-run=server", "-f", "-"], &meant);
    assert!(warned.success, "{warned:?}");
    // Said in both admission phases (the check runs in each), it reaches kubectl once.
    assert_eq!(
        warned
            .warnings()
            .iter()
            .filter(|w| w.contains("spec.driver.kubernetesMaster"))
            .count(),
        1,
        "the webhook's warning, once: {warned:?}"
    );

    let deleted = kubectl(
        cp,
        &["delete", "sparkapplication", "clean", "-n", NAMESPACE, "--wait=true"],
        "",
    );
    assert!(deleted.success, "{deleted:?}");
    drop(operator);
}
