//! TLS to MySQL: the mode and CA of `--ssl-mode` and `--ssl-ca`, as mysql_async's options and as
//! the rustls configuration of the backup's data sessions ([`super::wire`]), and what a failed
//! handshake means for the user.
//!
//! The modes are the `mysql` client's: `required` encrypts and accepts any certificate,
//! `verify-ca` also checks that the certificate chains to the CA, `verify-identity` also that
//! it names the host connected to (a DNS name or an IP address).

use std::sync::Arc;

use mysql_async::SslOpts;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
pub use visitors_agent_contract::SslMode;

/// How connections use TLS.
#[derive(Clone)]
pub struct TlsSettings {
    mode: SslMode,
    ca: Option<Ca>,
}

/// The CA of `--ssl-ca`: its PEM as read (for mysql_async) and its certificates (for rustls).
#[derive(Clone)]
struct Ca {
    pem: Arc<[u8]>,
    roots: Arc<RootCertStore>,
}

/// Why the CA of `--ssl-ca` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("--ssl-mode={0} checks the server's certificate against a CA: pass the CA's PEM file with --ssl-ca")]
    Missing(SslMode),
    #[error("it holds no PEM certificate (-----BEGIN CERTIFICATE-----)")]
    NoCertificate,
    #[error("it is not valid PEM: {0}")]
    Pem(String),
    #[error("a certificate in it is unusable as a CA: {0}")]
    Unusable(String),
}

impl TlsSettings {
    /// `mode` with the CA in `ca_pem`, which a verifying mode needs.
    pub fn new(mode: SslMode, ca_pem: Option<Vec<u8>>) -> Result<Self, CaError> {
        let ca = ca_pem.map(Ca::parse).transpose()?;
        if mode.verifies() && ca.is_none() {
            return Err(CaError::Missing(mode));
        }
        Ok(Self { mode, ca })
    }

    /// Plain text.
    pub fn disabled() -> Self {
        Self { mode: SslMode::Disabled, ca: None }
    }

    /// Encrypted, with any certificate: the default without `--ssl-ca`.
    pub fn required() -> Self {
        Self { mode: SslMode::Required, ca: None }
    }

    pub fn mode(&self) -> SslMode {
        self.mode
    }

    /// Whether connections use TLS.
    pub fn enabled(&self) -> bool {
        self.mode != SslMode::Disabled
    }

    /// mysql_async's options: `None` for plain text.
    pub fn ssl_opts(&self) -> Option<SslOpts> {
        let opts = SslOpts::default();
        match (self.mode, &self.ca) {
            (SslMode::Disabled, _) => None,
            (SslMode::Required, _) | (_, None) => Some(opts.with_danger_accept_invalid_certs(true)),
            (SslMode::VerifyIdentity, Some(ca)) => Some(ca.only_root(opts)),
            (SslMode::VerifyCa, Some(ca)) => Some(
                ca.only_root(opts)
                    .with_danger_skip_domain_validation(true)
                    .with_danger_tls_hostname_override(Some(NAME_MISMATCH_ACCEPTED)),
            ),
        }
    }

    /// The rustls configuration of a data session, or `None` for plain text.
    pub fn client_config(&self) -> Result<Option<Arc<ClientConfig>>, rustls::Error> {
        if !self.enabled() {
            return Ok(None);
        }
        let provider = provider();
        let verifier: Arc<dyn ServerCertVerifier> = match (self.mode, &self.ca) {
            (SslMode::VerifyIdentity, Some(ca)) => ca.verifier(&provider)?,
            (SslMode::VerifyCa, Some(ca)) => Arc::new(AnyName(ca.verifier(&provider)?)),
            _ => Arc::new(AnyCertificate(provider.clone())),
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Some(Arc::new(config)))
    }
}

