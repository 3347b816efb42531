//! `spark-operator agent`: the node agent, as the chart's DaemonSet runs it on every node (see
//! `docs/agent.md`). It shares the runtime (metrics, readiness, shutdown) with the other subcommands, but
//! elects nothing: each agent is alone on its node, so the leader-election flags are ignored (and hidden).

use spark_operator_agent::AgentArgs;
use spark_operator_runtime::{Runtime, RuntimeArgs, client, logging, shutdown::Shutdown, tokio_runtime};

#[derive(Debug, clap::Args)]
pub struct AgentCommandArgs {
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// Why the agent stopped.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Client(#[from] client::Error),
    #[error(transparent)]
    Runtime(#[from] spark_operator_runtime::Error),
    #[error("the agent stopped")]
    Agent(#[source] spark_operator_agent::Error),
}

async fn agent(args: AgentCommandArgs) -> Result<(), AgentError> {
    let config = client::config_from(args.runtime.kubeconfig.as_deref()).await?;
    let mut settings = args.runtime.settings();
    // One agent per node, each responsible for its own node only: there is no leader to elect.
    settings.election = None;
    let runtime = Runtime::start(config, settings, Shutdown::on_signals()).await?;
    let result = spark_operator_agent::run(args.agent, &runtime)
        .await
        .map_err(AgentError::Agent);
    runtime.stop().await;
    result
}

/// Runs the agent until SIGTERM or Ctrl-C.
pub fn run(args: AgentCommandArgs) -> anyhow::Result<()> {
    logging::init();
    tokio_runtime()?.block_on(agent(args))?;
    Ok(())
}
