//! `spark-operator controller`: reconciles SparkApplications (see `docs/controller.md`).

pub use spark_operator_controller::ControllerArgs;

/// Logs to standard error: `RUST_LOG` filters (default `info`), `SPARK_OPERATOR_LOG_FORMAT=json` for
/// JSON lines.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let json = std::env::var("SPARK_OPERATOR_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second initialisation (tests) is harmless.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// The runtime of the long-running subcommands. Worker stacks are larger than tokio's 2 MiB: kube's
/// controller machinery nests deeply in debug builds.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(8 * 1024 * 1024)
        .build()?)
}

/// Runs the controller until SIGTERM or Ctrl-C.
pub fn run(args: ControllerArgs) -> anyhow::Result<()> {
    init_tracing();
    runtime()?.block_on(spark_operator_controller::run(args))?;
    Ok(())
}
