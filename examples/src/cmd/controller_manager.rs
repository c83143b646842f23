//! `orchestra controller-manager`: the built-in controllers as their own
//! process behind one leader election, reaching the API server through a
//! kubeconfig.

use std::path::PathBuf;
use std::sync::Arc;

use orchestra_ctrl::SharedInformerFactory;
use orchestra_ctrl::controllers::{self, ControllerManagerConfig};
use orchestra_ctrl::leader::LeaderElector;

/// Options of `orchestra controller-manager`.
#[derive(clap::Args)]
pub struct Args {
    /// Kubeconfig to reach the API server with.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Pods' address space, split into one pod CIDR per node.
    #[arg(long, default_value = crate::cmd::CLUSTER_CIDR)]
    cluster_cidr: String,
    /// Prefix length of each node's pod CIDR.
    #[arg(long, default_value_t = 24)]
    node_cidr_mask_size: u8,
    /// This instance's identity in leader election.
    #[arg(long)]
    identity: Option<String>,
}

/// Runs the controllers (once elected) until SIGTERM or Ctrl-C.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let client = orchestra_core::client::from_kubeconfig(&args.kubeconfig).await?;
    let identity = args.identity.unwrap_or_else(super::default_identity);
    let config = ControllerManagerConfig {
        cluster_cidr: Some(args.cluster_cidr),
        node_cidr_mask_size: args.node_cidr_mask_size,
        ..Default::default()
    };
    let manager = controllers::builtin(SharedInformerFactory::new(client.clone()), config);
    let elector = Arc::new(LeaderElector::new(client, "kube-system", "kube-controller-manager", &identity));
    println!("orchestra controller-manager {identity} ready ({})", manager.names().join(", "));
    manager.run_elected(elector, super::shutdown_signal()).await?;
    println!("orchestra controller-manager stopped");
    Ok(())
}
