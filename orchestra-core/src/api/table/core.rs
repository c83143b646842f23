//! Printers of the core group (`v1`): pods, nodes, services and the rest.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::format::{age, array_at, containers, format_labels, int_at, map_len, name, seconds_between, since, str_at};
use super::{ColumnDefinition as Col, FnPrinter, Timestamp, other};

/// The printer of a core kind.
pub(super) fn printer(kind: &str) -> Option<FnPrinter> {
    let (columns, cells): (super::ColumnsFn, super::CellsFn) = match kind {
        "Pod" => {
            return Some(FnPrinter { columns: pod_columns, cells: pod_cells, conditions: Some(pod_conditions) });
        }
        "Node" => (node_columns, node_cells),
        "Service" => (service_columns, service_cells),
        "Endpoints" => (endpoints_columns, endpoints_cells),
        "Namespace" => (namespace_columns, namespace_cells),
        "Event" => (event_columns, event_cells),
        "ConfigMap" => (config_map_columns, config_map_cells),
        "Secret" => (secret_columns, secret_cells),
        "ServiceAccount" => (service_account_columns, service_account_cells),
        "PersistentVolume" => (pv_columns, pv_cells),
        "PersistentVolumeClaim" => (pvc_columns, pvc_cells),
        "ReplicationController" => (rc_columns, rc_cells),
        "ResourceQuota" => (quota_columns, quota_cells),
        "LimitRange" => return Some(other::CREATED_AT),
        _ => return None,
    };
    Some(FnPrinter { columns, cells, conditions: None })
}

// ---- pods ----

fn pod_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
        Col::new("Status", "string", "The aggregate status of the containers in this pod."),
        Col::new("Restarts", "string", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
        Col::age_column(),
        Col::new("IP", "string", "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.").priority(1),
        Col::new("Node", "string", "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName.").priority(1),
        Col::new("Nominated Node", "string", "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.").priority(1),
        Col::new("Readiness Gates", "string", "If specified, all readiness gates will be evaluated for pod readiness.").priority(1),
    ]
}

fn condition_true(object: &Value, type_: &str) -> bool {
    array_at(object, "/status/conditions").iter().any(|c| str_at(c, "/type") == type_ && str_at(c, "/status") == "True")
}

/// Keeps the later of two termination times.
fn later(current: Option<Timestamp>, status: &Value) -> Option<Timestamp> {
    let finished = status.pointer("/lastState/terminated/finishedAt").and_then(super::format::parse_time);
    match (current, finished) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn terminated_reason(terminated: &Value, prefix: &str) -> String {
    let reason = str_at(terminated, "/reason");
    if !reason.is_empty() {
        return format!("{prefix}{reason}");
    }
    let signal = int_at(terminated, "/signal");
    if signal != 0 {
        format!("{prefix}Signal:{signal}")
    } else {
        format!("{prefix}ExitCode:{}", int_at(terminated, "/exitCode"))
    }
}

/// Ready, Status and Restarts of a pod, as upstream's `printPod` works
/// them out.
pub(crate) fn pod_summary(pod: &Value, now: Timestamp) -> (String, String, String) {
    let phase = str_at(pod, "/status/phase");
    let mut reason = match str_at(pod, "/status/reason") {
        "" => phase.to_owned(),
        r => r.to_owned(),
    };
    if array_at(pod, "/status/conditions")
        .iter()
        .any(|c| str_at(c, "/type") == "PodScheduled" && str_at(c, "/reason") == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }
    let init_specs = array_at(pod, "/spec/initContainers");
    let restartable =
        |name: &str| init_specs.iter().any(|c| str_at(c, "/name") == name && str_at(c, "/restartPolicy") == "Always");
    let total = array_at(pod, "/spec/containers").len()
        + init_specs.iter().filter(|c| str_at(c, "/restartPolicy") == "Always").count();
    let mut ready = 0;
    let mut restarts = 0;
    let mut sidecar_restarts = 0;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_sidecar_restart: Option<Timestamp> = None;
    let mut initializing = false;
    for (i, status) in array_at(pod, "/status/initContainerStatuses").iter().enumerate() {
        let count = int_at(status, "/restartCount");
        restarts += count;
        last_restart = later(last_restart, status);
        let name = str_at(status, "/name");
        let is_sidecar = restartable(name);
        if is_sidecar {
            sidecar_restarts += count;
            last_sidecar_restart = later(last_sidecar_restart, status);
        }
        let terminated = status.pointer("/state/terminated").filter(|t| t.is_object());
        let waiting_reason = str_at(status, "/state/waiting/reason");
        if terminated.is_some_and(|t| int_at(t, "/exitCode") == 0) {
            continue;
        }
        if is_sidecar && status.get("started").and_then(Value::as_bool) == Some(true) {
            if status.get("ready").and_then(Value::as_bool) == Some(true) {
                ready += 1;
            }
            continue;
        }
        reason = if let Some(terminated) = terminated {
            terminated_reason(terminated, "Init:")
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            format!("Init:{waiting_reason}")
        } else {
            format!("Init:{i}/{}", init_specs.len())
        };
        initializing = true;
        break;
    }
    if !initializing || condition_true(pod, "Initialized") {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for status in array_at(pod, "/status/containerStatuses").iter().rev() {
            restarts += int_at(status, "/restartCount");
            last_restart = later(last_restart, status);
            let waiting_reason = str_at(status, "/state/waiting/reason");
            let terminated = status.pointer("/state/terminated").filter(|t| t.is_object());
            if !waiting_reason.is_empty() {
                reason = waiting_reason.to_owned();
            } else if let Some(terminated) = terminated {
                reason = terminated_reason(terminated, "");
            } else if status.get("ready").and_then(Value::as_bool) == Some(true)
                && status.pointer("/state/running").is_some_and(Value::is_object)
            {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if condition_true(pod, "Ready") { "Running".into() } else { "NotReady".into() };
        }
    }
    let deleting = pod.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null());
    if deleting && str_at(pod, "/status/reason") == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }
    let restarts = match last_restart {
        Some(at) if restarts != 0 => {
            format!("{restarts} ({} ago)", super::format::human_duration(seconds_between(at, now)))
        }
        _ => restarts.to_string(),
    };
    (format!("{ready}/{total}"), reason, restarts)
}

