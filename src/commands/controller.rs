//! `spark-operator controller`: the controller alone (see `docs/controller.md`); `operator` runs it
//! together with the webhook.

use spark_operator_controller::ControllerArgs;
use spark_operator_runtime::{Runtime, RuntimeArgs, client, logging, shutdown::Shutdown, tokio_runtime};

use super::operator::{Components, OperatorError, serve};

#[derive(Debug, clap::Args)]
pub struct ControllerCommandArgs {
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    #[command(flatten)]
    pub controller: ControllerArgs,
}

async fn controller(args: ControllerCommandArgs) -> Result<(), OperatorError> {
    let config = client::config_from(args.runtime.kubeconfig.as_deref()).await?;
    let runtime = Runtime::start(config, args.runtime.settings(), Shutdown::on_signals()).await?;
    let components = Components {
        controller: Some(args.controller),
        webhook: None,
        reports: None,
    };
    serve(components, runtime).await
}

/// Runs the controller until SIGTERM or Ctrl-C.
pub fn run(args: ControllerCommandArgs) -> anyhow::Result<()> {
    logging::init();
    tokio_runtime()?.block_on(controller(args))?;
    Ok(())
}
