//! Printers of the other built-in groups, and upstream's default convertor
//! (Name, Created At) for kinds it has no printer for.

use serde_json::Value;

use super::core::{EventFields, event_cells_from, events_columns};
use super::format::{
    age, array_at, format_endpoints_slice, int_at, int_or_string, list_with_more, name, parse_time, str_at,
};
use super::{ColumnDefinition as Col, FnPrinter, Timestamp};

/// Name and Created At: upstream's default table convertor (roles,
/// cluster roles, limit ranges, CRDs).
pub(crate) const CREATED_AT: FnPrinter =
    FnPrinter { columns: created_at_columns, cells: created_at_cells, conditions: None };

fn created_at_columns() -> Vec<Col> {
    vec![Col::name_column(), Col::new("Created At", "date", super::format::CREATION_TIMESTAMP_DESCRIPTION)]
}

fn created_at_cells(object: &Value, _now: Timestamp) -> Vec<Value> {
    let created = object
        .pointer("/metadata/creationTimestamp")
        .and_then(parse_time)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|| "0001-01-01T00:00:00Z".into());
    vec![name(object).into(), created.into()]
}

/// `autoscaling/v1` Scale (the scale subresource).
pub(crate) const SCALE: FnPrinter = FnPrinter { columns: scale_columns, cells: scale_cells, conditions: None };

fn scale_columns() -> Vec<Col> {
    vec![
        Col::new("Name", "string", super::format::NAME_DESCRIPTION),
        Col::new("Desired", "integer", "replicas is the desired number of instances for the scaled object."),
        Col::new("Available", "integer", "replicas is the actual number of observed instances of the scaled object."),
        Col::age_column(),
    ]
}

fn scale_cells(scale: &Value, now: Timestamp) -> Vec<Value> {
    vec![
        name(scale).into(),
        int_at(scale, "/spec/replicas").into(),
        int_at(scale, "/status/replicas").into(),
        age(scale, now).into(),
    ]
}

/// The printer of a kind in another group.
pub(super) fn printer(group: &str, kind: &str) -> Option<FnPrinter> {
    let (columns, cells): (super::ColumnsFn, super::CellsFn) = match (group, kind) {
        ("discovery.k8s.io", "EndpointSlice") => (slice_columns, slice_cells),
        ("coordination.k8s.io", "Lease") => (lease_columns, lease_cells),
        ("rbac.authorization.k8s.io", "RoleBinding") => (role_binding_columns, role_binding_cells),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => (cluster_role_binding_columns, role_binding_cells),
        ("rbac.authorization.k8s.io", "Role" | "ClusterRole")
        | ("apiextensions.k8s.io", "CustomResourceDefinition") => return Some(CREATED_AT),
        ("storage.k8s.io", "StorageClass") => (storage_class_columns, storage_class_cells),
        ("scheduling.k8s.io", "PriorityClass") => (priority_class_columns, priority_class_cells),
        ("policy", "PodDisruptionBudget") => (pdb_columns, pdb_cells),
        ("autoscaling", "Scale") => return Some(SCALE),
        ("events.k8s.io", "Event") => (events_columns, event_cells),
        ("certificates.k8s.io", "CertificateSigningRequest") => (csr_columns, csr_cells),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration") => {
            (webhook_columns, webhook_cells)
        }
        _ => return None,
    };
    Some(FnPrinter { columns, cells, conditions: None })
}

fn slice_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("AddressType", "string", "addressType specifies the type of address carried by this EndpointSlice."),
        Col::new(
            "Ports",
            "string",
            "ports specifies the list of network ports exposed by each endpoint in this slice.",
        ),
        Col::new("Endpoints", "string", "endpoints is a list of unique endpoints in this slice."),
        Col::age_column(),
    ]
}

