//! CertificateSubjectRestriction: nobody may ask the
//! `kubernetes.io/kube-apiserver-client` signer for a certificate in the
//! `system:masters` group.

use async_trait::async_trait;
use serde_json::Value;

use super::{AdmissionPlugin, AdmissionRequest, Operation};
use crate::api::ApiError;
use crate::api::certificates::{GROUP, KUBE_APISERVER_CLIENT, RESOURCE};

/// The superuser group no CSR may ask for.
const MASTERS: &str = "system:masters";

/// The admission plugin that refuses CertificateSigningRequests for the
/// `kubernetes.io/kube-apiserver-client` signer whose subject has the
/// organization `system:masters` (upstream's plugin of the same name):
/// approving one by mistake would hand out a superuser credential.
///
/// ```
/// use orchestra_core::auth::admission::{AdmissionChain, CertificateSubjectRestriction};
///
/// let chain = AdmissionChain::new().with(CertificateSubjectRestriction::new());
/// assert_eq!(chain.names().collect::<Vec<_>>(), [CertificateSubjectRestriction::NAME]);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct CertificateSubjectRestriction;

impl CertificateSubjectRestriction {
    /// The plugin's name.
    pub const NAME: &'static str = "CertificateSubjectRestriction";

    /// The plugin.
    pub fn new() -> CertificateSubjectRestriction {
        CertificateSubjectRestriction
    }
}

/// The request's PEM (`spec.request`, base64 in JSON).
fn request_pem(csr: &Value) -> Option<String> {
    use base64::Engine as _;
    let encoded = csr.pointer("/spec/request")?.as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
    String::from_utf8(bytes).ok()
}

#[async_trait]
impl AdmissionPlugin for CertificateSubjectRestriction {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn handles(&self, operation: Operation) -> bool {
        operation == Operation::Create
    }

    async fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        if !request.writes(GROUP, RESOURCE) {
            return Ok(());
        }
        let Some(csr) = request.object.as_ref() else { return Ok(()) };
        if csr.pointer("/spec/signerName").and_then(Value::as_str) != Some(KUBE_APISERVER_CLIENT) {
            return Ok(());
        }
        // An unparsable request is validation's to refuse, with its causes.
        let Some(parsed) = request_pem(csr).and_then(|pem| crate::tls::csr::parse_request(&pem).ok()) else {
            return Ok(());
        };
        if parsed.subject.organizations.iter().any(|o| o == MASTERS) {
            return Err(
                request.forbidden(format!("use of {KUBE_APISERVER_CLIENT} signer with {MASTERS} group is not allowed"))
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use serde_json::json;

    use super::*;
    use crate::auth::UserInfo;
    use crate::auth::admission::certificate_approval::tests::csrs;
    use crate::auth::admission::testing::admit;

    #[test]
    fn no_masters_from_the_client_signer() {
        let request = |org: &str| {
            let (pem, _) = crate::tls::csr::create_request("bob", Some(org), &[]).unwrap();
            base64::engine::general_purpose::STANDARD.encode(pem)
        };
        let cases = [
            ("masters via the client signer", KUBE_APISERVER_CLIENT, request(MASTERS), false),
            ("other group", KUBE_APISERVER_CLIENT, request("devs"), true),
            ("masters via another signer", "example.com/signer", request(MASTERS), true),
            ("unparsable: left to validation", KUBE_APISERVER_CLIENT, "eA==".to_owned(), true),
        ];
        let user = UserInfo::new("bob", &[]);
        for (name, signer, request, allowed) in cases {
            let csr = json!({"metadata": {"name": "c"}, "spec": {"signerName": signer, "request": request}});
            let (result, _) =
                admit(&CertificateSubjectRestriction, Operation::Create, &csrs(), None, &user, Some(csr), None);
            assert_eq!(result.is_ok(), allowed, "{name}: {result:?}");
            if let Err(e) = result {
                assert_eq!(e.code, 403);
                assert!(e.message.contains("with system:masters group is not allowed"), "{}", e.message);
            }
        }
    }
}
