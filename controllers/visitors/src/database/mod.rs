//! Connecting to a MySQL server of an app: where and as whom ([`Target`]), over TLS verified
//! against the app's CA ([`connect`]); and the reconcile's own check that the database answers
//! ([`check`]). The replication manager connects with the same.

pub mod check;

use std::fmt;

/// Where and as whom to connect. `Debug` never shows the password.
#[derive(Clone)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    /// The CA certificate (PEM) to verify the server with over TLS; `None`: plain text.
    pub ca_pem: Option<Vec<u8>>,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// A connection to `target`, in `database` when given. Over TLS, only the app's CA is trusted
/// and the certificate must name the host connected to.
pub async fn connect(target: &Target, database: Option<&str>) -> Result<mysql_async::Conn, mysql_async::Error> {
    // mysql_async asks rustls for the process's provider; without one chosen, a build that
    // links both ring and aws-lc-rs panics on the first TLS handshake.
    controller_common::startup::install_crypto_provider();
    let opts = mysql_async::OptsBuilder::default()
        .ip_or_hostname(target.host.clone())
        .tcp_port(target.port)
        .prefer_socket(false)
        .user(Some(target.user.clone()))
        .pass(Some(target.password.clone()))
        .db_name(database)
        .ssl_opts(target.ca_pem.as_ref().map(|ca| {
            mysql_async::SslOpts::default().with_root_certs(vec![ca.clone().into()]).with_disable_built_in_roots(true)
        }));
    mysql_async::Conn::new(opts).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_password() {
        let target =
            Target { host: "h".into(), port: 3306, user: "u".into(), password: "hunter2".into(), ca_pem: None };
        assert!(!format!("{target:?}").contains("hunter2"));
    }
}
