//! The X.509 work of the controllers: a CA and the MySQL server certificates it signs (rcgen),
//! and what a certificate says about itself (x509-parser): when it expires and which names it
//! serves. Keys never leave the values returned here except into Secrets; `Debug` hides them.

use std::fmt;

use jiff::{SignedDuration, Timestamp};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use sha2::{Digest, Sha256};

/// How long a generated CA is valid.
pub const CA_VALIDITY: SignedDuration = SignedDuration::from_hours(24 * 3650);
/// How long a generated server certificate is valid.
pub const SERVER_VALIDITY: SignedDuration = SignedDuration::from_hours(24 * 90);
/// A generated server certificate is renewed when it has less than this left.
pub const RENEW_BEFORE: SignedDuration = SignedDuration::from_hours(24 * 30);
/// Certificates start being valid a little before they are made, for clocks slightly behind.
const BACKDATE: SignedDuration = SignedDuration::from_mins(5);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CertificateError {
    #[error("the certificate is not PEM: {0}")]
    NotPem(String),
    #[error("the certificate cannot be read: {0}")]
    Unreadable(String),
    #[error("the private key cannot be read: {0}")]
    BadKey(String),
    #[error("generating a certificate failed: {0}")]
    Generation(String),
}

/// A certificate and its private key, both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyedCertificate {
    pub certificate_pem: String,
    pub private_key_pem: String,
}

impl fmt::Debug for KeyedCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCertificate").field("certificate_pem", &self.certificate_pem).finish_non_exhaustive()
    }
}

/// A new self-signed CA named `common_name`, valid from `now` for [`CA_VALIDITY`].
pub fn new_authority(common_name: &str, now: Timestamp) -> Result<KeyedCertificate, CertificateError> {
    let key = KeyPair::generate().map_err(generation)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = name(common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    set_validity(&mut params, now, CA_VALIDITY)?;
    let certificate = params.self_signed(&key).map_err(generation)?;
    Ok(KeyedCertificate { certificate_pem: certificate.pem(), private_key_pem: key.serialize_pem() })
}

/// A new server certificate for `names` (DNS names, wildcards, or IP addresses), signed by
/// `authority`, valid from `now` for `validity`.
pub fn issue_server(
    authority: &KeyedCertificate,
    common_name: &str,
    names: &[String],
    now: Timestamp,
    validity: SignedDuration,
) -> Result<KeyedCertificate, CertificateError> {
    let authority_key =
        KeyPair::from_pem(&authority.private_key_pem).map_err(|e| CertificateError::BadKey(e.to_string()))?;
    let issuer = Issuer::from_ca_cert_pem(&authority.certificate_pem, authority_key)
        .map_err(|e| CertificateError::Unreadable(e.to_string()))?;
    let key = KeyPair::generate().map_err(generation)?;
    let mut params = CertificateParams::new(names.to_vec()).map_err(generation)?;
    params.distinguished_name = name(common_name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, now, validity)?;
    let certificate = params.signed_by(&key, &issuer).map_err(generation)?;
    Ok(KeyedCertificate { certificate_pem: certificate.pem(), private_key_pem: key.serialize_pem() })
}

/// What the first certificate of a PEM bundle says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateFacts {
    pub not_after: Timestamp,
    /// Its DNS and IP subject alternative names.
    pub names: Vec<String>,
}

impl CertificateFacts {
    pub fn read(pem: &[u8]) -> Result<Self, CertificateError> {
        let (_, pem) = x509_parser::pem::parse_x509_pem(pem).map_err(|e| CertificateError::NotPem(e.to_string()))?;
        let certificate = pem.parse_x509().map_err(|e| CertificateError::Unreadable(e.to_string()))?;
        let not_after = Timestamp::from_second(certificate.validity().not_after.timestamp())
            .map_err(|e| CertificateError::Unreadable(e.to_string()))?;
        let names = match certificate.subject_alternative_name() {
            Ok(Some(extension)) => extension.value.general_names.iter().filter_map(general_name).collect(),
            Ok(None) => Vec::new(),
            Err(e) => return Err(CertificateError::Unreadable(e.to_string())),
        };
        Ok(Self { not_after, names })
    }

    /// Whether a client that verifies host names accepts this certificate for `host`: a
    /// name equal to it, or a wildcard `*.rest` where `host` is one label followed by `rest`.
    pub fn serves(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        self.names.iter().any(|name| {
            let name = name.to_ascii_lowercase();
            match name.strip_prefix("*.") {
                Some(rest) => host.split_once('.').is_some_and(|(label, tail)| !label.is_empty() && tail == rest),
                None => name == host,
            }
        })
    }

    /// Whether it should be renewed at `now` (see [`due_for_renewal`]).
    pub fn due_for_renewal(&self, now: Timestamp) -> bool {
        due_for_renewal(self.not_after, now)
    }
}

/// Whether a certificate expiring at `not_after` should be renewed at `now`: less than
/// [`RENEW_BEFORE`] left.
pub fn due_for_renewal(not_after: Timestamp, now: Timestamp) -> bool {
    not_after.duration_since(now) < RENEW_BEFORE
}

/// The SHA-256 of `parts` (hex): what a pod template carries so that new certificates roll it.
pub fn fingerprint(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hex::encode(hasher.finalize())
}

