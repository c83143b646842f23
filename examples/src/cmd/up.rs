//! `orchestra up`: a whole cluster in one process — the embedded store, the
//! API server over HTTPS, the scheduler, the controller manager and N node
//! agents — as the seed article's kind example, on one machine.
//!
//! The nodes are `orchestra-control-plane`, `orchestra-worker`,
//! `orchestra-worker2`, ... each with its own loopback address
//! (`127.0.10.<n>`), its own HTTPS endpoint on port 10250 at that address,
//! and a pod CIDR inside `127.64.0.0/11` given by the NodeIPAM controller.
//! The control-plane node runs the control plane as static pods (manifests in
//! `DIR/manifests`, mirror pods in `kube-system`) on an embedded runtime:
//! the scheduler and the controller manager are started and stopped by that
//! node's agent; the store and API server pods report the store and the API
//! server this process started first (the agent needs them to register).
//!
//! Pods are kept from the cluster's secrets: the process runtime hides the
//! data directory (store, keys, node state), the PKI directory and the
//! kubeconfigs from every container, containers run as an unprivileged user
//! unless their securityContext says otherwise, and PodSecurity enforces
//! `baseline` outside the system namespaces (`--pod-security-enforce`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use orchestra::control_plane::{ControlPlane, Listener, NodeRuntime, node_ip, node_name};
use orchestra::core::encryption::EncryptionConfig;
use orchestra::ctrl::controllers::ControllerManagerConfig;
use orchestra::store::RocksStore;

use super::images;

/// Which runtime the node agents use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Runtime {
    /// Every container is a host process (`orchestra images` lists the images).
    Process,
    /// Containers are simulated (no processes), as kwok does.
    Sim,
}

/// Options of `orchestra up`.
#[derive(clap::Args)]
pub struct Args {
    /// The cluster's directory: store, certificates, kubeconfig, node state.
    #[arg(long, default_value = ".orchestra")]
    pub data_dir: PathBuf,
    /// Address and port of the API server's HTTPS listener.
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// How many nodes (the first is the control-plane node).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// The nodes' container runtime.
    #[arg(long, value_enum, default_value_t = Runtime::Process)]
    pub runtime: Runtime,
    /// Where to write the admin kubeconfig (default `DIR/admin.kubeconfig`).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Port of every node's HTTPS endpoint, at the node's own address
    /// (0: any free port, as tests use).
    #[arg(long, default_value_t = 10250)]
    pub kubelet_port: u16,
    #[command(flatten)]
    pub auth: super::AuthArgs,
    #[command(flatten)]
    pub services: super::ServiceArgs,
    /// Encryption at rest: upstream's `EncryptionConfiguration` file.
    #[arg(long)]
    pub encryption_provider_config: Option<PathBuf>,
    #[command(flatten)]
    pub audit: super::audit::AuditArgs,
}

/// Runs the cluster until SIGTERM or Ctrl-C.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    if args.nodes == 0 {
        return Err("--nodes must be at least 1".into());
    }
    let data_dir = std::path::absolute(&args.data_dir)?;
    // The store, keys and kubeconfigs live here: owner only.
    orchestra::core::tls::pki::create_private_dir(&data_dir)?;
    println!("orchestra up: {} node(s), {:?} runtime, data in {}", args.nodes, args.runtime, data_dir.display());
    let store = RocksStore::open(data_dir.join("store")).await?;
    step(format!("store (RocksDB) in {}", data_dir.join("store").display()));

    let runtime = match args.runtime {
        Runtime::Process => NodeRuntime::Process(images::catalog()?),
        Runtime::Sim => NodeRuntime::simulated(),
    };
    let controllers = ControllerManagerConfig::default().with_cluster_cidr(Some(super::CLUSTER_CIDR.into()));
    let mut cluster = ControlPlane::builder();
    if let Some(path) = &args.encryption_provider_config {
        cluster = cluster.encryption(EncryptionConfig::from_file(path)?);
    }
    cluster = args.audit.apply(cluster)?;
    cluster = args.auth.apply(cluster)?;
    cluster = args.services.apply(cluster);
    // Besides the data directory: what else holds credentials or keys.
    let kubeconfig = args.kubeconfig.clone().unwrap_or_else(|| data_dir.join("admin.kubeconfig"));
    let secrets = [
        Some(&kubeconfig),
        args.encryption_provider_config.as_ref(),
        args.audit.audit_log_path.as_ref(),
        args.auth.authorization_webhook_config_file.as_ref(),
        args.auth.authentication_token_webhook_config_file.as_ref(),
    ];
    for path in secrets.into_iter().flatten() {
        cluster = cluster.hide_from_containers(path);
    }
    let cluster = cluster
        .store(Arc::new(store))
        .data_dir(&data_dir)
        .listener(Listener::tls(args.listen, data_dir.join("pki")))
        .controllers(controllers)
        .control_plane_static_pods(true)
        .nodes(args.nodes, runtime)
        .kubelet_port(args.kubelet_port)
        .start()
        .await?;
    let url = cluster.url().expect("a TLS listener has a URL");
    step(format!("certificates in {}", data_dir.join("pki").display()));
    step(format!("API server on {url}"));
    for n in 1..=args.nodes {
        if n <= 5 || n == args.nodes {
            step(format!("node {} at {}", node_name(n), node_ip(n)));
        } else if n == 6 {
            step("...");
        }
    }
    cluster.write_admin_kubeconfig(&kubeconfig)?;
    println!("orchestra up: ready — {} node(s) registered", cluster.nodes().len());
    println!("export KUBECONFIG={}", kubeconfig.display());

    super::shutdown_signal().await;
    println!("orchestra up: stopping");
    cluster.shutdown().await?;
    println!("orchestra up: stopped");
    Ok(())
}

fn step(text: impl AsRef<str>) {
    println!("  • {}", text.as_ref());
}
