//! The built `spark-operator` binary, run from the root package's tests, with the caller's arguments only:
//! `KUBECONFIG` from the environment is not passed on. A panic here is a failed test.

use std::process::Output;

/// Runs `spark-operator ARGS...` to its end, off the async runtime's threads.
pub async fn spark_operator(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_spark-operator"))
            .args(args)
            .env_remove("KUBECONFIG")
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}
