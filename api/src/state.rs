//! Application, driver and executor states, with the predicates the controller decides on.
//!
//! They serialize to Kubeflow's exact strings. Statuses may have been written by someone else (Kubeflow's
//! operator, a newer version of ours), so reading never fails: a string we do not know becomes the
//! `Unknown` state, which the controller treats as "re-derive the state from the pods". The unknown
//! string itself is not kept; it would be overwritten at the next status update anyway.

/// Defines a string enum that reads leniently (unknown strings map to `$fallback`) and writes the exact
/// strings, with a plain `type: string` schema so that old or foreign values still pass the CRD.
macro_rules! lenient_string_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident fallback $fallback:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The exact string stored in the status.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }

            /// Reads a stored string; unknown strings map to the fallback (see the module docs).
            pub fn parse(value: &str) -> Self {
                match value {
                    $( $text => $name::$variant, )+
                    _ => $name::$fallback,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(deserializer)?;
                Ok(Self::parse(&text))
            }
        }

        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                let values = [$($text),+].join(", ");
                schemars::json_schema!({
                    "type": "string",
                    "description": format!("One of: {values}."),
                })
            }
        }
    };
}

pub(crate) use lenient_string_enum;

lenient_string_enum! {
    /// The state of a SparkApplication (`status.applicationState.state`).
    pub enum ApplicationStateType fallback Unknown {
        // Never submitted; stored as the empty string, as Kubeflow does.
        #[default]
        New => "",
        Submitted => "SUBMITTED",
        Running => "RUNNING",
        Completed => "COMPLETED",
        Failed => "FAILED",
        SubmissionFailed => "SUBMISSION_FAILED",
        PendingRerun => "PENDING_RERUN",
        Invalidating => "INVALIDATING",
        Succeeding => "SUCCEEDING",
        Failing => "FAILING",
        Suspending => "SUSPENDING",
        Suspended => "SUSPENDED",
        Resuming => "RESUMING",
        Unknown => "UNKNOWN",
    }
}

impl ApplicationStateType {
    /// COMPLETED or FAILED: nothing more will happen except TTL expiry.
    /// SUBMISSION_FAILED is not terminal: the restart policy may resubmit.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed)
    }

    /// A state that reports a failure, final or not.
    pub fn is_failure(self) -> bool {
        matches!(self, Self::Failed | Self::SubmissionFailed | Self::Failing)
    }

    /// A state that reports success, final or not.
    pub fn is_success(self) -> bool {
        matches!(self, Self::Completed | Self::Succeeding)
    }

    /// Never submitted yet.
    pub fn is_new(self) -> bool {
        self == Self::New
    }

    /// A driver pod of the current submission is expected to exist (or to have existed).
    pub fn expects_driver(self) -> bool {
        matches!(
            self,
            Self::Submitted | Self::Running | Self::Unknown | Self::Succeeding | Self::Failing
        )
    }

    /// Suspended or on the way there.
    pub fn is_suspended(self) -> bool {
        matches!(self, Self::Suspending | Self::Suspended)
    }

    /// The spec may still be defaulted: defaults are applied only before submission, as Kubeflow does.
    pub fn accepts_defaults(self) -> bool {
        matches!(self, Self::New | Self::Invalidating)
    }

    /// The application state a driver state leads to (Kubeflow's `DriverStateToApplicationState`).
    pub fn from_driver_state(driver: DriverState) -> Self {
        match driver {
            DriverState::Pending => Self::Submitted,
            DriverState::Running => Self::Running,
            DriverState::Completed => Self::Succeeding,
            DriverState::Failed => Self::Failing,
            DriverState::Unknown => Self::Unknown,
        }
    }
}

lenient_string_enum! {
    /// The state of a driver pod.
    pub enum DriverState fallback Unknown {
        Pending => "PENDING",
        Running => "RUNNING",
        Completed => "COMPLETED",
        Failed => "FAILED",
        #[default]
        Unknown => "UNKNOWN",
    }
}

lenient_string_enum! {
    /// The state of an executor pod (`status.executorState` values).
    pub enum ExecutorState fallback Unknown {
        Pending => "PENDING",
        Running => "RUNNING",
        Completed => "COMPLETED",
        Failed => "FAILED",
        #[default]
        Unknown => "UNKNOWN",
    }
}