fn pod_cells(pod: &Value, now: Timestamp) -> Vec<Value> {
    let (ready, status, restarts) = pod_summary(pod, now);
    let or_none = |s: &str| {
        if s.is_empty() { "<none>".to_owned() } else { s.to_owned() }
    };
    let ip = match array_at(pod, "/status/podIPs").first() {
        Some(first) => str_at(first, "/ip"),
        None => str_at(pod, "/status/podIP"),
    };
    let gates = array_at(pod, "/spec/readinessGates");
    let readiness_gates = if gates.is_empty() {
        "<none>".to_owned()
    } else {
        let conditions = array_at(pod, "/status/conditions");
        let true_count = gates
            .iter()
            .filter(|gate| {
                let type_ = str_at(gate, "/conditionType");
                conditions.iter().find(|c| str_at(c, "/type") == type_).is_some_and(|c| str_at(c, "/status") == "True")
            })
            .count();
        format!("{true_count}/{}", gates.len())
    };
    vec![
        name(pod).into(),
        ready.into(),
        status.into(),
        restarts.into(),
        age(pod, now).into(),
        or_none(ip).into(),
        or_none(str_at(pod, "/spec/nodeName")).into(),
        or_none(str_at(pod, "/status/nominatedNodeName")).into(),
        readiness_gates.into(),
    ]
}

fn pod_conditions(pod: &Value) -> Option<Value> {
    let (reason, message) = match str_at(pod, "/status/phase") {
        "Succeeded" => ("Succeeded", "The pod has completed successfully."),
        "Failed" => ("Failed", "The pod failed."),
        _ => return None,
    };
    Some(json!([{"type": "Completed", "status": "True", "reason": reason, "message": message}]))
}

// ---- nodes ----

fn node_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Status", "string", "The status of the node"),
        Col::new("Roles", "string", "The roles of the node"),
        Col::age_column(),
        Col::new("Version", "string", "Kubelet Version reported by the node."),
        Col::new("Internal-IP", "string", "List of addresses reachable to the node.").priority(1),
        Col::new("External-IP", "string", "List of addresses reachable to the node.").priority(1),
        Col::new(
            "OS-Image",
            "string",
            "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
        )
        .priority(1),
        Col::new(
            "Kernel-Version",
            "string",
            "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
        )
        .priority(1),
        Col::new(
            "Container-Runtime",
            "string",
            "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
        )
        .priority(1),
    ]
}

/// The Status cell of a node: `Ready`, `NotReady` or `Unknown`, then
/// `SchedulingDisabled` if cordoned.
pub(crate) fn node_status(node: &Value) -> String {
    let mut status = Vec::new();
    if let Some(ready) = array_at(node, "/status/conditions").iter().rev().find(|c| str_at(c, "/type") == "Ready") {
        status.push(if str_at(ready, "/status") == "True" { "Ready" } else { "NotReady" });
    }
    if status.is_empty() {
        status.push("Unknown");
    }
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled");
    }
    status.join(",")
}

/// The roles of a node from its `node-role.kubernetes.io/<role>` and
/// `kubernetes.io/role` labels.
pub(crate) fn node_roles(node: &Value) -> String {
    let mut roles = BTreeSet::new();
    if let Some(labels) = node.pointer("/metadata/labels").and_then(Value::as_object) {
        for (key, value) in labels {
            if let Some(role) = key.strip_prefix("node-role.kubernetes.io/") {
                if !role.is_empty() {
                    roles.insert(role.to_owned());
                }
            } else if key == "kubernetes.io/role"
                && let Some(v) = value.as_str().filter(|v| !v.is_empty())
            {
                roles.insert(v.to_owned());
            }
        }
    }
    if roles.is_empty() { "<none>".into() } else { roles.into_iter().collect::<Vec<_>>().join(",") }
}

