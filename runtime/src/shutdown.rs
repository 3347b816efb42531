//! Shutdown as a value: every component holds a [`Shutdown`] and stops when it fires, whether the cause
//! is a signal or the caller (tests, `dev`).

use tokio::sync::watch;

/// Fires once; cheap to clone.
#[derive(Clone, Debug)]
pub struct Shutdown(watch::Receiver<bool>);

/// Fires its [`Shutdown`]s.
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

impl Trigger {
    pub fn fire(&self) {
        let _ = self.0.send(true);
    }
}

impl Shutdown {
    /// A shutdown fired by the returned trigger (or when the trigger is dropped).
    pub fn new() -> (Trigger, Shutdown) {
        let (tx, rx) = watch::channel(false);
        (Trigger(tx), Shutdown(rx))
    }

    /// A shutdown that never fires.
    pub fn never() -> Shutdown {
        let (tx, rx) = watch::channel(false);
        // Keep the sender alive for good: a dropped sender would count as fired.
        std::mem::forget(tx);
        Shutdown(rx)
    }

    /// A shutdown fired by SIGTERM or Ctrl-C.
    pub fn on_signals() -> Shutdown {
        let (trigger, shutdown) = Self::new();
        tokio::spawn(async move {
            signal().await;
            tracing::info!("shutting down");
            trigger.fire();
        });
        shutdown
    }

    pub fn is_fired(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once fired.
    pub async fn fired(&self) {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(|fired| *fired).await;
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn signal() {
    #[cfg(unix)]
    {
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fires_every_clone() {
        let (trigger, shutdown) = Shutdown::new();
        let other = shutdown.clone();
        assert!(!other.is_fired());
        trigger.fire();
        other.fired().await;
        assert!(shutdown.is_fired());
        assert!(!Shutdown::never().is_fired());
    }
}
