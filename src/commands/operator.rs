//! `spark-operator operator`: the process the Helm chart's Deployment runs, composed of components
//! around one [`Runtime`]: the controller (reconciling, and writing, only while this replica leads), the
//! admission webhook and the receiver of the node agents' reports (both serving on every replica, with one
//! serving certificate from the operator's CA). `/metrics`, `/healthz` and `/readyz` cover them all.

use spark_operator_controller::{ControllerArgs, ReceiverArgs};
use spark_operator_runtime::args::Listen;
use spark_operator_runtime::{Runtime, RuntimeArgs, client, logging, shutdown::Shutdown, tokio_runtime};
use spark_operator_webhook::WebhookArgs;
use spark_operator_webhook::certs::{CertConfig, CertManager, Subject, resolver};
use tokio_rustls::TlsAcceptor;

#[derive(Debug, clap::Args)]
pub struct OperatorArgs {
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    #[command(flatten)]
    pub controller: ControllerArgs,
    #[command(flatten)]
    pub webhook: WebhookArgs,
    #[command(flatten)]
    pub reports: ReceiverArgs,
}

/// Why the operator stopped.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error(transparent)]
    Client(#[from] client::Error),
    #[error(transparent)]
    Runtime(#[from] spark_operator_runtime::Error),
    #[error("the controller stopped")]
    Controller(#[source] spark_operator_controller::Error),
    #[error("the webhook stopped")]
    Webhook(#[source] spark_operator_webhook::Error),
    #[error("the report receiver stopped")]
    Reports(#[source] spark_operator_controller::reports::Error),
    #[error("starting the serving certificates")]
    Certificates(#[source] spark_operator_webhook::certs::Error),
    #[error("configuring TLS for the report receiver")]
    ReportsTls(#[source] spark_operator_webhook::certs::resolver::Error),
}

/// The components one process runs.
pub struct Components {
    pub controller: Option<ControllerArgs>,
    pub webhook: Option<WebhookArgs>,
    /// The report receiver; it takes its certificate from the webhook's CA, so it needs `webhook`.
    pub reports: Option<ReceiverArgs>,
}

/// The serving certificate the webhook and the receiver share: the webhook's (its CA Secret, its
/// configurations' `caBundle`, the agents' CA ConfigMap), also valid for the receiver's Service. None when
/// nothing serves TLS.
fn certificates(components: &Components, runtime: &Runtime) -> Result<Option<CertManager>, OperatorError> {
    let Some(webhook) = &components.webhook else {
        return Ok(None);
    };
    let webhook_tls = matches!(webhook.webhook_address, Listen::On(_)) && !webhook.webhook_plain_http;
    let reports = components
        .reports
        .as_ref()
        .filter(|r| matches!(r.reports_address, Listen::On(_)));
    if !webhook_tls && reports.is_none() {
        return Ok(None);
    }
    let mut config = webhook.certificates();
    if let (CertConfig::Managed(managed), Some(reports)) = (&mut config, reports) {
        let service = Subject::for_service(&reports.reports_service_name, &webhook.webhook_namespace);
        managed.subject.dns_names.extend(service.dns_names);
    }
    CertManager::start_in(config, runtime)
        .map(Some)
        .map_err(OperatorError::Certificates)
}

/// Runs the components until the runtime shuts down (or one fails, which shuts the others down), then
/// releases the lease.
pub async fn serve(components: Components, runtime: Runtime) -> Result<(), OperatorError> {
    let certificates = certificates(&components, &runtime)?;
    let controller = async {
        match components.controller {
            Some(args) => spark_operator_controller::run(args, &runtime)
                .await
                .map_err(OperatorError::Controller),
            None => Ok(()),
        }
    };
    let webhook = async {
        match components.webhook {
            Some(args) => {
                let acceptor = certificates
                    .as_ref()
                    .filter(|_| !args.webhook_plain_http)
                    .map(CertManager::acceptor);
                spark_operator_webhook::serve(args, &runtime, acceptor)
                    .await
                    .map_err(OperatorError::Webhook)
            }
            None => Ok(()),
        }
    };
    let reports = async {
        match (components.reports, &certificates) {
            (Some(args), Some(certificates)) => {
                // gRPC needs HTTP/2; the webhook's configuration offers HTTP/1.1 only. Same certificates.
                let config = resolver::server_config(certificates.resolver(), vec![b"h2".to_vec()])
                    .map_err(OperatorError::ReportsTls)?;
                spark_operator_controller::reports::serve(args, TlsAcceptor::from(config), &runtime)
                    .await
                    .map_err(OperatorError::Reports)
            }
            _ => Ok(()),
        }
    };
    let result = futures::try_join!(controller, webhook, reports).map(|_| ());
    drop(certificates);
    runtime.stop().await;
    result
}

pub async fn operator(args: OperatorArgs) -> Result<(), OperatorError> {
    let config = client::config_from(args.runtime.kubeconfig.as_deref()).await?;
    let runtime = Runtime::start(config, args.runtime.settings(), Shutdown::on_signals()).await?;
    let mut webhook = args.webhook;
    // The webhook caches the applications of the controller's namespaces.
    if let spark_operator_controller::scope::NamespaceScope::List(namespaces) = args.controller.namespace_scope() {
        webhook.namespaces = namespaces;
    }
    let mut reports = args.reports;
    // The receiver refuses a report that would push a status past the controller's own limit.
    reports.status_byte_budget = args.controller.status_byte_budget;
    let components = Components {
        controller: Some(args.controller),
        webhook: Some(webhook),
        reports: Some(reports),
    };
    serve(components, runtime).await
}

pub fn run(args: OperatorArgs) -> anyhow::Result<()> {
    logging::init();
    tokio_runtime()?.block_on(operator(args))?;
    Ok(())
}
