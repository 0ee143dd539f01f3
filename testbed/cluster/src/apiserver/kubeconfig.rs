//! Serving the API server on 127.0.0.1 (plain HTTP/1.1) for real binaries and kubectl, with a
//! generated kubeconfig: one cluster, context and user named `testbed`, no credentials (the
//! server authorizes everything).

use std::net::SocketAddr;
use std::path::Path;

use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::killable::KillableListener;

/// A running listener; the server stops when this is dropped.
#[derive(Debug)]
pub struct Listening {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    /// Set on shutdown: every accepted connection fails at once (`super::killable`).
    kill: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Listening {
    pub(crate) async fn start(router: axum::Router) -> std::io::Result<Self> {
        Self::start_at(router, SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Listens on `addr` (port 0: a free port). A restarted server binds its old port again,
    /// which works at once because tokio's listener sets `SO_REUSEADDR`.
    pub(crate) async fn start_at(router: axum::Router, addr: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let (kill, killed) = watch::channel(false);
        let listener = KillableListener::new(listener, killed);
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, router).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            if let Err(e) = serve.await {
                tracing::warn!(error = %e, "in-memory API server listener failed");
            }
        });
        Ok(Self {
            addr,
            stop: Some(stop),
            kill,
            task,
        })
    }

    /// The bound address (127.0.0.1 and a free port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig pointing at this server, context `testbed`, namespace `default`.
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: testbed\n  cluster:\n    server: {url}\ncontexts:\n- name: testbed\n  context:\n    cluster: testbed\n    user: testbed\n    namespace: default\ncurrent-context: testbed\nusers:\n- name: testbed\n  user: {{}}\npreferences: {{}}\n",
            url = self.url()
        )
    }

    /// Write [`Listening::kubeconfig_yaml`] to `path`.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// Stops the way a kube-apiserver process that dies looks to its clients: the listener
    /// closes and every open connection is closed at once, watches and requests being answered
    /// included; then waits for the listener task.
    ///
    /// A graceful stop that let requests in flight finish was not enough: a watch a client
    /// started just after the others were dropped kept its connection, and the stop waited
    /// for it until the client gave up (14 s in one `chaos --fault api-restart` run, past
    /// the leader's renew deadline), while a real restart closes every watch at once.
    pub async fn shutdown(mut self) {
        let _ = self.kill.send(true);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let task = std::mem::replace(&mut self.task, tokio::spawn(async {}));
        let _ = task.await;
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.kill.send(true);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}
