//! Client-certificate authentication (upstream's x509 authenticator).

use async_trait::async_trait;
use http::request::Parts;
use rustls::pki_types::CertificateDer;

use super::authn::{AuthError, Authenticator, UserInfo};

/// The certificate chain a client presented during the TLS handshake, already
/// verified against the cluster CA by the listener; carried as a request
/// extension (see `server::listener`).
#[derive(Debug, Clone)]
pub struct PeerCertificates(pub std::sync::Arc<Vec<CertificateDer<'static>>>);

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
    let (_, cert) = x509_parser::parse_x509_certificate(certificate)
        .map_err(|e| AuthError(format!("unparseable client certificate: {e}")))?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .filter(|cn| !cn.is_empty())
        .ok_or_else(|| AuthError("client certificate has no common name".into()))?;
    let groups = subject.iter_organization().filter_map(|o| o.as_str().ok()).map(str::to_owned).collect();
    Ok(UserInfo { name: name.to_owned(), groups, ..Default::default() })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::server::pki::Pki;

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
