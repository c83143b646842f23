//! The CSR cleaner (upstream's `csrcleaner`): deletes
//! CertificateSigningRequests once they are of no more use, so that they do
//! not pile up.
//!
//! | the request | is deleted |
//! |---|---|
//! | approved and issued | [`APPROVED_EXPIRATION`] after its `Approved` condition |
//! | denied | [`DENIED_EXPIRATION`] after its `Denied` condition |
//! | failed | [`DENIED_EXPIRATION`] after its `Failed` condition |
//! | pending (no condition) | [`PENDING_EXPIRATION`] after its creation |
//! | issued, the certificate expired | at once |
//!
//! Where upstream lists every request once an hour, each request here is
//! looked at again when its deadline comes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::DeleteParams;
use kube::{Api, Client};

use crate::controller::Controller;
use crate::informer::SharedInformerFactory;
use crate::{Action, Error};

/// How long an issued request is kept after its approval.
pub const APPROVED_EXPIRATION: Duration = Duration::from_secs(3600);
/// How long a denied or failed request is kept.
pub const DENIED_EXPIRATION: Duration = Duration::from_secs(3600);
/// How long a request nobody approved or denied is kept.
pub const PENDING_EXPIRATION: Duration = Duration::from_secs(24 * 3600);

/// What to do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Delete it, for this reason.
    Delete(&'static str),
    /// Look again in this long.
    Wait(Duration),
    /// Nothing will make it deletable but a change (an approval still
    /// waiting for its certificate, for instance).
    Keep,
}

