//! Client-certificate authentication (upstream's x509 authenticator).

use async_trait::async_trait;
use http::request::Parts;
use rustls::pki_types::CertificateDer;

use super::authn::{AuthError, Authenticator, UserInfo};

pub use crate::tls::PeerCertificates;

/// Recognises verified client certificates: the subject's common name is the
/// user name, its organizations are the groups.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientCertAuthenticator;

#[async_trait]
impl Authenticator for ClientCertAuthenticator {
    async fn authenticate(&self, request: &Parts) -> Result<Option<UserInfo>, AuthError> {
        let Some(PeerCertificates(chain)) = request.extensions.get::<PeerCertificates>() else { return Ok(None) };
        let Some(leaf) = chain.first() else { return Ok(None) };
        user_of(leaf).map(Some)
    }
}

/// The user a certificate names.
pub fn user_of(certificate: &CertificateDer<'_>) -> Result<UserInfo, AuthError> {
    let subject = crate::tls::certificate_subject(certificate).map_err(AuthError)?;
    Ok(UserInfo { name: subject.common_name, groups: subject.organizations, ..Default::default() })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::tls::pki::Pki;

    fn parts_with(chain: Option<Vec<CertificateDer<'static>>>) -> Parts {
        let mut request = http::Request::new(());
        if let Some(chain) = chain {
            request.extensions_mut().insert(PeerCertificates(Arc::new(chain)));
        }
        request.into_parts().0
    }

    #[tokio::test]
    async fn reads_user_and_groups_from_the_subject() {
        use rustls::pki_types::pem::PemObject as _;
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::load_or_create(dir.path(), &[]).unwrap();
        let credential = pki.issue_client("system:kube-scheduler", Some("system:schedulers")).unwrap();
        let der = CertificateDer::from_pem_slice(credential.cert_pem.as_bytes()).unwrap();
        let user = ClientCertAuthenticator.authenticate(&parts_with(Some(vec![der]))).await.unwrap().unwrap();
        assert_eq!(user.name, "system:kube-scheduler");
        assert_eq!(user.groups, ["system:schedulers"]);
        assert_eq!(ClientCertAuthenticator.authenticate(&parts_with(None)).await.unwrap(), None);
        let garbage = CertificateDer::from(vec![1u8, 2, 3]);
        assert!(ClientCertAuthenticator.authenticate(&parts_with(Some(vec![garbage]))).await.is_err());
    }
}
