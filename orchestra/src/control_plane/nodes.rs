//! The node agents of a [`ControlPlane`](super::ControlPlane): their names,
//! addresses, runtimes and HTTPS endpoints; and a node agent on its own,
//! joined to a cluster whose API server runs elsewhere
//! ([`NodeSpec::join`]).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use futures::future::BoxFuture;
use orchestra_core::auth::UserInfo;
use orchestra_core::auth::admission::NodeRestriction;
use orchestra_core::server::ListenOptions;
use orchestra_core::tls::pki::Credential;
use orchestra_core::tls::{ClientAuth, pki};
use orchestra_node::agent::AgentHandle;
use orchestra_node::agent::{AgentError, NodeAgent, NodeConfig, SharedPods};
use orchestra_node::runtime::RuntimeBackend;
use orchestra_node::runtime::images::ImageCatalog;
use orchestra_node::runtime::process::{ProcessRuntime, ProcessRuntimeConfig};
use orchestra_node::runtime::sim::{SimConfig, SimRuntime};
use orchestra_node::server::{DelegatingAuthorizer, NodeServer};

use super::ControlPlaneError;
use super::handle::{Running, RunningNode, StopSignal};

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
    /// Paths no container of the node may see (the cluster's data and PKI
    /// directories, kubeconfigs; the node's state directory).
    pub hidden_paths: Vec<PathBuf>,
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
                let mut config = ProcessRuntimeConfig::new(slot.root_dir.join("runtime"), catalog.clone())
                    .with_hidden_paths(slot.hidden_paths.iter().cloned());
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

    /// The agent's configuration for node `name` at `ip` with its state in
    /// `root` (before [`configure`](Self::configure)), and its runtime.
    async fn prepare(
        &self,
        name: &str,
        ip: IpAddr,
        root: &Path,
        hidden_paths: &[PathBuf],
    ) -> Result<(NodeConfig, Arc<dyn RuntimeBackend>), ControlPlaneError> {
        // The agent's state (volumes with secrets among them): owner only.
        orchestra_core::tls::pki::create_private_dir(root).map_err(|e| ControlPlaneError::Node {
            node: name.to_owned(),
            message: format!("{}: {e}", root.display()),
        })?;
        let mut config = NodeConfig::new(name).root_dir(root);
        config.node_ip = ip;
        if self.runtime.is_simulated() {
            config = config.fixed_capacity(8_000, 32 << 30);
        }
        let mut hidden_paths = hidden_paths.to_vec();
        hidden_paths.push(root.to_owned());
        let slot = NodeSlot { name: name.to_owned(), ip, root_dir: root.to_owned(), hidden_paths };
        Ok((config, self.runtime.create(slot).await?))
    }

    /// Starts this node's agent on its own, joined through `client` to a
    /// cluster whose API server runs elsewhere (another process, another
    /// host), as `orchestra node` runs it. The node needs a
    /// [`name`](Self::name); its address defaults to 127.0.0.1. Returns once
    /// the agent runs; [`JoinedNode::handle`] tells when it has registered.
    ///
    /// ```no_run
    /// use orchestra::control_plane::{JoinOptions, NodeRuntime, NodeSpec};
    ///
    /// # async fn demo(client: kube::Client, cluster_ca_pem: String) -> Result<(), Box<dyn std::error::Error>> {
    /// let node = NodeSpec::new(NodeRuntime::simulated())
    ///     .name("edge-1")
    ///     .join(client, JoinOptions::new("/var/lib/edge-1").endpoint(10250, cluster_ca_pem))
    ///     .await?;
    /// node.handle().registered().await;
    /// node.shutdown().await?; // the agent and its endpoint stop, then its containers
    /// # Ok(()) }
    /// ```
    pub async fn join(self, client: kube::Client, options: JoinOptions) -> Result<JoinedNode, ControlPlaneError> {
        let name = self.name.clone().ok_or_else(|| ControlPlaneError::Config("a joining node needs a name".into()))?;
        let ip = self.ip.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let failed = |message: String| ControlPlaneError::Node { node: name.clone(), message };
        std::fs::create_dir_all(&options.root_dir).map_err(|e| failed(e.to_string()))?;
        let root = std::path::absolute(&options.root_dir).map_err(|e| failed(e.to_string()))?;
        let (mut config, runtime) = self.prepare(&name, ip, &root, &options.hidden_paths).await?;
        let stop = StopSignal::new();
        let mut endpoint = None;
        config.kubelet_port = 0;
        if let Some((port, client_ca_pem)) = &options.endpoint {
            // A self-signed certificate: the API server does not verify
            // node certificates unless configured to, as upstream's
            // kubelets work by default.
            let serving = pki::self_signed_serving(&name, &[ip.to_string()])?;
            let endpoint_of = NodeEndpoint { name: &name, ip, port: *port, serving, client_ca_pem };
            let (port, task) = endpoint_of.serve(&runtime, &client, stop.stopped()).await?;
            config.kubelet_port = i32::from(port);
            endpoint = Some(task);
        }
        for configure in &self.configure {
            configure(&mut config);
        }
        let agent = NodeAgent::builder(client, runtime.clone(), config).build();
        let handle = agent.handle();
        let agent = tokio::spawn(agent.run(stop.stopped()));
        Ok(JoinedNode { handle, runtime, root_dir: root, stop, agent, endpoint })
    }
}

