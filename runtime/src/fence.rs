//! Fencing at the client: a tower layer that lets a request that changes something (any method but GET,
//! HEAD and OPTIONS) leave the process only while this replica leads. Reconcilers write through a fenced
//! client, so a leader that lost its lease without knowing it (its renewals refused, its process
//! stalled) cannot write once a standby may hold the Lease: see [`crate::lease`] for why the timing is
//! safe. Reads, watches included, are never fenced: a standby keeps its caches warm.
//!
//! The check is made as the request is handed to the connection, after kube's own retry layer would
//! run; a fenced client is built without that layer (see [`crate::client::fenced`]), so no retry can
//! send a write after the validity ended.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Method, Request};
use tower::{Layer, Service};

use crate::lease::LeadershipWatch;

/// Why a write was not sent.
#[derive(Debug, thiserror::Error)]
#[error("{method} {path} was not sent: this replica does not hold the leader lease")]
pub struct NotLeader {
    pub method: Method,
    pub path: String,
}

/// Adds [`Fence`] to a client's stack.
#[derive(Clone, Debug)]
pub struct FenceLayer {
    leadership: LeadershipWatch,
}

impl FenceLayer {
    pub fn new(leadership: LeadershipWatch) -> Self {
        Self { leadership }
    }
}

impl<S> Layer<S> for FenceLayer {
    type Service = Fence<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Fence {
            inner,
            leadership: self.leadership.clone(),
        }
    }
}

/// Refuses writes while not leading.
#[derive(Clone, Debug)]
pub struct Fence<S> {
    inner: S,
    leadership: LeadershipWatch,
}

fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B> Service<Request<B>> for Fence<S>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    S::Response: 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if is_write(request.method()) && !self.leadership.is_leading() {
            let refused = NotLeader {
                method: request.method().clone(),
                path: request.uri().path().to_owned(),
            };
            return Box::pin(async move { Err(refused.into()) });
        }
        let response = self.inner.call(request);
        Box::pin(async move { response.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::time::{Duration, Instant};

    use tokio::sync::watch;
    use tower::ServiceExt;

    use super::*;
    use crate::lease::Leadership;

    #[tokio::test]
    async fn writes_pass_only_while_leading_and_reads_always() {
        let (publish, rx) = watch::channel(Leadership::Standby);
        let leadership = crate::lease::LeadershipWatch::from_receiver(rx);
        let service = tower::service_fn(|_request: Request<()>| async { Ok::<_, Infallible>("sent") });
        let fenced = FenceLayer::new(leadership).layer(service);
        let request = |method: Method| Request::builder().method(method).uri("/api/v1/pods").body(()).unwrap();

        assert_eq!(fenced.clone().oneshot(request(Method::GET)).await.unwrap(), "sent");
        let refused = fenced.clone().oneshot(request(Method::POST)).await.unwrap_err();
        assert!(
            refused.to_string().contains("does not hold the leader lease"),
            "{refused}"
        );

        publish.send_replace(Leadership::Leading {
            until: Instant::now() + Duration::from_secs(60),
        });
        assert_eq!(fenced.clone().oneshot(request(Method::PATCH)).await.unwrap(), "sent");

        // Validity over and no renewal published: fenced again, with nothing else changing.
        publish.send_replace(Leadership::Leading { until: Instant::now() });
        assert!(fenced.clone().oneshot(request(Method::DELETE)).await.is_err());
    }
}
