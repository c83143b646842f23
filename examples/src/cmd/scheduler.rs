//! `orchestra scheduler`: the scheduler as its own process, reaching the API
//! server through a kubeconfig, with leader election so several may run.

use std::path::PathBuf;

use orchestra_sched::config::SchedulerConfiguration;
use orchestra_sched::scheduler::SchedulerBuilder;

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
    /// Elect a leader among the instances before scheduling (upstream's
    /// `--leader-elect`; default: the configuration file's setting, or on
    /// without a file).
    #[arg(long, action = clap::ArgAction::Set)]
    leader_elect: Option<bool>,
    /// This instance's identity in leader election and events.
    #[arg(long)]
    identity: Option<String>,
}

/// Runs the scheduler until SIGTERM or Ctrl-C.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let client = orchestra_core::client::from_kubeconfig(&args.kubeconfig).await?;
    let mut config = match &args.config {
        Some(path) => SchedulerConfiguration::from_file(path)?,
        None => {
            let mut config = SchedulerConfiguration::default();
            config.leader_election.leader_elect = true;
            config
        }
    };
    if let Some(elect) = args.leader_elect {
        config.leader_election.leader_elect = elect;
    }
    let identity = args.identity.unwrap_or_else(super::default_identity);
    let scheduler = SchedulerBuilder::new(client).config(config).identity(&identity).build()?;
    println!("orchestra scheduler {identity} ready");
    // On SIGTERM the lease is released, so a standby takes over at once.
    scheduler.run_until(super::shutdown_signal()).await?;
    println!("orchestra scheduler stopped");
    Ok(())
}
