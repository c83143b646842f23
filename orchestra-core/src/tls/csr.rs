//! Certificate signing requests (PKCS#10): parsing and checking the ones
//! a `CertificateSigningRequest` carries, making new ones (a node asking for
//! its client certificate), and signing them with the cluster CA
//! ([`CertificateAuthority`]).
//!
//! ```
//! use std::time::Duration;
//! use orchestra_core::tls::csr::{self, CertificateAuthority};
//!
//! let ca = CertificateAuthority::generate("example-ca").unwrap();
//! let (request, _key) = csr::create_request("system:node:n1", Some("system:nodes"), &[]).unwrap();
//! let parsed = csr::parse_request(&request).unwrap();
//! assert_eq!(parsed.subject.common_name, "system:node:n1");
//! let usages = ["digital signature".to_owned(), "client auth".to_owned()];
//! let cert = ca.sign(&request, &usages, Duration::from_secs(3600)).unwrap();
//! assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"));
//! ```

use std::net::IpAddr;
use std::time::Duration;

use rcgen::{
    CertificateParams, CertificateSigningRequestParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

use super::CertificateSubject;
use super::pki::{Credential, PkiError};

/// How far back an issued certificate's validity starts (upstream's
/// signer backdates by five minutes, for clocks that lag).
const BACKDATE: Duration = Duration::from_secs(5 * 60);

fn error(e: impl std::fmt::Display) -> PkiError {
    PkiError::Certificate(e.to_string())
}

/// What a parsed certificate request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateRequest {
    /// The subject's common name and organizations.
    pub subject: CertificateSubject,
    /// DNS subject alternative names.
    pub dns_names: Vec<String>,
    /// IP address subject alternative names.
    pub ip_addresses: Vec<IpAddr>,
    /// Email subject alternative names.
    pub email_addresses: Vec<String>,
    /// URI subject alternative names.
    pub uris: Vec<String>,
}

