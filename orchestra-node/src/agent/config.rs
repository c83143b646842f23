//! [`NodeConfig`]: everything a [`NodeAgent`](super::NodeAgent) is told
//! (the kubelet's flags and `KubeletConfiguration`).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Taint;

use super::backoff::BackoffConfig;

/// Amounts of the resources a node offers (capacity) or keeps back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resources {
    /// CPU in millicores.
    pub cpu_millis: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage_bytes: u64,
    /// Number of pods.
    pub pods: u64,
}

impl Resources {
    /// `self - other`, never below zero.
    pub fn saturating_sub(&self, other: &Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_sub(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_sub(other.memory_bytes),
            ephemeral_storage_bytes: self.ephemeral_storage_bytes.saturating_sub(other.ephemeral_storage_bytes),
            pods: self.pods.saturating_sub(other.pods),
        }
    }
}

/// Where the node's capacity comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapacitySource {
    /// Read from the host: CPUs, `/proc/meminfo`, the filesystem of
    /// `root_dir`; pods from [`NodeConfig::max_pods`].
    Host,
    /// Exactly these (simulated nodes).
    Fixed(Resources),
}

/// Identity fields of `status.nodeInfo` that come from the host. `None`
/// fields are read from the host (`/etc/machine-id`, boot id, kernel
/// release, `/etc/os-release`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeInfoOverrides {
    /// `machineID`.
    pub machine_id: Option<String>,
    /// `systemUUID`.
    pub system_uuid: Option<String>,
    /// `bootID`.
    pub boot_id: Option<String>,
    /// `kernelVersion`.
    pub kernel_version: Option<String>,
    /// `osImage`.
    pub os_image: Option<String>,
}

/// Configuration of a node agent. [`NodeConfig::new`] gives the kubelet's
/// defaults; the chained setters, one per field, change them, so that a new
/// setting is not a breaking change:
///
/// ```
/// use std::time::Duration;
/// use orchestra_node::agent::NodeConfig;
///
/// let config = NodeConfig::new("worker-1")
///     .root_dir("/var/lib/orchestra/worker-1")
///     .fixed_capacity(4000, 8 << 30)
///     .zone("zone-a")
///     .label("tier", "batch")
///     .sync_frequency(Duration::from_secs(30));
/// assert_eq!(config.pod_log_dir, std::path::Path::new("/var/lib/orchestra/worker-1/logs"));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeConfig {
    /// The Node's name.
    pub node_name: String,
    /// The `Hostname` address and `kubernetes.io/hostname` label (defaults to
    /// the node name).
    pub hostname: String,
    /// The `InternalIP` address: pods' `hostIP`.
    pub node_ip: IpAddr,
    /// The agent's state directory: volumes live under
    /// `<root_dir>/pods/<uid>/volumes`.
    pub root_dir: PathBuf,
    /// Where pods' log directories are created (`/var/log/pods` for the
    /// kubelet); defaults to `<root_dir>/logs`.
    pub pod_log_dir: PathBuf,
    /// Capacity: host readings or fixed.
    pub capacity: CapacitySource,
    /// Kept back from capacity for the system (allocatable = capacity − reserved).
    pub reserved: Resources,
    /// Maximum number of pods (110).
    pub max_pods: u64,
    /// Extra labels of the Node.
    pub labels: BTreeMap<String, String>,
    /// `topology.kubernetes.io/zone`.
    pub zone: Option<String>,
    /// `topology.kubernetes.io/region`.
    pub region: Option<String>,
    /// `node.kubernetes.io/instance-type`.
    pub instance_type: Option<String>,
    /// Taints the Node is registered with.
    pub register_with_taints: Vec<Taint>,
    /// Port of the agent's HTTPS endpoint (`daemonEndpoints.kubeletEndpoint`).
    pub kubelet_port: i32,
    /// The pod CIDR to use while the Node has no `spec.podCIDR`.
    pub pod_cidr: Option<String>,
    /// How often the agent checks whether its node status changed (10 s).
    pub node_status_update_frequency: Duration,
    /// The node status is posted at least this often even unchanged (5 min).
    pub node_status_report_frequency: Duration,
    /// The Lease's `leaseDurationSeconds` (40).
    pub lease_duration_seconds: i32,
    /// How often the Lease is renewed (10 s).
    pub lease_renew_interval: Duration,
    /// Read memory, disk and PID pressure from the host; otherwise they are
    /// always False.
    pub read_host_pressure: bool,
    /// Overrides of the host identity in `status.nodeInfo`.
    pub node_info: NodeInfoOverrides,
    /// How often every pod worker resyncs without a trigger (1 min).
    pub sync_frequency: Duration,
    /// How often orphaned sandboxes are looked for and static pods' mirror
    /// pods checked (10 s).
    pub housekeeping_interval: Duration,
    /// Directory of static pod manifests.
    pub static_pod_path: Option<PathBuf>,
    /// How often the static pod directory is rescanned (20 s).
    pub static_pod_check_interval: Duration,
    /// Crash-loop back-off of restarted containers (10 s doubling to 5 min).
    pub crash_backoff: BackoffConfig,
    /// Back-off of failed image pulls (10 s doubling to 5 min).
    pub image_backoff: BackoffConfig,
    /// Retry delay after a failed status write or an API error (1 s).
    pub api_retry: Duration,
    /// Inject service variables (`KUBERNETES_SERVICE_HOST`, and those of the
    /// pod's namespace unless `enableServiceLinks: false`) into containers.
    pub service_links: bool,
    /// The kubelet's `podPidsLimit`: `pids.max` of each container's cgroup
    /// (`None`: the runtime's default, 1024 for the process runtime).
    pub pod_pids_limit: Option<u64>,
}

