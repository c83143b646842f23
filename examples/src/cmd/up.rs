//! `orchestra up`: a whole cluster in one process — the embedded store, the
//! API server over HTTPS, the scheduler, the controller manager and N node
//! agents — as the seed article's kind example, on one machine.
//!
//! The nodes are `orchestra-control-plane`, `orchestra-worker`,
//! `orchestra-worker2`, ... each with its own loopback address
//! (`127.0.10.<n>`), its own HTTPS endpoint on port 10250 at that address,
//! and a pod CIDR inside `127.64.0.0/10` given by the NodeIPAM controller.
//! The control-plane node runs the control plane as static pods (manifests in
//! `DIR/manifests`, mirror pods in `kube-system`) on an embedded runtime:
//! the scheduler and the controller manager are started and stopped by that
//! node's agent; the store and API server pods report the store and the API
//! server this process started first (the agent needs them to register).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use orchestra_core::auth::service_account::{DEFAULT_ISSUER, TokenSigner};
use orchestra_core::auth::{
    AllowAuthenticated, AuthenticatorChain, AuthorizerChain, ClientCertAuthenticator, ExtensionAuthenticator,
    PublicInfoViewer, UserInfo,
};
use orchestra_core::server::pki::Pki;
use orchestra_core::server::{ApiServer, KubeletClient, ListenOptions};
use orchestra_core::tls::ClientAuth;
use orchestra_ctrl::SharedInformerFactory;
use orchestra_ctrl::controllers::serviceaccount_token::TokenConfig;
use orchestra_ctrl::controllers::{self, ControllerManagerConfig};
use orchestra_ctrl::leader::LeaderElector;
use orchestra_node::RuntimeBackend;
use orchestra_node::agent::{NodeAgent, NodeConfig, SharedPods};
use orchestra_node::runtime::embedded::{ComponentContext, EmbeddedRuntime};
use orchestra_node::runtime::mux::RuntimeMux;
use orchestra_node::runtime::process::{ProcessRuntime, ProcessRuntimeConfig};
use orchestra_node::runtime::sim::{SimConfig, SimRuntime};
use orchestra_node::server::{DelegatingAuthorizer, NodeServer};
use orchestra_store::RocksStore;
use tokio::sync::watch;

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
}

/// The runtime handler of the control-plane static pods.
const EMBEDDED_HANDLER: &str = "orchestra-embedded";

/// Name of the `n`-th node (1-based), as kind names them.
pub fn node_name(n: usize) -> String {
    match n {
        1 => "orchestra-control-plane".into(),
        2 => "orchestra-worker".into(),
        n => format!("orchestra-worker{}", n - 1),
    }
}

/// The `n`-th node's address: `127.0.10.<n>` for the first 254 nodes, then
/// further down the 127.0.0.0/8 loopback range.
pub fn node_ip(n: usize) -> IpAddr {
    let n = n as u32;
    IpAddr::V4(Ipv4Addr::new(127, 0, 10 + (n / 255) as u8, (n % 255) as u8))
}

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo { name: name.into(), groups: groups.iter().map(|g| (*g).to_owned()).collect(), ..Default::default() }
}

fn step(text: impl AsRef<str>) {
    println!("  • {}", text.as_ref());
}

