//! `orchestra`: the reference assembly of the Orchestra SDK.
//!
//! `orchestra up` runs a whole cluster in one process; `orchestra apiserver`,
//! `orchestra scheduler`, `orchestra controller-manager` and `orchestra node`
//! run each component as its own process; `orchestra images` lists the
//! images of the process runtime; `orchestra store-demo` shows the store
//! alone.

mod cmd;

/// The control plane in one process allocates and frees small objects
/// (decoded API objects, JSON buffers) from many threads: mimalloc spends
/// less CPU on that than glibc's allocator and returns freed memory sooner.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Runs a whole cluster in one process: store, API server, scheduler,
    /// controller manager and node agents; prints `ready` and the
    /// `export KUBECONFIG=...` to use.
    Up(cmd::up::Args),
    /// Runs one node agent against an API server given by a kubeconfig.
    Node(cmd::node::Args),
    /// Bootstrap tokens for joining nodes (`token create`).
    #[command(subcommand)]
    Token(cmd::token::Token),
    /// Lists the images the process runtime knows.
    Images(cmd::images::Args),
    /// Runs the scheduler against an API server given by a kubeconfig.
    Scheduler(cmd::scheduler::Args),
    /// Runs the built-in controllers (behind leader election) against an
    /// API server given by a kubeconfig.
    ControllerManager(cmd::controller_manager::Args),
    /// Runs the program behind one of the shipped images (what a container
    /// of that image executes).
    #[command(subcommand, hide = true)]
    Image(cmd::image::Image),
    /// Demonstrates the durable store: writes, watches, paginated reads at a
    /// revision, TTL expiry, compaction, and a restart that recovers everything.
    StoreDemo(cmd::store_demo::Args),
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    match Cli::parse().command {
        Command::Apiserver(args) => cmd::apiserver::run(args).await,
        Command::Up(args) => cmd::up::run(args).await,
        Command::Node(args) => cmd::node::run(args).await,
        Command::Token(command) => cmd::token::run(command).await,
        Command::Images(args) => cmd::images::run(args).await,
        Command::Scheduler(args) => cmd::scheduler::run(args).await,
        Command::ControllerManager(args) => cmd::controller_manager::run(args).await,
        Command::Image(image) => cmd::image::run(image).await,
        Command::StoreDemo(args) => cmd::store_demo::run(args).await,
    }
}
