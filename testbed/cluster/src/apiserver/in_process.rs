//! The tower service behind [`super::ApiServer::client`]: the router, called in-process, or
//! while a restart has the server down the error a refused TCP connection gives a kube
//! client (kube-rs reports both as a service error, which controllers retry).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use axum::body::Body;
use tower::Service;

use super::Shared;

/// See the module docs.
#[derive(Clone)]
pub(crate) struct InProcess {
    router: axum::Router,
    shared: Arc<Shared>,
}

impl InProcess {
    pub(crate) fn new(router: axum::Router, shared: Arc<Shared>) -> Self {
        Self { router, shared }
    }
}

impl<B> Service<http::Request<B>> for InProcess
where
    B: http_body::Body<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = axum::response::Response;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // axum's router is always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if self.shared.down.load(Ordering::SeqCst) {
            return Box::pin(std::future::ready(Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                "the in-memory API server is down (restarting)",
            ))));
        }
        let mut router = self.router.clone();
        Box::pin(async move {
            match router.call(request.map(Body::new)).await {
                Ok(response) => Ok(response),
                Err(never) => match never {},
            }
        })
    }
}