fn node_address(node: &Value, type_: &str) -> String {
    array_at(node, "/status/addresses")
        .iter()
        .find(|a| str_at(a, "/type") == type_)
        .map(|a| str_at(a, "/address").to_owned())
        .unwrap_or_else(|| "<none>".into())
}

fn node_cells(node: &Value, now: Timestamp) -> Vec<Value> {
    let info = |field: &str| match str_at(node, &format!("/status/nodeInfo/{field}")) {
        "" => "<unknown>".to_owned(),
        v => v.to_owned(),
    };
    vec![
        name(node).into(),
        node_status(node).into(),
        node_roles(node).into(),
        age(node, now).into(),
        str_at(node, "/status/nodeInfo/kubeletVersion").into(),
        node_address(node, "InternalIP").into(),
        node_address(node, "ExternalIP").into(),
        info("osImage").into(),
        info("kernelVersion").into(),
        info("containerRuntimeVersion").into(),
    ]
}

// ---- services and endpoints ----

fn service_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Type", "string", "type determines how the Service is exposed."),
        Col::new(
            "Cluster-IP",
            "string",
            "clusterIP is the IP address of the service and is usually assigned randomly.",
        ),
        Col::new(
            "External-IP",
            "string",
            "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
        ),
        Col::new("Port(s)", "string", "The list of ports that are exposed by this service."),
        Col::age_column(),
        Col::new(
            "Selector",
            "string",
            "Route service traffic to pods with label keys and values matching this selector.",
        )
        .priority(1),
    ]
}

/// The Port(s) cell: `80/TCP,443:30443/TCP`, `<none>` if there are none.
pub(crate) fn service_ports(service: &Value) -> String {
    let ports: Vec<String> = array_at(service, "/spec/ports")
        .iter()
        .map(|port| {
            let protocol = match str_at(port, "/protocol") {
                "" => "TCP",
                p => p,
            };
            let number = int_at(port, "/port");
            match int_at(port, "/nodePort") {
                0 => format!("{number}/{protocol}"),
                node_port => format!("{number}:{node_port}/{protocol}"),
            }
        })
        .collect();
    if ports.is_empty() { "<none>".into() } else { ports.join(",") }
}

/// The External-IP cell, as upstream's `getServiceExternalIP`.
pub(crate) fn service_external_ip(service: &Value) -> String {
    let external: Vec<&str> = array_at(service, "/spec/externalIPs").iter().filter_map(Value::as_str).collect();
    match service_type(service) {
        "ClusterIP" | "NodePort" if !external.is_empty() => external.join(","),
        "ClusterIP" | "NodePort" => "<none>".into(),
        "LoadBalancer" => {
            let balancers: BTreeSet<&str> = array_at(service, "/status/loadBalancer/ingress")
                .iter()
                .filter_map(|i| [str_at(i, "/ip"), str_at(i, "/hostname")].into_iter().find(|s| !s.is_empty()))
                .collect();
            let mut all: Vec<&str> = balancers.into_iter().collect();
            all.extend(external);
            if all.is_empty() { "<pending>".into() } else { all.join(",") }
        }
        "ExternalName" => str_at(service, "/spec/externalName").into(),
        _ => "<unknown>".into(),
    }
}

fn service_type(service: &Value) -> &str {
    match str_at(service, "/spec/type") {
        "" => "ClusterIP",
        t => t,
    }
}

fn service_cells(service: &Value, now: Timestamp) -> Vec<Value> {
    let cluster_ip = match array_at(service, "/spec/clusterIPs").first() {
        Some(ip) => ip.as_str().unwrap_or(""),
        None => str_at(service, "/spec/clusterIP"),
    };
    vec![
        name(service).into(),
        service_type(service).into(),
        if cluster_ip.is_empty() { "<none>" } else { cluster_ip }.into(),
        service_external_ip(service).into(),
        service_ports(service).into(),
        age(service, now).into(),
        format_labels(service.pointer("/spec/selector")).into(),
    ]
}

fn endpoints_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Endpoints", "string", "The set of all endpoints is the union of all subsets."),
        Col::age_column(),
    ]
}

fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// The Endpoints cell: up to three `ip:port`, then `+ N more...`.
pub(crate) fn format_endpoints(endpoints: &Value) -> String {
    const MAX: usize = 3;
    let subsets = array_at(endpoints, "/subsets");
    if subsets.is_empty() {
        return "<none>".into();
    }
    let mut list = Vec::new();
    let mut count = 0;
    for subset in subsets {
        let addresses = array_at(subset, "/addresses");
        let ports = array_at(subset, "/ports");
        if ports.is_empty() {
            count += addresses.len();
            list.extend(addresses.iter().map(|a| str_at(a, "/ip").to_owned()));
            continue;
        }
        for port in ports {
            count += addresses.len();
            list.extend(addresses.iter().map(|a| join_host_port(str_at(a, "/ip"), int_at(port, "/port"))));
        }
    }
    if count > MAX {
        list.truncate(MAX);
        return format!("{} + {} more...", list.join(","), count - MAX);
    }
    list.join(",")
}

