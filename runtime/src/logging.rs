//! Logs to standard error: `RUST_LOG` filters (default `info`); `SPARK_OPERATOR_LOG_FORMAT=json` writes
//! JSON lines (what log pipelines in a cluster want).

/// Initialises tracing once per process; a second call (tests, `dev`) is harmless.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let json = std::env::var("SPARK_OPERATOR_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
