//! Generates the gRPC code from `cri/runtime_v1.proto` and `agent/reports.proto` with protox (pure
//! Rust), so building needs no system `protoc`.

use std::error::Error;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let cri_dir = manifest_dir.join("cri");
    let agent_dir = manifest_dir.join("agent");

    // Only the proto sources and this script change the output.
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={}", cri_dir.display());
    println!("cargo:rerun-if-changed={}", agent_dir.display());

    // The include root is `cri/`, so the file is known as `runtime_v1.proto`, like upstream's
    // single-file layout; the generated module is named after the package (`runtime.v1`).
    let fds = protox::compile([cri_dir.join("runtime_v1.proto")], [&cri_dir])
        // protox errors carry the file, line and column; Display shows them, Debug would not.
        .map_err(|e| format!("compiling cri/runtime_v1.proto: {e}"))?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;

    // The agent's contract has its own include root: it imports nothing.
    let fds = protox::compile([agent_dir.join("reports.proto")], [&agent_dir])
        .map_err(|e| format!("compiling agent/reports.proto: {e}"))?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
