//! `spark-operator logs`: a Spark driver's or executor's log as the node agents kept it, also after its
//! pod and kubelet's files are gone. Reads the SparkApplication, asks every agent pod's index through the
//! API server's `pods/proxy` with the caller's own client, picks the execution and the container, and
//! prints its lines in order. The agents let the caller read only where Kubernetes RBAC lets it `get`
//! `pods/log` (see docs/agent.md, "Logs").

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use kube::api::Api;
use spark_operator_agent::logs::client::{self as agents, Agents, Nothing, Selection};
use spark_operator_api::SparkApplication;
use spark_operator_runtime::error_chain::ErrorChain;
use spark_operator_runtime::{client, tokio_runtime};

#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The SparkApplication.
    pub name: String,

    /// Its namespace; default: the kubeconfig context's.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,

    /// Show this executor's log (its `spark-exec-id`) instead of the driver's.
    #[arg(long)]
    pub executor: Option<i64>,

    /// Show the N-th oldest execution held (1 = the first) instead of the current one.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub attempt: Option<u32>,

    /// Keep printing as the log grows, until the container has finished and its copy is complete.
    #[arg(short = 'f', long)]
    pub follow: bool,

    /// kubeconfig to use; default: KUBECONFIG, ~/.kube/config or the in-cluster service account. Its user
    /// needs a bearer token (token, tokenFile or exec plugin): the agents check who you are with it.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Namespace of the agent pods (the chart's `agent.namespace`: the release namespace with `-agent`).
    #[arg(long, default_value = "spark-operator-agent")]
    pub agent_namespace: String,

    /// Label selector of the agent pods.
    #[arg(
        long,
        default_value = "app.kubernetes.io/name=spark-operator,app.kubernetes.io/component=agent"
    )]
    pub agent_selector: String,

    /// Port of the agents' log server.
    #[arg(long, default_value_t = spark_operator_agent::logs::DEFAULT_PORT)]
    pub agent_port: u16,
}

#[derive(Debug, thiserror::Error)]
pub enum LogsError {
    #[error(transparent)]
    Client(#[from] client::Error),
    #[error("could not read SparkApplication {namespace}/{name}")]
    ReadApp {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Agents(#[from] agents::Error),
    #[error("could not start the async runtime")]
    Runtime(#[source] std::io::Error),
}

/// What there was to show.
#[derive(Debug, PartialEq, Eq)]
pub enum Shown {
    Log,
    /// Nothing to show, and why.
    Nothing(String),
}

pub async fn logs(args: &LogsArgs, out: &mut (dyn Write + Send)) -> Result<Shown, LogsError> {
    let config = client::config_from(args.kubeconfig.as_deref()).await?;
    let namespace = args
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| config.default_namespace.clone());
    // No retries: kube's retry of a 503 would wait on an agent that cannot be reached (a node down)
    // for half a minute, where the other agents' answers are enough.
    let mut no_retry = config.clone();
    no_retry.default_retry = false;
    let kube = client::client(no_retry)?;
    let apps: Api<SparkApplication> = Api::namespaced(kube.clone(), &namespace);
    let app = apps.get_opt(&args.name).await.map_err(|source| LogsError::ReadApp {
        namespace: namespace.clone(),
        name: args.name.clone(),
        source,
    })?;
    let Some(app) = app else {
        return Ok(Shown::Nothing(format!(
            "SparkApplication {namespace}/{} not found",
            args.name
        )));
    };
    let token = agents::bearer_token(&config).await?;
    let agents_at = Agents {
        namespace: args.agent_namespace.clone(),
        selector: args.agent_selector.clone(),
        port: args.agent_port,
    };
    let pods = agents::agent_pods(&kube, &agents_at).await?;
    if pods.is_empty() {
        return Ok(Shown::Nothing(format!(
            "no running agent pods in namespace {} with labels {}: is the agent installed (--agent-namespace, --agent-selector)?",
            agents_at.namespace, agents_at.selector
        )));
    }
    let asked = agents::indexes(&kube, &agents_at, &pods, &token, &namespace, &args.name).await?;
    for failed in &asked.unreachable {
        eprintln!("spark-operator logs: warning: {}", ErrorChain(failed));
    }
    if asked.held.is_empty()
        && let Some(failed) = asked.unreachable.into_iter().next()
    {
        // Nothing held by the agents that answered: the ones that did not may hold it.
        return Err(failed.into());
    }
    let held = asked.held;
    let selection = Selection {
        current_submission: app.status.map(|s| s.submission_id).filter(|s| !s.is_empty()),
        attempt: args.attempt.map(|n| n as usize),
        executor: args.executor,
    };
    let chosen = match agents::choose(&held, &selection) {
        Ok(chosen) => chosen,
        Err(Nothing::NotHeld) => {
            return Ok(Shown::Nothing(format!(
                "no agent holds logs of SparkApplication {namespace}/{} ({} agent(s) asked)",
                args.name,
                pods.len()
            )));
        }
        Err(nothing) => {
            return Ok(Shown::Nothing(format!(
                "SparkApplication {namespace}/{}: {nothing}",
                args.name
            )));
        }
    };
    let mut write = |bytes: &[u8]| {
        out.write_all(bytes)?;
        out.flush()
    };
    agents::stream_log(
        &kube,
        &agents_at,
        &held[chosen.agent].0,
        &token,
        &namespace,
        &args.name,
        &chosen.container.id,
        args.follow,
        &mut write,
    )
    .await?;
    Ok(Shown::Log)
}

/// Prints the log; exits 1 with the reason when there is nothing to show.
pub fn run(args: &LogsArgs, out: &mut (dyn Write + Send)) -> anyhow::Result<ExitCode> {
    let runtime = tokio_runtime().map_err(LogsError::Runtime)?;
    match runtime.block_on(logs(args, out))? {
        Shown::Log => Ok(ExitCode::SUCCESS),
        Shown::Nothing(why) => {
            eprintln!("spark-operator logs: {why}");
            Ok(ExitCode::FAILURE)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: LogsArgs,
    }

    #[test]
    fn flags_and_defaults() {
        let cli = Cli::try_parse_from(["logs", "pi", "-n", "jobs", "--executor", "3", "--attempt", "2", "-f"]).unwrap();
        assert_eq!(cli.args.name, "pi");
        assert_eq!(cli.args.namespace.as_deref(), Some("jobs"));
        assert_eq!(
            (cli.args.executor, cli.args.attempt, cli.args.follow),
            (Some(3), Some(2), true)
        );
        assert_eq!(cli.args.agent_namespace, "spark-operator-agent");
        assert_eq!(cli.args.agent_port, 9444);
        assert!(cli.args.agent_selector.contains("app.kubernetes.io/component=agent"));
        assert!(
            Cli::try_parse_from(["logs", "pi", "--attempt", "0"]).is_err(),
            "attempts count from 1"
        );
        assert!(Cli::try_parse_from(["logs"]).is_err(), "the application is required");
    }
}
