//! Certificates for test servers: a CA of their own, and a server certificate it signs.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

/// The PEM files a server needs for TLS.
pub struct ServerFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A fresh CA and a certificate it signs for `names` (DNS names or IP addresses), in `dir`.
pub fn write_server_files(dir: &Path, names: &[String]) -> ServerFiles {
    std::fs::create_dir_all(dir).unwrap();
    let (ca_pem, issuer) = new_ca("visitors test CA");
    let mut params = CertificateParams::new(names.to_vec()).expect("valid names");
    params.distinguished_name.push(DnType::CommonName, "visitors test server");
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let files =
        ServerFiles { ca: dir.join("ca.pem"), cert: dir.join("server-cert.pem"), key: dir.join("server-key.pem") };
    std::fs::write(&files.ca, ca_pem).unwrap();
    std::fs::write(&files.cert, cert.pem()).unwrap();
    std::fs::write(&files.key, key.serialize_pem()).unwrap();
    files
}

/// The PEM file of a CA that signed nothing, at `path`.
pub fn write_unrelated_ca(path: &Path) -> PathBuf {
    std::fs::write(path, new_ca("an unrelated CA").0).unwrap();
    path.to_path_buf()
}

fn new_ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(params, key))
}