/// The DER bytes of the one `CERTIFICATE REQUEST` PEM block of `pem`.
fn request_der(pem: &str) -> Result<Vec<u8>, PkiError> {
    let (rest, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map_err(|_| error("PEM block type must be CERTIFICATE REQUEST"))?;
    if block.label != "CERTIFICATE REQUEST" && block.label != "NEW CERTIFICATE REQUEST" {
        return Err(error("PEM block type must be CERTIFICATE REQUEST"));
    }
    if std::str::from_utf8(rest).is_ok_and(|rest| rest.contains("-----BEGIN")) {
        return Err(error("the request holds more than one PEM block"));
    }
    Ok(block.contents)
}

/// Parses a PEM certificate request and checks its signature (upstream's
/// `ParseCSR` then `CheckSignature`).
pub fn parse_request(pem: &str) -> Result<CertificateRequest, PkiError> {
    let der = request_der(pem)?;
    let (_, request) = x509_parser::certification_request::X509CertificationRequest::from_der(&der)
        .map_err(|e| error(format!("cannot parse the certificate request: {e}")))?;
    request.verify_signature().map_err(|e| error(format!("the certificate request's signature is invalid: {e}")))?;
    let info = &request.certification_request_info;
    let common_name =
        info.subject.iter_common_name().next().and_then(|cn| cn.as_str().ok()).unwrap_or_default().to_owned();
    let organizations = info.subject.iter_organization().filter_map(|o| o.as_str().ok()).map(str::to_owned).collect();
    let mut parsed = CertificateRequest {
        subject: CertificateSubject { common_name, organizations },
        dns_names: Vec::new(),
        ip_addresses: Vec::new(),
        email_addresses: Vec::new(),
        uris: Vec::new(),
    };
    for extension in request.requested_extensions().into_iter().flatten() {
        let ParsedExtension::SubjectAlternativeName(san) = extension else { continue };
        for name in &san.general_names {
            match name {
                GeneralName::DNSName(dns) => parsed.dns_names.push((*dns).to_owned()),
                GeneralName::RFC822Name(email) => parsed.email_addresses.push((*email).to_owned()),
                GeneralName::URI(uri) => parsed.uris.push((*uri).to_owned()),
                GeneralName::IPAddress(bytes) => match bytes.len() {
                    4 => parsed.ip_addresses.push(IpAddr::from(<[u8; 4]>::try_from(*bytes).expect("4 bytes"))),
                    16 => parsed.ip_addresses.push(IpAddr::from(<[u8; 16]>::try_from(*bytes).expect("16 bytes"))),
                    _ => return Err(error("the certificate request has a malformed IP address")),
                },
                _ => {}
            }
        }
    }
    Ok(parsed)
}

/// The organization of node certificates.
pub const NODES_GROUP: &str = "system:nodes";
/// The prefix of a node certificate's common name, before the node name.
pub const NODE_USER_PREFIX: &str = "system:node:";

fn same_usages(usages: &[String], want: &[&str]) -> bool {
    usages.iter().all(|u| want.contains(&u.as_str())) && want.iter().all(|w| usages.iter().any(|u| u == w))
}

/// Whether `request` with `usages` is a valid node client certificate
/// request (upstream's `ValidateKubeletClientCSR`): organization exactly
/// `system:nodes`, common name `system:node:<name>`, no subject alternative
/// names, usages digital signature and client auth, with key encipherment
/// or without.
pub fn validate_kubelet_client(request: &CertificateRequest, usages: &[String]) -> Result<(), String> {
    if request.subject.organizations != [NODES_GROUP] {
        return Err(format!("subject organization is not {NODES_GROUP}"));
    }
    if !request.dns_names.is_empty()
        || !request.email_addresses.is_empty()
        || !request.ip_addresses.is_empty()
        || !request.uris.is_empty()
    {
        return Err("subject alternative names are not allowed".into());
    }
    if !request.subject.common_name.starts_with(NODE_USER_PREFIX) {
        return Err(format!("subject common name does not begin with {NODE_USER_PREFIX}"));
    }
    let with_rsa = ["digital signature", "key encipherment", "client auth"];
    if !same_usages(usages, &with_rsa) && !same_usages(usages, &["digital signature", "client auth"]) {
        return Err("usages did not match [client auth digital signature key encipherment]".into());
    }
    Ok(())
}

/// Whether `request` with `usages` is a valid node serving certificate
/// request (upstream's `ValidateKubeletServingCSR`): organization exactly
/// `system:nodes`, common name `system:node:<name>`, at least one DNS name
/// or IP address and no email or URI names, usages digital signature and
/// server auth, with key encipherment or without.
pub fn validate_kubelet_serving(request: &CertificateRequest, usages: &[String]) -> Result<(), String> {
    if request.subject.organizations != [NODES_GROUP] {
        return Err(format!("subject organization is not {NODES_GROUP}"));
    }
    if request.dns_names.is_empty() && request.ip_addresses.is_empty() {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if !request.email_addresses.is_empty() || !request.uris.is_empty() {
        return Err("email and URI subjectAltNames are not allowed".into());
    }
    if !request.subject.common_name.starts_with(NODE_USER_PREFIX) {
        return Err(format!("subject common name does not begin with {NODE_USER_PREFIX}"));
    }
    let with_rsa = ["digital signature", "key encipherment", "server auth"];
    if !same_usages(usages, &with_rsa) && !same_usages(usages, &["digital signature", "server auth"]) {
        return Err("usages did not match [digital signature key encipherment server auth]".into());
    }
    Ok(())
}

/// Whether `usages` suit an API server client certificate (upstream's
/// `validAPIServerClientUsages`): client auth, optionally digital
/// signature and key encipherment, nothing else.
pub fn validate_client_usages(usages: &[String]) -> Result<(), String> {
    for usage in usages {
        if !["digital signature", "key encipherment", "client auth"].contains(&usage.as_str()) {
            return Err(format!("invalid usage for client certificate: {usage}"));
        }
    }
    if !usages.iter().any(|u| u == "client auth") {
        return Err("missing required usage for client certificate: client auth".into());
    }
    Ok(())
}

/// A new key (ECDSA P-256) and a PEM certificate request for it with
/// subject CN `common_name` and O `organization`, and `hosts` (names or IP
/// addresses) as subject alternative names. Returns (request, key), both
/// PEM.
pub fn create_request(
    common_name: &str,
    organization: Option<&str>,
    hosts: &[String],
) -> Result<(String, String), PkiError> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(error)?;
    let mut name = DistinguishedName::new();
    if let Some(organization) = organization {
        name.push(DnType::OrganizationName, organization);
    }
    name.push(DnType::CommonName, common_name);
    params.distinguished_name = name;
    params.subject_alt_names = hosts
        .iter()
        .map(|host| match host.parse::<IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => host.clone().try_into().map(SanType::DnsName).map_err(error),
        })
        .collect::<Result<_, _>>()?;
    let key = KeyPair::generate().map_err(error)?;
    let request = params.serialize_request(&key).map_err(error)?;
    Ok((request.pem().map_err(error)?, key.serialize_pem()))
}

