//! The node agents of a [`ControlPlane`](super::ControlPlane): their names,
//! addresses, runtimes and HTTPS endpoints.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use orchestra_core::auth::UserInfo;
use orchestra_core::server::ListenOptions;
use orchestra_core::tls::ClientAuth;
use orchestra_node::RuntimeBackend;
use orchestra_node::agent::{NodeAgent, NodeConfig, SharedPods};
use orchestra_node::runtime::images::ImageCatalog;
use orchestra_node::runtime::process::{ProcessRuntime, ProcessRuntimeConfig};
use orchestra_node::runtime::sim::{SimConfig, SimRuntime};
use orchestra_node::server::{DelegatingAuthorizer, NodeServer};

use super::ControlPlaneError;
use super::handle::{Running, RunningNode};

/// Name of the `n`-th node (1-based), as kind names them:
/// `orchestra-control-plane`, `orchestra-worker`, `orchestra-worker2`, ...
pub fn node_name(n: usize) -> String {
    match n {
        1 => "orchestra-control-plane".into(),
        2 => "orchestra-worker".into(),
        n => format!("orchestra-worker{}", n - 1),
    }
}

/// The `n`-th node's address (1-based): `127.0.10.<n>` for the first 254
/// nodes, then further down the 127.0.0.0/8 loopback range, so that every
/// node's endpoint binds an address of its own without privileges.
pub fn node_ip(n: usize) -> IpAddr {
    let n = n as u32;
    IpAddr::V4(Ipv4Addr::new(127, 0, 10 + (n / 255) as u8, (n % 255) as u8))
}

/// What a custom runtime factory is told about the node it creates a runtime for.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeSlot {
    /// The node's name.
    pub name: String,
    /// The node's address.
    pub ip: IpAddr,
    /// The node's state directory.
    pub root_dir: PathBuf,
}

type RuntimeFactory = Arc<
    dyn Fn(NodeSlot) -> BoxFuture<'static, Result<Arc<dyn RuntimeBackend>, Box<dyn std::error::Error + Send + Sync>>>
        + Send
        + Sync,
>;

/// The container runtime of a node.
#[derive(Clone)]
#[non_exhaustive]
pub enum NodeRuntime {
    /// Simulated containers ([`SimRuntime`]): no processes, as kwok does;
    /// the node reports a fixed capacity of 8 CPUs and 32 GiB.
    Simulated(SimConfig),
    /// Every container a host process ([`ProcessRuntime`]) of an image of
    /// this catalog; state under the node's directory.
    Process(ImageCatalog),
    /// A runtime of the caller's, created per node.
    Custom(RuntimeFactory),
}

impl std::fmt::Debug for NodeRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeRuntime::Simulated(config) => f.debug_tuple("Simulated").field(config).finish(),
            NodeRuntime::Process(catalog) => f.debug_tuple("Process").field(catalog).finish(),
            NodeRuntime::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

impl NodeRuntime {
    /// Simulated containers with the default settings.
    pub fn simulated() -> NodeRuntime {
        NodeRuntime::Simulated(SimConfig::default())
    }

    /// A runtime `create` makes for each node.
    pub fn custom<F, Fut, R>(create: F) -> NodeRuntime
    where
        F: Fn(NodeSlot) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, Box<dyn std::error::Error + Send + Sync>>> + Send + 'static,
        R: RuntimeBackend + 'static,
    {
        let create = Arc::new(create);
        NodeRuntime::Custom(Arc::new(move |slot| {
            let create = create.clone();
            Box::pin(async move { create(slot).await.map(|runtime| Arc::new(runtime) as Arc<dyn RuntimeBackend>) })
        }))
    }

    fn is_simulated(&self) -> bool {
        matches!(self, NodeRuntime::Simulated(_))
    }

    async fn create(&self, slot: NodeSlot) -> Result<Arc<dyn RuntimeBackend>, ControlPlaneError> {
        let node = slot.name.clone();
        let failed = |message: String| ControlPlaneError::Node { node: node.clone(), message };
        Ok(match self {
            NodeRuntime::Simulated(config) => Arc::new(SimRuntime::new(config.clone())),
            NodeRuntime::Process(catalog) => {
                let mut config = ProcessRuntimeConfig::new(slot.root_dir.join("runtime"), catalog.clone());
                config.node_name = slot.name.clone();
                config.host_ip = slot.ip;
                Arc::new(ProcessRuntime::new(config).await.map_err(|e| failed(e.to_string()))?)
            }
            NodeRuntime::Custom(create) => create(slot).await.map_err(|e| failed(e.to_string()))?,
        })
    }
}

/// The control plane's static pods, run by the first node: their
/// manifests and the runtime handler whose images are the components.
pub(crate) struct ControlPlanePods {
    pub(crate) manifests: PathBuf,
    pub(crate) handler: &'static str,
    pub(crate) runtime: Arc<dyn RuntimeBackend>,
}

type Configure = Arc<dyn Fn(&mut NodeConfig) + Send + Sync>;

