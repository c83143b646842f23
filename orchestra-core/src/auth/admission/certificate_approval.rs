//! CertificateApproval: who may approve or deny a CertificateSigningRequest
//! (writes of its `approval` subresource): users allowed to `approve` the
//! request's signer, a `signers` resource of `certificates.k8s.io` named
//! after the signer or `<domain>/*`.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::{AdmissionPlugin, AdmissionRequest, Operation};
use crate::api::ApiError;
use crate::api::certificates::{GROUP, RESOURCE};
use crate::auth::{Attributes, Authorizer, Decision, UserInfo};

/// The admission plugin that refuses approvals and denials of
/// CertificateSigningRequests by users the authorizer does not allow to
/// `approve` the request's `spec.signerName` (upstream's plugin of the same
/// name). [`ApiServerBuilder::certificate_approval`](crate::server::ApiServerBuilder::certificate_approval)
/// gives one deciding with the server's own authorizers.
///
/// ```
/// use std::sync::Arc;
/// use orchestra_core::auth::AllowAll;
/// use orchestra_core::auth::admission::{AdmissionChain, CertificateApproval};
///
/// let chain = AdmissionChain::new().with(CertificateApproval::new(Arc::new(AllowAll)));
/// assert_eq!(chain.names().collect::<Vec<_>>(), [CertificateApproval::NAME]);
/// ```
pub struct CertificateApproval {
    authorizer: Arc<dyn Authorizer>,
}

impl CertificateApproval {
    /// The plugin's name.
    pub const NAME: &'static str = "CertificateApproval";

    /// Decides with `authorizer`.
    pub fn new(authorizer: Arc<dyn Authorizer>) -> CertificateApproval {
        CertificateApproval { authorizer }
    }
}

/// Whether `user` may `verb` the signer `signer`: the `signers` resource of
/// `certificates.k8s.io` named `signer`, or else `<domain>/*` (upstream's
/// `IsAuthorizedForSignerName`).
pub(super) async fn authorized_for_signer(
    authorizer: &dyn Authorizer,
    user: &UserInfo,
    verb: &str,
    signer: &str,
) -> bool {
    let ask = |name: String| Attributes {
        user: user.clone(),
        verb: verb.to_owned(),
        resource_request: true,
        api_group: GROUP.to_owned(),
        resource: "signers".to_owned(),
        name,
        ..Default::default()
    };
    if authorizer.authorize(&ask(signer.to_owned())).await == Decision::Allow {
        return true;
    }
    match signer.split_once('/') {
        Some((domain, _)) => authorizer.authorize(&ask(format!("{domain}/*"))).await == Decision::Allow,
        None => false,
    }
}

/// The request's signer name.
pub(super) fn signer_of(csr: Option<&Value>) -> &str {
    csr.and_then(|csr| csr.pointer("/spec/signerName")).and_then(Value::as_str).unwrap_or_default()
}

/// Whether the write is to `subresource` of a CertificateSigningRequest.
pub(super) fn writes_csr(request: &AdmissionRequest<'_>, subresource: &str) -> bool {
    request.resource.group == GROUP && request.resource.plural == RESOURCE && request.subresource == Some(subresource)
}

#[async_trait]
impl AdmissionPlugin for CertificateApproval {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn handles(&self, operation: Operation) -> bool {
        operation == Operation::Update
    }

    async fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        if !writes_csr(request, "approval") {
            return Ok(());
        }
        // The new object's signer, as upstream checks.
        let signer = signer_of(request.object.as_ref());
        if authorized_for_signer(&*self.authorizer, request.user, "approve", signer).await {
            return Ok(());
        }
        Err(request.forbidden(format!("user not permitted to approve requests with signerName {signer:?}")))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::ResourceInfo;
    use crate::auth::admission::{AdmissionChain, collect_warnings};

    /// Allows `verb` on the `signers` named in `names` for everybody.
    pub struct SignerGrant {
        pub verb: &'static str,
        pub names: &'static [&'static str],
    }

    #[async_trait]
    impl Authorizer for SignerGrant {
        async fn authorize(&self, a: &Attributes) -> Decision {
            let allowed = a.api_group == GROUP
                && a.resource == "signers"
                && a.verb == self.verb
                && self.names.contains(&a.name.as_str());
            if allowed { Decision::Allow } else { Decision::no_opinion() }
        }
    }

    pub fn csrs() -> ResourceInfo {
        ResourceInfo::new(GROUP, "v1", "CertificateSigningRequest", RESOURCE, false)
    }

    pub fn csr(signer: &str) -> Value {
        json!({"metadata": {"name": "c"}, "spec": {"signerName": signer}})
    }

    /// Runs `plugin` on an update of `subresource` from `old` to `new`.
    pub fn update(
        plugin: impl AdmissionPlugin + 'static,
        subresource: Option<&str>,
        old: &Value,
        new: Value,
    ) -> Result<(), ApiError> {
        let chain = AdmissionChain::new().with(plugin);
        let resource = csrs();
        let user = UserInfo::new("alice", &[]);
        let mut request = AdmissionRequest {
            operation: Operation::Update,
            resource: &resource,
            subresource,
            namespace: None,
            name: "c",
            object: Some(new),
            old_object: Some(old),
            user: &user,
            dry_run: false,
        };
        futures::executor::block_on(collect_warnings(chain.admit(&mut request))).0
    }

    #[test]
    fn approval_needs_approve_on_the_signer() {
        let signer = "example.com/my-signer";
        /// Name, signers granted, verb granted, subresource written, allowed.
        type Case = (&'static str, &'static [&'static str], &'static str, Option<&'static str>, bool);
        let cases: [Case; 6] = [
            ("exact name", &["example.com/my-signer"], "approve", Some("approval"), true),
            ("domain wildcard", &["example.com/*"], "approve", Some("approval"), true),
            ("other signer", &["other.io/x"], "approve", Some("approval"), false),
            ("sign is not approve", &["example.com/my-signer"], "sign", Some("approval"), false),
            ("status is not approval", &[], "approve", Some("status"), true),
            ("main resource", &[], "approve", None, true),
        ];
        for (name, names, verb, subresource, allowed) in cases {
            let plugin = CertificateApproval::new(Arc::new(SignerGrant { verb, names }));
            let result = update(plugin, subresource, &csr(signer), csr(signer));
            assert_eq!(result.is_ok(), allowed, "{name}: {result:?}");
            if let Err(e) = result {
                assert_eq!(e.code, 403);
                assert!(
                    e.message
                        .contains("user not permitted to approve requests with signerName \"example.com/my-signer\""),
                    "{}",
                    e.message
                );
            }
        }
    }
}
