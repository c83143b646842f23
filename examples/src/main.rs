//! `orchestra`: the reference assembly of the Orchestra SDK.
//!
//! Subcommands grow with the SDK; today the store is the piece that exists, and
//! `orchestra store-demo` shows it end to end on the durable backend.

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
    /// Demonstrates the durable store: writes, watches, paginated reads at a
    /// revision, TTL expiry, compaction, and a restart that recovers everything.
    StoreDemo(cmd::store_demo::Args),
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    match Cli::parse().command {
        Command::StoreDemo(args) => cmd::store_demo::run(args).await,
    }
}