impl NodeConfig {
    /// The defaults for a node named `node_name`, on the loopback address,
    /// with its state under the system's temporary directory.
    pub fn new(node_name: impl Into<String>) -> Self {
        let node_name = node_name.into();
        let root_dir = std::env::temp_dir().join("orchestra-node").join(&node_name);
        Self {
            hostname: node_name.clone(),
            node_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            pod_log_dir: root_dir.join("logs"),
            root_dir,
            capacity: CapacitySource::Host,
            reserved: Resources::default(),
            max_pods: 110,
            labels: BTreeMap::new(),
            zone: None,
            region: None,
            instance_type: None,
            register_with_taints: Vec::new(),
            kubelet_port: 10250,
            pod_cidr: None,
            node_status_update_frequency: Duration::from_secs(10),
            node_status_report_frequency: Duration::from_secs(300),
            lease_duration_seconds: 40,
            lease_renew_interval: Duration::from_secs(10),
            read_host_pressure: false,
            node_info: NodeInfoOverrides::default(),
            sync_frequency: Duration::from_secs(60),
            housekeeping_interval: Duration::from_secs(10),
            static_pod_path: None,
            static_pod_check_interval: Duration::from_secs(20),
            crash_backoff: BackoffConfig::default(),
            image_backoff: BackoffConfig::default(),
            api_retry: Duration::from_secs(1),
            service_links: true,
            pod_pids_limit: None,
            node_name,
        }
    }

    /// Puts the state (and logs) under `root_dir`.
    pub fn root_dir(mut self, root_dir: impl Into<PathBuf>) -> Self {
        self.root_dir = root_dir.into();
        self.pod_log_dir = self.root_dir.join("logs");
        self
    }

    /// A fixed capacity (simulated nodes).
    pub fn fixed_capacity(mut self, cpu_millis: u64, memory_bytes: u64) -> Self {
        self.capacity = CapacitySource::Fixed(Resources {
            cpu_millis,
            memory_bytes,
            ephemeral_storage_bytes: 100 << 30,
            pods: self.max_pods,
        });
        self
    }

    /// Uses `cidr` until the Node has a `spec.podCIDR`.
    pub fn pod_cidr(mut self, cidr: impl Into<String>) -> Self {
        self.pod_cidr = Some(cidr.into());
        self
    }

    /// Sets the `Hostname` address and `kubernetes.io/hostname` label.
    pub fn hostname(mut self, hostname: impl Into<String>) -> Self {
        self.hostname = hostname.into();
        self
    }

    /// Sets the `InternalIP` address (pods' `hostIP`).
    pub fn node_ip(mut self, node_ip: IpAddr) -> Self {
        self.node_ip = node_ip;
        self
    }

    /// Sets where pods' log directories are created (after [`root_dir`](Self::root_dir), which resets it).
    pub fn pod_log_dir(mut self, pod_log_dir: impl Into<PathBuf>) -> Self {
        self.pod_log_dir = pod_log_dir.into();
        self
    }

    /// Sets where the capacity comes from.
    pub fn capacity(mut self, capacity: CapacitySource) -> Self {
        self.capacity = capacity;
        self
    }

    /// Sets what is kept back from capacity for the system.
    pub fn reserved(mut self, reserved: Resources) -> Self {
        self.reserved = reserved;
        self
    }

    /// Sets the maximum number of pods.
    pub fn max_pods(mut self, max_pods: u64) -> Self {
        self.max_pods = max_pods;
        self
    }

    /// Sets the Node's extra labels (replacing those set before).
    pub fn labels(mut self, labels: BTreeMap<String, String>) -> Self {
        self.labels = labels;
        self
    }

