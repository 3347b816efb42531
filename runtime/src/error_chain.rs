//! Showing an error together with its causes.
//!
//! Our error messages leave their source out (the workspace convention, checked by
//! `tests/error_convention.rs`), so a message read on its own (a log line, a status message, an
//! Event) must be rendered with the chain: `outer: cause: root cause`.
//!
//! kube's own errors print Rust `Debug` (`ApiError: ... (Status { status: Some(Failure), ...`); they
//! are rendered here as Kubernetes renders them instead ([`kube_error`]).

use std::error::Error;
use std::fmt;

/// Displays `error: cause: cause …`, walking [`Error::source`].
///
/// A cause whose text the previous message already contains is left out: errors from outside the
/// workspace (kube's, for one) often print their cause themselves, and it should not appear twice.
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'static));

/// How one error of the chain reads, and whether its causes are already in it.
fn text_of(error: &(dyn Error + 'static)) -> (String, bool) {
    match error.downcast_ref::<kube::Error>() {
        Some(kube) => (kube_error(kube), true),
        None => (error.to_string(), false),
    }
}

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (mut previous, mut complete) = text_of(self.0);
        f.write_str(&previous)?;
        let mut next = self.0.source();
        while let Some(cause) = next {
            if complete {
                break;
            }
            let (text, whole) = text_of(cause);
            if !previous.contains(&text) {
                write!(f, ": {text}")?;
            }
            previous = text;
            complete = whole;
            next = cause.source();
        }
        Ok(())
    }
}

/// A kube error as people should read it. An API refusal reads as kube-apiserver worded it, with its
/// reason and HTTP code (`pods "x" is forbidden: ... (Forbidden, 403)`, as kubectl's "Error from server
/// (Forbidden)"); any other error with its causes, never Rust `Debug`.
pub fn kube_error(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => {
            let message = status.message.trim();
            let reason = if status.reason.is_empty() {
                "Failure"
            } else {
                status.reason.as_str()
            };
            if message.is_empty() {
                format!("the API server refused the request ({reason}, {})", status.code)
            } else {
                format!("{message} ({reason}, {})", status.code)
            }
        }
        other => {
            let mut text = other.to_string();
            let mut next = other.source();
            while let Some(cause) = next {
                let cause_text = cause.to_string();
                if !text.contains(&cause_text) {
                    text = format!("{text}: {cause_text}");
                }
                next = cause.source();
            }
            text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ErrorChain, kube_error};

    #[test]
    fn an_api_refusal_reads_as_kubernetes_words_it() {
        let status = kube::core::Status {
            code: 403,
            reason: "Forbidden".into(),
            message: r#"pods "x" is forbidden: exceeded quota"#.into(),
            ..kube::core::Status::default()
        };
        let error = kube::Error::Api(Box::new(status));
        let text = kube_error(&error);
        assert_eq!(text, r#"pods "x" is forbidden: exceeded quota (Forbidden, 403)"#);

        #[derive(Debug, thiserror::Error)]
        #[error("creating Pod default/x")]
        struct Create(#[source] kube::Error);
        let chained = ErrorChain(&Create(error)).to_string();
        assert_eq!(
            chained,
            r#"creating Pod default/x: pods "x" is forbidden: exceeded quota (Forbidden, 403)"#
        );
        for debug in ["Some(", "Status {", "ApiError"] {
            assert!(!chained.contains(debug), "{chained}");
        }
    }

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
