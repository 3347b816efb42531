//! Ownership on the real API server (faults 1 and 2 of the issue), with the operator bound by the chart's RBAC
//! only and OwnerReferencesPermissionEnforcement on:
//! - owners of a kind the chart lets it read (`webhook.ownerResources`, here an Argo-like
//!   `workflows.argoproj.io`) are fully checked: one in another namespace, a namesake and a missing one are
//!   refused with the explanation, one here admitted; owners of kinds it may not read (a ConfigMap, and
//!   `pipelines.example.test` from a CRD the test installs) are admitted with a warning saying what could not be
//!   checked, without a refused request (the webhook asks a SelfSubjectAccessReview first);
//! - the `*/finalizers` rules are what lets the operator set `blockOwnerDeletion` on an application's
//!   dependents: the same create as a ServiceAccount with the chart's job rules minus them is refused.

use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use spark_operator_e2e::real::control_plane::client_from;
use spark_operator_e2e::real::operator::RELEASE;

use crate::support::{Tier, app_in, kubectl};

pub const NAMESPACE: &str = "rcp-owners";
const OTHER: &str = "rcp-owners-other";
/// The chart value the tier installs with: reads of this kind in the job namespaces.
pub const LISTED_OWNER_RESOURCE: &str = "workflows.argoproj.io";

fn crd(group: &str, kind: &str, plural: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{ kind: {kind}, plural: {plural}, singular: {singular}, listKind: {kind}List }}
  versions:
    - name: v1alpha1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"#,
        singular = kind.to_lowercase()
    )
}

/// An application owned by `owner` (apiVersion, kind, name, uid), as YAML.
fn owned_app(name: &str, owner: (&str, &str, &str, &str)) -> String {
    let (api_version, kind, owner_name, uid) = owner;
    app_in(NAMESPACE, name, "1s", 0, 1, "").replacen(
        &format!("  namespace: {NAMESPACE}\n"),
        &format!(
            "  namespace: {NAMESPACE}\n  ownerReferences:\n    - apiVersion: {api_version}\n      kind: {kind}\n      name: {owner_name}\n      uid: {uid}\n"
        ),
        1,
    )
}

async fn uid_of(
    client: &kube::Client,
    namespace: &str,
    gvk: (&str, &str, &str),
    plural: &str,
    object: Value,
) -> String {
    let (group, version, kind) = gvk;
    let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let mut object: DynamicObject = serde_json::from_value(object).expect("an object");
    object.types = Some(kube::core::TypeMeta {
        api_version: resource.api_version.clone(),
        kind: kind.to_owned(),
    });
    let created = api
        .create(&PostParams::default(), &object)
        .await
        .expect("the owner is created");
    created.metadata.uid.expect("a uid")
}

pub async fn owners_of_any_kind(tier: &'static Tier) {
    let cp = tier.control_plane;
    let admin = cp.admin().await;
    let operator = tier.install.start(cp, "owners-0", &[]);
    tier.install.route_webhooks_to(cp, &operator, NAMESPACE).await;
    spark_operator_e2e::real::operator::ensure_namespace(cp, OTHER);
    for (group, kind, plural) in [
        ("argoproj.io", "Workflow", "workflows"),
        ("example.test", "Pipeline", "pipelines"),
    ] {
        let out = kubectl(cp, &["apply", "-f", "-"], &crd(group, kind, plural));
        assert!(out.success, "{out:?}");
        let established = kubectl(
            cp,
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &format!("crd/{plural}.{group}"),
            ],
            "",
        );
        assert!(established.success, "{established:?}");
    }
    let core = ("", "v1", "ConfigMap");
    let argo = ("argoproj.io", "v1alpha1", "Workflow");
    let named = |name: &str| json!({ "metadata": { "name": name } });
    let config_map = uid_of(&admin, NAMESPACE, core, "configmaps", named("settings")).await;
    let workflow = uid_of(&admin, NAMESPACE, argo, "workflows", named("nightly")).await;
    let elsewhere = uid_of(&admin, OTHER, argo, "workflows", named("hourly")).await;
    let namesake = uid_of(&admin, OTHER, argo, "workflows", named("nightly")).await;
    let pipeline = uid_of(
        &admin,
        NAMESPACE,
        ("example.test", "v1alpha1", "Pipeline"),
        "pipelines",
        named("etl"),
    )
    .await;
    let wf = "argoproj.io/v1alpha1";

    let dry_run = |yaml: String| kubectl(cp, &["apply", "--dry-run=server", "-f", "-"], &yaml);
    let not_here = format!("is not in namespace \"{NAMESPACE}\"");
    let refused = [
        (
            "an owner in another namespace",
            owned_app("a", (wf, "Workflow", "hourly", &elsewhere)),
            not_here.clone(),
        ),
        (
            "a namesake here, the owner elsewhere",
            owned_app("b", (wf, "Workflow", "nightly", &namesake)),
            "an object of that name there has uid".to_owned(),
        ),
        (
            "a missing owner",
            owned_app("c", (wf, "Workflow", "weekly", "00000000-0000-0000-0000-000000000001")),
            not_here,
        ),
    ];
    for (case, yaml, explanation) in refused {
        let out = dry_run(yaml);
        assert!(!out.success, "{case}: admitted: {out:?}");
        assert!(
            out.stderr.contains(&explanation),
            "{case}: no explanation {explanation:?}: {}",
            out.stderr
        );
        assert!(
            out.stderr.contains("garbage-collects"),
            "{case}: says what Kubernetes would do: {}",
            out.stderr
        );
    }
    // The owner here, of a kind the chart lets the operator read: admitted, no warning.
    let out = dry_run(owned_app("d", (wf, "Workflow", "nightly", &workflow)));
    assert!(
        out.success && out.warnings().is_empty(),
        "a Workflow owner here: {out:?}"
    );
    // Kinds the operator may not read (the chart grants no read of ConfigMaps or Pipelines in job namespaces):
    // admitted, with a warning that says what could not be checked, and no request of the operator refused.
    for (case, yaml) in [
        (
            "a ConfigMap owner here",
            owned_app("e", ("v1", "ConfigMap", "settings", &config_map)),
        ),
        (
            "a Pipeline owner here",
            owned_app("f", ("example.test/v1alpha1", "Pipeline", "etl", &pipeline)),
        ),
        (
            "a missing ConfigMap owner",
            owned_app(
                "g",
                ("v1", "ConfigMap", "ghost", "00000000-0000-0000-0000-000000000002"),
            ),
        ),
    ] {
        let out = dry_run(yaml);
        assert!(
            out.success,
            "{case}: an owner the operator may not read is admitted: {out:?}"
        );
        let warning = out.warnings().join("\n");
        for words in [
            "could not check that the owner",
            "garbage-collects",
            "webhook.ownerResources",
        ] {
            assert!(warning.contains(words), "{case}: the warning says {words:?}: {warning}");
        }
    }
    drop(operator);
}