/// One node of a [`ControlPlane`](super::ControlPlane).
#[derive(Clone)]
#[must_use]
pub struct NodeSpec {
    runtime: NodeRuntime,
    name: Option<String>,
    ip: Option<IpAddr>,
    configure: Vec<Configure>,
}

impl std::fmt::Debug for NodeSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSpec").field("runtime", &self.runtime).field("name", &self.name).finish_non_exhaustive()
    }
}

impl NodeSpec {
    /// A node on `runtime`, named and addressed by its position ([`node_name`], [`node_ip`]).
    pub fn new(runtime: NodeRuntime) -> NodeSpec {
        NodeSpec { runtime, name: None, ip: None, configure: Vec::new() }
    }

    /// The node's name.
    pub fn name(mut self, name: impl Into<String>) -> NodeSpec {
        self.name = Some(name.into());
        self
    }

    /// The node's address.
    pub fn ip(mut self, ip: IpAddr) -> NodeSpec {
        self.ip = Some(ip);
        self
    }

    /// Adjusts the agent's configuration (labels, taints, capacity,
    /// timings) after the control plane has filled it in.
    pub fn configure(mut self, configure: impl Fn(&mut NodeConfig) + Send + Sync + 'static) -> NodeSpec {
        self.configure.push(Arc::new(configure));
        self
    }
}

impl Running {
    /// Starts one agent per spec and waits until all have registered.
    pub(crate) async fn start_nodes(
        &mut self,
        specs: Vec<NodeSpec>,
        kubelet_port: u16,
        control_plane: Option<ControlPlanePods>,
    ) -> Result<(), ControlPlaneError> {
        // One watch of bound pods feeds every agent of this process.
        let pods = SharedPods::start(self.client_as(UserInfo::new("system:node-agents", &["system:nodes"])));
        for (index, spec) in specs.into_iter().enumerate() {
            let n = index + 1;
            let name = spec.name.clone().unwrap_or_else(|| node_name(n));
            let ip = spec.ip.unwrap_or_else(|| node_ip(n));
            let root = self.data_dir.join("nodes").join(&name);
            let client = self.client_as(UserInfo::new(format!("system:node:{name}"), &["system:nodes"]));
            let mut config = NodeConfig::new(&name).root_dir(&root);
            config.node_ip = ip;
            if spec.runtime.is_simulated() {
                config = config.fixed_capacity(8_000, 32 << 30);
            }
            let slot = NodeSlot { name: name.clone(), ip, root_dir: root.clone() };
            let mut runtime = spec.runtime.create(slot).await?;
            let hosts_control_plane = n == 1 && control_plane.is_some();
            if let (true, Some(pods)) = (hosts_control_plane, &control_plane) {
                config.static_pod_path = Some(pods.manifests.clone());
                config.labels.insert("node-role.kubernetes.io/control-plane".into(), String::new());
                runtime = Arc::new(
                    orchestra_node::runtime::mux::RuntimeMux::new(runtime).handler(pods.handler, pods.runtime.clone()),
                );
            }
            // Simulated nodes run no processes to ask for logs or exec: they
            // get no endpoint, so that thousands of them stay cheap.
            if self.pki.is_some() && (!spec.runtime.is_simulated() || hosts_control_plane) {
                config.kubelet_port = self.serve_node(&name, ip, kubelet_port, &runtime, &client).await?;
            } else {
                config.kubelet_port = 0;
            }
            for configure in &spec.configure {
                configure(&mut config);
            }
            let agent = NodeAgent::builder(client, runtime.clone(), config).shared_pods(pods.clone()).build();
            let handle = agent.handle();
            let task = tokio::spawn(agent.run(self.nodes_stop.stopped()));
            self.nodes.push(RunningNode { handle, runtime, task });
        }
        for node in &self.nodes {
            node.handle.registered().await;
        }
        Ok(())
    }

    /// Serves the node's HTTPS endpoint (logs, exec) at `ip:port` with a
    /// certificate of the cluster CA; returns the port.
    async fn serve_node(
        &mut self,
        name: &str,
        ip: IpAddr,
        port: u16,
        runtime: &Arc<dyn RuntimeBackend>,
        client: &kube::Client,
    ) -> Result<i32, ControlPlaneError> {
        let pki = self.pki.as_ref().expect("only called with a PKI");
        let serving = pki.issue_serving(name, &[ip.to_string()])?;
        let tls = orchestra_core::tls::server_config(&serving, pki.ca_pem(), ClientAuth::Required)?;
        let node_server = NodeServer::new(runtime.clone(), Arc::new(DelegatingAuthorizer::new(client.clone(), name)));
        let address = SocketAddr::new(ip, port);
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(ControlPlaneError::io(format!("binding node {name}'s endpoint to {address}")))?;
        let port = listener.local_addr().map_err(ControlPlaneError::io("reading a listener's address"))?.port();
        let options = ListenOptions::default().with_tls(tls).with_drain_timeout(Duration::from_secs(1));
        self.listeners.push(tokio::spawn(orchestra_core::tls::serve(
            listener,
            node_server.router(),
            options,
            self.listeners_stop.stopped(),
        )));
        Ok(i32::from(port))
    }
}
