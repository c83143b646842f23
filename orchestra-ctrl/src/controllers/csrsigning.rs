//! The CSR signing controller (upstream's `csrsigning`): issues the
//! certificates of approved CertificateSigningRequests of the built-in
//! signers with the cluster CA, into `status.certificate`.
//!
//! | signer | the request must be |
//! |---|---|
//! | `kubernetes.io/kube-apiserver-client` | for client auth only ([`validate_client_usages`]) |
//! | `kubernetes.io/kube-apiserver-client-kubelet` | a node client request ([`validate_kubelet_client`]) |
//! | `kubernetes.io/kubelet-serving` | a node serving request ([`validate_kubelet_serving`]) |
//!
//! A request its signer refuses gets a `Failed` condition (reason
//! `SignerValidationFailure`). A certificate is valid for
//! `spec.expirationSeconds`, at most [`SigningConfig::max_duration`]
//! (upstream's `--cluster-signing-duration`, one year by default).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::PostParams;
use kube::{Api, Client};
use orchestra_core::api::certificates::{KUBE_APISERVER_CLIENT, KUBE_APISERVER_CLIENT_KUBELET, KUBELET_SERVING};
use orchestra_core::tls::csr::{
    CertificateAuthority, validate_client_usages, validate_kubelet_client, validate_kubelet_serving,
};

use super::csrapproving::{has_condition, issued, parsed};
use crate::controller::Controller;
use crate::informer::SharedInformerFactory;
use crate::{Action, Error};

/// The longest validity by default: one year.
pub const DEFAULT_MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// The signers this controller issues for.
pub const SIGNERS: [&str; 3] = [KUBE_APISERVER_CLIENT, KUBE_APISERVER_CLIENT_KUBELET, KUBELET_SERVING];

/// The CA the controller signs with and the longest validity it grants
/// (upstream's `--cluster-signing-cert-file`, `--cluster-signing-key-file`
/// and `--cluster-signing-duration`).
///
/// ```
/// use std::time::Duration;
/// use orchestra_core::tls::csr::CertificateAuthority;
/// use orchestra_ctrl::controllers::csrsigning::{DEFAULT_MAX_DURATION, SigningConfig};
///
/// let ca = CertificateAuthority::generate("cluster-ca").unwrap();
/// let config = SigningConfig::new(ca).with_max_duration(Duration::from_secs(3600));
/// assert_eq!(config.max_duration, Duration::from_secs(3600));
/// assert!(DEFAULT_MAX_DURATION > config.max_duration);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SigningConfig {
    /// The cluster CA.
    pub ca: CertificateAuthority,
    /// The longest validity of an issued certificate.
    pub max_duration: Duration,
}

impl SigningConfig {
    /// Signs with `ca`, for at most [`DEFAULT_MAX_DURATION`].
    pub fn new(ca: CertificateAuthority) -> SigningConfig {
        SigningConfig { ca, max_duration: DEFAULT_MAX_DURATION }
    }

    /// Sets [`max_duration`](Self::max_duration).
    pub fn with_max_duration(mut self, duration: Duration) -> SigningConfig {
        self.max_duration = duration;
        self
    }
}

/// What the reconciler works with.
pub struct Context {
    /// Client for writes.
    pub client: Client,
    /// The CA and the longest validity.
    pub config: SigningConfig,
}

/// What to do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Not this controller's (pending, denied, failed, issued, another
    /// signer).
    Skip,
    /// Issue a certificate valid this long.
    Sign(Duration),
    /// The signer refuses the request, for this reason.
    Fail(String),
}

