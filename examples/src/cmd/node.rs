//! `orchestra node --name NAME`: one node agent as its own process (or on
//! its own host), reaching the API server through a kubeconfig, or joining
//! with a bootstrap token (`--bootstrap-token T --server URL --ca-file F`):
//! it then asks the cluster for its client certificate
//! ([`TlsBootstrap`]), writes its kubeconfig in its data directory and
//! goes on as `system:node:<name>`; a restart reuses that kubeconfig.
//!
//! A command-line front end over the SDK's [`NodeSpec::join`]: its HTTPS
//! endpoint verifies clients against the CA of the kubeconfig's cluster and
//! presents a self-signed certificate for the node's address.

use std::net::IpAddr;
use std::path::PathBuf;

use orchestra::control_plane::{JoinOptions, NodeRuntime, NodeSpec, kubeconfig_cluster_ca};
use orchestra::core::client::bootstrap::{KUBECONFIG_FILE, TlsBootstrap};
use orchestra_node::agent::CapacitySource;

use super::up::Runtime;

/// Options of `orchestra node`.
#[derive(clap::Args)]
pub struct Args {
    /// The node's name.
    #[arg(long)]
    name: String,
    /// Kubeconfig to reach the API server with.
    #[arg(long, required_unless_present = "bootstrap_token", conflicts_with = "bootstrap_token")]
    kubeconfig: Option<PathBuf>,
    /// A bootstrap token (`orchestra token create`) to join with instead
    /// of a kubeconfig.
    #[arg(long, requires_all = ["server", "ca_file"])]
    bootstrap_token: Option<String>,
    /// The API server's URL, to join with a bootstrap token.
    #[arg(long)]
    server: Option<String>,
    /// The cluster CA's certificate, to join with a bootstrap token.
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// The node's state: volumes, logs, the runtime's state.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The node's address (InternalIP), where its endpoint listens.
    #[arg(long, default_value = "127.0.0.1")]
    node_ip: IpAddr,
    /// Port of the node's HTTPS endpoint (0: any free port).
    #[arg(long, default_value_t = 10250)]
    kubelet_port: u16,
    /// The container runtime.
    #[arg(long, value_enum, default_value_t = Runtime::Process)]
    runtime: Runtime,
    /// A directory of static pod manifests.
    #[arg(long)]
    pod_manifest_path: Option<PathBuf>,
}

/// Runs the node agent until SIGTERM or Ctrl-C.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let root = args.data_dir.clone().unwrap_or_else(|| PathBuf::from(format!(".orchestra-node-{}", args.name)));
    let kubeconfig = match (&args.kubeconfig, &args.bootstrap_token) {
        (Some(kubeconfig), _) => kubeconfig.clone(),
        (None, Some(token)) => {
            let kubeconfig = root.join(KUBECONFIG_FILE);
            if !kubeconfig.exists() {
                let (Some(server), Some(ca_file)) = (&args.server, &args.ca_file) else {
                    return Err("--bootstrap-token needs --server and --ca-file".into());
                };
                let ca = std::fs::read_to_string(ca_file).map_err(|e| format!("{}: {e}", ca_file.display()))?;
                println!("orchestra node {}: asking {server} for a client certificate", args.name);
                TlsBootstrap::new(server, ca, token, &args.name).write_kubeconfig(&root).await?;
                println!("orchestra node {}: certificate issued, kubeconfig {}", args.name, kubeconfig.display());
            }
            kubeconfig
        }
        (None, None) => return Err("give --kubeconfig or --bootstrap-token".into()),
    };
    let client = orchestra_core::client::from_kubeconfig(&kubeconfig).await?;
    let runtime = match args.runtime {
        Runtime::Process => NodeRuntime::Process(super::images::catalog()?),
        Runtime::Sim => NodeRuntime::simulated(),
    };
    let static_pods = args.pod_manifest_path.clone();
    let simulated = args.runtime == Runtime::Sim;
    let spec = NodeSpec::new(runtime).name(&args.name).ip(args.node_ip).configure(move |config| {
        config.static_pod_path = static_pods.clone();
        // A node of its own reports its host's capacity, simulated or not.
        if simulated {
            config.capacity = CapacitySource::Host;
        }
    });
    let options = JoinOptions::new(root)
        .endpoint(args.kubelet_port, kubeconfig_cluster_ca(&kubeconfig)?)
        .hide_from_containers(&kubeconfig);
    let node = spec.join(client, options).await?;
    println!("orchestra node {}: starting at {} (state in {})", args.name, args.node_ip, node.root_dir().display());
    tokio::select! {
        () = node.handle().registered() => {
            println!("orchestra node {} ready", args.name);
            super::shutdown_signal().await;
        }
        () = super::shutdown_signal() => {}
    }
    node.shutdown().await?;
    println!("orchestra node {} stopped", args.name);
    Ok(())
}
