//! The reconcile's database step: once a MySQL pod is ready, the controller's own check
//! ([`crate::db`]) as the application user, through the client Service.

use tracing::Instrument;

use crate::build::tls::ServingTls;
use crate::build::{self, secret::Credentials};
use crate::context::AppScope;
use crate::db::Target;
use crate::status::{Database, Workload};

/// How far the database check gets with `mysql` as its workload reports.
pub async fn check(
    scope: &AppScope<'_>,
    mysql: &Workload,
    credentials: &Credentials,
    tls: Option<&ServingTls>,
) -> Database {
    if mysql.ready < 1 {
        return Database::PodNotReady;
    }
    let Some(probe) = &scope.ctx.probe else {
        return Database::PodReady;
    };
    let target = Target {
        host: build::mysql::client_host(scope.app),
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
    let result = probe.select_one(&target).instrument(span.clone()).await;
    span.record("db.check.result", result.as_ref().err().map_or("connected", String::as_str));
    match result {
        Ok(()) => Database::Connected,
        Err(why) => {
            tracing::info!(%why, "database not answering yet");
            Database::QueryFailed(why)
        }
    }
}
