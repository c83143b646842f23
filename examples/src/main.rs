//! `orchestra`: the reference assembly of the Orchestra SDK.
//!
//! Subcommands grow with the SDK: `orchestra apiserver` serves the API over
//! HTTPS on the durable store; `orchestra store-demo` shows the store alone.

mod cmd;

use clap::{Parser, Subcommand};

/// The Orchestra reference assembly.
#[derive(Parser)]
#[command(name = "orchestra", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the API server over HTTPS on the embedded RocksDB store; writes
    /// an admin kubeconfig, prints a line containing `ready`, stops cleanly
    /// on SIGTERM.
    Apiserver(cmd::apiserver::Args),
    /// Demonstrates the durable store: writes, watches, paginated reads at a
    /// revision, TTL expiry, compaction, and a restart that recovers everything.
    StoreDemo(cmd::store_demo::Args),
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    match Cli::parse().command {
        Command::Apiserver(args) => cmd::apiserver::run(args).await,
        Command::StoreDemo(args) => cmd::store_demo::run(args).await,
    }
}