fn general_name(name: &x509_parser::extensions::GeneralName<'_>) -> Option<String> {
    use x509_parser::extensions::GeneralName;
    match name {
        GeneralName::DNSName(dns) => Some((*dns).to_string()),
        GeneralName::IPAddress(bytes) => match bytes.len() {
            4 => Some(std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*bytes).ok()?).to_string()),
            16 => Some(std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*bytes).ok()?).to_string()),
            _ => None,
        },
        _ => None,
    }
}

fn name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "visitors-operator");
    name.push(DnType::CommonName, common_name);
    name
}

fn set_validity(
    params: &mut CertificateParams,
    now: Timestamp,
    validity: SignedDuration,
) -> Result<(), CertificateError> {
    let at = |t: Timestamp| time::OffsetDateTime::from_unix_timestamp(t.as_second()).map_err(generation);
    let start = now.checked_sub(BACKDATE).map_err(generation)?;
    let end = now.checked_add(validity).map_err(generation)?;
    params.not_before = at(start)?;
    params.not_after = at(end)?;
    Ok(())
}

fn generation(error: impl fmt::Display) -> CertificateError {
    CertificateError::Generation(error.to_string())
}

/// The names a server certificate of the MySQL Service `service` in `namespace` carries:
/// every name cluster DNS gives the Service, and those of the pods of its headless Service
/// `headless`.
pub fn service_names(service: &str, headless: &str, namespace: &str) -> Vec<String> {
    let mut names = Vec::new();
    for domain in ["", ".svc", ".svc.cluster.local"] {
        names.push(format!("{service}.{namespace}{domain}"));
        names.push(format!("*.{headless}.{namespace}{domain}"));
    }
    names.insert(0, service.to_string());
    names.push("localhost".to_string());
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-11-26T10:00:00Z".parse().unwrap()
    }

    #[test]
    fn a_generated_server_certificate_names_the_service_and_expires_when_asked() {
        let ca = new_authority("ex-mysql CA", now()).unwrap();
        let names = service_names("ex-mysql", "ex-mysql-headless", "shop");
        let server = issue_server(&ca, "ex-mysql", &names, now(), SERVER_VALIDITY).unwrap();
        let facts = CertificateFacts::read(server.certificate_pem.as_bytes()).unwrap();
        assert_eq!(facts.not_after, now().checked_add(SERVER_VALIDITY).unwrap());
        for host in ["ex-mysql.shop.svc", "ex-mysql.shop.svc.cluster.local", "ex-mysql-0.ex-mysql-headless.shop.svc"] {
            assert!(facts.serves(host), "{host}");
        }
        assert!(!facts.serves("other-mysql.shop.svc"));
        assert!(!facts.serves("a.b.ex-mysql-headless.shop.svc"), "a wildcard covers one label");
        assert!(server.private_key_pem.contains("PRIVATE KEY"));
        assert!(!format!("{server:?}").contains("PRIVATE KEY"), "Debug hides the key");
    }

    #[test]
    fn the_server_certificate_chains_to_the_ca() {
        let ca = new_authority("CA", now()).unwrap();
        let server = issue_server(&ca, "s", &["s.example".into()], now(), SERVER_VALIDITY).unwrap();
        let (_, ca_pem) = x509_parser::pem::parse_x509_pem(ca.certificate_pem.as_bytes()).unwrap();
        let (_, server_pem) = x509_parser::pem::parse_x509_pem(server.certificate_pem.as_bytes()).unwrap();
        let ca_cert = ca_pem.parse_x509().unwrap();
        let server_cert = server_pem.parse_x509().unwrap();
        assert_eq!(server_cert.issuer(), ca_cert.subject());
        assert!(ca_cert.is_ca());
        server_cert.verify_signature(Some(ca_cert.public_key())).unwrap();
        let other = new_authority("CA", now()).unwrap();
        let (_, other_pem) = x509_parser::pem::parse_x509_pem(other.certificate_pem.as_bytes()).unwrap();
        assert!(server_cert.verify_signature(Some(other_pem.parse_x509().unwrap().public_key())).is_err());
    }

    #[test]
    fn renewal_is_due_thirty_days_before_expiry() {
        let facts = CertificateFacts { not_after: now(), names: vec![] };
        assert!(!facts.due_for_renewal(now().checked_sub(SignedDuration::from_hours(24 * 31)).unwrap()));
        assert!(facts.due_for_renewal(now().checked_sub(SignedDuration::from_hours(24 * 29)).unwrap()));
    }

    #[test]
    fn ip_names_are_read_back() {
        let ca = new_authority("CA", now()).unwrap();
        let server = issue_server(&ca, "s", &["10.1.2.3".into()], now(), SERVER_VALIDITY).unwrap();
        assert!(CertificateFacts::read(server.certificate_pem.as_bytes()).unwrap().serves("10.1.2.3"));
    }

    #[test]
    fn garbage_is_not_a_certificate() {
        assert!(matches!(CertificateFacts::read(b"hello"), Err(CertificateError::NotPem(_))));
    }

    #[test]
    fn fingerprints_change_with_any_part() {
        assert_ne!(fingerprint(&[b"ab", b"c"]), fingerprint(&[b"a", b"bc"]));
        assert_eq!(fingerprint(&[b"x"]), fingerprint(&[b"x"]));
    }
}
