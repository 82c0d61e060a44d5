//! What every MySQL server the controllers run shares (an app's StatefulSet, a drill's
//! throwaway pod), pure: where it mounts its certificate, the options that make it serve TLS
//! only, the group it runs as, and the data of the Secret its certificate is read from.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use visitors_api::visitors_app::tls_keys;

use crate::certificates::KeyedCertificate;

/// Where a MySQL server's pod mounts its certificate, key and CA.
pub const TLS_MOUNT: &str = "/etc/mysql/tls";

/// The group MySQL's official images (and MariaDB's) run mysqld as: the server's key is
/// readable by that group only, through the pod's `fsGroup`.
pub const MYSQL_GROUP: i64 = 999;
/// The user those images run mysqld as, owner of the data directory.
pub const MYSQL_UID: i64 = 999;

/// mysqld's TLS options: the certificate mounted at [`TLS_MOUNT`], and no plain-text
/// connection over TCP.
pub fn tls_args() -> Vec<String> {
    vec![
        format!("--ssl-ca={TLS_MOUNT}/{}", tls_keys::CA),
        format!("--ssl-cert={TLS_MOUNT}/{}", tls_keys::CERTIFICATE),
        format!("--ssl-key={TLS_MOUNT}/{}", tls_keys::PRIVATE_KEY),
        "--require-secure-transport=ON".to_string(),
    ]
}

/// The keys of a server's TLS Secret: its certificate and key, and the CA clients verify it with.
pub fn tls_secret_data(server: &KeyedCertificate, ca_pem: &str) -> BTreeMap<String, ByteString> {
    BTreeMap::from([
        (tls_keys::CERTIFICATE.to_string(), bytes(&server.certificate_pem)),
        (tls_keys::PRIVATE_KEY.to_string(), bytes(&server.private_key_pem)),
        (tls_keys::CA.to_string(), bytes(ca_pem)),
    ])
}

/// A text value of a Secret.
pub fn bytes(text: &str) -> ByteString {
    ByteString(text.as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_reads_its_certificate_where_it_is_mounted_and_refuses_plain_text() {
        assert_eq!(
            tls_args(),
            [
                "--ssl-ca=/etc/mysql/tls/ca.crt",
                "--ssl-cert=/etc/mysql/tls/tls.crt",
                "--ssl-key=/etc/mysql/tls/tls.key",
                "--require-secure-transport=ON",
            ]
        );
    }
}
