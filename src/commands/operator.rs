//! `spark-operator operator`: the process the Helm chart's Deployment runs, composed of components
//! around one [`Runtime`]: the controller (reconciling, and writing, only while this replica leads) and
//! the admission webhook (serving on every replica). `/metrics`, `/healthz` and `/readyz` cover them all.

use spark_operator_controller::ControllerArgs;
use spark_operator_runtime::{Runtime, RuntimeArgs, client, logging, shutdown::Shutdown, tokio_runtime};
use spark_operator_webhook::WebhookArgs;

#[derive(Debug, clap::Args)]
pub struct OperatorArgs {
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    #[command(flatten)]
    pub controller: ControllerArgs,
    #[command(flatten)]
    pub webhook: WebhookArgs,
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
}

/// The components one process runs.
pub struct Components {
    pub controller: Option<ControllerArgs>,
    pub webhook: Option<WebhookArgs>,
}

/// Runs the components until the runtime shuts down (or one fails, which shuts the others down), then
/// releases the lease.
pub async fn serve(components: Components, runtime: Runtime) -> Result<(), OperatorError> {
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
            Some(args) => spark_operator_webhook::run(args, &runtime)
                .await
                .map_err(OperatorError::Webhook),
            None => Ok(()),
        }
    };
    let result = futures::try_join!(controller, webhook).map(|_| ());
    runtime.stop().await;
    result
}

pub async fn operator(args: OperatorArgs) -> Result<(), OperatorError> {
    let config = client::config_from(args.runtime.kubeconfig.as_deref()).await?;
    let runtime = Runtime::start(config, args.runtime.settings(), Shutdown::on_signals()).await?;
    let mut webhook = args.webhook;
    // The webhook caches the applications of the controller's namespaces.
    if let spark_operator_controller::config::NamespaceScope::List(namespaces) = args.controller.namespace_scope() {
        webhook.namespaces = namespaces;
    }
    let components = Components {
        controller: Some(args.controller),
        webhook: Some(webhook),
    };
    serve(components, runtime).await
}

pub fn run(args: OperatorArgs) -> anyhow::Result<()> {
    logging::init();
    tokio_runtime()?.block_on(operator(args))?;
    Ok(())
}