fn endpoints_cells(object: &Value, now: Timestamp) -> Vec<Value> {
    vec![name(object).into(), format_endpoints(object).into(), age(object, now).into()]
}

// ---- namespaces, events, config ----

fn namespace_columns() -> Vec<Col> {
    vec![Col::name_column(), Col::new("Status", "string", "The status of the namespace"), Col::age_column()]
}

fn namespace_cells(object: &Value, now: Timestamp) -> Vec<Value> {
    vec![name(object).into(), str_at(object, "/status/phase").into(), age(object, now).into()]
}

fn event_columns() -> Vec<Col> {
    vec![
        Col::new("Last Seen", "string", "The time at which the most recent occurrence of this event was recorded."),
        Col::new("Type", "string", "Type of this event (Normal, Warning), new types could be added in the future"),
        Col::new("Reason", "string", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
        Col::new("Object", "string", "The object that this event is about."),
        Col::new("Subobject", "string", "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2].").priority(1),
        Col::new("Source", "string", "The component reporting this event. Should be a short machine understandable string.").priority(1),
        Col::new("Message", "string", "A human-readable description of the status of this operation."),
        Col::new("First Seen", "string", "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)").priority(1),
        Col::new("Count", "string", "The number of times this event has occurred.").priority(1),
        Col::new("Name", "string", super::format::NAME_DESCRIPTION).priority(1).format("name"),
    ]
}

/// The fields of a core/v1 Event, or of an events.k8s.io/v1 Event mapped
/// to them (`regarding`, `note`, `deprecated*`).
pub(crate) struct EventFields<'a> {
    pub first: Option<&'a Value>,
    pub last: Option<&'a Value>,
    pub event_time: Option<&'a Value>,
    pub count: i64,
    pub series: Option<&'a Value>,
    pub involved: Option<&'a Value>,
    pub type_: &'a str,
    pub reason: &'a str,
    pub message: &'a str,
    pub component: &'a str,
    pub host: &'a str,
    pub reporting_controller: &'a str,
    pub reporting_instance: &'a str,
}

fn core_event_fields(event: &Value) -> EventFields<'_> {
    EventFields {
        first: event.get("firstTimestamp"),
        last: event.get("lastTimestamp"),
        event_time: event.get("eventTime"),
        count: int_at(event, "/count"),
        series: event.get("series").filter(|s| s.is_object()),
        involved: event.get("involvedObject"),
        type_: str_at(event, "/type"),
        reason: str_at(event, "/reason"),
        message: str_at(event, "/message"),
        component: str_at(event, "/source/component"),
        host: str_at(event, "/source/host"),
        reporting_controller: str_at(event, "/reportingComponent"),
        reporting_instance: str_at(event, "/reportingInstance"),
    }
}

/// The cells of an event (both event APIs share upstream's printer).
pub(crate) fn event_cells_from(event: &Value, fields: EventFields<'_>, now: Timestamp) -> Vec<Value> {
    let set = |v: Option<&Value>| v.and_then(super::format::parse_time).is_some();
    let first = if set(fields.first) { since(fields.first, now) } else { since(fields.event_time, now) };
    let mut last = if set(fields.last) { since(fields.last, now) } else { first.clone() };
    let mut count = fields.count;
    if let Some(series) = fields.series {
        last = since(series.get("lastObservedTime"), now);
        count = int_at(series, "/count");
    } else if count == 0 {
        count = 1;
    }
    let involved = fields.involved.unwrap_or(&Value::Null);
    let kind = str_at(involved, "/kind").to_ascii_lowercase();
    let target = match str_at(involved, "/name") {
        "" => kind,
        n => format!("{kind}/{n}"),
    };
    let first_non_empty = |a: &'_ str, b: &'_ str| {
        if a.is_empty() { b.to_owned() } else { a.to_owned() }
    };
    let component = first_non_empty(fields.component, fields.reporting_controller);
    let host = first_non_empty(fields.host, fields.reporting_instance);
    let source = if host.is_empty() { component } else { format!("{component}, {host}") };
    vec![
        last.into(),
        fields.type_.into(),
        fields.reason.into(),
        target.into(),
        str_at(involved, "/fieldPath").into(),
        source.into(),
        fields.message.trim().into(),
        first.into(),
        count.into(),
        name(event).into(),
    ]
}

fn event_cells(event: &Value, now: Timestamp) -> Vec<Value> {
    event_cells_from(event, core_event_fields(event), now)
}

/// Columns of events, shared with events.k8s.io.
pub(crate) fn events_columns() -> Vec<Col> {
    event_columns()
}

fn config_map_columns() -> Vec<Col> {
    vec![Col::name_column(), Col::new("Data", "string", "Data contains the configuration data."), Col::age_column()]
}

fn config_map_cells(object: &Value, now: Timestamp) -> Vec<Value> {
    let count = map_len(object, "/data") + map_len(object, "/binaryData");
    vec![name(object).into(), count.into(), age(object, now).into()]
}

fn secret_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Type", "string", "Used to facilitate programmatic handling of secret data."),
        Col::new("Data", "string", "Data contains the secret data."),
        Col::age_column(),
    ]
}

