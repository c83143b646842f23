//! The subcommands of the `orchestra` binary.

pub mod apiserver;
pub mod controller_manager;
pub mod image;
pub mod images;
pub mod node;
pub mod scheduler;
pub mod store_demo;
pub mod up;

/// Pods' address space in the reference assembly: inside 127.0.0.0/8, so
/// every pod address is a loopback address a process can bind on Linux
/// without any set-up (see `orchestra_node::network`).
pub const CLUSTER_CIDR: &str = "127.64.0.0/10";

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// `<hostname>_<pid>`: an identity for leader election that differs between
/// processes.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "orchestra".into());
    format!("{host}_{}", std::process::id())
}
