//! One module per subcommand, each with its `Args`, its error type and `run`.

pub mod agent;
pub mod cleanup;
pub mod controller;
pub mod crd;
#[cfg(feature = "dev")]
pub mod dev;
pub mod documents;
pub mod logs;
pub mod operator;
pub mod permissions;
pub mod validate;
