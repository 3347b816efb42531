//! The sim follows the real API server: every manifest of the repository's corpus, and the cases of
//! `cases/` (one rule of the API server's validation each), sent with `dryRun=All` (what `kubectl create
//! --dry-run=server` sends) to the real kube-apiserver of `tests/real-k8s/` and to kube-sim, both with the
//! project's CRDs and no webhooks. Both must accept, or both refuse with the same set of field paths
//! (`status.details.causes[].field`; messages are not compared). The agreement figure is printed; a
//! disagreement not listed in [`LISTED`] (each with the reason the sim does not follow, as in
//! `sim/README.md`) fails the test, and so does a listed one that agrees now.
//!
//! `validate -f` is judged on the same corpus: every SparkApplication or ScheduledSparkApplication the real
//! server refuses must be an error for the manifest check `validate -f` runs.
//!
//! Without the built control plane (or root) the test skips with one line naming `tests/real-k8s/build.sh`;
//! under `CI=true` it fails instead.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use kube::api::ApiResource;
use kube::discovery::{Discovery, Scope};
use serde_json::{Value, json};
use spark_operator_e2e::helm::repo_root;
use spark_operator_e2e::real::ControlPlane;

/// The namespace of every case whose manifest names none; created on both servers.
const NAMESPACE: &str = "differential";

/// Disagreements the sim keeps, by case id, with why (the same list, with what the sim would need, is in
/// `sim/README.md`).
const LISTED: &[(&str, &str)] = &[
    (
        "e2e/tests/sim_differential/cases/core.yaml:loopback-endpoints",
        LOOPBACK,
    ),
    ("e2e/tests/sim_differential/cases/core.yaml:loopback-slice", LOOPBACK),
];

/// Why the sim admits loopback addresses in Endpoints and EndpointSlices, which kube-apiserver refuses.
const LOOPBACK: &str = "the sim's process pods share the host's network and take addresses in 127.0.0.0/8, which \
    its own EndpointSlice and Endpoints controllers write: refusing them would break every Service of the sim. It \
    needs pods in their own network namespaces on non-loopback addresses (the pod-network issue after the node one)";

/// Cases whose `Warning` headers differ, by case id, with why (as in `sim/README.md`).
const LISTED_WARNINGS: &[(&str, &str)] = &[];

/// The corpus: every manifest the repository keeps, and the cases written for this test.
const CORPUS: &[&str] = &[
    "api/tests/bad-manifests",
    "api/tests/valid-manifests",
    "api/tests/fixtures/invalid",
    "tests/fixtures/kubeflow-examples",
    "e2e/tests/sim_differential/cases",
];

/// One object to send: where it comes from and what it is.
struct Case {
    id: String,
    object: Value,
}

/// What a server answered to a dry-run create.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Accepted,
    /// `message` is shown in a disagreement, never compared.
    Refused {
        code: u16,
        fields: BTreeSet<String>,
        message: String,
    },
}

