//! The agent's Node: registration, capacity and allocatable, labels,
//! addresses, `nodeInfo`, images, and the conditions (Ready, MemoryPressure,
//! DiskPressure, PIDPressure).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ObjectMeta;

use super::config::{CapacitySource, NodeConfig, Resources};
use crate::runtime::Image;

/// The kubelet version the agent reports.
pub const KUBELET_VERSION: &str = "v1.33.0";

/// Identity and size of the host, read once per process.
#[derive(Debug, Clone, Default)]
pub struct HostInfo {
    /// `/etc/machine-id`.
    pub machine_id: String,
    /// `/sys/class/dmi/id/product_uuid`, or the machine id.
    pub system_uuid: String,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel_version: String,
    /// `PRETTY_NAME` of `/etc/os-release`.
    pub os_image: String,
    /// Online CPUs.
    pub cpus: u64,
    /// `MemTotal` in bytes.
    pub memory_bytes: u64,
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

fn meminfo(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?;
    let kib: u64 = line[field.len() + 1..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// The host's identity and size (read on first use).
pub fn host_info() -> &'static HostInfo {
    static INFO: OnceLock<HostInfo> = OnceLock::new();
    INFO.get_or_init(|| {
        let machine_id = read_trimmed("/etc/machine-id").unwrap_or_default();
        let os_image = std::fs::read_to_string("/etc/os-release")
            .ok()
            .and_then(|t| {
                t.lines().find_map(|l| l.strip_prefix("PRETTY_NAME=").map(|v| v.trim_matches('"').to_owned()))
            })
            .unwrap_or_else(|| "Linux".into());
        HostInfo {
            system_uuid: read_trimmed("/sys/class/dmi/id/product_uuid").unwrap_or_else(|| machine_id.clone()),
            machine_id,
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id").unwrap_or_default(),
            kernel_version: read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_default(),
            os_image,
            cpus: std::thread::available_parallelism().map(|n| n.get() as u64).unwrap_or(1),
            memory_bytes: meminfo("MemTotal").unwrap_or(0),
        }
    })
}

/// Size and free space of the filesystem holding `path`, in bytes.
pub fn filesystem(path: &Path) -> Option<(u64, u64)> {
    let mut probe = path.to_path_buf();
    while !probe.exists() {
        probe = probe.parent()?.to_path_buf();
    }
    let st = rustix::fs::statvfs(&probe).ok()?;
    let unit = st.f_frsize;
    Some((st.f_blocks * unit, st.f_bavail * unit))
}

/// The node's capacity.
pub fn capacity(config: &NodeConfig) -> Resources {
    match &config.capacity {
        CapacitySource::Fixed(r) => *r,
        CapacitySource::Host => {
            let host = host_info();
            Resources {
                cpu_millis: host.cpus * 1000,
                memory_bytes: host.memory_bytes,
                ephemeral_storage_bytes: filesystem(&config.root_dir).map(|(total, _)| total).unwrap_or(0),
                pods: config.max_pods,
            }
        }
    }
}

/// Resource readings that decide the pressure conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pressure {
    /// `memory.available` < 100Mi.
    pub memory: bool,
    /// `nodefs.available` < 10%.
    pub disk: bool,
    /// Fewer than 5% of PIDs left.
    pub pid: bool,
}

/// Reads the pressure signals from the host.
pub fn host_pressure(root_dir: &Path) -> Pressure {
    let memory = meminfo("MemAvailable").is_some_and(|a| a < 100 << 20);
    let disk = filesystem(root_dir).is_some_and(|(total, free)| total > 0 && free * 10 < total);
    let pid = (|| {
        let max: u64 = read_trimmed("/proc/sys/kernel/pid_max")?.parse().ok()?;
        let used = std::fs::read_dir("/proc")
            .ok()?
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
            .count() as u64;
        Some(used * 20 > max * 19)
    })()
    .unwrap_or(false);
    Pressure { memory, disk, pid }
}

fn quantities(r: &Resources) -> BTreeMap<String, Quantity> {
    [
        (
            "cpu",
            if r.cpu_millis.is_multiple_of(1000) {
                (r.cpu_millis / 1000).to_string()
            } else {
                format!("{}m", r.cpu_millis)
            },
        ),
        ("memory", format!("{}Ki", r.memory_bytes / 1024)),
        ("ephemeral-storage", format!("{}Ki", r.ephemeral_storage_bytes / 1024)),
        ("pods", r.pods.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), Quantity(v)))
    .collect()
}