/// Where a node started with [`NodeSpec::join`] keeps its state, and its
/// HTTPS endpoint (logs, exec).
#[derive(Debug, Clone)]
#[must_use]
pub struct JoinOptions {
    root_dir: PathBuf,
    endpoint: Option<(u16, String)>,
    hidden_paths: Vec<PathBuf>,
}

impl JoinOptions {
    /// State (volumes, logs, the runtime's state) in `root_dir`; no endpoint.
    pub fn new(root_dir: impl Into<PathBuf>) -> JoinOptions {
        JoinOptions { root_dir: root_dir.into(), endpoint: None, hidden_paths: Vec::new() }
    }

    /// Hides `path` (the node's kubeconfig, its keys) from the node's
    /// containers, besides its state directory, which is always hidden.
    pub fn hide_from_containers(mut self, path: impl Into<PathBuf>) -> JoinOptions {
        let path = path.into();
        self.hidden_paths.push(std::path::absolute(&path).unwrap_or(path));
        self
    }

    /// Serves the node's HTTPS endpoint at the node's address on `port` (0:
    /// any free port) with a self-signed certificate, accepting clients with
    /// a certificate of the CA `client_ca_pem` (the cluster's: the API server
    /// reaches nodes with a client certificate it signed).
    pub fn endpoint(mut self, port: u16, client_ca_pem: impl Into<String>) -> JoinOptions {
        self.endpoint = Some((port, client_ca_pem.into()));
        self
    }
}

/// A node agent running on its own, started by [`NodeSpec::join`].
/// Dropped without a [`shutdown`](Self::shutdown), it signals the agent and
/// the endpoint to stop and does not wait.
pub struct JoinedNode {
    handle: AgentHandle,
    runtime: Arc<dyn RuntimeBackend>,
    root_dir: PathBuf,
    stop: StopSignal,
    agent: tokio::task::JoinHandle<Result<(), AgentError>>,
    endpoint: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl std::fmt::Debug for JoinedNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinedNode")
            .field("handle", &self.handle)
            .field("root_dir", &self.root_dir)
            .finish_non_exhaustive()
    }
}

impl JoinedNode {
    /// The agent: its node's name, whether it has registered.
    pub fn handle(&self) -> &AgentHandle {
        &self.handle
    }

    /// The node's runtime.
    pub fn runtime(&self) -> &Arc<dyn RuntimeBackend> {
        &self.runtime
    }