impl Answer {
    /// Whether `other` is the same verdict: both accepted, or both refused on the same fields (codes differ
    /// between an Invalid 422 and a BadRequest 400 only in how a server words it; fields are what a user
    /// acts on).
    fn agrees(&self, other: &Answer) -> bool {
        match (self, other) {
            (Answer::Accepted, Answer::Accepted) => true,
            // Without causes the code is all a refusal says (403 and 404 are different answers).
            (Answer::Refused { fields: a, code: x, .. }, Answer::Refused { fields: b, code: y, .. }) => {
                a == b && (!a.is_empty() || x == y)
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Accepted => write!(f, "accepted"),
            Answer::Refused { code, fields, message } => write!(f, "refused ({code}) on {fields:?}: {message}"),
        }
    }
}

/// A response as a verdict: accepted, or refused with the fields of its causes.
fn answer(code: u16, body: &Value) -> Answer {
    if (200..300).contains(&code) {
        return Answer::Accepted;
    }
    let fields = body["details"]["causes"]
        .as_array()
        .map(|causes| {
            causes
                .iter()
                .filter_map(|c| c["field"].as_str())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let message = body["message"].as_str().unwrap_or_default().to_owned();
    Answer::Refused { code, fields, message }
}

/// One request of a sequence (`sequences/`), sent for real to both servers in turn.
struct Step {
    id: String,
    method: String,
    path: String,
    content_type: String,
    body: Value,
    /// Who sends it (None: the admin).
    user: Option<String>,
}

/// One API server under test.
struct Server {
    name: &'static str,
    client: kube::Client,
}

impl Server {
    /// POSTs `body` to `path` and returns the status, the body as JSON (Null when not JSON) and the texts
    /// of the `Warning` headers.
    async fn post(&self, path: &str, body: &Value) -> (u16, Value, BTreeSet<String>) {
        self.send("POST", path, "application/json", body).await
    }

    /// Sends one request (`body` as JSON, or none for Null).
    async fn send(&self, method: &str, path: &str, content_type: &str, body: &Value) -> (u16, Value, BTreeSet<String>) {
        self.send_as(method, path, content_type, body, None).await
    }

    /// [`Server::send`] as another user (`Impersonate-User`, as `kubectl --as` sends it).
    async fn send_as(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &Value,
        user: Option<&str>,
    ) -> (u16, Value, BTreeSet<String>) {
        let bytes = if body.is_null() {
            Vec::new()
        } else {
            serde_json::to_vec(body).unwrap()
        };
        let mut request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", content_type);
        if let Some(user) = user {
            request = request.header("impersonate-user", user);
        }
        let request = request.body(kube::client::Body::from(bytes)).unwrap();
        let response = self
            .client
            .send(request)
            .await
            .unwrap_or_else(|e| panic!("{}: {method} {path}: {e}", self.name));
        let code = response.status().as_u16();
        let warnings = response
            .headers()
            .get_all("warning")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(warning_text)
            .collect();
        let bytes = response.into_body().collect_bytes().await.expect("a response body");
        (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null), warnings)
    }

    /// A dry-run create of `object` at `path`, as `kubectl create --dry-run=server` sends it.
    async fn dry_run(&self, path: &str, object: &Value) -> (Answer, BTreeSet<String>) {
        let (code, body, warnings) = self
            .post(&format!("{path}?dryRun=All&fieldValidation=Strict"), object)
            .await;
        (answer(code, &body), warnings)
    }

    /// One step of a sequence, for real.
    async fn step(&self, step: &Step) -> (Answer, BTreeSet<String>) {
        let (code, body, warnings) = self
            .send_as(
                &step.method,
                &step.path,
                &step.content_type,
                &step.body,
                step.user.as_deref(),
            )
            .await;
        (answer(code, &body), warnings)
    }

    /// Creates `object` for real (CRDs, the namespace); an existing one is fine.
    async fn create(&self, path: &str, object: &Value) {
        let (code, body, _) = self.post(path, object).await;
        assert!(
            (200..300).contains(&code) || code == 409,
            "{}: creating {}: {code} {body}",
            self.name,
            object["metadata"]["name"]
        );
    }
}

/// The text of a `Warning: 299 - "text"` header.
fn warning_text(header: &str) -> String {
    header
        .strip_prefix("299 - ")
        .and_then(|t| t.strip_prefix('"'))
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(header)
        .replace("\\\"", "\"")
}

/// Every document of every `.yaml`/`.json` file under the corpus directories, in a stable order. Files no
/// client would send (not UTF-8, not YAML) are left out: kubectl refuses them before any request, and
/// `validate -f`'s own tests cover them.
fn corpus() -> Vec<Case> {
    let root = repo_root();
    let mut cases = Vec::new();
    for dir in CORPUS {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "json"))
            .collect();
        files.sort();
        for file in files {
            let relative = file.strip_prefix(&root).unwrap().display().to_string();
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            let mut names = BTreeSet::new();
            for (index, document) in serde_yaml::Deserializer::from_str(&text).enumerate() {
                // serde_yaml repeats a syntax error for every later document: stop at the first. A case
                // written for this test must parse (a broken one would silently hide the rest of its file).
                let object: Value = match serde::Deserialize::deserialize(document) {
                    Ok(object) => object,
                    Err(error) if dir.ends_with("/cases") => panic!("{relative}: document {index}: {error}"),
                    Err(_) => break,
                };
                if !object.is_object() {
                    continue;
                }
                let name = object["metadata"]["name"].as_str().unwrap_or("").to_owned();
                // Cases are named by their object where the name is unique in the file.
                let id = if !name.is_empty() && names.insert(name.clone()) {
                    format!("{relative}:{name}")
                } else {
                    format!("{relative}#{index}")
                };
                cases.push(Case { id, object });
            }
        }
    }
    cases
}

