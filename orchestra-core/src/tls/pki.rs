//! The cluster's certificates: a CA, the API server's serving certificate and
//! client credentials, kept in a data directory, plus the admin kubeconfig.
//!
//! On first use [`Pki::load_or_create`] creates everything; later calls load
//! the same files, so clients keep trusting the server across restarts. The
//! serving certificate is re-issued (by the same CA) when a host the server
//! must answer for is missing from it.

use std::fs;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// The admin user's name in the certificates [`Pki`] issues.
pub const ADMIN_USER: &str = "orchestra-admin";
/// The admin user's group: upstream's superuser group.
pub const ADMIN_GROUP: &str = "system:masters";

/// What can go wrong with the cluster's certificates.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: io::Error,
    },
    /// Creating or parsing a certificate or key failed.
    #[error("certificate: {0}")]
    Certificate(String),
    /// Building the TLS configuration failed.
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
}

fn cert_error(e: impl std::fmt::Display) -> PkiError {
    PkiError::Certificate(e.to_string())
}

/// A certificate and its private key, PEM-encoded.
#[derive(Clone)]
pub struct Credential {
    /// The certificate.
    pub cert_pem: String,
    /// The private key (PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential").field("key_pem", &"<redacted>").finish_non_exhaustive()
    }
}

/// The cluster CA and the credentials it issued, stored in one directory.
#[derive(Debug, Clone)]
pub struct Pki {
    dir: PathBuf,
    ca: Credential,
    serving: Credential,
    admin: Credential,
}

const VALIDITY_DAYS: i64 = 3650;