/// `linux`.
pub fn os() -> &'static str {
    std::env::consts::OS
}

/// The Go architecture name (`amd64`, `arm64`...).
pub fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// The labels the agent owns on its Node.
pub fn node_labels(config: &NodeConfig) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    labels.insert("kubernetes.io/hostname".to_owned(), config.hostname.clone());
    labels.insert("kubernetes.io/os".to_owned(), os().to_owned());
    labels.insert("kubernetes.io/arch".to_owned(), arch().to_owned());
    labels.insert("beta.kubernetes.io/os".to_owned(), os().to_owned());
    labels.insert("beta.kubernetes.io/arch".to_owned(), arch().to_owned());
    if let Some(t) = &config.instance_type {
        labels.insert("node.kubernetes.io/instance-type".to_owned(), t.clone());
    }
    if let Some(z) = &config.zone {
        labels.insert("topology.kubernetes.io/zone".to_owned(), z.clone());
    }
    if let Some(r) = &config.region {
        labels.insert("topology.kubernetes.io/region".to_owned(), r.clone());
    }
    labels.extend(config.labels.clone());
    labels
}

/// The Node object the agent registers.
pub fn initial_node(config: &NodeConfig) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(config.node_name.clone()),
            labels: Some(node_labels(config)),
            annotations: Some(
                [("volumes.kubernetes.io/controller-managed-attach-detach".to_owned(), "true".to_owned())].into(),
            ),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: (!config.register_with_taints.is_empty()).then(|| config.register_with_taints.clone()),
            pod_cidr: None,
            ..Default::default()
        }),
        status: None,
    }
}

/// Everything a node status is computed from.
#[derive(Debug, Clone)]
pub struct NodeObservation {
    /// Capacity.
    pub capacity: Resources,
    /// Allocatable.
    pub allocatable: Resources,
    /// Pressure signals.
    pub pressure: Pressure,
    /// The pod network is ready (a pod CIDR is known).
    pub network_ready: bool,
    /// `<name>://<version>` of the runtime.
    pub runtime_version: String,
    /// Images on the node.
    pub images: Vec<Image>,
}

fn condition(
    old: Option<&NodeStatus>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: &Time,
) -> NodeCondition {
    let status = if status { "True" } else { "False" };
    let since = old
        .and_then(|s| s.conditions.iter().flatten().find(|c| c.type_ == type_))
        .filter(|c| c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(since),
    }
}

/// The node's status. `old` keeps conditions' transition times.
pub fn node_status(config: &NodeConfig, obs: &NodeObservation, old: Option<&NodeStatus>, now: &Time) -> NodeStatus {
    let host = host_info();
    let o = &config.node_info;
    let p = obs.pressure;
    let conditions = vec![
        if p.memory {
            condition(
                old,
                "MemoryPressure",
                true,
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available",
                now,
            )
        } else {
            condition(
                old,
                "MemoryPressure",
                false,
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
                now,
            )
        },
        if p.disk {
            condition(old, "DiskPressure", true, "KubeletHasDiskPressure", "kubelet has disk pressure", now)
        } else {
            condition(old, "DiskPressure", false, "KubeletHasNoDiskPressure", "kubelet has no disk pressure", now)
        },
        if p.pid {
            condition(
                old,
                "PIDPressure",
                true,
                "KubeletHasInsufficientPID",
                "kubelet has insufficient PID available",
                now,
            )
        } else {
            condition(old, "PIDPressure", false, "KubeletHasSufficientPID", "kubelet has sufficient PID available", now)
        },
        if obs.network_ready {
            condition(old, "Ready", true, "KubeletReady", "kubelet is posting ready status", now)
        } else {
            condition(
                old,
                "Ready",
                false,
                "KubeletNotReady",
                "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: no pod CIDR assigned to the node",
                now,
            )
        },
    ];
    let mut images: Vec<ContainerImage> = obs
        .images
        .iter()
        .map(|i| {
            let mut names = vec![i.id.clone()];
            names.extend(i.repo_tags.iter().cloned());
            ContainerImage { names: Some(names), size_bytes: Some(i.size_bytes as i64) }
        })
        .collect();
    images.sort_by(|a, b| b.size_bytes.cmp(&a.size_bytes).then_with(|| a.names.cmp(&b.names)));
    images.truncate(50);
    NodeStatus {
        capacity: Some(quantities(&obs.capacity)),
        allocatable: Some(quantities(&obs.allocatable)),
        conditions: Some(conditions),
        addresses: Some(vec![
            NodeAddress { type_: "InternalIP".into(), address: config.node_ip.to_string() },
            NodeAddress { type_: "Hostname".into(), address: config.hostname.clone() },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: config.kubelet_port }),
        }),
        node_info: Some(NodeSystemInfo {
            machine_id: o.machine_id.clone().unwrap_or_else(|| host.machine_id.clone()),
            system_uuid: o.system_uuid.clone().unwrap_or_else(|| host.system_uuid.clone()),
            boot_id: o.boot_id.clone().unwrap_or_else(|| host.boot_id.clone()),
            kernel_version: o.kernel_version.clone().unwrap_or_else(|| host.kernel_version.clone()),
            os_image: o.os_image.clone().unwrap_or_else(|| host.os_image.clone()),
            container_runtime_version: obs.runtime_version.clone(),
            kubelet_version: KUBELET_VERSION.into(),
            kube_proxy_version: KUBELET_VERSION.into(),
            operating_system: os().into(),
            architecture: arch().into(),
            ..Default::default()
        }),
        images: Some(images),
        ..Default::default()
    }
}

