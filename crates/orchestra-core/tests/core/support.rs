//! Starting servers for tests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use orchestra_core::server::{ApiServer, ServerOptions};
use orchestra_store::MemStore;

/// An API server on a MemStore, with short bookmark intervals.
pub async fn server() -> ApiServer {
    ApiServer::builder(Arc::new(MemStore::new()))
        .options(ServerOptions {
            bookmark_interval: Duration::from_millis(200),
        })
        .build()
        .await
        .expect("server starts")
}

/// Serves `server` over plain HTTP on a free loopback port.
pub async fn listen(server: &ApiServer) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let router = server.router();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    address
}