/// mysql_async 0.37.1 skips a name mismatch only when the error's text contains
/// `NotValidForName`, which rustls 0.23's text no longer does (blackbeam/mysql_async#404, fixed
/// after that release). The text names the host it expected, so verifying against this name
/// makes every name mismatch match again; the chain is checked before the name, so a
/// certificate the CA did not sign is still refused.
const NAME_MISMATCH_ACCEPTED: &str = "NotValidForName.invalid";

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSettings")
            .field("mode", &self.mode)
            .field("ca_certificates", &self.ca.as_ref().map(|ca| ca.roots.len()))
            .finish()
    }
}

impl Ca {
    fn parse(pem: Vec<u8>) -> Result<Self, CaError> {
        let mut roots = RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(&pem) {
            let certificate = certificate.map_err(|e| CaError::Pem(e.to_string()))?;
            roots.add(certificate).map_err(|e| CaError::Unusable(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(CaError::NoCertificate);
        }
        Ok(Self { pem: pem.into(), roots: Arc::new(roots) })
    }

    /// `opts` trusting this CA alone.
    fn only_root(&self, opts: SslOpts) -> SslOpts {
        opts.with_root_certs(vec![self.pem.to_vec().into()]).with_disable_built_in_roots(true)
    }

    fn verifier(&self, provider: &Arc<CryptoProvider>) -> Result<Arc<WebPkiServerVerifier>, rustls::Error> {
        WebPkiServerVerifier::builder_with_provider(self.roots.clone(), provider.clone())
            .build()
            .map_err(|e| rustls::Error::General(e.to_string()))
    }
}

/// The process's crypto provider (the binaries install ring's), or ring's.
fn provider() -> Arc<CryptoProvider> {
    CryptoProvider::get_default().cloned().unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// `required`: any certificate, though the handshake's signatures are still checked against it.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the CA's check, but whatever names the certificate holds.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(error) if is_name_mismatch(&error) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

fn is_name_mismatch(error: &rustls::Error) -> bool {
    matches!(
        error,
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
        )
    )
}

/// What a failed TLS handshake means.
#[derive(Debug, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// The certificate does not chain to the CA (or is expired, malformed, badly signed).
    Untrusted(String),
    /// The certificate chains to the CA but does not name the host.
    WrongHost(String),
    /// Anything else (protocol versions, ciphers, an alert from the server).
    Other(String),
}

impl HandshakeFailure {
    pub fn of(error: &rustls::Error) -> Self {
        match error {
            _ if is_name_mismatch(error) => Self::WrongHost(error.to_string()),
            rustls::Error::InvalidCertificate(_) => Self::Untrusted(error.to_string()),
            other => Self::Other(other.to_string()),
        }
    }
}

/// The rustls error at the root of `error`, if any: tokio-rustls hands them over inside an
/// `io::Error`, whose `source` skips the wrapped error, so both paths are followed.
pub fn rustls_error<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(found) = error.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        let inner = error.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref());
        current = match inner {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => error.source(),
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_without_a_certificate_is_refused() {
        assert!(matches!(Ca::parse(b"not a certificate".to_vec()), Err(CaError::NoCertificate)));
        let broken = b"-----BEGIN CERTIFICATE-----\nnot base64 !!\n-----END CERTIFICATE-----\n".to_vec();
        assert!(matches!(Ca::parse(broken), Err(CaError::Pem(_) | CaError::Unusable(_))));
    }

    #[test]
    fn a_verifying_mode_needs_a_ca() {
        assert!(matches!(TlsSettings::new(SslMode::VerifyCa, None), Err(CaError::Missing(SslMode::VerifyCa))));
        assert!(TlsSettings::new(SslMode::Required, None).is_ok());
    }

    #[test]
    fn a_rustls_error_is_found_inside_an_io_error() {
        let inner = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, inner.clone());
        assert_eq!(rustls_error(&io), Some(&inner));
        assert_eq!(HandshakeFailure::of(&inner), HandshakeFailure::Untrusted(inner.to_string()));
        let name = rustls::Error::InvalidCertificate(CertificateError::NotValidForName);
        assert!(matches!(HandshakeFailure::of(&name), HandshakeFailure::WrongHost(_)));
    }
}