impl Pki {
    /// Loads the certificates in `dir`, creating whatever is missing: the CA
    /// (`ca.crt`, `ca.key`), the serving certificate (`apiserver.crt`,
    /// `apiserver.key`) valid for `hosts` (names or IP addresses; `localhost`
    /// and the loopback addresses are always included) and the admin client
    /// certificate (`admin.crt`, `admin.key`; user [`ADMIN_USER`], group
    /// [`ADMIN_GROUP`]). Keys are written with mode 0600, in a directory
    /// of mode 0700 ([`create_private_dir`]).
    pub fn load_or_create(dir: &Path, hosts: &[String]) -> Result<Pki, PkiError> {
        create_private_dir(dir).map_err(|source| PkiError::Io { path: dir.to_owned(), source })?;
        let ca = match read_credential(dir, "ca")? {
            Some(ca) => ca,
            None => {
                let ca = new_ca()?;
                write_credential(dir, "ca", &ca)?;
                ca
            }
        };
        let mut hosts: Vec<String> = hosts.to_vec();
        for always in ["localhost", "127.0.0.1", "::1"] {
            if !hosts.iter().any(|h| h == always) {
                hosts.push(always.to_owned());
            }
        }
        let serving = match read_credential(dir, "apiserver")? {
            Some(serving) if covers(&serving.cert_pem, &hosts) => serving,
            _ => {
                let serving = issue(&ca, &ServingSpec { common_name: "orchestra-apiserver", hosts: &hosts })?;
                write_credential(dir, "apiserver", &serving)?;
                serving
            }
        };
        let admin = match read_credential(dir, "admin")? {
            Some(admin) => admin,
            None => {
                let admin = issue(&ca, &ClientSpec { user: ADMIN_USER, group: Some(ADMIN_GROUP) })?;
                write_credential(dir, "admin", &admin)?;
                admin
            }
        };
        Ok(Pki { dir: dir.to_owned(), ca, serving, admin })
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate (PEM): what clients trust.
    pub fn ca_pem(&self) -> &str {
        &self.ca.cert_pem
    }

    /// The admin client credential.
    pub fn admin(&self) -> &Credential {
        &self.admin
    }

    /// The CA as a signer of certificate requests: what the CSR signing
    /// controller issues certificates with.
    pub fn certificate_authority(&self) -> Result<super::csr::CertificateAuthority, PkiError> {
        super::csr::CertificateAuthority::new(self.ca.clone())
    }

    /// Issues a client certificate for `user`, in `group` if given (subject
    /// CN and O, as upstream's x509 authenticator reads them). Not stored.
    /// One group at most: the certificate library keeps one value per
    /// subject attribute.
    pub fn issue_client(&self, user: &str, group: Option<&str>) -> Result<Credential, PkiError> {
        issue(&self.ca, &ClientSpec { user, group })
    }

    /// The rustls configuration of the API server's listener: the serving
    /// certificate, HTTP/2 and HTTP/1.1 by ALPN, and client certificates
    /// requested and verified against the CA but not required (bearer tokens
    /// and anonymous requests are the authenticators' business).
    pub fn server_tls_config(&self) -> Result<Arc<rustls::ServerConfig>, PkiError> {
        super::server_config(&self.serving, &self.ca.cert_pem, super::ClientAuth::Optional)
    }

    /// Issues a serving certificate for `hosts` (names or IP addresses) with
    /// subject `common_name` — a node agent's endpoint, for instance. Not
    /// stored.
    pub fn issue_serving(&self, common_name: &str, hosts: &[String]) -> Result<Credential, PkiError> {
        issue(&self.ca, &ServingSpec { common_name, hosts })
    }

    /// A kubeconfig for `server` (e.g. `https://127.0.0.1:6443`) that trusts
    /// the CA and authenticates with `credential`, as user and context
    /// `user_name` ([`kubeconfig`] with this CA).
    pub fn kubeconfig(&self, server: &str, user_name: &str, credential: &Credential) -> String {
        kubeconfig(server, &self.ca.cert_pem, user_name, credential)
    }

    /// [`Pki::kubeconfig`] for the admin credential, written to `path` with
    /// mode 0600 (it holds a private key).
    pub fn write_admin_kubeconfig(&self, path: &Path, server: &str) -> Result<(), PkiError> {
        write_private(path, &self.kubeconfig(server, "orchestra-admin", &self.admin))
    }

    /// Writes a kubeconfig for `server` with a new client certificate of
    /// `user` (in `group`, if any) to `path`, mode 0600: how the components
    /// run as separate processes get their own identities, as kubeadm's
    /// `scheduler.conf` (`system:kube-scheduler`) and
    /// `controller-manager.conf` (`system:kube-controller-manager`).
    pub fn write_client_kubeconfig(
        &self,
        path: &Path,
        server: &str,
        user: &str,
        group: Option<&str>,
    ) -> Result<(), PkiError> {
        let credential = self.issue_client(user, group)?;
        write_private(path, &self.kubeconfig(server, user, &credential))
    }
}

/// A kubeconfig for `server` that trusts the CA `ca_pem` and authenticates
/// with `credential`, as user and context `user_name` (the certificate and
/// key inline).
///
/// ```
/// use orchestra_core::tls::pki::{Credential, kubeconfig};
///
/// let credential = Credential { cert_pem: "CERT".into(), key_pem: "KEY".into() };
/// let text = kubeconfig("https://127.0.0.1:6443", "CA", "system:node:n1", &credential);
/// assert!(text.contains("current-context: system:node:n1"));
/// ```
pub fn kubeconfig(server: &str, ca_pem: &str, user_name: &str, credential: &Credential) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "orchestra", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": user_name, "user": {
            "client-certificate-data": b64(&credential.cert_pem),
            "client-key-data": b64(&credential.key_pem),
        }}],
        "contexts": [{"name": user_name, "context": {"cluster": "orchestra", "user": user_name}}],
        "current-context": user_name,
        "preferences": {},
    });
    serde_yaml::to_string(&config).expect("a kubeconfig serializes")
}

use super::parse_certificates as parse_certs;

