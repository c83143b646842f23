//! The roles of the controller manager's controllers, each bound to the
//! controller's service account in `kube-system` (upstream's
//! `system:controller:<account>` roles, for
//! `--use-service-account-credentials`).
//!
//! The rules are upstream's for the controllers Orchestra runs, with
//! `patch` beside `update` where a controller patches, and the
//! EndpointSlice rules in `endpoint-controller`'s role because one
//! controller keeps both Endpoints and EndpointSlices here.

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};

use super::{EVENTS, READ, metadata, named, role, rule};
use crate::auth::rbac::GROUP;

/// The prefix of every controller role's name.
pub const ROLE_PREFIX: &str = "system:controller:";

/// The namespace of the controllers' service accounts.
const NAMESPACE: &str = "kube-system";

fn events() -> PolicyRule {
    rule(EVENTS, &["", "events.k8s.io"], &["events"])
}

/// Each controller's service account and rules.
fn controllers() -> Vec<(&'static str, Vec<PolicyRule>)> {
    let owned = |group: &[&str], kind: &str| {
        vec![
            rule(&["get", "list", "watch", "update", "patch"], group, &[kind]),
            rule(&["update", "patch"], group, &[&format!("{kind}/status")]),
            rule(&["update"], group, &[&format!("{kind}/finalizers")]),
        ]
    };
    let pods_of_sets = rule(&["create", "delete", "list", "patch", "watch"], &[""], &["pods"]);
    vec![
        (
            "replicaset-controller",
            [owned(&["apps", "extensions"], "replicasets"), vec![pods_of_sets.clone(), events()]].concat(),
        ),
        ("replication-controller", [owned(&[""], "replicationcontrollers"), vec![pods_of_sets, events()]].concat()),
        (
            "clusterrole-aggregation-controller",
            vec![rule(&["escalate", "get", "list", "patch", "update", "watch"], &[GROUP], &["clusterroles"])],
        ),
        (
            "deployment-controller",
            [
                owned(&["apps", "extensions"], "deployments"),
                vec![
                    rule(
                        &["create", "delete", "get", "list", "patch", "update", "watch"],
                        &["apps", "extensions"],
                        &["replicasets"],
                    ),
                    rule(&["get", "list", "update", "patch", "watch"], &[""], &["pods"]),
                    events(),
                ],
            ]
            .concat(),
        ),
        (
            "generic-garbage-collector",
            vec![rule(&["get", "list", "watch", "patch", "update", "delete"], &["*"], &["*"]), events()],
        ),
        (
            "namespace-controller",
            vec![
                rule(&["delete", "get", "list", "watch"], &[""], &["namespaces"]),
                rule(&["update"], &[""], &["namespaces/finalize"]),
                rule(&["update", "patch"], &[""], &["namespaces/status"]),
                rule(&["delete", "deletecollection", "get", "list"], &["*"], &["*"]),
                events(),
            ],
        ),
        (
            "resourcequota-controller",
            vec![
                rule(&["list", "watch"], &["*"], &["*"]),
                rule(&["update"], &[""], &["resourcequotas/status"]),
                events(),
            ],
        ),
        ("service-account-controller", vec![rule(&["create"], &[""], &["serviceaccounts"]), events()]),
        ("root-ca-cert-publisher", vec![rule(&["create", "update"], &[""], &["configmaps"]), events()]),
        (
            "node-controller",
            vec![
                rule(&["delete", "get", "list", "patch", "update"], &[""], &["nodes"]),
                rule(&["patch", "update"], &[""], &["nodes/status"]),
                rule(&["patch", "update"], &[""], &["pods/status"]),
                rule(&["delete", "get", "list"], &[""], &["pods"]),
                events(),
            ],
        ),
        (
            // The CSR approving, signing and cleaning controllers.
            "certificate-controller",
            vec![
                rule(&["delete", "get", "list", "watch"], &["certificates.k8s.io"], &["certificatesigningrequests"]),
                rule(
                    &["update"],
                    &["certificates.k8s.io"],
                    &["certificatesigningrequests/approval", "certificatesigningrequests/status"],
                ),
                named(
                    &["approve"],
                    &["certificates.k8s.io"],
                    &["signers"],
                    &["kubernetes.io/kube-apiserver-client-kubelet"],
                ),
                named(
                    &["sign"],
                    &["certificates.k8s.io"],
                    &["signers"],
                    &[
                        "kubernetes.io/kube-apiserver-client",
                        "kubernetes.io/kube-apiserver-client-kubelet",
                        "kubernetes.io/kubelet-serving",
                        "kubernetes.io/legacy-unknown",
                    ],
                ),
                rule(&["create"], &["authorization.k8s.io"], &["subjectaccessreviews"]),
                events(),
            ],
        ),
        (
            "endpoint-controller",
            vec![
                rule(READ, &[""], &["services", "pods", "nodes"]),
                rule(&["create", "delete", "get", "list", "update", "patch"], &[""], &["endpoints"]),
                rule(&["create"], &[""], &["endpoints/restricted"]),
                rule(
                    &["create", "delete", "get", "list", "update", "patch"],
                    &["discovery.k8s.io"],
                    &["endpointslices"],
                ),
                rule(&["update"], &[""], &["services/finalizers"]),
                events(),
            ],
        ),
    ]
}

/// The controllers' ClusterRoles, `system:controller:<account>`.
pub fn cluster_roles() -> Vec<ClusterRole> {
    controllers().into_iter().map(|(account, rules)| role(&format!("{ROLE_PREFIX}{account}"), &[], rules)).collect()
}

/// Each controller role bound to its service account.
pub fn cluster_role_bindings() -> Vec<ClusterRoleBinding> {
    controllers()
        .into_iter()
        .map(|(account, _)| {
            let name = format!("{ROLE_PREFIX}{account}");
            ClusterRoleBinding {
                metadata: metadata(&name, &[]),
                role_ref: RoleRef { api_group: GROUP.into(), kind: "ClusterRole".into(), name },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: account.into(),
                    namespace: Some(NAMESPACE.into()),
                    api_group: Some(String::new()),
                }]),
            }
        })
        .collect()
}