fn slice_cells(slice: &Value, now: Timestamp) -> Vec<Value> {
    let ports: Vec<String> = array_at(slice, "/ports")
        .iter()
        .map(|p| match p.get("port").and_then(Value::as_i64) {
            Some(n) => n.to_string(),
            None => match str_at(p, "/name") {
                "" => "*".into(),
                n => n.into(),
            },
        })
        .collect();
    vec![
        name(slice).into(),
        str_at(slice, "/addressType").into(),
        list_with_more(&ports).into(),
        format_endpoints_slice(array_at(slice, "/endpoints")).into(),
        age(slice, now).into(),
    ]
}

fn csr_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::age_column(),
        Col::new("SignerName", "string", "signerName indicates the requested signer, and is a qualified name."),
        Col::new(
            "Requestor",
            "string",
            "username contains the name of the user that created the CertificateSigningRequest.",
        ),
        Col::new(
            "RequestedDuration",
            "string",
            "expirationSeconds is the requested duration of validity of the issued certificate.",
        ),
        Col::new("Condition", "string", "conditions applied to the request."),
    ]
}

fn csr_cells(csr: &Value, now: Timestamp) -> Vec<Value> {
    let requested = csr
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .map_or_else(|| "<none>".to_owned(), super::format::human_duration);
    vec![
        name(csr).into(),
        age(csr, now).into(),
        str_at(csr, "/spec/signerName").into(),
        str_at(csr, "/spec/username").into(),
        requested.into(),
        csr_condition(csr).into(),
    ]
}

/// Upstream's CSR condition column: Denied, Approved or Pending, then
/// `,Failed` and `,Issued`.
pub(crate) fn csr_condition(csr: &Value) -> String {
    let has = |kind: &str| array_at(csr, "/status/conditions").iter().any(|c| c["type"] == kind);
    let mut condition = if has("Denied") {
        "Denied".to_owned()
    } else if has("Approved") {
        "Approved".to_owned()
    } else {
        "Pending".to_owned()
    };
    if has("Failed") {
        condition.push_str(",Failed");
    }
    if csr.pointer("/status/certificate").and_then(Value::as_str).is_some_and(|c| !c.is_empty()) {
        condition.push_str(",Issued");
    }
    condition
}

fn lease_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Holder", "string", "holderIdentity contains the identity of the holder of a current lease."),
        Col::age_column(),
    ]
}

fn lease_cells(lease: &Value, now: Timestamp) -> Vec<Value> {
    vec![name(lease).into(), str_at(lease, "/spec/holderIdentity").into(), age(lease, now).into()]
}

fn binding_columns(what: &str) -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Role", "string", "RoleRef can only reference a ClusterRole in the global namespace."),
        Col::age_column(),
        Col::new("Users", "string", &format!("Users in the {what}")).priority(1),
        Col::new("Groups", "string", &format!("Groups in the {what}")).priority(1),
        Col::new("ServiceAccounts", "string", &format!("ServiceAccounts in the {what}")).priority(1),
    ]
}

fn role_binding_columns() -> Vec<Col> {
    binding_columns("roleBinding")
}

fn cluster_role_binding_columns() -> Vec<Col> {
    binding_columns("clusterRoleBinding")
}

fn role_binding_cells(binding: &Value, now: Timestamp) -> Vec<Value> {
    let (mut users, mut groups, mut accounts) = (Vec::new(), Vec::new(), Vec::new());
    for subject in array_at(binding, "/subjects") {
        let subject_name = str_at(subject, "/name");
        match str_at(subject, "/kind") {
            "User" => users.push(subject_name.to_owned()),
            "Group" => groups.push(subject_name.to_owned()),
            "ServiceAccount" => accounts.push(format!("{}/{subject_name}", str_at(subject, "/namespace"))),
            _ => {}
        }
    }
    vec![
        name(binding).into(),
        format!("{}/{}", str_at(binding, "/roleRef/kind"), str_at(binding, "/roleRef/name")).into(),
        age(binding, now).into(),
        users.join(", ").into(),
        groups.join(", ").into(),
        accounts.join(", ").into(),
    ]
}

