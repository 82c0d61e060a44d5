//! The controller's own database check: a `SELECT 1` as the application user, through the
//! client Service, bounded by a short timeout so that a reconcile never waits on a database.

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use mysql_async::prelude::Queryable;
use visitors_api::visitors_app::DATABASE_NAME;

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

/// Runs the check. A trait so that reconcile tests can answer without a database.
pub trait DatabaseProbe: Send + Sync {
    /// `Ok` when `SELECT 1` succeeded; otherwise a few stable words saying why (they end up in
    /// a condition message, so never a time, an address that changes, or a secret).
    fn select_one<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, Result<(), String>>;
}

/// The real check through mysql_async.
pub struct MysqlProbe {
    pub timeout: Duration,
}

impl DatabaseProbe for MysqlProbe {
    fn select_one<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let seconds = self.timeout.as_secs_f64();
            match tokio::time::timeout(self.timeout, query(target)).await {
                Ok(result) => result.map_err(|e| describe(&e, &target.user)),
                Err(_) => Err(format!("no answer within {seconds} s")),
            }
        })
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

async fn query(target: &Target) -> Result<(), mysql_async::Error> {
    let mut conn = connect(target, Some(DATABASE_NAME)).await?;
    let one: Option<i64> = conn.query_first("SELECT 1").await?;
    // The answer is in; a failed goodbye does not make the database unreachable.
    let _ = conn.disconnect().await;
    match one {
        Some(1) => Ok(()),
        _ => Err(mysql_async::Error::Other("SELECT 1 did not return 1".into())),
    }
}

/// A short, stable reason for a failed check.
fn describe(error: &mysql_async::Error, user: &str) -> String {
    match error {
        mysql_async::Error::Server(e) if e.code == 1045 => {
            format!("access denied for user {user}: the credentials Secret does not match the database")
        }
        mysql_async::Error::Server(e) if e.code == 1049 => format!("database {DATABASE_NAME} does not exist"),
        mysql_async::Error::Server(e) => format!("MySQL error {}", e.code),
        // rustls reports a refused certificate as an I/O error wrapping its own.
        mysql_async::Error::Io(mysql_async::IoError::Io(e))
            if e.get_ref().is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()) =>
        {
            "TLS error: MySQL's certificate is not signed by the app's CA or does not name its Service".to_string()
        }
        mysql_async::Error::Io(mysql_async::IoError::Io(e)) => match e.kind() {
            std::io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
            std::io::ErrorKind::TimedOut => "connection timed out".to_string(),
            _ => "cannot reach the Service".to_string(),
        },
        mysql_async::Error::Io(_) => "TLS error".to_string(),
        mysql_async::Error::Driver(_) => "protocol error".to_string(),
        mysql_async::Error::Url(_) | mysql_async::Error::Other(_) => "unexpected answer".to_string(),
    }
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

    #[test]
    fn failures_are_described_in_stable_words() {
        let refused = mysql_async::Error::Io(mysql_async::IoError::Io(std::io::ErrorKind::ConnectionRefused.into()));
        assert_eq!(describe(&refused, "visitors"), "connection refused");
        let other = mysql_async::Error::Other("x".into());
        assert_eq!(describe(&other, "visitors"), "unexpected answer");
    }

    #[tokio::test]
    async fn unreachable_database_fails_within_the_timeout() {
        // Port 3306 of a reserved TEST-NET address: the connection never completes.
        let probe = MysqlProbe { timeout: Duration::from_millis(200) };
        let target =
            Target { host: "192.0.2.1".into(), port: 3306, user: "u".into(), password: "p".into(), ca_pem: None };
        let result = probe.select_one(&target).await;
        assert!(result.is_err(), "{result:?}");
    }
}
