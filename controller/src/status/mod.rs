//! The layer the SparkApplication controller, the scheduled controller and the report receiver all write
//! through, below each of them:
//!
//! - [`write`]: the status byte budget and its conditional merge-patch write;
//! - [`conditions`]: standard conditions from the state;
//! - [`events`]: Kubernetes Events for transitions and noticed condition changes;
//! - [`text`]: free text cut to a byte bound on a character boundary.

pub(crate) mod conditions;
pub(crate) mod events;
pub(crate) mod text;
pub(crate) mod write;