/// Runs the cluster until SIGTERM or Ctrl-C.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    if args.nodes == 0 {
        return Err("--nodes must be at least 1".into());
    }
    let data_dir = std::path::absolute(&args.data_dir)?;
    std::fs::create_dir_all(&data_dir)?;
    println!("orchestra up: {} node(s), {:?} runtime, data in {}", args.nodes, args.runtime, data_dir.display());

    // Certificates and store.
    let mut hosts = Vec::new();
    if !args.listen.ip().is_unspecified() {
        hosts.push(args.listen.ip().to_string());
    }
    let pki = Pki::load_or_create(&data_dir.join("pki"), &hosts)?;
    step(format!("certificates in {}", pki.dir().display()));
    let store = RocksStore::open(data_dir.join("store")).await?;
    step(format!("store (RocksDB) in {}", data_dir.join("store").display()));

    // API server.
    // Service account tokens (bound ones from `kubectl create token`, legacy
    // ones in token Secrets) are signed by one key kept with the certificates.
    let signer = Arc::new(TokenSigner::load_or_create(&pki.dir().join("sa.key"), DEFAULT_ISSUER)?);
    let tokens = TokenConfig { signer: signer.clone(), root_ca: Some(pki.ca_pem().to_owned()) };
    let kubelet_identity = pki.issue_client("kube-apiserver-kubelet-client", Some("system:masters"))?;
    let server = ApiServer::builder(Arc::new(store))
        // In-process components carry their identity as a request extension
        // (never settable from the network); remote clients present the
        // certificates of the cluster CA.
        .authenticator(
            AuthenticatorChain::new().with(ExtensionAuthenticator).with(ClientCertAuthenticator).allow_anonymous(true),
        )
        .authorizer(AuthorizerChain::new().with(PublicInfoViewer).with(AllowAuthenticated))
        .kubelet_client(KubeletClient::new(&kubelet_identity, pki.ca_pem())?)
        .service_account_tokens(signer.clone())
        .build()
        .await?;
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let address = listener.local_addr()?;
    let host = if address.ip().is_unspecified() { "127.0.0.1".to_owned() } else { address.ip().to_string() };
    let url = format!("https://{host}:{}", address.port());
    let kubeconfig = args.kubeconfig.clone().unwrap_or_else(|| data_dir.join("admin.kubeconfig"));
    pki.write_admin_kubeconfig(&kubeconfig, &url)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let options = ListenOptions { tls: Some(pki.server_tls_config()?), ..ListenOptions::default() };
    let (server_done_tx, server_done) = watch::channel(false);
    let serving = tokio::spawn({
        let router = server.router();
        let stopped = stopped.clone();
        async move {
            let result = orchestra_core::server::serve(listener, router, options, stopped()).await;
            let _ = server_done_tx.send(true);
            result
        }
    });
    step(format!("API server on {url}"));

    // The control plane's static pods: the node agent of the control-plane
    // node starts the scheduler and the controller manager.
    let manifests = data_dir.join("manifests");
    write_control_plane_manifests(&manifests, &url)?;
    let embedded = control_plane_runtime(&server, node_ip(1), server_done, tokens);

    // Node agents.
    let pods = SharedPods::start(orchestra_core::client::in_process_as(
        &server,
        user("system:node-agents", &["system:nodes"]),
        "default",
    ));
    let mut agents = Vec::new();
    let mut process_runtimes = Vec::new();
    for n in 1..=args.nodes {
        let name = node_name(n);
        let ip = node_ip(n);
        let root = data_dir.join("nodes").join(&name);
        let client = orchestra_core::client::in_process_as(
            &server,
            user(&format!("system:node:{name}"), &["system:nodes"]),
            "default",
        );
        let mut config = NodeConfig::new(&name).root_dir(&root);
        config.node_ip = ip;
        let runtime: Arc<dyn RuntimeBackend> = match args.runtime {
            Runtime::Process => {
                let mut runtime_config = ProcessRuntimeConfig::new(root.join("runtime"), images::catalog()?);
                runtime_config.node_name = name.clone();
                runtime_config.host_ip = ip;
                let process = Arc::new(ProcessRuntime::new(runtime_config).await?);
                process_runtimes.push(process.clone());
                process
            }
            Runtime::Sim => {
                config = config.fixed_capacity(8_000, 32 << 30);
                Arc::new(SimRuntime::new(SimConfig::default()))
            }
        };
        let runtime: Arc<dyn RuntimeBackend> = if n == 1 {
            config.static_pod_path = Some(manifests.clone());
            config.labels.insert("node-role.kubernetes.io/control-plane".into(), String::new());
            Arc::new(RuntimeMux::new(runtime).handler(EMBEDDED_HANDLER, embedded.clone()))
        } else {
            runtime
        };
        // The node's HTTPS endpoint (logs, exec), with a certificate of the
        // cluster CA for its address.
        if args.runtime == Runtime::Process || n == 1 {
            let serving = pki.issue_serving(&name, &[ip.to_string()])?;
            let tls = orchestra_core::tls::server_config(&serving, pki.ca_pem(), ClientAuth::Required)?;
            let node_server =
                NodeServer::new(runtime.clone(), Arc::new(DelegatingAuthorizer::new(client.clone(), &name)));
            let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, args.kubelet_port)).await?;
            config.kubelet_port = i32::from(listener.local_addr()?.port());
            let options = ListenOptions { tls: Some(tls), drain_timeout: Duration::from_secs(1) };
            tokio::spawn(orchestra_core::tls::serve(listener, node_server.router(), options, stopped()));
        } else {
            config.kubelet_port = 0;
        }
        let agent = NodeAgent::builder(client, runtime, config).shared_pods(pods.clone()).build();
        agents.push((agent.handle(), tokio::spawn(agent.run(stopped()))));
        if n <= 5 || n == args.nodes {
            step(format!("node {name} at {ip}"));
        } else if n == 6 {
            step("...");
        }
    }
    for (handle, _) in &agents {
        handle.registered().await;
    }
    println!("orchestra up: ready — {} node(s) registered", agents.len());
    println!("export KUBECONFIG={}", kubeconfig.display());

    super::shutdown_signal().await;
    println!("orchestra up: stopping");
    let _ = stop_tx.send(true);
    for (_, task) in agents {
        let _ = task.await;
    }
    for runtime in process_runtimes {
        runtime.shutdown(Duration::from_secs(10)).await;
    }
    serving.await??;
    println!("orchestra up: stopped");
    Ok(())
}

