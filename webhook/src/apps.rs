//! Where the webhook finds a pod's application: a cache of every SparkApplication (a lenient watch, as the
//! controller's), confirmed by a live GET whenever the cache would refuse the pod, so cache lag never
//! refuses the pod of an application that exists.

use std::sync::Arc;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use spark_operator_api::watched::WatchedApp;
use spark_operator_runtime::error_chain::kube_error;

use crate::mutate::{SparkPodClaims, is_current};

/// The application as found: from the cache when it already says the pod is current, else as read live.
#[derive(Clone, Debug)]
pub enum Found {
    App(Arc<WatchedApp>),
    Gone,
}

/// Why the application could not be looked up (the pod is then refused: nothing is half-applied).
#[derive(Debug, thiserror::Error)]
#[error("reading SparkApplication {namespace}/{name}")]
pub struct LookupError {
    pub namespace: String,
    pub name: String,
    #[source]
    pub source: kube::Error,
}

/// The cache and the client for live reads.
#[derive(Clone)]
pub struct Apps {
    client: kube::Client,
    store: Store<WatchedApp>,
}

impl Apps {
    /// Starts the watch (all namespaces, or the listed ones); returns the lookup and the task that keeps
    /// the cache, which resolves only if it ends.
    pub fn watch(client: kube::Client, namespaces: &[String]) -> (Self, futures::future::BoxFuture<'static, ()>) {
        let (store, writer) = reflector::store::<WatchedApp>();
        let apis: Vec<Api<WatchedApp>> = if namespaces.is_empty() {
            vec![Api::all(client.clone())]
        } else {
            namespaces.iter().map(|n| Api::namespaced(client.clone(), n)).collect()
        };
        let streams = apis
            .into_iter()
            .map(|api| watcher(api, watcher::Config::default()).default_backoff().boxed());
        let merged = futures::stream::select_all(streams);
        let task: futures::future::BoxFuture<'static, ()> =
            Box::pin(reflector::reflector(writer, merged).for_each(|_| async {}));
        (Self { client, store }, task)
    }

    /// Resolves once the cache has listed.
    pub async fn synced(&self) {
        let _ = self.store.wait_until_ready().await;
    }

    /// The pod's application, live-confirmed unless the cache already says the pod is current.
    pub async fn find(&self, namespace: &str, claims: &SparkPodClaims) -> Result<Found, LookupError> {
        let reference = ObjectRef::new(&claims.app).within(namespace);
        if let Some(cached) = self.store.get(&reference)
            && cached.readable().is_some_and(|app| is_current(app, claims))
        {
            return Ok(Found::App(cached));
        }
        let api: Api<WatchedApp> = Api::namespaced(self.client.clone(), namespace);
        match api.get_opt(&claims.app).await {
            Ok(Some(live)) => Ok(Found::App(Arc::new(live))),
            Ok(None) => Ok(Found::Gone),
            Err(source) => {
                tracing::warn!(namespace, app = claims.app, error = %kube_error(&source), "could not read an application");
                Err(LookupError {
                    namespace: namespace.to_owned(),
                    name: claims.app.clone(),
                    source,
                })
            }
        }
    }
}