/// The key usages and extended key usages of `usages` (a CSR's
/// `spec.usages`); usages this signer cannot put in a certificate are an
/// error.
fn usages_of(usages: &[String]) -> Result<(Vec<KeyUsagePurpose>, Vec<ExtendedKeyUsagePurpose>), PkiError> {
    let (mut key, mut extended) = (Vec::new(), Vec::new());
    for usage in usages {
        match usage.as_str() {
            "signing" | "digital signature" => key.push(KeyUsagePurpose::DigitalSignature),
            "content commitment" => key.push(KeyUsagePurpose::ContentCommitment),
            "key encipherment" => key.push(KeyUsagePurpose::KeyEncipherment),
            "key agreement" => key.push(KeyUsagePurpose::KeyAgreement),
            "data encipherment" => key.push(KeyUsagePurpose::DataEncipherment),
            "encipher only" => key.push(KeyUsagePurpose::EncipherOnly),
            "decipher only" => key.push(KeyUsagePurpose::DecipherOnly),
            "any" => extended.push(ExtendedKeyUsagePurpose::Any),
            "server auth" => extended.push(ExtendedKeyUsagePurpose::ServerAuth),
            "client auth" => extended.push(ExtendedKeyUsagePurpose::ClientAuth),
            "code signing" => extended.push(ExtendedKeyUsagePurpose::CodeSigning),
            "email protection" | "s/mime" => extended.push(ExtendedKeyUsagePurpose::EmailProtection),
            "timestamping" => extended.push(ExtendedKeyUsagePurpose::TimeStamping),
            "ocsp signing" => extended.push(ExtendedKeyUsagePurpose::OcspSigning),
            other => return Err(error(format!("usage {other:?} is not supported by this signer"))),
        }
    }
    key.dedup();
    extended.dedup();
    Ok((key, extended))
}

/// The cluster CA as a signer of certificate requests.
#[derive(Debug, Clone)]
pub struct CertificateAuthority {
    ca: Credential,
    not_after: time::OffsetDateTime,
}

impl CertificateAuthority {
    /// The CA whose certificate and key `ca` holds (PEM).
    pub fn new(ca: Credential) -> Result<CertificateAuthority, PkiError> {
        let certs = super::parse_certificates(&ca.cert_pem)?;
        let (_, cert) = x509_parser::parse_x509_certificate(&certs[0]).map_err(error)?;
        let not_after = cert.validity().not_after.to_datetime();
        KeyPair::from_pem(&ca.key_pem).map_err(error)?;
        Ok(CertificateAuthority { ca, not_after })
    }

    /// A new self-signed CA named `common_name` (tests and throw-away
    /// clusters).
    pub fn generate(common_name: &str) -> Result<CertificateAuthority, PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(error)?;
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::hours(1);
        params.not_after = now + time::Duration::days(3650);
        let key = KeyPair::generate().map_err(error)?;
        let cert = params.self_signed(&key).map_err(error)?;
        CertificateAuthority::new(Credential { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }

    /// The CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca.cert_pem
    }

    /// Signs the PEM certificate `request` (its signature checked) for
    /// `usages` (a CSR's `spec.usages`), valid from five minutes ago for
    /// `duration`, but never past the CA's own expiry. Subject and subject
    /// alternative names are the request's; the certificate is never a CA.
    pub fn sign(&self, request: &str, usages: &[String], duration: Duration) -> Result<String, PkiError> {
        let der = request_der(request)?;
        let mut params = CertificateSigningRequestParams::from_der(&der.into()).map_err(error)?;
        let (key_usages, extended) = usages_of(usages)?;
        let now = time::OffsetDateTime::now_utc();
        let duration = time::Duration::try_from(duration).map_err(error)?;
        params.params.not_before = now - time::Duration::try_from(BACKDATE).expect("small");
        params.params.not_after = (now + duration).min(self.not_after);
        params.params.key_usages = key_usages;
        params.params.extended_key_usages = extended;
        params.params.is_ca = IsCa::ExplicitNoCa;
        params.params.use_authority_key_identifier_extension = true;
        let mut serial = [0u8; 16];
        getrandom::fill(&mut serial).map_err(error)?;
        serial[0] &= 0x7f;
        params.params.serial_number = Some(serial.to_vec().into());
        let key = KeyPair::from_pem(&self.ca.key_pem).map_err(error)?;
        let issuer = Issuer::from_ca_cert_pem(&self.ca.cert_pem, key).map_err(error)?;
        Ok(params.signed_by(&issuer).map_err(error)?.pem())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_with_their_subject_and_names() {
        let hosts = ["node-1.example".to_owned(), "10.0.0.7".to_owned()];
        let (request, key) = create_request("system:node:node-1", Some("system:nodes"), &hosts).unwrap();
        assert!(key.contains("PRIVATE KEY"));
        let parsed = parse_request(&request).unwrap();
        assert_eq!(parsed.subject.common_name, "system:node:node-1");
        assert_eq!(parsed.subject.organizations, ["system:nodes"]);
        assert_eq!(parsed.dns_names, ["node-1.example"]);
        assert_eq!(parsed.ip_addresses, ["10.0.0.7".parse::<IpAddr>().unwrap()]);

        let cases = [
            ("not PEM", "garbage".to_owned(), "PEM block type"),
            ("a certificate", CertificateAuthority::generate("x").unwrap().ca_pem().to_owned(), "PEM block type"),
            ("two blocks", format!("{request}{request}"), "more than one"),
        ];
        for (name, pem, want) in cases {
            let err = parse_request(&pem).unwrap_err().to_string();
            assert!(err.contains(want), "{name}: {err}");
        }
        // A request whose signed content was altered.
        let der = request_der(&request).unwrap();
        let mut altered = der.clone();
        let at = altered.windows(6).position(|w| w == b"node-1").unwrap();
        altered[at] = b'x';
        let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &altered);
        let altered = format!("-----BEGIN CERTIFICATE REQUEST-----\n{b64}\n-----END CERTIFICATE REQUEST-----\n");
        assert!(parse_request(&altered).unwrap_err().to_string().contains("signature"));
    }