/// The URL path of a create of `object`, from the real server's discovery (a kind it does not serve gets
/// a path neither server serves, which both must refuse).
fn create_path(object: &Value, kinds: &BTreeMap<(String, String), (ApiResource, bool)>) -> String {
    let api_version = object["apiVersion"].as_str().unwrap_or("");
    let kind = object["kind"].as_str().unwrap_or("");
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or(NAMESPACE);
    let (base, plural, namespaced) = match kinds.get(&(api_version.to_owned(), kind.to_owned())) {
        Some((resource, namespaced)) => (
            if resource.group.is_empty() {
                format!("/api/{}", resource.version)
            } else {
                format!("/apis/{}/{}", resource.group, resource.version)
            },
            resource.plural.clone(),
            *namespaced,
        ),
        None => (
            format!("/apis/{api_version}"),
            format!("{}s", kind.to_lowercase()),
            true,
        ),
    };
    if namespaced {
        format!("{base}/namespaces/{namespace}/{plural}")
    } else {
        format!("{base}/{plural}")
    }
}

/// The project's CRDs, the test's own (`schema-crd.yaml`: every schema keyword) and the cases' namespace,
/// on one server; returns once the CRDs are served.
async fn prepare(server: &Server) {
    let root = repo_root();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("charts/spark-operator/crds"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.push(root.join("e2e/tests/sim_differential/schema-crd.yaml"));
    let mut names = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let crd: Value = serde_yaml::from_str(&text).unwrap();
        names.push(crd["metadata"]["name"].as_str().unwrap().to_owned());
        server
            .create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", &crd)
            .await;
    }
    server
        .create(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        )
        .await;
    // The namespaces some cases need (Pod Security levels), created for real.
    let setup = std::fs::read_to_string(root.join("e2e/tests/sim_differential/setup.yaml")).unwrap();
    for document in serde_yaml::Deserializer::from_str(&setup) {
        let namespace: Value = serde::Deserialize::deserialize(document).unwrap();
        server.create("/api/v1/namespaces", &namespace).await;
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    spark_operator_e2e::wait_crds_established(&server.client, &names).await;
}

/// The kinds the real server serves, by (apiVersion, kind), with whether they are namespaced.
async fn served_kinds(client: &kube::Client) -> BTreeMap<(String, String), (ApiResource, bool)> {
    let discovery = Discovery::new(client.clone()).run().await.expect("discovery");
    let mut kinds = BTreeMap::new();
    for group in discovery.groups() {
        for version in group.versions() {
            for (resource, capabilities) in group.versioned_resources(version) {
                if resource.plural.contains('/') {
                    continue;
                }
                let key = (resource.api_version.clone(), resource.kind.clone());
                kinds.insert(key, (resource, capabilities.scope == Scope::Namespaced));
            }
        }
    }
    kinds
}

/// Whether `validate -f`'s manifest check finds an error in `object`; None for objects outside our API
/// group (`validate -f` skips them). An object of our group it skips counts as accepted.
fn validate_refuses(object: &Value) -> Option<bool> {
    let ours = object["apiVersion"]
        .as_str()
        .is_some_and(|v| v.starts_with("sparkoperator.k8s.io/"));
    let context = spark_operator_api::validation::ValidationContext { namespace: None };
    match spark_operator_api::manifest::check_manifest(object, &context) {
        Ok(Some(check)) => Some(!check.report.errors.is_empty()),
        Ok(None) => ours.then_some(false),
        Err(_) => Some(true),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sim_answers_as_the_real_api_server() {
    spark_operator_e2e::init_logging();
    let Some(control_plane) = ControlPlane::shared() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sim = kube_sim::Sim::start(kube_sim::SimConfig::new(dir.path()))
        .await
        .expect("the sim starts");
    let real = Server {
        name: "kube-apiserver",
        client: control_plane.admin().await,
    };
    let simulated = Server {
        name: "kube-sim",
        client: sim.client().await.expect("a sim client"),
    };
    prepare(&real).await;
    prepare(&simulated).await;
    let kinds = served_kinds(&real.client).await;

    let cases = corpus();
    let mut tally = Tally::default();
    for case in &cases {
        let path = create_path(&case.object, &kinds);
        let (truth, real_warnings) = real.dry_run(&path, &case.object).await;
        let (sim_answer, sim_warnings) = simulated.dry_run(&path, &case.object).await;
        tally.compare(&case.id, &truth, &sim_answer, &real_warnings, &sim_warnings);
        if matches!(truth, Answer::Refused { .. }) && validate_refuses(&case.object) == Some(false) {
            tally
                .validate_misses
                .push(format!("{}: kube-apiserver {truth}", case.id));
        }
    }
    let sequences = sequences(&kinds);
    for (namespace, steps) in &sequences {
        let setup = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
        real.create("/api/v1/namespaces", &setup).await;
        simulated.create("/api/v1/namespaces", &setup).await;
        for step in steps {
            let (truth, real_warnings) = real.step(step).await;
            let (sim_answer, sim_warnings) = simulated.step(step).await;
            tally.compare(&step.id, &truth, &sim_answer, &real_warnings, &sim_warnings);
        }
    }
    tally.report(cases.len() + sequences.iter().map(|(_, s)| s.len()).sum::<usize>());
    sim.shutdown().await;
}

/// The comparisons of a run: what agreed, what did not and was not listed, what was listed but agrees.
#[derive(Default)]
struct Tally {
    /// Per part of the corpus (the repository's manifests, the cases, the sequences): agreeing and all.
    parts: BTreeMap<&'static str, (usize, usize)>,
    agreeing: usize,
    unlisted: Vec<String>,
    stale: Vec<String>,
    warning_differences: Vec<String>,
    validate_misses: Vec<String>,
}

impl Tally {
    fn compare(
        &mut self,
        id: &str,
        truth: &Answer,
        sim: &Answer,
        real_warnings: &BTreeSet<String>,
        sim_warnings: &BTreeSet<String>,
    ) {
        let warnings_listed = LISTED_WARNINGS.iter().any(|(listed, _)| *listed == id);
        match (real_warnings == sim_warnings, warnings_listed) {
            (true, true) => self.stale.push(format!("{id} (warnings)")),
            (false, false) => self.warning_differences.push(format!(
                "{id}: kube-apiserver {real_warnings:?}, kube-sim {sim_warnings:?}"
            )),
            _ => {}
        }
        let agrees = truth.agrees(sim);
        if agrees {
            self.agreeing += 1;
        }
        let part = if id.starts_with("sequences/") {
            "sequences"
        } else if id.starts_with("e2e/tests/sim_differential/cases/") {
            "cases"
        } else {
            "the repository's manifests"
        };
        let counts = self.parts.entry(part).or_default();
        counts.0 += usize::from(agrees);
        counts.1 += 1;
        match (agrees, LISTED.iter().any(|(listed, _)| *listed == id)) {
            (false, false) => self
                .unlisted
                .push(format!("{id}: kube-apiserver {truth}, kube-sim {sim}")),
            (true, true) => self.stale.push(id.to_owned()),
            _ => {}
        }
    }

    /// Prints the figures and every difference, then fails on what is not listed.
    fn report(&self, all: usize) {
        println!(
            "sim_differential: {} of {all} agree ({} listed)",
            self.agreeing,
            LISTED.len()
        );
        for (part, (agreeing, all)) in &self.parts {
            println!("sim_differential: {part}: {agreeing} of {all} agree");
        }
        for line in &self.unlisted {
            println!("DISAGREES {line}");
        }
        println!(
            "sim_differential: warnings differ for {} of {all} ({} listed)",
            self.warning_differences.len(),
            LISTED_WARNINGS.len()
        );
        for line in &self.warning_differences {
            println!("WARNINGS DIFFER {line}");
        }
        for line in &self.validate_misses {
            println!("VALIDATE MISSES {line}");
        }
        assert!(
            self.unlisted.is_empty(),
            "{} disagreement(s) not listed:\n{}",
            self.unlisted.len(),
            self.unlisted.join("\n")
        );
        assert!(
            self.warning_differences.is_empty(),
            "{} case(s) with other warnings, not listed:\n{}",
            self.warning_differences.len(),
            self.warning_differences.join("\n")
        );
        assert!(
            self.stale.is_empty(),
            "listed but agreeing now (remove them from LISTED and sim/README.md): {:?}",
            self.stale
        );
        assert!(
            self.validate_misses.is_empty(),
            "validate -f accepts what the real API server refuses:\n{}",
            self.validate_misses.join("\n")
        );
    }
}

/// The sequences of `sequences/`: per file, a namespace of its own (`seq-<file stem>`) and its steps in
/// order. A step is `{verb, object}` (`create`, `get`, `list`, `patch` with `patchType` merge (default),
/// strategic or json and then `patch`, `delete`), the object naming what the step acts on, sent as the
/// user in `as` if any.
fn sequences(kinds: &BTreeMap<(String, String), (ApiResource, bool)>) -> Vec<(String, Vec<Step>)> {
    let dir = repo_root().join("e2e/tests/sim_differential/sequences");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut all = Vec::new();
    for file in files {
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        let namespace = format!("seq-{stem}");
        let text = std::fs::read_to_string(&file).unwrap();
        let mut steps = Vec::new();
        for (index, document) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let step: Value = serde::Deserialize::deserialize(document)
                .unwrap_or_else(|e| panic!("{}: step {index}: {e}", file.display()));
            let mut object = step["object"].clone();
            let namespaced_default = object["metadata"]["namespace"].is_null();
            if namespaced_default {
                object["metadata"]["namespace"] = json!(namespace);
            }
            let collection = create_path(&object, kinds);
            let name = object["metadata"]["name"].as_str().unwrap_or("").to_owned();
            // A cluster-scoped object's collection path has no namespace; put it back as the sender would.
            if namespaced_default && !collection.contains("/namespaces/") {
                object["metadata"].as_object_mut().unwrap().remove("namespace");
            }
            let verb = step["verb"].as_str().unwrap_or("create");
            let (method, path, content_type, body) = match verb {
                "create" => ("POST", collection, "application/json", object),
                "patch" => {
                    let content_type = match step["patchType"].as_str().unwrap_or("merge") {
                        "strategic" => "application/strategic-merge-patch+json",
                        "json" => "application/json-patch+json",
                        _ => "application/merge-patch+json",
                    };
                    let body = if step["patch"].is_null() {
                        object
                    } else {
                        step["patch"].clone()
                    };
                    ("PATCH", format!("{collection}/{name}"), content_type, body)
                }
                "delete" => (
                    "DELETE",
                    format!("{collection}/{name}"),
                    "application/json",
                    Value::Null,
                ),
                "get" => ("GET", format!("{collection}/{name}"), "application/json", Value::Null),
                "list" => ("GET", collection, "application/json", Value::Null),
                other => panic!("{}: step {index}: unknown verb {other}", file.display()),
            };
            steps.push(Step {
                id: format!("sequences/{stem}.yaml#{index} ({verb} {name})"),
                method: method.to_owned(),
                path: if method == "GET" {
                    path
                } else {
                    format!("{path}?fieldValidation=Strict")
                },
                content_type: content_type.to_owned(),
                body,
                user: step["as"].as_str().map(str::to_owned),
            });
        }
        all.push((namespace, steps));
    }
    all
}

/// Every listed case exists in the corpus (a renamed file would otherwise hide its disagreement).
#[test]
fn listed_cases_exist() {
    let mut ids: BTreeSet<String> = corpus().into_iter().map(|c| c.id).collect();
    ids.extend(
        sequences(&BTreeMap::new())
            .into_iter()
            .flat_map(|(_, steps)| steps.into_iter().map(|s| s.id)),
    );
    for (id, _) in LISTED.iter().chain(LISTED_WARNINGS) {
        assert!(ids.contains(*id), "{id} is listed but not in the corpus");
    }
}
