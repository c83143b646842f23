//! Client-certificate authentication (upstream's x509 authenticator).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

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
        if let Some(user) = USERS.lock().unwrap_or_else(|e| e.into_inner()).get(leaf.as_ref()) {
            return Ok(Some(user.clone()));
        }
        let user = user_of(leaf)?;
        let mut users = USERS.lock().unwrap_or_else(|e| e.into_inner());
        if users.len() >= USERS_CAPACITY {
            users.clear();
        }
        users.insert(leaf.as_ref().to_vec(), user.clone());
        Ok(Some(user))
    }
}

/// Most certificates whose user [`USERS`] remembers; past it, it starts over.
const USERS_CAPACITY: usize = 1024;

/// The users of recently seen leaf certificates, by their DER bytes. A
/// connection presents one certificate for all its requests, and parsing it
/// on each was about 3 % of the CPU of an HTTPS create. The user is a
/// function of the bytes alone (the listener verified the chain during the
/// handshake), so a remembered answer is the one parsing would give.
static USERS: LazyLock<Mutex<HashMap<Vec<u8>, UserInfo>>> = LazyLock::new(Mutex::default);

/// The user a certificate names.
pub fn user_of(certificate: &CertificateDer<'_>) -> Result<UserInfo, AuthError> {
    let subject = crate::tls::certificate_subject(certificate).map_err(|e| AuthError(e.to_string()))?;
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
        assert!(ClientCertAuthenticator.authenticate(&parts_with(Some(vec![garbage.clone()]))).await.is_err());
        // Remembered users answer by certificate, never across certificates;
        // a bad certificate stays refused.
        let other = pki.issue_client("alice", None).unwrap();
        let other = CertificateDer::from_pem_slice(other.cert_pem.as_bytes()).unwrap();
        let scheduler = CertificateDer::from_pem_slice(credential.cert_pem.as_bytes()).unwrap();
        for _ in 0..2 {
            let alice =
                ClientCertAuthenticator.authenticate(&parts_with(Some(vec![other.clone()]))).await.unwrap().unwrap();
            assert_eq!((alice.name.as_str(), alice.groups.len()), ("alice", 0));
            let again = ClientCertAuthenticator
                .authenticate(&parts_with(Some(vec![scheduler.clone()])))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(again.name, "system:kube-scheduler");
            assert!(ClientCertAuthenticator.authenticate(&parts_with(Some(vec![garbage.clone()]))).await.is_err());
        }
    }
}
