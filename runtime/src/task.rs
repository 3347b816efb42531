//! Tasks tied to a scope.

/// Aborts a task when dropped, so a component's background work ends with the component.
#[derive(Debug)]
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