fn new_ca() -> Result<Credential, PkiError> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(cert_error)?;
    params.distinguished_name = distinguished_name("orchestra-ca", None);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    set_validity(&mut params);
    let key = KeyPair::generate().map_err(cert_error)?;
    let cert = params.self_signed(&key).map_err(cert_error)?;
    Ok(Credential { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
}

/// What a leaf certificate is for.
trait LeafSpec {
    fn params(&self) -> Result<CertificateParams, PkiError>;
}

struct ServingSpec<'a> {
    common_name: &'a str,
    hosts: &'a [String],
}

impl LeafSpec for ServingSpec<'_> {
    fn params(&self) -> Result<CertificateParams, PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(cert_error)?;
        params.distinguished_name = distinguished_name(self.common_name, None);
        params.subject_alt_names = self
            .hosts
            .iter()
            .map(|host| match host.parse::<IpAddr>() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => host.clone().try_into().map(SanType::DnsName).map_err(cert_error),
            })
            .collect::<Result<_, _>>()?;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        Ok(params)
    }
}

struct ClientSpec<'a> {
    user: &'a str,
    group: Option<&'a str>,
}

impl LeafSpec for ClientSpec<'_> {
    fn params(&self) -> Result<CertificateParams, PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(cert_error)?;
        params.distinguished_name = distinguished_name(self.user, self.group);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        Ok(params)
    }
}