/// What to do with `csr` at `now` (seconds since the Unix epoch).
pub fn decide(csr: &CertificateSigningRequest, now: i64) -> Decision {
    let status = csr.status.clone().unwrap_or_default();
    let conditions = status.conditions.unwrap_or_default();
    let issued = status.certificate.as_ref().is_some_and(|c| !c.0.is_empty());
    // The earliest deadline among the rules that apply, and its reason.
    let mut deadlines: Vec<(i64, &'static str)> = Vec::new();
    let after = |time: &Option<Time>, keep: Duration| time.as_ref().map(|t| t.0.as_second() + keep.as_secs() as i64);
    for condition in &conditions {
        let (keep, reason) = match condition.type_.as_str() {
            "Approved" if issued => (APPROVED_EXPIRATION, "issued more than an hour ago"),
            "Denied" => (DENIED_EXPIRATION, "denied more than an hour ago"),
            "Failed" => (DENIED_EXPIRATION, "failed more than an hour ago"),
            _ => continue,
        };
        if let Some(at) = after(&condition.last_update_time, keep) {
            deadlines.push((at, reason));
        }
    }
    if conditions.is_empty()
        && let Some(at) = after(&csr.metadata.creation_timestamp, PENDING_EXPIRATION)
    {
        deadlines.push((at, "pending for more than a day"));
    }
    if issued && let Some(at) = not_after(csr) {
        deadlines.push((at, "its certificate expired"));
    }
    match deadlines.into_iter().min() {
        Some((at, reason)) if at < now => Decision::Delete(reason),
        Some((at, _)) => Decision::Wait(Duration::from_secs((at - now).unsigned_abs() + 1)),
        None => Decision::Keep,
    }
}

/// When the issued certificate's validity ends (its first certificate's).
fn not_after(csr: &CertificateSigningRequest) -> Option<i64> {
    let pem = String::from_utf8_lossy(&csr.status.as_ref()?.certificate.as_ref()?.0).into_owned();
    let certificates = orchestra_core::tls::parse_certificates(&pem).ok()?;
    orchestra_core::tls::certificate_not_after(certificates.first()?).ok()
}

/// Deletes `csr` or waits for its deadline, as [`decide`] says.
pub async fn reconcile(csr: Arc<CertificateSigningRequest>, client: Arc<Client>) -> Result<Action, Error> {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    match decide(&csr, now) {
        Decision::Keep => Ok(Action::await_change()),
        Decision::Wait(delay) => Ok(Action::requeue(delay)),
        Decision::Delete(reason) => {
            let name = csr.metadata.name.clone().unwrap_or_default();
            tracing::info!(csr = name, reason, "cleaning up a CertificateSigningRequest");
            // Only the request that was judged: not one made since under the same name.
            let params = DeleteParams {
                preconditions: csr
                    .metadata
                    .uid
                    .clone()
                    .map(|uid| kube::api::Preconditions { uid: Some(uid), resource_version: None }),
                ..Default::default()
            };
            let api: Api<CertificateSigningRequest> = Api::all((*client).clone());
            match api.delete(&name, &params).await {
                Ok(_) => Ok(Action::await_change()),
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(Action::await_change()),
                Err(e) => Err(e.into()),
            }
        }
    }
}

/// Runs the controller until `shutdown`.
pub async fn run(factory: SharedInformerFactory, workers: usize, shutdown: impl Future<Output = ()> + Send) {
    let client = Arc::new(factory.client().clone());
    Controller::<CertificateSigningRequest>::for_(&factory)
        .name("csrcleaner")
        .concurrency(workers)
        .run(reconcile, client, shutdown)
        .await;
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::CertificateSigningRequestStatus;
    use orchestra_core::tls::csr::{CertificateAuthority, create_request};

    use super::*;
    use crate::controllers::csrapproving::tests::{condition, csr};
    use crate::testing::FakeCluster;

    const HOUR: i64 = 3600;
    /// "Now" in the table: a fixed instant, so that ages are exact.
    const NOW: i64 = 1_800_000_000;

    fn at(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap())
    }

    /// A request created `age` seconds before [`NOW`], its conditions each
    /// updated `updated` seconds before, issued with `certificate`.
    fn request(age: i64, conditions: &[&str], updated: i64, certificate: Option<&str>) -> CertificateSigningRequest {
        let mut csr = csr("c", "alice", "devs", "kubernetes.io/kube-apiserver-client", "u", &["client auth"]);
        csr.metadata.creation_timestamp = Some(at(NOW - age));
        let conditions: Vec<_> = conditions
            .iter()
            .map(|kind| {
                let mut c = condition(kind);
                c.last_update_time = Some(at(NOW - updated));
                c
            })
            .collect();
        csr.status = Some(CertificateSigningRequestStatus {
            conditions: (!conditions.is_empty()).then_some(conditions),
            certificate: certificate.map(|pem| ByteString(pem.as_bytes().to_vec())),
        });
        csr
    }

    /// A certificate valid for `seconds` from the real now.
    fn certificate(seconds: u64) -> String {
        let ca = CertificateAuthority::generate("test-ca").unwrap();
        let (pem, _) = create_request("alice", Some("devs"), &[]).unwrap();
        ca.sign(&pem, &["client auth".into()], Duration::from_secs(seconds)).unwrap()
    }

    #[test]
    fn decisions() {
        let cases = [
            ("pending, new", request(HOUR, &[], 0, None), Decision::Wait(Duration::from_secs(23 * 3600 + 1))),
            ("pending a day", request(25 * HOUR, &[], 0, None), Decision::Delete("pending for more than a day")),
            ("approved, not issued", request(5 * HOUR, &["Approved"], 2 * HOUR, None), Decision::Keep),
            ("denied now", request(HOUR, &["Denied"], 60, None), Decision::Wait(Duration::from_secs(3541))),
            (
                "denied an hour ago",
                request(3 * HOUR, &["Denied"], 2 * HOUR, None),
                Decision::Delete("denied more than an hour ago"),
            ),
            (
                "failed an hour ago",
                request(3 * HOUR, &["Approved", "Failed"], 2 * HOUR, None),
                Decision::Delete("failed more than an hour ago"),
            ),
            (
                "old pending but denied just now",
                request(48 * HOUR, &["Denied"], 0, None),
                Decision::Wait(Duration::from_secs(3601)),
            ),
        ];
        for (name, csr, want) in cases {
            assert_eq!(decide(&csr, NOW), want, "{name}");
        }
    }

    #[test]
    fn issued_requests_go_after_an_hour_or_when_their_certificate_expires() {
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let shift = |mut csr: CertificateSigningRequest| {
            // Ages relative to the real now, as the certificates' validity is.
            csr.metadata.creation_timestamp = csr.metadata.creation_timestamp.map(|t| at(t.0.as_second() - NOW + now));
            for c in csr.status.as_mut().unwrap().conditions.iter_mut().flatten() {
                c.last_update_time = c.last_update_time.take().map(|t| at(t.0.as_second() - NOW + now));
            }
            csr
        };
        let long = certificate(30 * 24 * 3600);
        let issued_recently = shift(request(HOUR, &["Approved"], 600, Some(&long)));
        assert!(matches!(decide(&issued_recently, now), Decision::Wait(d) if d.as_secs().abs_diff(3000) <= 2));
        let issued_long_ago = shift(request(3 * HOUR, &["Approved"], 2 * HOUR, Some(&long)));
        assert_eq!(decide(&issued_long_ago, now), Decision::Delete("issued more than an hour ago"));
        // A certificate that ends in ten minutes goes then, before the hour.
        let short = certificate(600);
        let expiring = shift(request(HOUR, &["Approved"], 60, Some(&short)));
        assert!(
            matches!(decide(&expiring, now), Decision::Wait(d) if d.as_secs().abs_diff(600) <= 2),
            "{:?}",
            decide(&expiring, now)
        );
        assert_eq!(decide(&expiring, now + 700), Decision::Delete("its certificate expired"));
    }

    #[tokio::test]
    async fn deletes_what_is_past_its_deadline_only() {
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let mut old = request(3 * HOUR, &["Denied"], 2 * HOUR, None);
        let mut fresh = request(HOUR, &["Denied"], 60, None);
        for (csr, name, age, updated) in [(&mut old, "old", 3 * HOUR, 2 * HOUR), (&mut fresh, "fresh", HOUR, 60)] {
            csr.metadata.name = Some(name.into());
            csr.metadata.creation_timestamp = Some(at(now - age));
            for c in csr.status.as_mut().unwrap().conditions.iter_mut().flatten() {
                c.last_update_time = Some(at(now - updated));
            }
        }
        let fake = FakeCluster::builder().object(&old).object(&fresh).build().await;
        let client = Arc::new(fake.client());
        for name in ["old", "fresh"] {
            let stored: CertificateSigningRequest = fake.get_cluster(name).await.unwrap();
            reconcile(Arc::new(stored), client.clone()).await.expect("reconciles");
        }
        assert_eq!(fake.writes(), ["delete certificatesigningrequests old"]);
        assert!(fake.get_cluster::<CertificateSigningRequest>("fresh").await.is_some());
    }
}
