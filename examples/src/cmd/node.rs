//! `orchestra node --name NAME`: one node agent as its own process (or on
//! its own host), reaching the API server through a kubeconfig.
//!
//! Its HTTPS endpoint verifies clients against the CA of the kubeconfig's
//! cluster and presents a self-signed certificate for the node's address
//! (the API server does not verify node certificates unless configured to,
//! as upstream's kubelets work by default).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use orchestra_core::server::ListenOptions;
use orchestra_core::tls::{ClientAuth, pki};
use orchestra_node::RuntimeBackend;
use orchestra_node::agent::{NodeAgent, NodeConfig};
use orchestra_node::runtime::process::{ProcessRuntime, ProcessRuntimeConfig};
use orchestra_node::runtime::sim::{SimConfig, SimRuntime};
use orchestra_node::server::{DelegatingAuthorizer, NodeServer};

use super::up::Runtime;

/// Options of `orchestra node`.
#[derive(clap::Args)]
pub struct Args {
    /// The node's name.
    #[arg(long)]
    name: String,
    /// Kubeconfig to reach the API server with.
    #[arg(long)]
    kubeconfig: PathBuf,
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

/// The CA (PEM) of the kubeconfig's current cluster.
fn cluster_ca(kubeconfig: &std::path::Path) -> Result<String, Box<dyn std::error::Error>> {
    let config = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let context = config.current_context.as_deref().ok_or("the kubeconfig has no current context")?;
    let cluster = config
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .ok_or("the current context names no cluster")?;
    let cluster =
        config.clusters.iter().find(|c| c.name == cluster).and_then(|c| c.cluster.as_ref()).ok_or("unknown cluster")?;
    if let Some(data) = &cluster.certificate_authority_data {
        return Ok(String::from_utf8(base64::engine::general_purpose::STANDARD.decode(data)?)?);
    }
    if let Some(path) = &cluster.certificate_authority {
        return Ok(std::fs::read_to_string(path)?);
    }
    Err("the kubeconfig's cluster has no certificate authority".into())
}

/// Runs the node agent until SIGTERM or Ctrl-C.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let client = orchestra_core::client::from_kubeconfig(&args.kubeconfig).await?;
    let root = std::path::absolute(
        args.data_dir.clone().unwrap_or_else(|| PathBuf::from(format!(".orchestra-node-{}", args.name))),
    )?;
    let mut config = NodeConfig::new(&args.name).root_dir(&root);
    config.node_ip = args.node_ip;
    config.static_pod_path = args.pod_manifest_path.clone();
    let mut process = None;
    let runtime: Arc<dyn RuntimeBackend> = match args.runtime {
        Runtime::Process => {
            let mut runtime_config = ProcessRuntimeConfig::new(root.join("runtime"), super::images::catalog()?);
            runtime_config.node_name = args.name.clone();
            runtime_config.host_ip = args.node_ip;
            let runtime = Arc::new(ProcessRuntime::new(runtime_config).await?);
            process = Some(runtime.clone());
            runtime
        }
        Runtime::Sim => Arc::new(SimRuntime::new(SimConfig::default())),
    };
    let serving = pki::self_signed_serving(&args.name, &[args.node_ip.to_string()])?;
    let tls = orchestra_core::tls::server_config(&serving, &cluster_ca(&args.kubeconfig)?, ClientAuth::Required)?;
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(args.node_ip, args.kubelet_port)).await?;
    config.kubelet_port = i32::from(listener.local_addr()?.port());
    let node_server = NodeServer::new(runtime.clone(), Arc::new(DelegatingAuthorizer::new(client.clone(), &args.name)));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let wait = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    let options = ListenOptions::default().with_tls(tls).with_drain_timeout(Duration::from_secs(1));
    let serving = tokio::spawn(orchestra_core::tls::serve(listener, node_server.router(), options, wait()));
    let agent = NodeAgent::builder(client, runtime, config).build();
    let handle = agent.handle();
    let running = tokio::spawn(agent.run(wait()));
    println!("orchestra node {}: starting at {} (state in {})", args.name, args.node_ip, root.display());
    tokio::select! {
        () = handle.registered() => println!("orchestra node {} ready", args.name),
        () = super::shutdown_signal() => {
            let _ = stop.send(true);
        }
    }
    if !*stop.borrow() {
        super::shutdown_signal().await;
        let _ = stop.send(true);
    }
    running.await??;
    if let Some(process) = process {
        process.shutdown(Duration::from_secs(10)).await;
    }
    serving.await??;
    println!("orchestra node {} stopped", args.name);
    Ok(())
}
