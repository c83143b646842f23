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

/// Every key usage a `CertificateSigningRequest` may ask for (upstream's
/// `KeyUsage` values).
pub const KEY_USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

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