    /// Adds the label `key=value` to the Node's extra labels.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Sets `topology.kubernetes.io/zone`.
    pub fn zone(mut self, zone: impl Into<String>) -> Self {
        self.zone = Some(zone.into());
        self
    }

    /// Sets `topology.kubernetes.io/region`.
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Sets `node.kubernetes.io/instance-type`.
    pub fn instance_type(mut self, instance_type: impl Into<String>) -> Self {
        self.instance_type = Some(instance_type.into());
        self
    }

    /// Sets the taints the Node is registered with.
    pub fn register_with_taints(mut self, register_with_taints: Vec<Taint>) -> Self {
        self.register_with_taints = register_with_taints;
        self
    }

    /// Sets the port of the agent's HTTPS endpoint.
    pub fn kubelet_port(mut self, kubelet_port: i32) -> Self {
        self.kubelet_port = kubelet_port;
        self
    }

    /// Sets how often the agent checks whether its node status changed.
    pub fn node_status_update_frequency(mut self, node_status_update_frequency: Duration) -> Self {
        self.node_status_update_frequency = node_status_update_frequency;
        self
    }

    /// Sets how often the node status is posted even unchanged.
    pub fn node_status_report_frequency(mut self, node_status_report_frequency: Duration) -> Self {
        self.node_status_report_frequency = node_status_report_frequency;
        self
    }

    /// Sets the Lease's `leaseDurationSeconds`.
    pub fn lease_duration_seconds(mut self, lease_duration_seconds: i32) -> Self {
        self.lease_duration_seconds = lease_duration_seconds;
        self
    }

    /// Sets how often the Lease is renewed.
    pub fn lease_renew_interval(mut self, lease_renew_interval: Duration) -> Self {
        self.lease_renew_interval = lease_renew_interval;
        self
    }

    /// Sets whether memory, disk and PID pressure are read from the host.
    pub fn read_host_pressure(mut self, read_host_pressure: bool) -> Self {
        self.read_host_pressure = read_host_pressure;
        self
    }

    /// Sets the overrides of the host identity in `status.nodeInfo`.
    pub fn node_info(mut self, node_info: NodeInfoOverrides) -> Self {
        self.node_info = node_info;
        self
    }

    /// Sets how often every pod worker resyncs without a trigger.
    pub fn sync_frequency(mut self, sync_frequency: Duration) -> Self {
        self.sync_frequency = sync_frequency;
        self
    }

    /// Sets how often orphaned sandboxes and mirror pods are checked.
    pub fn housekeeping_interval(mut self, housekeeping_interval: Duration) -> Self {
        self.housekeeping_interval = housekeeping_interval;
        self
    }

    /// Sets the directory of static pod manifests.
    pub fn static_pod_path(mut self, static_pod_path: impl Into<PathBuf>) -> Self {
        self.static_pod_path = Some(static_pod_path.into());
        self
    }

    /// Sets how often the static pod directory is rescanned.
    pub fn static_pod_check_interval(mut self, static_pod_check_interval: Duration) -> Self {
        self.static_pod_check_interval = static_pod_check_interval;
        self
    }

    /// Sets the crash-loop back-off of restarted containers.
    pub fn crash_backoff(mut self, crash_backoff: BackoffConfig) -> Self {
        self.crash_backoff = crash_backoff;
        self
    }

    /// Sets the back-off of failed image pulls.
    pub fn image_backoff(mut self, image_backoff: BackoffConfig) -> Self {
        self.image_backoff = image_backoff;
        self
    }

    /// Sets the retry delay after a failed status write or an API error.
    pub fn api_retry(mut self, api_retry: Duration) -> Self {
        self.api_retry = api_retry;
        self
    }

    /// Sets whether service variables are injected into containers.
    pub fn service_links(mut self, service_links: bool) -> Self {
        self.service_links = service_links;
        self
    }

    /// Short timings for tests: status checks every 200 ms, lease renewal
    /// every 500 ms, resync every 5 s, static pods rescanned every 200 ms,
    /// back-offs of 200 ms doubling to 2 s.
    pub fn fast(mut self) -> Self {
        self.node_status_update_frequency = Duration::from_millis(200);
        self.lease_renew_interval = Duration::from_millis(500);
        self.sync_frequency = Duration::from_secs(5);
        self.housekeeping_interval = Duration::from_millis(500);
        self.static_pod_check_interval = Duration::from_millis(200);
        self.crash_backoff = BackoffConfig::new(Duration::from_millis(200), Duration::from_secs(2));
        self.image_backoff = BackoffConfig::new(Duration::from_millis(200), Duration::from_secs(2));
        self.api_retry = Duration::from_millis(200);
        self
    }
}
