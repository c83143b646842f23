//! The roles of TLS bootstrapping: upstream's
//! `system:node-bootstrapper`, the `nodeclient` and `selfnodeclient` roles
//! the CSR approver checks, and the approver roles of the built-in
//! signers; with the bindings `kubeadm init` creates, so that a node
//! joining with a bootstrap token of group
//! [`KUBEADM_GROUP`] may ask
//! for its client certificate and have it approved, and a node may renew
//! its own.

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleRef, Subject};

use super::{metadata, named, role, rule};
use crate::api::certificates::{
    GROUP as CERTIFICATES, KUBE_APISERVER_CLIENT, KUBE_APISERVER_CLIENT_KUBELET, KUBELET_SERVING,
};
use crate::auth::bootstrap_token::KUBEADM_GROUP;
use crate::auth::rbac::GROUP;

/// May create and read CertificateSigningRequests: what a bootstrap token
/// needs to ask for a node's client certificate.
pub const NODE_BOOTSTRAPPER: &str = "system:node-bootstrapper";
/// May ask for a node client certificate for any node (its own bootstrap):
/// the approver approves such requests from holders of this role.
pub const NODE_CLIENT: &str = "system:certificates.k8s.io:certificatesigningrequests:nodeclient";
/// May renew its own node client certificate.
pub const SELF_NODE_CLIENT: &str = "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient";

/// The roles, as upstream defines them.
pub fn cluster_roles() -> Vec<ClusterRole> {
    let approver =
        |name: &str, signer: &str| role(name, &[], vec![named(&["approve"], &[CERTIFICATES], &["signers"], &[signer])]);
    vec![
        role(
            NODE_BOOTSTRAPPER,
            &[],
            vec![rule(&["create", "get", "list", "watch"], &[CERTIFICATES], &["certificatesigningrequests"])],
        ),
        role(NODE_CLIENT, &[], vec![rule(&["create"], &[CERTIFICATES], &["certificatesigningrequests/nodeclient"])]),
        role(
            SELF_NODE_CLIENT,
            &[],
            vec![rule(&["create"], &[CERTIFICATES], &["certificatesigningrequests/selfnodeclient"])],
        ),
        approver("system:certificates.k8s.io:kube-apiserver-client-approver", KUBE_APISERVER_CLIENT),
        approver("system:certificates.k8s.io:kube-apiserver-client-kubelet-approver", KUBE_APISERVER_CLIENT_KUBELET),
        approver("system:certificates.k8s.io:kubelet-serving-approver", KUBELET_SERVING),
    ]
}

/// The bindings `kubeadm init` creates: bootstrap tokens of
/// [`KUBEADM_GROUP`] may create CSRs and have node client ones
/// auto-approved; nodes (`system:nodes`) may have their renewals
/// auto-approved.
pub fn cluster_role_bindings() -> Vec<ClusterRoleBinding> {
    let bind = |name: &str, role: &str, group: &str| ClusterRoleBinding {
        metadata: metadata(name, &[]),
        role_ref: RoleRef { api_group: GROUP.into(), kind: "ClusterRole".into(), name: role.into() },
        subjects: Some(vec![Subject {
            api_group: Some(GROUP.into()),
            kind: "Group".into(),
            name: group.into(),
            namespace: None,
        }]),
    };
    vec![
        bind("kubeadm:kubelet-bootstrap", NODE_BOOTSTRAPPER, KUBEADM_GROUP),
        bind("kubeadm:node-autoapprove-bootstrap", NODE_CLIENT, KUBEADM_GROUP),
        bind("kubeadm:node-autoapprove-certificate-rotation", SELF_NODE_CLIENT, "system:nodes"),
    ]
}