pub async fn finalizers_rules_let_dependents_block_deletion(tier: &'static Tier) {
    let cp = tier.control_plane;
    let admin = cp.admin().await;
    let operator = tier.install.start(cp, "finalizers-0", &[]);
    tier.install.route_webhooks_to(cp, &operator, NAMESPACE).await;
    let app = kubectl(cp, &["apply", "-f", "-"], &app_in(NAMESPACE, "blocker", "1s", 0, 1, ""));
    assert!(app.success, "{app:?}");
    let apps: Api<spark_operator_api::SparkApplication> = Api::namespaced(admin.clone(), NAMESPACE);
    let uid = apps
        .get("blocker")
        .await
        .expect("the application")
        .metadata
        .uid
        .expect("a uid");
    let dependent = |name: &str| -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "ownerReferences": [{
                    "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
                    "name": "blocker", "uid": uid, "controller": true, "blockOwnerDeletion": true,
                }],
            },
        }))
        .expect("a ConfigMap")
    };

    // The chart's job Role, as installed, minus its `*/finalizers` rules, for another ServiceAccount.
    let roles: Api<Role> = Api::namespaced(admin.clone(), NAMESPACE);
    let chart_role = roles
        .get(&format!("{RELEASE}-controller-jobs"))
        .await
        .expect("the chart's job Role");
    let rules: Vec<_> = chart_role
        .rules
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| !r.resources.iter().flatten().any(|res| res.ends_with("/finalizers")))
        .collect();
    assert!(
        rules.len() < chart_role.rules.as_ref().map_or(0, Vec::len),
        "the chart's job Role has `*/finalizers` rules"
    );
    let name = "no-finalizers";
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), NAMESPACE);
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": name } })).unwrap(),
        )
        .await
        .expect("the ServiceAccount");
    let mut role = Role::default();
    role.metadata.name = Some(name.into());
    role.rules = Some(rules);
    roles.create(&PostParams::default(), &role).await.expect("the Role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name },
        "subjects": [{ "kind": "ServiceAccount", "name": name, "namespace": NAMESPACE }],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), NAMESPACE)
        .create(&PostParams::default(), &binding)
        .await
        .expect("the RoleBinding");
    let token = accounts
        .create_token_request(name, &PostParams::default(), &Default::default())
        .await
        .expect("a token")
        .status
        .expect("a token")
        .token;
    let mut config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(cp.kubeconfig()).expect("the admin kubeconfig"),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("a configuration");
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..kube::config::AuthInfo::default()
    };
    let without = kube::Client::try_from(config).expect("a client");

    let refused = Api::<ConfigMap>::namespaced(without, NAMESPACE)
        .create(&PostParams::default(), &dependent("without-finalizers"))
        .await;
    match refused {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert!(status.message.contains("blockOwnerDeletion"), "{status:?}");
        }
        other => panic!("without the `*/finalizers` rules the dependent must be refused: {other:?}"),
    }
    // The operator's ServiceAccount, with the chart's rules.
    let operator_client = client_from(tier.install.kubeconfig()).await;
    Api::<ConfigMap>::namespaced(operator_client, NAMESPACE)
        .create(&PostParams::default(), &dependent("with-finalizers"))
        .await
        .expect("with the chart's rules the operator may block its application's deletion");
    let deleted = kubectl(
        cp,
        &["delete", "sparkapplication", "blocker", "-n", NAMESPACE, "--wait=true"],
        "",
    );
    assert!(deleted.success, "{deleted:?}");
    drop(operator);
}
