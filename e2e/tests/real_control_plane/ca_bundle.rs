//! Fault 6 on the real API server: webhook configurations that appear after the operator started get their
//! `caBundle` on their watch event. The operator runs with `--webhook-certificate-check-interval=3600`, so
//! the periodic check cannot be what fills it within the wait.

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use kube::api::{Api, DeleteParams};
use spark_operator_e2e::real::operator::RELEASE;
use spark_operator_e2e::{Poll, poll};

use crate::support::Tier;

pub const NAMESPACE: &str = crate::admission::NAMESPACE;

pub async fn filled_on_the_configurations_event(tier: &'static Tier) {
    let cp = tier.control_plane;
    let admin = cp.admin().await;
    let name = format!("{RELEASE}-webhook");
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(admin.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(admin.clone());
    let _ = mutating.delete(&name, &DeleteParams::default()).await;
    let _ = validating.delete(&name, &DeleteParams::default()).await;

    let operator = tier
        .install
        .start(cp, "ca-bundle-0", &["--webhook-certificate-check-interval=3600"]);
    // Up: its webhook listens (it has its serving certificate, so it has looked for the configurations once).
    let port = operator.webhook_port;
    poll(std::time::Duration::from_secs(60), || async move {
        match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            Ok(_) => Poll::Done(()),
            Err(e) => Poll::Pending(e.to_string()),
        }
    })
    .await
    .unwrap_or_else(|e| panic!("the webhook never listened: {e}\n{}", operator.log_tail()));
    assert!(
        mutating.get_opt(&name).await.expect("reading").is_none(),
        "no configuration yet"
    );

    // The installer registers the configurations now (without caBundle, as the chart does); the webhook
    // answering means the API server trusts it: the caBundle came on the event, well within the hour.
    tier.install.route_webhooks_to(cp, &operator, NAMESPACE).await;
    let bundles: Vec<usize> = mutating
        .get(&name)
        .await
        .expect("the mutating configuration")
        .webhooks
        .unwrap_or_default()
        .iter()
        .map(|w| w.client_config.ca_bundle.as_ref().map_or(0, |b| b.0.len()))
        .chain(
            validating
                .get(&name)
                .await
                .expect("the validating configuration")
                .webhooks
                .unwrap_or_default()
                .iter()
                .map(|w| w.client_config.ca_bundle.as_ref().map_or(0, |b| b.0.len())),
        )
        .collect();
    assert!(
        bundles.len() >= 3 && bundles.iter().all(|&b| b > 0),
        "every webhook has a caBundle: {bundles:?}"
    );
    drop(operator);
}
