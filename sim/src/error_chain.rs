//! Showing an error together with its causes.
//!
//! The sim's error messages leave their source out (the workspace convention, checked by
//! `tests/error_convention.rs`), so a message read on its own (a log line, a status message, an
//! Event, a container status) must be rendered with the chain: `outer: cause: root cause`.

use std::error::Error;
use std::fmt;

/// Displays `error: cause: cause …`, walking [`Error::source`].
///
/// A cause whose text the previous message already contains is left out: errors from outside the
/// workspace (kube's, for one) often print their cause themselves, and it should not appear twice.
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut previous = self.0.to_string();
        f.write_str(&previous)?;
        let mut next = self.0.source();
        while let Some(cause) = next {
            let text = cause.to_string();
            if !previous.contains(&text) {
                write!(f, ": {text}")?;
            }
            previous = text;
            next = cause.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorChain;

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error("writing the status of {name}")]
        Write {
            name: String,
            #[source]
            source: Middle,
        },
    }

    /// An error from outside the workspace that prints its own cause, as `kube::Error` does.
    #[derive(Debug)]
    enum Middle {
        Api(std::io::Error),
    }

    impl std::fmt::Display for Middle {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let Middle::Api(cause) = self;
            write!(f, "ApiError: {cause}")
        }
    }

    impl std::error::Error for Middle {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            let Middle::Api(cause) = self;
            Some(cause)
        }
    }

    #[test]
    fn shows_every_cause_once() {
        let error = Outer::Write {
            name: "pi".to_owned(),
            source: Middle::Api(std::io::Error::other("connection reset")),
        };
        assert_eq!(
            ErrorChain(&error).to_string(),
            "writing the status of pi: ApiError: connection reset"
        );
    }

    #[test]
    fn an_error_without_causes_is_its_message() {
        let error = std::io::Error::other("connection reset");
        assert_eq!(ErrorChain(&error).to_string(), "connection reset");
    }
}