/// Whether two statuses differ in anything but heartbeat times.
pub fn changed(a: &NodeStatus, b: &NodeStatus) -> bool {
    let strip = |s: &NodeStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_heartbeat_time = None;
        }
        s
    };
    strip(a) != strip(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::status::time;
    use std::time::{Duration, SystemTime};

    fn obs(network_ready: bool) -> NodeObservation {
        let r = Resources { cpu_millis: 4000, memory_bytes: 8 << 30, ephemeral_storage_bytes: 100 << 30, pods: 110 };
        NodeObservation {
            capacity: r,
            allocatable: r,
            pressure: Pressure::default(),
            network_ready,
            runtime_version: "orchestra-sim://0.1.0".into(),
            images: vec![Image { id: "sha256:1".into(), repo_tags: vec!["busybox".into()], size_bytes: 5 }],
        }
    }

    #[test]
    fn status_fields_and_transition_times() {
        let config = NodeConfig::new("n1");
        let t1 = time(SystemTime::UNIX_EPOCH + Duration::from_secs(10));
        let t2 = time(SystemTime::UNIX_EPOCH + Duration::from_secs(20));
        let s1 = node_status(&config, &obs(false), None, &t1);
        let ready =
            |s: &NodeStatus| s.conditions.as_ref().unwrap().iter().find(|c| c.type_ == "Ready").unwrap().clone();
        assert_eq!(ready(&s1).status, "False");
        assert_eq!(s1.capacity.as_ref().unwrap()["cpu"].0, "4");
        assert_eq!(s1.capacity.as_ref().unwrap()["memory"].0, "8388608Ki");
        assert_eq!(s1.node_info.as_ref().unwrap().container_runtime_version, "orchestra-sim://0.1.0");
        assert_eq!(s1.daemon_endpoints.as_ref().unwrap().kubelet_endpoint.as_ref().unwrap().port, 10250);
        let s2 = node_status(&config, &obs(false), Some(&s1), &t2);
        assert!(!changed(&s1, &s2), "only heartbeats moved");
        let s3 = node_status(&config, &obs(true), Some(&s2), &t2);
        assert!(changed(&s2, &s3));
        assert_eq!(ready(&s3).reason.as_deref(), Some("KubeletReady"));
        let memory = s3.conditions.as_ref().unwrap().iter().find(|c| c.type_ == "MemoryPressure").unwrap();
        assert_eq!(memory.last_transition_time, Some(t1));
    }

    #[test]
    fn host_readings_are_sane() {
        let h = host_info();
        assert!(h.cpus >= 1);
        assert!(h.memory_bytes > 0);
        let (total, free) = filesystem(Path::new("/tmp/surely/missing/dir")).unwrap();
        assert!(total >= free && total > 0);
        let labels = node_labels(&NodeConfig::new("n1").zone("z1"));
        assert_eq!(labels["kubernetes.io/hostname"], "n1");
        assert_eq!(labels["topology.kubernetes.io/zone"], "z1");
    }
}