macro_rules! pod_state_predicates {
    ($name:ident) => {
        impl $name {
            /// The container has finished, one way or the other.
            pub fn is_terminal(self) -> bool {
                matches!(self, Self::Completed | Self::Failed)
            }

            pub fn is_failure(self) -> bool {
                self == Self::Failed
            }

            /// The state a pod phase (`status.phase`) maps to, before looking at container statuses.
            pub fn from_pod_phase(phase: &str) -> Self {
                match phase {
                    "Pending" => Self::Pending,
                    "Running" => Self::Running,
                    "Succeeded" => Self::Completed,
                    "Failed" => Self::Failed,
                    _ => Self::Unknown,
                }
            }
        }
    };
}

pod_state_predicates!(DriverState);
pod_state_predicates!(ExecutorState);

lenient_string_enum! {
    /// Which path saw a termination first: the node agent, the controller's pod watch, or the
    /// driver-protection finalizer when the pod was being deleted.
    pub enum TerminationObserver fallback Unknown {
        Agent => "Agent",
        PodWatch => "PodWatch",
        Finalizer => "Finalizer",
        #[default]
        Unknown => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_round_trips_through_its_string() {
        for state in ApplicationStateType::ALL {
            let json = serde_json::to_value(state).unwrap();
            assert_eq!(json, serde_json::Value::String(state.as_str().to_owned()));
            let back: ApplicationStateType = serde_json::from_value(json).unwrap();
            assert_eq!(back, *state);
        }
        for state in ExecutorState::ALL {
            let back: ExecutorState = serde_json::from_value(serde_json::to_value(state).unwrap()).unwrap();
            assert_eq!(back, *state);
        }
    }

    #[test]
    fn kubeflow_strings_are_exact() {
        assert_eq!(ApplicationStateType::New.as_str(), "");
        assert_eq!(ApplicationStateType::SubmissionFailed.as_str(), "SUBMISSION_FAILED");
        assert_eq!(ApplicationStateType::PendingRerun.as_str(), "PENDING_RERUN");
        assert_eq!(ExecutorState::Completed.as_str(), "COMPLETED");
        assert_eq!(ApplicationStateType::default(), ApplicationStateType::New);
    }

    #[test]
    fn unknown_strings_read_as_unknown_instead_of_failing() {
        let state: ApplicationStateType = serde_json::from_str("\"SOME_FUTURE_STATE\"").unwrap();
        assert_eq!(state, ApplicationStateType::Unknown);
        let executor: ExecutorState = serde_json::from_str("\"Evicted\"").unwrap();
        assert_eq!(executor, ExecutorState::Unknown);
        let observer: TerminationObserver = serde_json::from_str("\"Kubelet\"").unwrap();
        assert_eq!(observer, TerminationObserver::Unknown);
    }

    #[test]
    fn terminal_states_are_exactly_completed_and_failed() {
        let terminal: Vec<_> = ApplicationStateType::ALL.iter().filter(|s| s.is_terminal()).collect();
        assert_eq!(
            terminal,
            [&ApplicationStateType::Completed, &ApplicationStateType::Failed]
        );
        assert!(!ApplicationStateType::SubmissionFailed.is_terminal());
    }

    #[test]
    fn failure_and_success_predicates_do_not_overlap() {
        for state in ApplicationStateType::ALL {
            assert!(!(state.is_failure() && state.is_success()), "{state:?}");
        }
        assert!(ApplicationStateType::Failing.is_failure());
        assert!(ApplicationStateType::SubmissionFailed.is_failure());
        assert!(ApplicationStateType::Succeeding.is_success());
        assert!(!ApplicationStateType::Running.is_failure());
    }

    #[test]
    fn defaults_only_before_submission() {
        let accepting: Vec<_> = ApplicationStateType::ALL
            .iter()
            .filter(|s| s.accepts_defaults())
            .collect();
        assert_eq!(
            accepting,
            [&ApplicationStateType::New, &ApplicationStateType::Invalidating]
        );
    }

    #[test]
    fn driver_states_map_to_kubeflow_application_states() {
        use ApplicationStateType as A;
        let mapped: Vec<_> = DriverState::ALL.iter().map(|d| A::from_driver_state(*d)).collect();
        assert_eq!(
            mapped,
            [A::Submitted, A::Running, A::Succeeding, A::Failing, A::Unknown]
        );
    }

    #[test]
    fn pod_phases_map_to_pod_states() {
        assert_eq!(ExecutorState::from_pod_phase("Succeeded"), ExecutorState::Completed);
        assert_eq!(ExecutorState::from_pod_phase("Failed"), ExecutorState::Failed);
        assert_eq!(DriverState::from_pod_phase("Pending"), DriverState::Pending);
        assert_eq!(DriverState::from_pod_phase("Weird"), DriverState::Unknown);
        assert!(ExecutorState::Failed.is_terminal() && ExecutorState::Failed.is_failure());
        assert!(!ExecutorState::Running.is_terminal());
    }
}
