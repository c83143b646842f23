//! Starting servers for tests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use orchestra_core::server::{ApiServer, ServerOptions};
use orchestra_store::MemStore;

/// An API server on a MemStore, with short bookmark intervals.
pub async fn server() -> ApiServer {
    ApiServer::builder(Arc::new(MemStore::new()))
        .options(ServerOptions::default().with_bookmark_interval(Duration::from_millis(200)))
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

/// Writes `dir/kubeconfig`: an anonymous user of the plain-HTTP server at
/// `address`, namespace `default`.
pub fn write_kubeconfig(dir: &std::path::Path, address: SocketAddr) {
    std::fs::write(
        dir.join("kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://{address}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\n    namespace: default\ncurrent-context: ctx\n"
        ),
    )
    .unwrap();
}

/// Serves `server` on loopback and writes a kubeconfig for it into a new
/// temporary directory: (the directory's guard, its path for kubectl).
pub async fn kubectl_dir(server: &ApiServer) -> (tempfile::TempDir, std::path::PathBuf) {
    let address = listen(server).await;
    let tmp = tempfile::tempdir().unwrap();
    write_kubeconfig(tmp.path(), address);
    let dir = tmp.path().to_owned();
    (tmp, dir)
}

/// A kubectl command with `dir/kubeconfig` and a throwaway cache in
/// `dir/cache`; stdin closed, output captured.
pub fn kubectl_command(dir: &std::path::Path, args: &[&str]) -> std::process::Command {
    use std::process::Stdio;
    let mut command = std::process::Command::new("kubectl");
    command
        .arg(format!("--kubeconfig={}", dir.join("kubeconfig").display()))
        .arg(format!("--cache-dir={}", dir.join("cache").display()))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs kubectl (see [`kubectl_command`]) with `stdin` as its input;
/// returns (success, stdout, stderr).
pub fn kubectl(dir: &std::path::Path, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    use std::io::Write as _;
    let mut child =
        kubectl_command(dir, args).stdin(std::process::Stdio::piped()).spawn().expect("kubectl is installed");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    let output = child.wait_with_output().unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
