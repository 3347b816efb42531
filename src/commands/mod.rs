//! One module per subcommand, each with its `Args`, its error type and `run`.

pub mod cleanup;
pub mod controller;
pub mod crd;
pub mod dev;
pub mod documents;
pub mod validate;
