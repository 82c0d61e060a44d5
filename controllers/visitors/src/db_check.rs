//! The reconcile's database step: once the MySQL pod is ready, the controller's own check
//! ([`crate::db`]) as the application user, with the credentials read for it when this
//! reconcile did not read them already.

use tracing::Instrument;

use crate::build::tls::ServingTls;
use crate::build::{self, secret::Credentials};
use crate::context::Error;
use crate::db::Target;
use crate::reconcile::Reconciler;
use crate::status::{Database, Workload};
use crate::validate::Invalid;

impl Reconciler<'_> {
    pub(crate) async fn check_database(
        &self,
        mysql: &Workload,
        credentials: Option<Credentials>,
        tls: Option<&ServingTls>,
    ) -> Result<Result<Database, Invalid>, Error> {
        if mysql.ready < 1 {
            return Ok(Ok(Database::PodNotReady));
        }
        let Some(probe) = &self.ctx.probe else {
            return Ok(Ok(Database::PodReady));
        };
        let credentials = match credentials {
            Some(credentials) => credentials,
            None => match self.credentials().await? {
                Ok(credentials) => credentials,
                Err(invalid) => return Ok(Err(invalid)),
            },
        };
        let target = Target {
            host: build::mysql::client_host(self.app),
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
        Ok(Ok(match result {
            Ok(()) => Database::Connected,
            Err(why) => {
                tracing::info!(%why, "database not answering yet");
                Database::QueryFailed(why)
            }
        }))
    }
}
