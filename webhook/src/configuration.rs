//! The webhook configurations, as whoever installs the operator registers them (the chart renders the same
//! shape; `spark-operator dev` and the tests apply these). The webhook itself owns only their `caBundle`
//! and never changes anything else, `failurePolicy` included.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference, ValidatingWebhook,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};
use spark_operator_api::labels::{LABEL_LAUNCHED_BY_SPARK_OPERATOR, LABEL_VALUE_TRUE};

use crate::server::{MUTATE_POD_PATH, VALIDATE_PATH, VALIDATE_SCHEDULED_PATH};

/// Name of the mutating configuration and its one webhook.
pub const MUTATING_NAME: &str = "spark-operator-webhook";
/// Name of the validating configuration.
pub const VALIDATING_NAME: &str = "spark-operator-webhook";

/// Where the API server reaches the webhook.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// A Service in the cluster (what the chart uses).
    Service { namespace: String, name: String, port: i32 },
    /// A URL (`https://127.0.0.1:9443`, what `dev` uses); paths are appended.
    Url(String),
}

/// Which namespaces' objects go through the webhook: the controller's scope.
#[derive(Clone, Debug, Default)]
pub enum Scope {
    #[default]
    All,
    Namespaces(Vec<String>),
    /// A label selector on namespaces, `key=value,...`.
    Selector(BTreeMap<String, String>),
}

/// What the configurations are made of.
#[derive(Clone, Debug)]
pub struct ConfigurationInput {
    pub endpoint: Endpoint,
    /// `Fail` (the default: a pod never escapes its configuration) or `Ignore`.
    pub failure_policy: String,
    pub timeout_seconds: i32,
    pub scope: Scope,
    /// PEM CA certificates the API server trusts for the webhook; empty: left for the webhook to fill.
    pub ca_bundle: Vec<u8>,
}

fn client_config(input: &ConfigurationInput, path: &str) -> WebhookClientConfig {
    let ca_bundle = (!input.ca_bundle.is_empty()).then(|| ByteString(input.ca_bundle.clone()));
    match &input.endpoint {
        Endpoint::Service { namespace, name, port } => WebhookClientConfig {
            service: Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(path.to_owned()),
                port: Some(*port),
            }),
            ca_bundle,
            url: None,
        },
        Endpoint::Url(base) => WebhookClientConfig {
            url: Some(format!("{}{path}", base.trim_end_matches('/'))),
            ca_bundle,
            service: None,
        },
    }
}

fn namespace_selector(scope: &Scope) -> Option<LabelSelector> {
    match scope {
        Scope::All => None,
        Scope::Namespaces(names) => Some(LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "kubernetes.io/metadata.name".into(),
                operator: "In".into(),
                values: Some(names.clone()),
            }]),
            match_labels: None,
        }),
        Scope::Selector(labels) => Some(LabelSelector {
            match_labels: Some(labels.clone()),
            match_expressions: None,
        }),
    }
}

fn rule(operations: &[&str], group: &str, resource: &str) -> RuleWithOperations {
    RuleWithOperations {
        operations: Some(operations.iter().map(|o| (*o).to_owned()).collect()),
        api_groups: Some(vec![group.to_owned()]),
        api_versions: Some(vec![if group.is_empty() { "v1" } else { "v1beta2" }.to_owned()]),
        resources: Some(vec![resource.to_owned()]),
        scope: Some("Namespaced".into()),
    }
}

