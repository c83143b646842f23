//! `orchestra scheduler`: the scheduler as its own process, reaching the API
//! server through a kubeconfig, with leader election so several may run.

use std::path::PathBuf;

use orchestra_sched::{SchedulerBuilder, SchedulerConfiguration};

/// Options of `orchestra scheduler`.
#[derive(clap::Args)]
pub struct Args {
    /// Kubeconfig to reach the API server with.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// A KubeSchedulerConfiguration file (YAML or JSON); the default profile
    /// otherwise.
    #[arg(long)]
    config: Option<PathBuf>,
    /// This instance's identity in leader election and events.
    #[arg(long)]
    identity: Option<String>,
}

/// Runs the scheduler until SIGTERM or Ctrl-C.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let client = orchestra_core::client::from_kubeconfig(&args.kubeconfig).await?;
    let mut builder = SchedulerBuilder::new(client);
    if let Some(path) = &args.config {
        builder = builder.config(SchedulerConfiguration::from_file(path)?);
    }
    let identity = args.identity.unwrap_or_else(super::default_identity);
    let scheduler = builder.identity(&identity).build()?;
    println!("orchestra scheduler {identity} ready");
    tokio::select! {
        result = scheduler.run() => result?,
        () = super::shutdown_signal() => {}
    }
    println!("orchestra scheduler stopped");
    Ok(())
}