fn secret_cells(object: &Value, now: Timestamp) -> Vec<Value> {
    let mut keys = BTreeSet::new();
    for field in ["data", "stringData"] {
        if let Some(map) = object.get(field).and_then(Value::as_object) {
            keys.extend(map.keys());
        }
    }
    let type_ = match str_at(object, "/type") {
        "" => "Opaque",
        t => t,
    };
    vec![name(object).into(), type_.into(), keys.len().into(), age(object, now).into()]
}

fn service_account_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new(
            "Secrets",
            "string",
            "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.",
        ),
        Col::age_column(),
    ]
}

fn service_account_cells(object: &Value, now: Timestamp) -> Vec<Value> {
    vec![name(object).into(), array_at(object, "/secrets").len().into(), age(object, now).into()]
}

// ---- storage ----

/// Access modes as upstream's `GetAccessModesAsString`: `RWO,ROX,RWX,RWOP`.
fn access_modes(modes: &[Value]) -> String {
    let has = |m: &str| modes.iter().any(|v| v.as_str() == Some(m));
    [("ReadWriteOnce", "RWO"), ("ReadOnlyMany", "ROX"), ("ReadWriteMany", "RWX"), ("ReadWriteOncePod", "RWOP")]
        .iter()
        .filter(|(long, _)| has(long))
        .map(|(_, short)| *short)
        .collect::<Vec<_>>()
        .join(",")
}

fn storage_class(object: &Value) -> String {
    let annotation = object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
        .and_then(Value::as_str);
    annotation.unwrap_or_else(|| str_at(object, "/spec/storageClassName")).to_owned()
}

fn phase_or_terminating(object: &Value) -> String {
    if object.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()) {
        "Terminating".into()
    } else {
        str_at(object, "/status/phase").into()
    }
}

fn unset_or(object: &Value, pointer: &str) -> String {
    match str_at(object, pointer) {
        "" => "<unset>".into(),
        v => v.into(),
    }
}

fn pv_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Capacity", "string", "capacity is the description of the persistent volume's resources and capacity."),
        Col::new("Access Modes", "string", "accessModes contains all ways the volume can be mounted."),
        Col::new("Reclaim Policy", "string", "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim."),
        Col::new("Status", "string", "phase indicates if a volume is available, bound to a claim, or released by a claim."),
        Col::new("Claim", "string", "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim."),
        Col::new("StorageClass", "string", "StorageClass of the pv"),
        Col::new("VolumeAttributesClass", "string", "VolumeAttributesClass of the pv"),
        Col::new("Reason", "string", "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI."),
        Col::age_column(),
        Col::new("VolumeMode", "string", "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state.").priority(1),
    ]
}

fn pv_cells(pv: &Value, now: Timestamp) -> Vec<Value> {
    let claim = match pv.pointer("/spec/claimRef").filter(|c| c.is_object()) {
        Some(c) => format!("{}/{}", str_at(c, "/namespace"), str_at(c, "/name")),
        None => String::new(),
    };
    vec![
        name(pv).into(),
        str_at(pv, "/spec/capacity/storage").into(),
        access_modes(array_at(pv, "/spec/accessModes")).into(),
        str_at(pv, "/spec/persistentVolumeReclaimPolicy").into(),
        phase_or_terminating(pv).into(),
        claim.into(),
        storage_class(pv).into(),
        unset_or(pv, "/spec/volumeAttributesClassName").into(),
        str_at(pv, "/status/reason").into(),
        age(pv, now).into(),
        unset_or(pv, "/spec/volumeMode").into(),
    ]
}

fn pvc_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Status", "string", "phase represents the current phase of PersistentVolumeClaim."),
        Col::new("Volume", "string", "volumeName is the binding reference to the PersistentVolume backing this claim."),
        Col::new("Capacity", "string", "capacity represents the actual resources of the underlying volume."),
        Col::new(
            "Access Modes",
            "string",
            "accessModes contains the actual access modes the volume backing the PVC has.",
        ),
        Col::new("StorageClass", "string", "StorageClass of the pvc"),
        Col::new("VolumeAttributesClass", "string", "VolumeAttributesClass of the pvc"),
        Col::age_column(),
        Col::new("VolumeMode", "string", "volumeMode defines what type of volume is required by the claim.")
            .priority(1),
    ]
}

fn pvc_cells(pvc: &Value, now: Timestamp) -> Vec<Value> {
    let volume = str_at(pvc, "/spec/volumeName");
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (str_at(pvc, "/status/capacity/storage").to_owned(), access_modes(array_at(pvc, "/status/accessModes")))
    };
    vec![
        name(pvc).into(),
        phase_or_terminating(pvc).into(),
        volume.into(),
        capacity.into(),
        modes.into(),
        storage_class(pvc).into(),
        unset_or(pvc, "/spec/volumeAttributesClassName").into(),
        age(pvc, now).into(),
        unset_or(pvc, "/spec/volumeMode").into(),
    ]
}

// ---- replication controllers, quotas ----

