//! The reconcile's database step: once a MySQL pod is ready, the controller's own check, a
//! `SELECT 1` as the application user through the client Service, bounded by a short timeout so
//! that a reconcile never waits on a database.

use std::time::Duration;

use futures::future::BoxFuture;
use mysql_async::prelude::Queryable;
use tracing::Instrument;
use visitors_api::VisitorsApp;
use visitors_api::visitors_app::DATABASE_NAME;

use super::{Target, connect};
use crate::build;
use crate::build::secret::Credentials;
use crate::build::tls::ServingTls;

/// How far the database check got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    /// The MySQL pod has not passed its readiness probe.
    PodNotReady,
    /// The pod is ready, but the controller's `SELECT 1` failed; the text says how, in a few
    /// stable words (never a password, never a time).
    QueryFailed(String),
    /// The controller's `SELECT 1` succeeded.
    Connected,
    /// The pod is ready and the controller's own query is switched off.
    PodReady,
}

impl Database {
    pub fn is_ready(&self) -> bool {
        matches!(self, Database::Connected | Database::PodReady)
    }
}

/// How far the database check of `app` gets, with `ready_pods` MySQL pods ready.
pub async fn check(
    checker: Option<&dyn DatabaseCheck>,
    app: &VisitorsApp,
    ready_pods: i32,
    credentials: &Credentials,
    tls: Option<&ServingTls>,
) -> Database {
    if ready_pods < 1 {
        return Database::PodNotReady;
    }
    let Some(checker) = checker else {
        return Database::PodReady;
    };
    let target = Target {
        host: build::mysql::client_host(app),
        port: visitors_api::visitors_app::MYSQL_PORT as u16,
        user: credentials.username.clone(),
        password: credentials.password.clone(),
        ca_pem: tls.map(|tls| tls.ca_pem.clone()),
    };
    // Host and port only: the target's credentials never reach a span.
    let span = tracing::info_span!(
        "db.check",
        "db.system" = "mysql",
        "db.query.text" = "SELECT 1",
        "server.address" = %target.host,
        "server.port" = target.port,
        "tls" = target.ca_pem.is_some(),
        "db.check.result" = tracing::field::Empty,
    );
    let result = checker.select_one(&target).instrument(span.clone()).await;
    span.record("db.check.result", result.as_ref().err().map_or("connected", String::as_str));
    match result {
        Ok(()) => Database::Connected,
        Err(why) => {
            tracing::info!(%why, "database not answering yet");
            Database::QueryFailed(why)
        }
    }
}

/// Runs the check. A trait so that reconcile tests can answer without a database.
pub trait DatabaseCheck: Send + Sync {
    /// `Ok` when `SELECT 1` succeeded; otherwise a few stable words saying why (they end up in
    /// a condition message, so never a time, an address that changes, or a secret).
    fn select_one<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, Result<(), String>>;
}

/// The real check through mysql_async.
pub struct MysqlCheck {
    pub timeout: Duration,
}

impl DatabaseCheck for MysqlCheck {
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
    fn failures_are_described_in_stable_words() {
        let refused = mysql_async::Error::Io(mysql_async::IoError::Io(std::io::ErrorKind::ConnectionRefused.into()));
        assert_eq!(describe(&refused, "visitors"), "connection refused");
        let other = mysql_async::Error::Other("x".into());
        assert_eq!(describe(&other, "visitors"), "unexpected answer");
    }

    #[tokio::test]
    async fn unreachable_database_fails_within_the_timeout() {
        // Port 3306 of a reserved TEST-NET address: the connection never completes.
        let check = MysqlCheck { timeout: Duration::from_millis(200) };
        let target =
            Target { host: "192.0.2.1".into(), port: 3306, user: "u".into(), password: "p".into(), ca_pem: None };
        let result = check.select_one(&target).await;
        assert!(result.is_err(), "{result:?}");
    }
}
