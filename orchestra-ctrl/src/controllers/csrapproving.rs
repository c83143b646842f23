//! The CSR approving controller (upstream's `csrapproving`): approves the
//! node client certificate requests of the
//! `kubernetes.io/kube-apiserver-client-kubelet` signer whose requestor may
//! have them approved, as a SubjectAccessReview through the API tells:
//!
//! - a node renewing its own certificate (the requestor is the request's
//!   subject, `system:node:<name>`) needs `create` on
//!   `certificatesigningrequests/selfnodeclient`;
//! - anyone else asking for a node's certificate (a bootstrap token) needs
//!   `create` on `certificatesigningrequests/nodeclient`.
//!
//! The request must be a valid node client request
//! ([`validate_kubelet_client`]). Requests of other signers, already
//! approved, denied or issued are left alone; a request no review allows
//! stays pending, for a person to approve or deny.

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::PostParams;
use kube::{Api, Client};
use orchestra_core::api::certificates::{GROUP, KUBE_APISERVER_CLIENT_KUBELET, RESOURCE};
use orchestra_core::tls::csr::{CertificateRequest, parse_request, validate_kubelet_client};

use crate::controller::Controller;
use crate::informer::SharedInformerFactory;
use crate::{Action, Error};

/// Name of the controller (its service account's, as upstream's).
pub const NAME: &str = "certificate-controller";

/// The reason of the `Approved` condition this controller writes.
pub const REASON: &str = "AutoApproved";

/// What the reconciler works with.
pub struct Context {
    /// Client for reviews and writes.
    pub client: Client,
}

/// One kind of request this controller approves, and the permission its
/// requestor needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recognizer {
    /// The subresource of `certificatesigningrequests` the requestor must
    /// be allowed to `create`.
    pub permission: &'static str,
    /// The message of the `Approved` condition.
    pub message: &'static str,
}

/// A node renewing its own client certificate.
pub const SELF_NODE_CLIENT: Recognizer = Recognizer {
    permission: "selfnodeclient",
    message: "Auto approving self kubelet client certificate after SubjectAccessReview.",
};

/// A node client certificate asked for by someone else (a bootstrap token).
pub const NODE_CLIENT: Recognizer = Recognizer {
    permission: "nodeclient",
    message: "Auto approving kubelet client certificate after SubjectAccessReview.",
};

/// Whether the request has a condition of type `kind`.
pub(crate) fn has_condition(csr: &CertificateSigningRequest, kind: &str) -> bool {
    csr.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| c.iter().any(|c| c.type_ == kind))
}

/// Whether the request already has a certificate.
pub(crate) fn issued(csr: &CertificateSigningRequest) -> bool {
    csr.status.as_ref().and_then(|s| s.certificate.as_ref()).is_some_and(|c| !c.0.is_empty())
}

/// The parsed certificate request of `csr`.
pub(crate) fn parsed(csr: &CertificateSigningRequest) -> Result<CertificateRequest, String> {
    let pem = std::str::from_utf8(&csr.spec.request.0).map_err(|_| "the request is not PEM text".to_owned())?;
    parse_request(pem).map_err(|e| e.to_string())
}

/// The recognizers that apply to `csr`, most specific first; none for a
/// request this controller does not approve (another signer, not a valid
/// node client request, already decided or issued).
pub fn recognize(csr: &CertificateSigningRequest) -> Vec<Recognizer> {
    if csr.spec.signer_name != KUBE_APISERVER_CLIENT_KUBELET
        || issued(csr)
        || has_condition(csr, "Approved")
        || has_condition(csr, "Denied")
    {
        return Vec::new();
    }
    let Ok(request) = parsed(csr) else { return Vec::new() };
    if validate_kubelet_client(&request, csr.spec.usages.as_deref().unwrap_or_default()).is_err() {
        return Vec::new();
    }
    let mut recognized = Vec::new();
    if csr.spec.username.as_deref() == Some(request.subject.common_name.as_str()) {
        recognized.push(SELF_NODE_CLIENT);
    }
    recognized.push(NODE_CLIENT);
    recognized
}

/// Whether the request's requestor may `create` the subresource
/// `permission` of CSRs, asked through a SubjectAccessReview.
async fn allowed(client: &Client, csr: &CertificateSigningRequest, permission: &str) -> Result<bool, Error> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: csr.spec.username.clone(),
            uid: csr.spec.uid.clone(),
            groups: csr.spec.groups.clone(),
            extra: csr.spec.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                group: Some(GROUP.into()),
                resource: Some(RESOURCE.into()),
                subresource: Some(permission.into()),
                verb: Some("create".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone()).create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// Approves `csr` if a recognizer applies and its review allows.
pub async fn reconcile(csr: Arc<CertificateSigningRequest>, ctx: Arc<Context>) -> Result<Action, Error> {
    let recognizers = recognize(&csr);
    if recognizers.is_empty() {
        return Ok(Action::await_change());
    }
    for recognizer in &recognizers {
        if !allowed(&ctx.client, &csr, recognizer.permission).await? {
            continue;
        }
        let mut approved = csr.as_ref().clone();
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let status = approved.status.get_or_insert_with(Default::default);
        status.conditions.get_or_insert_with(Vec::new).push(CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            reason: Some(REASON.into()),
            message: Some(recognizer.message.into()),
            last_update_time: Some(now.clone()),
            last_transition_time: Some(now),
        });
        let name = csr.metadata.name.clone().unwrap_or_default();
        let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
        return match api.replace_subresource("approval", &name, &PostParams::default(), &approved).await {
            Ok(_) => Ok(Action::await_change()),
            // Changed or deleted since it was read: the watch brings it back.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(Action::await_change()),
            Err(e) => Err(e.into()),
        };
    }
    let names: Vec<_> = recognizers.iter().map(|r| r.permission).collect();
    tracing::debug!(csr = ?csr.metadata.name, recognized = ?names, "no subject access review allows approving the request");
    Ok(Action::await_change())
}