/// What to do with `csr`, given the longest validity `max`.
pub fn decide(csr: &CertificateSigningRequest, max: Duration) -> Decision {
    let signer = csr.spec.signer_name.as_str();
    if !SIGNERS.contains(&signer)
        || !has_condition(csr, "Approved")
        || has_condition(csr, "Denied")
        || has_condition(csr, "Failed")
        || issued(csr)
    {
        return Decision::Skip;
    }
    let request = match parsed(csr) {
        Ok(request) => request,
        Err(e) => return Decision::Fail(format!("unable to parse csr: {e}")),
    };
    let usages = csr.spec.usages.as_deref().unwrap_or_default();
    let valid = match signer {
        KUBE_APISERVER_CLIENT => validate_client_usages(usages),
        KUBE_APISERVER_CLIENT_KUBELET => validate_kubelet_client(&request, usages),
        _ => validate_kubelet_serving(&request, usages),
    };
    if let Err(e) = valid {
        return Decision::Fail(e);
    }
    let duration = match csr.spec.expiration_seconds {
        Some(seconds) => max.min(Duration::from_secs(u64::try_from(seconds).unwrap_or(0).max(600))),
        None => max,
    };
    Decision::Sign(duration)
}

/// Issues or fails `csr` as [`decide`] says, through the status subresource.
pub async fn reconcile(csr: Arc<CertificateSigningRequest>, ctx: Arc<Context>) -> Result<Action, Error> {
    let mut updated = csr.as_ref().clone();
    let status = updated.status.get_or_insert_with(Default::default);
    match decide(&csr, ctx.config.max_duration) {
        Decision::Skip => return Ok(Action::await_change()),
        Decision::Sign(duration) => {
            let pem = String::from_utf8_lossy(&csr.spec.request.0).into_owned();
            let usages = csr.spec.usages.clone().unwrap_or_default();
            match ctx.config.ca.sign(&pem, &usages, duration) {
                Ok(certificate) => status.certificate = Some(ByteString(certificate.into_bytes())),
                Err(e) => failed(status, format!("{e}")),
            }
        }
        Decision::Fail(reason) => failed(status, reason),
    }
    let name = csr.metadata.name.clone().unwrap_or_default();
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    match api.replace_status(&name, &PostParams::default(), &updated).await {
        Ok(_) => Ok(Action::await_change()),
        // Changed or deleted since it was read: the watch brings it back.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

/// Adds the `Failed` condition upstream's signer writes.
fn failed(status: &mut k8s_openapi::api::certificates::v1::CertificateSigningRequestStatus, message: String) {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    status.conditions.get_or_insert_with(Vec::new).push(CertificateSigningRequestCondition {
        type_: "Failed".into(),
        status: "True".into(),
        reason: Some("SignerValidationFailure".into()),
        message: Some(message),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    });
}

/// Runs the controller until `shutdown`.
pub async fn run(
    factory: SharedInformerFactory,
    config: SigningConfig,
    workers: usize,
    shutdown: impl Future<Output = ()> + Send,
) {
    let ctx = Arc::new(Context { client: factory.client().clone(), config });
    Controller::<CertificateSigningRequest>::for_(&factory)
        .name("csrsigning")
        .concurrency(workers)
        .run(reconcile, ctx, shutdown)
        .await;
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequestStatus;
    use orchestra_core::tls::csr::create_request;

    use super::*;
    use crate::controllers::csrapproving::tests::{condition, csr};
    use crate::testing::FakeCluster;

    const CLIENT: &[&str] = &["digital signature", "key encipherment", "client auth"];
    const HOUR: Duration = Duration::from_secs(3600);

    fn with_conditions(mut csr: CertificateSigningRequest, kinds: &[&str]) -> CertificateSigningRequest {
        let conditions = kinds.iter().map(|k| condition(k)).collect();
        csr.status = Some(CertificateSigningRequestStatus { conditions: Some(conditions), ..Default::default() });
        csr
    }

    fn approved(signer: &str, cn: &str, org: &str, usages: &[&str]) -> CertificateSigningRequest {
        with_conditions(csr("c", cn, org, signer, "u", usages), &["Approved"])
    }

    #[test]
    fn decisions() {
        let serving = || {
            let (request, _) = create_request("system:node:n1", Some("system:nodes"), &["10.0.0.1".into()]).unwrap();
            let mut csr = approved(KUBELET_SERVING, "x", "y", &["digital signature", "server auth"]);
            csr.spec.request = ByteString(request.into_bytes());
            csr
        };
        let with_seconds = |seconds: i32| {
            let mut csr = approved(KUBE_APISERVER_CLIENT, "alice", "devs", CLIENT);
            csr.spec.expiration_seconds = Some(seconds);
            csr
        };
        let pending = csr("c", "alice", "devs", KUBE_APISERVER_CLIENT, "u", CLIENT);
        let cases = [
            ("client", approved(KUBE_APISERVER_CLIENT, "alice", "devs", CLIENT), Decision::Sign(HOUR * 24)),
            (
                "node client",
                approved(KUBE_APISERVER_CLIENT_KUBELET, "system:node:n1", "system:nodes", CLIENT),
                Decision::Sign(HOUR * 24),
            ),
            ("node serving", serving(), Decision::Sign(HOUR * 24)),
            ("shorter asked", with_seconds(3600), Decision::Sign(HOUR)),
            ("longer asked: capped", with_seconds(1_000_000), Decision::Sign(HOUR * 24)),
            ("pending", pending.clone(), Decision::Skip),
            ("denied", with_conditions(pending.clone(), &["Denied"]), Decision::Skip),
            ("failed", with_conditions(pending.clone(), &["Approved", "Failed"]), Decision::Skip),
            ("other signer", approved("example.com/x", "alice", "devs", CLIENT), Decision::Skip),
            (
                "client with server auth",
                approved(KUBE_APISERVER_CLIENT, "alice", "devs", &["client auth", "server auth"]),
                Decision::Fail("invalid usage for client certificate: server auth".into()),
            ),
            (
                "node client not a node",
                approved(KUBE_APISERVER_CLIENT_KUBELET, "alice", "system:nodes", CLIENT),
                Decision::Fail("subject common name does not begin with system:node:".into()),
            ),
        ];
        for (name, csr, want) in cases {
            assert_eq!(decide(&csr, HOUR * 24), want, "{name}");
        }
    }

    #[tokio::test]
    async fn issues_or_fails_through_the_status_subresource() {
        let ca = CertificateAuthority::generate("test-ca").unwrap();
        let mut good = approved(KUBE_APISERVER_CLIENT, "alice", "devs", CLIENT);
        good.metadata.name = Some("good".into());
        let mut bad = approved(KUBE_APISERVER_CLIENT, "alice", "devs", &["server auth"]);
        bad.metadata.name = Some("bad".into());
        let fake = FakeCluster::builder().object(&good).object(&bad).build().await;
        let ctx = Arc::new(Context { client: fake.client(), config: SigningConfig::new(ca.clone()) });
        for name in ["good", "bad"] {
            let stored: CertificateSigningRequest = fake.get_cluster(name).await.unwrap();
            reconcile(Arc::new(stored), ctx.clone()).await.expect("reconciles");
        }
        assert_eq!(
            fake.writes(),
            ["update certificatesigningrequests/status good", "update certificatesigningrequests/status bad"]
        );
        let good: CertificateSigningRequest = fake.get_cluster("good").await.unwrap();
        let pem = String::from_utf8(good.status.unwrap().certificate.unwrap().0).unwrap();
        let der = orchestra_core::tls::parse_certificates(&pem).unwrap();
        assert_eq!(orchestra_core::tls::certificate_subject(&der[0]).unwrap().common_name, "alice");
        let bad: CertificateSigningRequest = fake.get_cluster("bad").await.unwrap();
        let status = bad.status.unwrap();
        assert!(status.certificate.is_none());
        let failed = status.conditions.unwrap().into_iter().find(|c| c.type_ == "Failed").unwrap();
        assert_eq!(failed.reason.as_deref(), Some("SignerValidationFailure"));

        // Issued and failed requests are left alone.
        fake.clear_actions();
        for name in ["good", "bad"] {
            let stored: CertificateSigningRequest = fake.get_cluster(name).await.unwrap();
            reconcile(Arc::new(stored), ctx.clone()).await.expect("reconciles");
        }
        assert!(fake.writes().is_empty());
    }
}
