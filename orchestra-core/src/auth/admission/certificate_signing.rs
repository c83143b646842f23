//! CertificateSigning: who may issue the certificate of a
//! CertificateSigningRequest (writes of `status.certificate` through its
//! `status` subresource): users allowed to `sign` the request's signer.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::certificate_approval::{authorized_for_signer, signer_of, writes_csr};
use super::{AdmissionPlugin, AdmissionRequest, Operation};
use crate::api::ApiError;
use crate::auth::Authorizer;

/// The admission plugin that refuses status writes changing
/// `status.certificate` of a CertificateSigningRequest by users the
/// authorizer does not allow to `sign` its signer, checked against the
/// stored request's `spec.signerName` (upstream's plugin of the same name).
/// [`ApiServerBuilder::certificate_signing`](crate::server::ApiServerBuilder::certificate_signing)
/// gives one deciding with the server's own authorizers.
///
/// ```
/// use std::sync::Arc;
/// use orchestra_core::auth::AllowAll;
/// use orchestra_core::auth::admission::{AdmissionChain, CertificateSigning};
///
/// let chain = AdmissionChain::new().with(CertificateSigning::new(Arc::new(AllowAll)));
/// assert_eq!(chain.names().collect::<Vec<_>>(), [CertificateSigning::NAME]);
/// ```
pub struct CertificateSigning {
    authorizer: Arc<dyn Authorizer>,
}

impl CertificateSigning {
    /// The plugin's name.
    pub const NAME: &'static str = "CertificateSigning";

    /// Decides with `authorizer`.
    pub fn new(authorizer: Arc<dyn Authorizer>) -> CertificateSigning {
        CertificateSigning { authorizer }
    }
}

fn certificate(csr: Option<&Value>) -> &str {
    csr.and_then(|csr| csr.pointer("/status/certificate")).and_then(Value::as_str).unwrap_or_default()
}

#[async_trait]
impl AdmissionPlugin for CertificateSigning {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn handles(&self, operation: Operation) -> bool {
        operation == Operation::Update
    }

    async fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        if !writes_csr(request, "status") || certificate(request.object.as_ref()) == certificate(request.old_object) {
            return Ok(());
        }
        // The stored signer: a client cannot pick another in the same write.
        let signer = signer_of(request.old_object);
        if authorized_for_signer(&*self.authorizer, request.user, "sign", signer).await {
            return Ok(());
        }
        Err(request.forbidden(format!("user not permitted to sign requests with signerName {signer:?}")))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::auth::admission::certificate_approval::tests::{SignerGrant, csr, update};

    #[test]
    fn issuing_needs_sign_on_the_stored_signer() {
        let issued = |signer: &str| {
            let mut csr = csr(signer);
            csr["status"] = json!({"certificate": "Y2VydA=="});
            csr
        };
        let stored = csr("example.com/a");
        /// Name, signers granted, verb granted, new object, subresource written, allowed.
        type Case = (&'static str, &'static [&'static str], &'static str, Value, Option<&'static str>, bool);
        let cases: [Case; 6] = [
            ("allowed", &["example.com/a"], "sign", issued("example.com/a"), Some("status"), true),
            ("wildcard", &["example.com/*"], "sign", issued("example.com/a"), Some("status"), true),
            ("not allowed", &["example.com/b"], "sign", issued("example.com/a"), Some("status"), false),
            ("checks the stored signer", &["example.com/b"], "sign", issued("example.com/b"), Some("status"), false),
            ("approve is not sign", &["example.com/a"], "approve", issued("example.com/a"), Some("status"), false),
            ("certificate unchanged", &[], "sign", csr("example.com/a"), Some("status"), true),
        ];
        for (name, names, verb, new, subresource, allowed) in cases {
            let plugin = CertificateSigning::new(Arc::new(SignerGrant { verb, names }));
            let result = update(plugin, subresource, &stored, new);
            assert_eq!(result.is_ok(), allowed, "{name}: {result:?}");
            if let Err(e) = result {
                assert!(
                    e.message.contains("user not permitted to sign requests with signerName \"example.com/a\""),
                    "{}",
                    e.message
                );
            }
        }
    }
}