/// The mutating configuration: Spark pods (the launched-by label) on CREATE; and the applications' check
/// (the validating webhooks' path) on CREATE and UPDATE, because the mutating phase runs before the API
/// server's own validation (names, the CRD schema): a manifest with several mistakes is refused once with
/// all of them. That check never changes the object; the validating webhooks check the final one.
pub fn mutating(input: &ConfigurationInput) -> MutatingWebhookConfiguration {
    let check = |name: &str, path: &str, resource: &str| MutatingWebhook {
        name: name.into(),
        admission_review_versions: vec!["v1".into()],
        client_config: client_config(input, path),
        failure_policy: Some(input.failure_policy.clone()),
        match_policy: Some("Exact".into()),
        namespace_selector: namespace_selector(&input.scope),
        reinvocation_policy: Some("Never".into()),
        rules: Some(vec![rule(&["CREATE", "UPDATE"], "sparkoperator.k8s.io", resource)]),
        side_effects: "None".into(),
        timeout_seconds: Some(input.timeout_seconds),
        ..MutatingWebhook::default()
    };
    let pods = MutatingWebhook {
        name: "mutate-pods.sparkoperator.k8s.io".into(),
        admission_review_versions: vec!["v1".into()],
        client_config: client_config(input, MUTATE_POD_PATH),
        failure_policy: Some(input.failure_policy.clone()),
        match_policy: Some("Exact".into()),
        namespace_selector: namespace_selector(&input.scope),
        object_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                LABEL_LAUNCHED_BY_SPARK_OPERATOR.to_owned(),
                LABEL_VALUE_TRUE.to_owned(),
            )])),
            match_expressions: None,
        }),
        reinvocation_policy: Some("Never".into()),
        rules: Some(vec![rule(&["CREATE"], "", "pods")]),
        side_effects: "None".into(),
        timeout_seconds: Some(input.timeout_seconds),
        ..MutatingWebhook::default()
    };
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(MUTATING_NAME.into()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![
            pods,
            check(
                "check-sparkapplications.sparkoperator.k8s.io",
                VALIDATE_PATH,
                "sparkapplications",
            ),
            check(
                "check-scheduledsparkapplications.sparkoperator.k8s.io",
                VALIDATE_SCHEDULED_PATH,
                "scheduledsparkapplications",
            ),
        ]),
    }
}

/// The validating configuration: SparkApplications and ScheduledSparkApplications on CREATE and UPDATE.
pub fn validating(input: &ConfigurationInput) -> ValidatingWebhookConfiguration {
    let webhook = |name: &str, path: &str, resource: &str| ValidatingWebhook {
        name: name.into(),
        admission_review_versions: vec!["v1".into()],
        client_config: client_config(input, path),
        failure_policy: Some(input.failure_policy.clone()),
        match_policy: Some("Exact".into()),
        namespace_selector: namespace_selector(&input.scope),
        rules: Some(vec![rule(&["CREATE", "UPDATE"], "sparkoperator.k8s.io", resource)]),
        side_effects: "None".into(),
        timeout_seconds: Some(input.timeout_seconds),
        ..ValidatingWebhook::default()
    };
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(VALIDATING_NAME.into()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![
            webhook(
                "validate-sparkapplications.sparkoperator.k8s.io",
                VALIDATE_PATH,
                "sparkapplications",
            ),
            webhook(
                "validate-scheduledsparkapplications.sparkoperator.k8s.io",
                VALIDATE_SCHEDULED_PATH,
                "scheduledsparkapplications",
            ),
        ]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_selected_by_the_launched_by_label_and_scoped_to_the_job_namespaces() {
        let input = ConfigurationInput {
            endpoint: Endpoint::Service {
                namespace: "spark-operator".into(),
                name: "spark-operator-webhook".into(),
                port: 9443,
            },
            failure_policy: "Fail".into(),
            timeout_seconds: 10,
            scope: Scope::Namespaces(vec!["jobs".into()]),
            ca_bundle: Vec::new(),
        };
        let mutating = mutating(&input);
        let webhook = &mutating.webhooks.as_ref().unwrap()[0];
        assert_eq!(
            webhook.object_selector.as_ref().unwrap().match_labels.as_ref().unwrap()[LABEL_LAUNCHED_BY_SPARK_OPERATOR],
            "true"
        );
        assert_eq!(webhook.failure_policy.as_deref(), Some("Fail"));
        assert!(webhook.client_config.ca_bundle.is_none(), "the webhook fills it");
        let selector = webhook.namespace_selector.as_ref().unwrap();
        assert_eq!(
            selector.match_expressions.as_ref().unwrap()[0].values.as_ref().unwrap(),
            &vec!["jobs".to_owned()]
        );
        assert_eq!(validating(&input).webhooks.unwrap().len(), 2);
        let checks: Vec<_> = mutating.webhooks.unwrap().into_iter().skip(1).collect();
        assert_eq!(
            checks
                .iter()
                .map(|w| w
                    .client_config
                    .url
                    .clone()
                    .or(w.client_config.service.clone().and_then(|s| s.path)))
                .collect::<Vec<_>>(),
            vec![Some(VALIDATE_PATH.to_owned()), Some(VALIDATE_SCHEDULED_PATH.to_owned())],
            "the mutating phase runs the validating webhooks' check"
        );
    }
}