fn storage_class_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Provisioner", "string", "provisioner indicates the type of the provisioner."),
        Col::new(
            "ReclaimPolicy",
            "string",
            "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class.",
        ),
        Col::new(
            "VolumeBindingMode",
            "string",
            "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.",
        ),
        Col::new(
            "AllowVolumeExpansion",
            "string",
            "allowVolumeExpansion shows whether the storage class allow volume expand.",
        ),
        Col::age_column(),
    ]
}

fn storage_class_cells(sc: &Value, now: Timestamp) -> Vec<Value> {
    let annotations = sc.pointer("/metadata/annotations");
    let default = ["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"]
        .iter()
        .any(|a| annotations.and_then(|m| m.get(*a)).and_then(Value::as_str) == Some("true"));
    let mut display = name(sc).to_owned();
    if default {
        display.push_str(" (default)");
    }
    let or = |pointer: &str, fallback: &'static str| match str_at(sc, pointer) {
        "" => fallback.to_owned(),
        v => v.to_owned(),
    };
    vec![
        display.into(),
        str_at(sc, "/provisioner").into(),
        or("/reclaimPolicy", "Delete").into(),
        or("/volumeBindingMode", "Immediate").into(),
        sc.get("allowVolumeExpansion").and_then(Value::as_bool).unwrap_or(false).into(),
        age(sc, now).into(),
    ]
}

fn priority_class_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Value", "integer", "value represents the integer value of this priority class."),
        Col::new(
            "Global-Default",
            "boolean",
            "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class.",
        ),
        Col::age_column(),
        Col::new(
            "PreemptionPolicy",
            "string",
            "preemptionPolicy is the Policy for preempting pods with lower priority.",
        ),
    ]
}

fn priority_class_cells(pc: &Value, now: Timestamp) -> Vec<Value> {
    vec![
        name(pc).into(),
        int_at(pc, "/value").into(),
        pc.get("globalDefault").and_then(Value::as_bool).unwrap_or(false).into(),
        age(pc, now).into(),
        str_at(pc, "/preemptionPolicy").into(),
    ]
}

fn pdb_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Min Available", "string", "The minimum number of pods that must be available."),
        Col::new("Max Unavailable", "string", "The maximum number of pods that may be unavailable."),
        Col::new("Allowed Disruptions", "integer", "Calculated number of pods that may be disrupted at this time."),
        Col::age_column(),
    ]
}

fn pdb_cells(pdb: &Value, now: Timestamp) -> Vec<Value> {
    let or_na = |pointer: &str| int_or_string(pdb.pointer(pointer)).unwrap_or_else(|| "N/A".into());
    vec![
        name(pdb).into(),
        or_na("/spec/minAvailable").into(),
        or_na("/spec/maxUnavailable").into(),
        int_at(pdb, "/status/disruptionsAllowed").into(),
        age(pdb, now).into(),
    ]
}

fn event_cells(event: &Value, now: Timestamp) -> Vec<Value> {
    let fields = EventFields {
        first: event.get("deprecatedFirstTimestamp"),
        last: event.get("deprecatedLastTimestamp"),
        event_time: event.get("eventTime"),
        count: int_at(event, "/deprecatedCount"),
        series: event.get("series").filter(|s| s.is_object()),
        involved: event.get("regarding"),
        type_: str_at(event, "/type"),
        reason: str_at(event, "/reason"),
        message: str_at(event, "/note"),
        component: str_at(event, "/deprecatedSource/component"),
        host: str_at(event, "/deprecatedSource/host"),
        reporting_controller: str_at(event, "/reportingController"),
        reporting_instance: str_at(event, "/reportingInstance"),
    };
    event_cells_from(event, fields, now)
}

fn webhook_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Webhooks", "integer", "Webhooks indicates the number of webhooks registered in this configuration"),
        Col::age_column(),
    ]
}