    #[test]
    fn node_request_rules() {
        let strings = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let parsed = |cn: &str, org: Option<&str>, hosts: &[&str]| {
            parse_request(&create_request(cn, org, &strings(hosts)).unwrap().0).unwrap()
        };
        let client = strings(&["digital signature", "key encipherment", "client auth"]);
        let client_ec = strings(&["client auth", "digital signature"]);
        let serving = strings(&["digital signature", "server auth"]);
        let node = parsed("system:node:n1", Some(NODES_GROUP), &[]);
        let cases: Vec<(&str, Result<(), String>, bool)> = vec![
            ("client", validate_kubelet_client(&node, &client), true),
            ("client without key encipherment", validate_kubelet_client(&node, &client_ec), true),
            ("client with server auth", validate_kubelet_client(&node, &serving), false),
            (
                "client of another group",
                validate_kubelet_client(&parsed("system:node:n1", Some("x"), &[]), &client),
                false,
            ),
            ("client not a node", validate_kubelet_client(&parsed("alice", Some(NODES_GROUP), &[]), &client), false),
            (
                "client with names",
                validate_kubelet_client(&parsed("system:node:n1", Some(NODES_GROUP), &["n1"]), &client),
                false,
            ),
            (
                "serving",
                validate_kubelet_serving(&parsed("system:node:n1", Some(NODES_GROUP), &["10.0.0.1"]), &serving),
                true,
            ),
            ("serving without names", validate_kubelet_serving(&node, &serving), false),
            ("client usages", validate_client_usages(&client), true),
            ("client usages without client auth", validate_client_usages(&strings(&["digital signature"])), false),
            (
                "client usages with server auth",
                validate_client_usages(&strings(&["client auth", "server auth"])),
                false,
            ),
        ];
        for (name, result, ok) in cases {
            assert_eq!(result.is_ok(), ok, "{name}: {result:?}");
        }
    }

    #[test]
    fn signs_requests_with_the_usages_and_duration_asked() {
        let ca = CertificateAuthority::generate("test-ca").unwrap();
        let (request, _) = create_request("alice", Some("devs"), &[]).unwrap();
        let usages = ["digital signature".to_owned(), "key encipherment".to_owned(), "client auth".to_owned()];
        let pem = ca.sign(&request, &usages, Duration::from_secs(3600)).unwrap();
        let der = super::super::parse_certificates(&pem).unwrap();
        let subject = super::super::certificate_subject(&der[0]).unwrap();
        assert_eq!(
            (subject.common_name.as_str(), subject.organizations.as_slice()),
            ("alice", &["devs".to_owned()][..])
        );
        let (_, cert) = x509_parser::parse_x509_certificate(&der[0]).unwrap();
        let lifetime = cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
        assert_eq!(lifetime, 3600 + 300, "an hour, backdated five minutes");
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && !eku.server_auth);
        let ku = cert.key_usage().unwrap().unwrap().value;
        assert!(ku.digital_signature() && ku.key_encipherment() && !ku.key_cert_sign());
        assert!(!cert.is_ca());
        assert_eq!(cert.issuer().to_string(), "CN=test-ca");

        // Capped by the CA's own validity; unsupported usages refused.
        let long = ca.sign(&request, &usages, Duration::from_secs(100 * 365 * 86400)).unwrap();
        let (_, long) = x509_parser::parse_x509_certificate(&super::super::parse_certificates(&long).unwrap()[0])
            .map(|(r, c)| (r.len(), c.validity().not_after.timestamp()))
            .unwrap();
        assert_eq!(long, ca.not_after.unix_timestamp());
        let err = ca.sign(&request, &["cert sign".to_owned()], Duration::from_secs(60)).unwrap_err();
        assert!(err.to_string().contains("not supported"), "{err}");
    }
}