fn rc_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Desired", "integer", "Replicas is the number of desired replicas."),
        Col::new("Current", "integer", "Replicas is the most recently observed number of replicas."),
        Col::new("Ready", "integer", "The number of ready replicas for this replication controller."),
        Col::age_column(),
        Col::new("Containers", "string", "Names of each container in the template.").priority(1),
        Col::new("Images", "string", "Images referenced by each container in the template.").priority(1),
        Col::new("Selector", "string", "Selector is a label query over pods that should match the Replicas count.")
            .priority(1),
    ]
}

fn rc_cells(rc: &Value, now: Timestamp) -> Vec<Value> {
    let desired = rc.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1);
    let (names, images) = containers(rc.pointer("/spec/template/spec"));
    vec![
        name(rc).into(),
        desired.into(),
        int_at(rc, "/status/replicas").into(),
        int_at(rc, "/status/readyReplicas").into(),
        age(rc, now).into(),
        names.into(),
        images.into(),
        format_labels(rc.pointer("/spec/selector")).into(),
    ]
}

fn quota_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new(
            "Request",
            "string",
            "Request represents a minimum amount of cpu/memory that a container may consume.",
        ),
        Col::new(
            "Limit",
            "string",
            "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
        ),
        Col::age_column(),
    ]
}

fn quota_cells(quota: &Value, now: Timestamp) -> Vec<Value> {
    let mut requests = Vec::new();
    let mut limits = Vec::new();
    if let Some(hard) = quota.pointer("/status/hard").and_then(Value::as_object) {
        let mut resources: Vec<&String> = hard.keys().collect();
        resources.sort();
        for resource in resources {
            let used = quota
                .pointer("/status/used")
                .and_then(|u| u.get(resource.as_str()))
                .and_then(super::format::quantity)
                .unwrap_or_else(|| "0".into());
            let limit = hard.get(resource.as_str()).and_then(super::format::quantity).unwrap_or_else(|| "0".into());
            let entry = format!("{resource}: {used}/{limit}");
            match resource.split_once('.') {
                Some(("limits", _)) => limits.push(entry),
                _ => requests.push(entry),
            }
        }
    }
    vec![name(quota).into(), requests.join(", ").into(), limits.join(", ").into(), age(quota, now).into()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2024-06-01T12:00:00Z".parse().unwrap()
    }

    fn pod(status: Value) -> Value {
        json!({
            "metadata": {"name": "p", "creationTimestamp": "2024-06-01T11:55:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": status,
        })
    }

    fn running(ready: bool, restarts: i64) -> Value {
        json!({"name": "a", "ready": ready, "restartCount": restarts, "state": {"running": {"startedAt": "2024-06-01T11:56:00Z"}}})
    }

    #[test]
    fn pod_status_reasons() {
        let waiting = |reason: &str| json!({"name": "a", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": reason}}});
        let terminated = |reason: &str, code: i64| json!({"name": "a", "ready": false, "restartCount": 0, "state": {"terminated": {"reason": reason, "exitCode": code}}});
        let cases: Vec<(&str, Value, &str, &str)> = vec![
            ("pending, nothing known", json!({"phase": "Pending"}), "0/2", "Pending"),
            (
                "running, both ready",
                json!({"phase": "Running", "containerStatuses": [running(true, 0), running(true, 0)]}),
                "2/2",
                "Running",
            ),
            (
                "one not ready",
                json!({"phase": "Running", "containerStatuses": [running(true, 0), running(false, 0)]}),
                "1/2",
                "Running",
            ),
            (
                "creating",
                json!({"phase": "Pending", "containerStatuses": [waiting("ContainerCreating"), waiting("ContainerCreating")]}),
                "0/2",
                "ContainerCreating",
            ),
            (
                "crash loop",
                json!({"phase": "Running", "containerStatuses": [running(true, 0), waiting("CrashLoopBackOff")]}),
                "1/2",
                "CrashLoopBackOff",
            ),
            (
                "completed",
                json!({"phase": "Succeeded", "containerStatuses": [terminated("Completed", 0), terminated("Completed", 0)]}),
                "0/2",
                "Completed",
            ),
            ("error", json!({"phase": "Failed", "containerStatuses": [terminated("Error", 1)]}), "0/2", "Error"),
            (
                "exit code without reason",
                json!({"phase": "Failed", "containerStatuses": [terminated("", 137)]}),
                "0/2",
                "ExitCode:137",
            ),
            (
                "completed but one running, ready",
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "containerStatuses": [running(true, 0), terminated("Completed", 0)]}),
                "1/2",
                "Running",
            ),
            (
                "completed but one running, not ready",
                json!({"phase": "Running", "containerStatuses": [running(true, 0), terminated("Completed", 0)]}),
                "1/2",
                "NotReady",
            ),
            ("evicted", json!({"phase": "Failed", "reason": "Evicted"}), "0/2", "Evicted"),
            (
                "gated",
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}),
                "0/2",
                "SchedulingGated",
            ),
        ];
        for (what, status, ready, reason) in cases {
            let (r, s, _) = pod_summary(&pod(status), now());
            assert_eq!((r.as_str(), s.as_str()), (ready, reason), "{what}");
        }
    }

    #[test]
    fn pod_init_containers_and_deletion() {
        let mut p = pod(json!({"phase": "Pending", "initContainerStatuses": [
            {"name": "i1", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "i2", "restartCount": 0, "state": {"running": {}}}]}));
        p["spec"]["initContainers"] = json!([{"name": "i1"}, {"name": "i2"}, {"name": "i3"}]);
        assert_eq!(pod_summary(&p, now()).1, "Init:1/3");
        p["status"]["initContainerStatuses"][1]["state"] = json!({"waiting": {"reason": "ImagePullBackOff"}});
        assert_eq!(pod_summary(&p, now()).1, "Init:ImagePullBackOff");
        p["status"]["initContainerStatuses"][1]["state"] = json!({"terminated": {"exitCode": 2}});
        assert_eq!(pod_summary(&p, now()).1, "Init:ExitCode:2");

        // A started sidecar counts towards Ready and the total.
        let mut s = pod(json!({"phase": "Running", "initContainerStatuses": [
            {"name": "side", "restartCount": 0, "started": true, "ready": true, "state": {"running": {}}}],
            "containerStatuses": [running(true, 0), running(true, 0)]}));
        s["spec"]["initContainers"] = json!([{"name": "side", "restartPolicy": "Always"}]);
        assert_eq!(pod_summary(&s, now()).0, "3/3");

        let mut d = pod(json!({"phase": "Running", "containerStatuses": [running(true, 0)]}));
        d["metadata"]["deletionTimestamp"] = "2024-06-01T11:59:00Z".into();
        assert_eq!(pod_summary(&d, now()).1, "Terminating");
        d["status"]["reason"] = "NodeLost".into();
        assert_eq!(pod_summary(&d, now()).1, "Unknown");
        let mut done = pod(
            json!({"phase": "Succeeded", "containerStatuses": [{"name": "a", "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}]}),
        );
        done["metadata"]["deletionTimestamp"] = "2024-06-01T11:59:00Z".into();
        assert_eq!(pod_summary(&done, now()).1, "Completed");
    }

    #[test]
    fn pod_restarts() {
        let mut c = running(true, 3);
        c["lastState"] = json!({"terminated": {"finishedAt": "2024-06-01T11:55:00Z", "exitCode": 1}});
        let p = pod(json!({"phase": "Running", "containerStatuses": [c, running(true, 2)]}));
        assert_eq!(pod_summary(&p, now()).2, "5 (5m ago)");
        let p = pod(json!({"phase": "Running", "containerStatuses": [running(true, 2)]}));
        assert_eq!(pod_summary(&p, now()).2, "2");
        let p = pod(json!({"phase": "Running", "containerStatuses": [running(true, 0)]}));
        assert_eq!(pod_summary(&p, now()).2, "0");
    }

    #[test]
    fn pod_wide_cells() {
        let mut p = pod(
            json!({"phase": "Running", "podIPs": [{"ip": "10.0.0.5"}], "conditions": [{"type": "www.example.com/gate", "status": "True"}], "containerStatuses": [running(true, 0), running(true, 0)]}),
        );
        p["spec"]["nodeName"] = "n1".into();
        p["spec"]["readinessGates"] = json!([{"conditionType": "www.example.com/gate"}, {"conditionType": "other"}]);
        let cells = pod_cells(&p, now());
        assert_eq!(
            cells,
            json!(["p", "2/2", "Running", "0", "5m", "10.0.0.5", "n1", "<none>", "1/2"]).as_array().unwrap().clone()
        );
        assert_eq!(cells.len(), pod_columns().len());
        assert!(pod_conditions(&p).is_none());
        assert_eq!(pod_conditions(&pod(json!({"phase": "Succeeded"}))).unwrap()[0]["reason"], "Succeeded");
    }

    #[test]
    fn node_statuses_and_roles() {
        let node = |conditions: Value, unschedulable: bool| json!({"metadata": {"name": "n", "labels": {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "worker", "node-role.kubernetes.io/": "x"}}, "spec": {"unschedulable": unschedulable}, "status": {"conditions": conditions}});
        let cases = [
            (json!([{"type": "Ready", "status": "True"}]), false, "Ready"),
            (json!([{"type": "Ready", "status": "False"}]), false, "NotReady"),
            (json!([{"type": "Ready", "status": "Unknown"}]), true, "NotReady,SchedulingDisabled"),
            (json!([{"type": "MemoryPressure", "status": "False"}]), false, "Unknown"),
            (json!([]), true, "Unknown,SchedulingDisabled"),
        ];
        for (conditions, cordoned, expected) in cases {
            assert_eq!(node_status(&node(conditions, cordoned)), expected);
        }
        assert_eq!(node_roles(&node(json!([]), false)), "control-plane,worker");
        assert_eq!(node_roles(&json!({"metadata": {}})), "<none>");
        let full = json!({"metadata": {"name": "n1", "creationTimestamp": "2024-05-27T12:00:00Z"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "addresses": [{"type": "InternalIP", "address": "10.1.0.1"}],
                "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Debian"}}});
        assert_eq!(
            node_cells(&full, now()),
            json!(["n1", "Ready", "<none>", "5d", "v1.33.0", "10.1.0.1", "<none>", "Debian", "<unknown>", "<unknown>"])
                .as_array()
                .unwrap()
                .clone()
        );
    }

    #[test]
    fn service_cells_and_ports() {
        let svc = |spec: Value, status: Value| json!({"metadata": {"name": "s"}, "spec": spec, "status": status});
        let cases = [
            (
                json!({"ports": [{"port": 80, "protocol": "TCP"}, {"port": 443, "nodePort": 30443}]}),
                "80/TCP,443:30443/TCP",
            ),
            (json!({"ports": [{"port": 53, "protocol": "UDP"}]}), "53/UDP"),
            (json!({}), "<none>"),
        ];
        for (spec, expected) in cases {
            assert_eq!(service_ports(&svc(spec, json!({}))), expected);
        }
        let externals = [
            (json!({"type": "ClusterIP"}), json!({}), "<none>"),
            (json!({"type": "NodePort", "externalIPs": ["1.2.3.4", "5.6.7.8"]}), json!({}), "1.2.3.4,5.6.7.8"),
            (json!({"type": "LoadBalancer"}), json!({}), "<pending>"),
            (
                json!({"type": "LoadBalancer", "externalIPs": ["9.9.9.9"]}),
                json!({"loadBalancer": {"ingress": [{"ip": "2.2.2.2"}, {"hostname": "lb.example"}]}}),
                "2.2.2.2,lb.example,9.9.9.9",
            ),
            (json!({"type": "ExternalName", "externalName": "db.example"}), json!({}), "db.example"),
        ];
        for (spec, status, expected) in externals {
            assert_eq!(service_external_ip(&svc(spec, status)), expected);
        }
        let s = svc(
            json!({"clusterIPs": ["10.96.0.10"], "selector": {"app": "dns"}, "ports": [{"port": 53, "protocol": "UDP"}]}),
            json!({}),
        );
        let cells = service_cells(&s, now());
        assert_eq!(cells[1], "ClusterIP");
        assert_eq!(cells[2], "10.96.0.10");
        assert_eq!(cells[6], "app=dns");
    }

    #[test]
    fn endpoints_and_events() {
        let ep = json!({"subsets": [{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}], "ports": [{"port": 80}, {"port": 443}]}]});
        assert_eq!(format_endpoints(&ep), "10.0.0.1:80,10.0.0.2:80,10.0.0.1:443 + 1 more...");
        assert_eq!(format_endpoints(&json!({})), "<none>");
        let event = json!({"metadata": {"name": "p.123"}, "type": "Normal", "reason": "Scheduled", "message": " Assigned ",
            "involvedObject": {"kind": "Pod", "name": "p"}, "source": {"component": "scheduler"},
            "firstTimestamp": "2024-06-01T11:50:00Z", "lastTimestamp": "2024-06-01T11:59:00Z", "count": 2});
        assert_eq!(
            event_cells(&event, now()),
            json!(["60s", "Normal", "Scheduled", "pod/p", "", "scheduler", "Assigned", "10m", 2, "p.123"])
                .as_array()
                .unwrap()
                .clone()
        );
        let new_style = json!({"metadata": {"name": "e"}, "eventTime": "2024-06-01T11:59:30.000000Z", "reportingComponent": "ctl", "reportingInstance": "i1", "involvedObject": {"kind": "Node"}});
        let cells = event_cells(&new_style, now());
        assert_eq!(
            (cells[0].clone(), cells[3].clone(), cells[5].clone(), cells[8].clone()),
            (json!("30s"), json!("node"), json!("ctl, i1"), json!(1))
        );
    }

    #[test]
    fn config_and_storage_cells() {
        let cm = json!({"metadata": {"name": "c"}, "data": {"a": "1"}, "binaryData": {"b": ""}});
        assert_eq!(config_map_cells(&cm, now())[1], 2);
        let secret =
            json!({"metadata": {"name": "s"}, "type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}});
        assert_eq!(secret_cells(&secret, now())[1..3], [json!("kubernetes.io/tls"), json!(2)]);
        let pv = json!({"metadata": {"name": "pv"}, "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Retain", "claimRef": {"namespace": "d", "name": "c"}, "storageClassName": "fast"}, "status": {"phase": "Bound"}});
        let cells = pv_cells(&pv, now());
        assert_eq!(
            cells[1..7],
            [json!("1Gi"), json!("RWO,RWX"), json!("Retain"), json!("Bound"), json!("d/c"), json!("fast")]
        );
        let quota = json!({"metadata": {"name": "q"}, "status": {"hard": {"pods": "10", "limits.cpu": "2"}, "used": {"pods": "3"}}});
        assert_eq!(quota_cells(&quota, now())[1..3], [json!("pods: 3/10"), json!("limits.cpu: 0/2")]);
    }
}