    /// Where the node keeps its state (absolute).
    pub fn root_dir(&self) -> &Path {
        &self.root_dir
    }

    /// Stops the agent and the endpoint (which drains its connections),
    /// then the node's running containers (SIGTERM, then SIGKILL after a
    /// grace period). Returns the agent's failure, else the endpoint's.
    pub async fn shutdown(mut self) -> Result<(), ControlPlaneError> {
        let node = self.handle.node_name().to_owned();
        let failed = |message: String| ControlPlaneError::Node { node: node.clone(), message };
        self.stop.stop();
        let agent = (&mut self.agent).await;
        orchestra_node::runtime::stop_running_containers(&*self.runtime, super::CONTAINER_GRACE).await;
        let endpoint = match self.endpoint.take() {
            Some(task) => task.await.map_err(|e| failed(e.to_string()))?,
            None => Ok(()),
        };
        agent.map_err(|e| failed(e.to_string()))?.map_err(|e| failed(e.to_string()))?;
        endpoint.map_err(ControlPlaneError::io(format!("serving node {node}'s endpoint")))
    }
}

impl Drop for JoinedNode {
    fn drop(&mut self) {
        self.stop.stop();
    }
}

/// The CA (PEM) of the current cluster of the kubeconfig at `path`: the CA
/// a node joining that cluster accepts client certificates of
/// ([`JoinOptions::endpoint`]).
pub fn kubeconfig_cluster_ca(path: &Path) -> Result<String, ControlPlaneError> {
    let invalid = |what: String| ControlPlaneError::Config(format!("kubeconfig {}: {what}", path.display()));
    let config = kube::config::Kubeconfig::read_from(path).map_err(|e| invalid(e.to_string()))?;
    let context = config.current_context.as_deref().ok_or_else(|| invalid("no current context".into()))?;
    let cluster = config
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .ok_or_else(|| invalid("the current context names no cluster".into()))?;
    let cluster = config
        .clusters
        .iter()
        .find(|c| c.name == cluster)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| invalid(format!("unknown cluster {cluster}")))?;
    if let Some(data) = &cluster.certificate_authority_data {
        let pem = base64::engine::general_purpose::STANDARD.decode(data).map_err(|e| invalid(e.to_string()))?;
        return String::from_utf8(pem).map_err(|e| invalid(e.to_string()));
    }
    if let Some(ca) = &cluster.certificate_authority {
        return std::fs::read_to_string(ca).map_err(|e| invalid(format!("{ca}: {e}")));
    }
    Err(invalid("the cluster has no certificate authority".into()))
}

/// A node's HTTPS endpoint (logs, exec), before it listens.
struct NodeEndpoint<'a> {
    name: &'a str,
    ip: IpAddr,
    port: u16,
    serving: Credential,
    client_ca_pem: &'a str,
}

impl NodeEndpoint<'_> {
    /// Binds `ip:port` and serves until `stopped`; returns the port bound
    /// and the serving task.
    async fn serve(
        self,
        runtime: &Arc<dyn RuntimeBackend>,
        client: &kube::Client,
        stopped: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(u16, tokio::task::JoinHandle<std::io::Result<()>>), ControlPlaneError> {
        let name = self.name;
        let tls = orchestra_core::tls::server_config(&self.serving, self.client_ca_pem, ClientAuth::Required)?;
        let node_server = NodeServer::new(runtime.clone(), Arc::new(DelegatingAuthorizer::new(client.clone(), name)));
        let address = SocketAddr::new(self.ip, self.port);
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(ControlPlaneError::io(format!("binding node {name}'s endpoint to {address}")))?;
        let port = listener.local_addr().map_err(ControlPlaneError::io("reading a listener's address"))?.port();
        let options = ListenOptions::default().with_tls(tls).with_drain_timeout(Duration::from_secs(1));
        Ok((port, tokio::spawn(orchestra_core::tls::serve(listener, node_server.router(), options, stopped))))
    }
}