/// The control plane's static pods, one manifest each.
fn write_control_plane_manifests(dir: &Path, url: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let components = [
        ("etcd", "orchestra/etcd", "the embedded RocksDB store"),
        ("kube-apiserver", "orchestra/kube-apiserver", url),
        ("kube-controller-manager", "orchestra/kube-controller-manager", "the built-in controllers"),
        ("kube-scheduler", "orchestra/kube-scheduler", "the default scheduler profile"),
    ];
    for (name, image, about) in components {
        let manifest = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "kube-system",
                "labels": {"component": name, "tier": "control-plane"},
                "annotations": {"orchestra.dev/component": about},
            },
            "spec": {
                "runtimeClassName": EMBEDDED_HANDLER,
                "hostNetwork": true,
                "priorityClassName": "system-node-critical",
                "priority": 2000001000,
                "containers": [{"name": name, "image": image}],
            },
        });
        let text = serde_json::to_string_pretty(&manifest).expect("a manifest serializes");
        let path = dir.join(format!("{name}.json"));
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            std::fs::write(path, text)?;
        }
    }
    Ok(())
}

/// The embedded runtime of the control-plane node: its images are the
/// control-plane components of this process.
fn control_plane_runtime(
    server: &ApiServer,
    ip: IpAddr,
    server_done: watch::Receiver<bool>,
    tokens: TokenConfig,
) -> Arc<EmbeddedRuntime> {
    // The store and the API server run before any agent (the agents need
    // them); their containers report them: running while they serve.
    let attached = move |what: &'static str| {
        let server_done = server_done.clone();
        move |mut ctx: ComponentContext| {
            let mut server_done = server_done.clone();
            async move {
                ctx.log.line(format!("{what} is serving in this process"));
                tokio::select! {
                    () = ctx.stopped() => 0,
                    _ = server_done.wait_for(|d| *d) => {
                        ctx.log.line(format!("{what} stopped"));
                        1
                    }
                }
            }
        }
    };
    let scheduler_server = server.clone();
    let manager_server = server.clone();
    let runtime = EmbeddedRuntime::new(ip)
        .component("orchestra/etcd", attached("the store"))
        .component("orchestra/kube-apiserver", attached("the API server"))
        .component("orchestra/kube-scheduler", move |mut ctx: ComponentContext| {
            let client =
                orchestra_core::client::in_process_as(&scheduler_server, user("system:kube-scheduler", &[]), "default");
            async move {
                let scheduler =
                    match orchestra_sched::SchedulerBuilder::new(client).identity(&super::default_identity()).build() {
                        Ok(scheduler) => scheduler,
                        Err(error) => {
                            ctx.log.line(format!("cannot build the scheduler: {error}"));
                            return 1;
                        }
                    };
                ctx.log.line("scheduler started");
                tokio::select! {
                    result = scheduler.run() => {
                        ctx.log.line(format!("scheduler stopped: {result:?}"));
                        1
                    }
                    () = ctx.stopped() => 0,
                }
            }
        })
        .component("orchestra/kube-controller-manager", move |ctx: ComponentContext| {
            let client = orchestra_core::client::in_process_as(
                &manager_server,
                user("system:kube-controller-manager", &[]),
                "default",
            );
            let tokens = tokens.clone();
            async move {
                let config = ControllerManagerConfig::default()
                    .with_cluster_cidr(Some(super::CLUSTER_CIDR.into()))
                    .with_service_account_tokens(tokens);
                let manager = match controllers::builtin(SharedInformerFactory::new(client.clone()), config) {
                    Ok(manager) => manager,
                    Err(error) => {
                        ctx.log.line(format!("controller manager: {error}"));
                        return 1;
                    }
                };
                ctx.log.line(format!("controllers: {}", manager.names().join(", ")));
                let elector = Arc::new(LeaderElector::new(
                    client,
                    "kube-system",
                    "kube-controller-manager",
                    &super::default_identity(),
                ));
                let stop = ctx.stop.clone();
                let stopped = async move {
                    let mut stop = stop;
                    let _ = stop.wait_for(|s| *s).await;
                };
                match manager.run_elected(elector, stopped).await {
                    Ok(()) => 0,
                    Err(error) => {
                        ctx.log.line(format!("controller manager stopped: {error}"));
                        1
                    }
                }
            }
        });
    Arc::new(runtime)
}
