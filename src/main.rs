//! `spark-operator`: the one binary of the Spark operator. Each subcommand lives in `commands/`; `cli.rs`
//! declares them. Built without the default `dev` feature (the container image), it contains nothing of
//! the simulator.

mod cli;
mod commands;

use std::io;
use std::process::ExitCode;

use anyhow::Context;

use crate::cli::Command;

fn main() -> anyhow::Result<ExitCode> {
    let cli = cli::parse();
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match cli.command {
        Command::Crd(args) => commands::crd::run(&args, &mut out).context("spark-operator crd"),
        Command::Validate(args) => {
            commands::validate::run(&args, io::stdin().lock(), &mut out).context("spark-operator validate")
        }
        Command::Controller(args) => {
            commands::controller::run(*args).context("spark-operator controller")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Operator(args) => {
            commands::operator::run(*args).context("spark-operator operator")?;
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(feature = "dev")]
        Command::Dev(args) => {
            commands::dev::run(args, &mut out).context("spark-operator dev")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Agent(args) => {
            commands::agent::run(*args).context("spark-operator agent")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Logs(args) => commands::logs::run(&args, &mut io::stdout()).context("spark-operator logs"),
        Command::Permissions(args) => commands::permissions::run(&args, &mut out).context("spark-operator permissions"),
        Command::Cleanup(args) => {
            commands::cleanup::run(&args, &mut out).context("spark-operator cleanup")?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