fn webhook_cells(config: &Value, now: Timestamp) -> Vec<Value> {
    vec![name(config).into(), array_at(config, "/webhooks").len().into(), age(config, now).into()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2024-06-01T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn csr_cells_and_conditions() {
        let cases = [
            (json!({}), "Pending"),
            (json!({"conditions": [{"type": "Approved"}]}), "Approved"),
            (json!({"conditions": [{"type": "Approved"}], "certificate": "LS0t"}), "Approved,Issued"),
            (json!({"conditions": [{"type": "Denied"}, {"type": "Failed"}]}), "Denied,Failed"),
            (json!({"conditions": [{"type": "Approved"}, {"type": "Failed"}]}), "Approved,Failed"),
        ];
        for (status, want) in cases {
            assert_eq!(csr_condition(&json!({"status": status})), want, "{status}");
        }
        let csr = json!({"metadata": {"name": "node-csr-1", "creationTimestamp": "2024-06-01T11:58:00Z"},
            "spec": {"signerName": "kubernetes.io/kube-apiserver-client", "username": "alice", "expirationSeconds": 86400}});
        assert_eq!(
            csr_cells(&csr, now()),
            [
                json!("node-csr-1"),
                json!("2m"),
                json!("kubernetes.io/kube-apiserver-client"),
                json!("alice"),
                json!("24h"),
                json!("Pending")
            ]
        );
        assert_eq!(csr_cells(&json!({"metadata": {}}), now())[4], "<none>");
    }

    #[test]
    fn other_group_cells() {
        let slice = json!({"metadata": {"name": "s"}, "addressType": "IPv4", "ports": [{"port": 80}, {"name": "http"}, {}],
            "endpoints": [{"addresses": ["10.0.0.1", "10.0.0.2"]}, {"addresses": ["10.0.0.3", "10.0.0.4"]}]});
        assert_eq!(
            slice_cells(&slice, now())[1..4],
            [json!("IPv4"), json!("80,http,*"), json!("10.0.0.1,10.0.0.2,10.0.0.3 + 1 more...")]
        );
        assert_eq!(slice_cells(&json!({"metadata": {}}), now())[3], "<unset>");
        let binding = json!({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "admin"},
            "subjects": [{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "devs"}, {"kind": "ServiceAccount", "namespace": "d", "name": "sa"}, {"kind": "User", "name": "bob"}]});
        assert_eq!(
            role_binding_cells(&binding, now())[1..6].to_vec(),
            vec![json!("ClusterRole/admin"), json!("<unknown>"), json!("alice, bob"), json!("devs"), json!("d/sa")]
        );
        let sc = json!({"metadata": {"name": "fast", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}, "provisioner": "x.csi"});
        assert_eq!(
            storage_class_cells(&sc, now())[..5],
            [json!("fast (default)"), json!("x.csi"), json!("Delete"), json!("Immediate"), json!(false)]
        );
        let pdb =
            json!({"metadata": {"name": "p"}, "spec": {"minAvailable": "50%"}, "status": {"disruptionsAllowed": 1}});
        assert_eq!(pdb_cells(&pdb, now())[1..4], [json!("50%"), json!("N/A"), json!(1)]);
        let role = json!({"metadata": {"name": "r", "creationTimestamp": "2024-05-01T10:00:00Z"}});
        assert_eq!(created_at_cells(&role, now())[1], "2024-05-01T10:00:00Z");
        let event = json!({"metadata": {"name": "e"}, "regarding": {"kind": "Pod", "name": "p"}, "note": "hi", "reason": "R", "type": "Warning",
            "eventTime": "2024-06-01T11:59:00.000000Z", "reportingController": "c"});
        assert_eq!(
            event_cells(&event, now())[..7],
            [json!("60s"), json!("Warning"), json!("R"), json!("pod/p"), json!(""), json!("c"), json!("hi")]
        );
    }
}