/// Runs the controller until `shutdown`.
pub async fn run(factory: SharedInformerFactory, workers: usize, shutdown: impl Future<Output = ()> + Send) {
    let ctx = Arc::new(Context { client: factory.client().clone() });
    Controller::<CertificateSigningRequest>::for_(&factory)
        .name("csrapproving")
        .concurrency(workers)
        .run(reconcile, ctx, shutdown)
        .await;
}

#[cfg(test)]
pub(crate) mod tests {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::{CertificateSigningRequestSpec, CertificateSigningRequestStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use orchestra_core::tls::csr::create_request;

    use super::*;
    use crate::testing::FakeCluster;

    /// A request named `name` for subject `cn`/`org` of `signer`, by
    /// `username`, with `usages`.
    pub(crate) fn csr(
        name: &str,
        cn: &str,
        org: &str,
        signer: &str,
        username: &str,
        usages: &[&str],
    ) -> CertificateSigningRequest {
        let (request, _) = create_request(cn, Some(org), &[]).unwrap();
        CertificateSigningRequest {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            spec: CertificateSigningRequestSpec {
                request: ByteString(request.into_bytes()),
                signer_name: signer.into(),
                username: Some(username.into()),
                groups: Some(vec!["system:bootstrappers".into(), "system:authenticated".into()]),
                usages: Some(usages.iter().map(|u| (*u).to_owned()).collect()),
                ..Default::default()
            },
            status: None,
        }
    }

    pub(crate) fn condition(kind: &str) -> CertificateSigningRequestCondition {
        CertificateSigningRequestCondition { type_: kind.into(), status: "True".into(), ..Default::default() }
    }

    const CLIENT: &[&str] = &["digital signature", "key encipherment", "client auth"];

    #[test]
    fn recognizes_node_client_requests_only() {
        let node = |username: &str| {
            csr("c", "system:node:n1", "system:nodes", KUBE_APISERVER_CLIENT_KUBELET, username, CLIENT)
        };
        let with_status = |mut csr: CertificateSigningRequest, status: CertificateSigningRequestStatus| {
            csr.status = Some(status);
            csr
        };
        let cases = [
            ("bootstrap", node("system:bootstrap:abcdef"), vec![NODE_CLIENT]),
            ("renewal", node("system:node:n1"), vec![SELF_NODE_CLIENT, NODE_CLIENT]),
            ("another node", node("system:node:n2"), vec![NODE_CLIENT]),
            (
                "other signer",
                csr("c", "system:node:n1", "system:nodes", "kubernetes.io/kube-apiserver-client", "u", CLIENT),
                vec![],
            ),
            (
                "not system:nodes",
                csr("c", "system:node:n1", "devs", KUBE_APISERVER_CLIENT_KUBELET, "u", CLIENT),
                vec![],
            ),
            ("not a node", csr("c", "alice", "system:nodes", KUBE_APISERVER_CLIENT_KUBELET, "u", CLIENT), vec![]),
            (
                "server usages",
                csr(
                    "c",
                    "system:node:n1",
                    "system:nodes",
                    KUBE_APISERVER_CLIENT_KUBELET,
                    "u",
                    &["digital signature", "server auth"],
                ),
                vec![],
            ),
            (
                "approved",
                with_status(
                    node("u"),
                    CertificateSigningRequestStatus {
                        conditions: Some(vec![condition("Approved")]),
                        ..Default::default()
                    },
                ),
                vec![],
            ),
            (
                "denied",
                with_status(
                    node("u"),
                    CertificateSigningRequestStatus {
                        conditions: Some(vec![condition("Denied")]),
                        ..Default::default()
                    },
                ),
                vec![],
            ),
            (
                "issued",
                with_status(
                    node("u"),
                    CertificateSigningRequestStatus {
                        certificate: Some(ByteString(b"x".to_vec())),
                        ..Default::default()
                    },
                ),
                vec![],
            ),
        ];
        for (name, csr, want) in cases {
            assert_eq!(recognize(&csr), want, "{name}");
        }
    }

    #[tokio::test]
    async fn approves_through_the_approval_subresource() {
        let request = csr(
            "node-csr",
            "system:node:n1",
            "system:nodes",
            KUBE_APISERVER_CLIENT_KUBELET,
            "system:bootstrap:abcdef",
            CLIENT,
        );
        let fake = FakeCluster::builder().object(&request).build().await;
        let ctx = Arc::new(Context { client: fake.client() });
        let stored: CertificateSigningRequest = fake.get_cluster("node-csr").await.unwrap();
        reconcile(Arc::new(stored), ctx.clone()).await.expect("reconciles");
        // The fake authorizes everything: the review allows.
        assert_eq!(
            fake.writes(),
            ["create subjectaccessreviews ", "update certificatesigningrequests/approval node-csr"]
        );
        let approved: CertificateSigningRequest = fake.get_cluster("node-csr").await.unwrap();
        let conditions = approved.status.unwrap().conditions.unwrap();
        assert_eq!((conditions[0].type_.as_str(), conditions[0].reason.as_deref()), ("Approved", Some(REASON)));

        fake.clear_actions();
        let approved: CertificateSigningRequest = fake.get_cluster("node-csr").await.unwrap();
        reconcile(Arc::new(approved), ctx).await.expect("reconciles");
        assert!(fake.writes().is_empty(), "decided already");
    }
}