/// The user the process's shared watch of pods acts as.
const SHARED_PODS_USER: &str = "orchestra:node-agents";

impl Running {
    /// Starts one agent per spec and waits until all have registered.
    pub(crate) async fn start_nodes(
        &mut self,
        specs: Vec<NodeSpec>,
        kubelet_port: u16,
        control_plane: Option<ControlPlanePods>,
    ) -> Result<(), ControlPlaneError> {
        // One watch of bound pods feeds every agent of this process, under
        // an identity that may read pods and nothing else.
        self.grant_shared_pods().await?;
        let pods = SharedPods::start(self.client_as(UserInfo::new(SHARED_PODS_USER, &["system:nodes"])));
        let mut admin_labels = Vec::new();
        for (index, spec) in specs.into_iter().enumerate() {
            let n = index + 1;
            let name = spec.name.clone().unwrap_or_else(|| node_name(n));
            let ip = spec.ip.unwrap_or_else(|| node_ip(n));
            let root = self.data_dir.join("nodes").join(&name);
            let client = self.client_as(UserInfo::new(format!("system:node:{name}"), &["system:nodes"]));
            let (mut config, mut runtime) = spec.prepare(&name, ip, &root, &self.hidden_paths).await?;
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
            // Labels NodeRestriction keeps node agents from setting are the
            // administrator's to set, once the node has registered.
            let restricted: BTreeMap<String, String> = config
                .labels
                .iter()
                .filter(|(key, _)| NodeRestriction::restricts_label(key))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect();
            config.labels.retain(|key, _| !restricted.contains_key(key));
            if !restricted.is_empty() {
                admin_labels.push((name.clone(), restricted));
            }
            let agent = NodeAgent::builder(client, runtime.clone(), config).shared_pods(pods.clone()).build();
            let handle = agent.handle();
            let task = tokio::spawn(agent.run(self.nodes_stop.stopped()));
            self.nodes.push(RunningNode { handle, runtime, task });
        }
        for node in &self.nodes {
            node.handle.registered().await;
        }
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(self.client_as(super::admin()));
        for (name, labels) in admin_labels {
            let patch = serde_json::json!({"metadata": {"labels": labels}});
            let labelled =
                nodes.patch(&name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch)).await;
            labelled.map_err(|source| ControlPlaneError::Api { what: format!("labelling node {name}"), source })?;
        }
        Ok(())
    }

    /// The ClusterRole and ClusterRoleBinding that let [`SHARED_PODS_USER`]
    /// read pods.
    async fn grant_shared_pods(&self) -> Result<(), ControlPlaneError> {
        use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
        let admin = self.client_as(super::admin());
        let role: ClusterRole = serde_json::from_value(serde_json::json!({
            "metadata": {"name": SHARED_PODS_USER},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
        }))
        .expect("a valid ClusterRole");
        let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": SHARED_PODS_USER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SHARED_PODS_USER},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": SHARED_PODS_USER}],
        }))
        .expect("a valid ClusterRoleBinding");
        let apply = kube::api::PatchParams::apply("orchestra-control-plane").force();
        let failed = |source| ControlPlaneError::Api { what: format!("granting {SHARED_PODS_USER} pods"), source };
        kube::Api::<ClusterRole>::all(admin.clone())
            .patch(SHARED_PODS_USER, &apply, &kube::api::Patch::Apply(&role))
            .await
            .map_err(failed)?;
        kube::Api::<ClusterRoleBinding>::all(admin)
            .patch(SHARED_PODS_USER, &apply, &kube::api::Patch::Apply(&binding))
            .await
            .map_err(failed)?;
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
        let endpoint = NodeEndpoint { name, ip, port, serving, client_ca_pem: pki.ca_pem() };
        let (port, task) = endpoint.serve(runtime, client, self.listeners_stop.stopped()).await?;
        self.listeners.push(task);
        Ok(i32::from(port))
    }
}