/// A self-signed serving certificate for `hosts`, for an endpoint whose
/// clients do not verify it (a node agent started without the cluster's CA
/// key: upstream's kubelet does the same, and the API server does not check
/// kubelet certificates unless told to).
pub fn self_signed_serving(common_name: &str, hosts: &[String]) -> Result<Credential, PkiError> {
    let mut params = ServingSpec { common_name, hosts }.params()?;
    set_validity(&mut params);
    let key = KeyPair::generate().map_err(cert_error)?;
    let cert = params.self_signed(&key).map_err(cert_error)?;
    Ok(Credential { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
}

fn issue(ca: &Credential, spec: &impl LeafSpec) -> Result<Credential, PkiError> {
    let ca_key = KeyPair::from_pem(&ca.key_pem).map_err(cert_error)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key).map_err(cert_error)?;
    let mut params = spec.params()?;
    set_validity(&mut params);
    let key = KeyPair::generate().map_err(cert_error)?;
    let cert = params.signed_by(&key, &issuer).map_err(cert_error)?;
    Ok(Credential { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
}

fn distinguished_name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    if let Some(organization) = organization {
        name.push(DnType::OrganizationName, organization);
    }
    name.push(DnType::CommonName, common_name);
    name
}

fn set_validity(params: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    // Backdated a little, so a clock a few minutes behind still accepts it.
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(VALIDITY_DAYS);
}

/// True if the certificate's subject alternative names cover every host.
fn covers(cert_pem: &str, hosts: &[String]) -> bool {
    let Ok(certs) = parse_certs(cert_pem) else { return false };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(&certs[0]) else { return false };
    let Ok(Some(san)) = cert.subject_alternative_name() else { return false };
    hosts.iter().all(|host| {
        san.value.general_names.iter().any(|name| match name {
            x509_parser::extensions::GeneralName::DNSName(dns) => dns.eq_ignore_ascii_case(host),
            x509_parser::extensions::GeneralName::IPAddress(bytes) => host.parse::<IpAddr>().is_ok_and(|ip| match ip {
                IpAddr::V4(v4) => bytes == &v4.octets(),
                IpAddr::V6(v6) => bytes == &v6.octets(),
            }),
            _ => false,
        })
    })
}

fn read_credential(dir: &Path, name: &str) -> Result<Option<Credential>, PkiError> {
    let read = |path: PathBuf| match fs::read_to_string(&path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PkiError::Io { path, source }),
    };
    let cert = read(dir.join(format!("{name}.crt")))?;
    let key = read(dir.join(format!("{name}.key")))?;
    Ok(match (cert, key) {
        (Some(cert_pem), Some(key_pem)) => Some(Credential { cert_pem, key_pem }),
        _ => None,
    })
}

fn write_credential(dir: &Path, name: &str, credential: &Credential) -> Result<(), PkiError> {
    write_private(&dir.join(format!("{name}.key")), &credential.key_pem)?;
    let path = dir.join(format!("{name}.crt"));
    fs::write(&path, &credential.cert_pem).map_err(|source| PkiError::Io { path, source })
}

/// Creates `dir` (and its missing parents) and makes it accessible to its
/// owner only (mode 0700), also when it existed already: what a cluster's
/// data directory, its certificates' directory and a node agent's state
/// directory are.
///
/// ```
/// use std::os::unix::fs::PermissionsExt as _;
///
/// let parent = tempfile::tempdir().unwrap();
/// let dir = parent.path().join("data");
/// orchestra_core::tls::pki::create_private_dir(&dir).unwrap();
/// assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
/// ```
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    fs::create_dir_all(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

/// Writes a file readable by its owner only (mode 0600), atomically (temp
/// file + rename), creating its directory: how keys and kubeconfigs are
/// written.
pub fn write_private(path: &Path, contents: &str) -> Result<(), PkiError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let io_error = |source| PkiError::Io { path: path.to_owned(), source };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(io_error)?;
    }
    let temporary = path.with_extension("tmp");
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .map_err(io_error)?;
    file.write_all(contents.as_bytes()).and_then(|()| file.sync_all()).map_err(io_error)?;
    fs::rename(&temporary, path).map_err(io_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_then_reloads_the_same_ca_and_reissues_for_new_hosts() {
        let dir = tempfile::tempdir().unwrap();
        let first = Pki::load_or_create(dir.path(), &[]).unwrap();
        let again = Pki::load_or_create(dir.path(), &[]).unwrap();
        assert_eq!(first.ca_pem(), again.ca_pem());
        assert_eq!(first.serving.cert_pem, again.serving.cert_pem, "nothing new to cover");
        assert!(covers(&first.serving.cert_pem, &["localhost".into(), "127.0.0.1".into()]));
        assert!(!covers(&first.serving.cert_pem, &["127.0.0.9".into()]));

        let wider = Pki::load_or_create(dir.path(), &["127.0.0.9".into(), "api.example".into()]).unwrap();
        assert_eq!(wider.ca_pem(), first.ca_pem(), "same CA");
        assert_ne!(wider.serving.cert_pem, first.serving.cert_pem, "re-issued");
        assert!(covers(&wider.serving.cert_pem, &["127.0.0.9".into(), "api.example".into(), "::1".into()]));
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |file: &str| fs::metadata(dir.path().join(file)).unwrap().permissions().mode() & 0o777;
        for key in ["ca.key", "apiserver.key", "admin.key"] {
            assert_eq!(mode(key), 0o600, "{key}");
        }
        assert_eq!(mode("."), 0o700, "the directory");
        wider.server_tls_config().unwrap();
    }

    #[test]
    fn client_certificates_name_the_user_and_groups() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::load_or_create(dir.path(), &[]).unwrap();
        let credential = pki.issue_client("alice", Some("dev")).unwrap();
        let der = parse_certs(&credential.cert_pem).unwrap().remove(0);
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        let cn: Vec<_> = cert.subject().iter_common_name().map(|a| a.as_str().unwrap().to_owned()).collect();
        let o: Vec<_> = cert.subject().iter_organization().map(|a| a.as_str().unwrap().to_owned()).collect();
        assert_eq!(cn, ["alice"]);
        assert_eq!(o, ["dev"]);
        let kubeconfig: serde_json::Value =
            serde_yaml::from_str(&pki.kubeconfig("https://127.0.0.1:1", "alice", &credential)).unwrap();
        assert_eq!(kubeconfig["current-context"], "alice");
        assert_eq!(kubeconfig["clusters"][0]["cluster"]["server"], "https://127.0.0.1:1");
    }
}
