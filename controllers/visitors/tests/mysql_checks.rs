//! The database checks against a real server: the controller's `SELECT 1` (mysql_async) and
//! the exact probe commands the StatefulSet builder puts in the MySQL container, run with the
//! same environment variables the container has.
//!
//! Uses the shared throwaway MariaDB of visitors-test-support (plus `mysql` and `mysqladmin`,
//! which the probes run). Without them the tests print SKIPPED and pass, unless
//! `VISITORS_REQUIRE_MARIADB=1` asks them to fail.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Probe;
use visitors_api::{VisitorsApp, VisitorsAppSpec};
use visitors_controller::build::mysql::statefulset;
use visitors_controller::database::Target;
use visitors_controller::database::check::{DatabaseCheck, MysqlCheck};
use visitors_test_support::{MariaDb, programs_or_skip};

const USER: &str = "visitors";
const PASSWORD: &str = "s3cret-Never-Logged";
const ROOT_PASSWORD: &str = "r00t-Never-Logged";

/// The shared throwaway server, set up as the MySQL image's entrypoint leaves it: a root
/// password, the `visitors` database and the application user.
struct Server {
    db: MariaDb,
    port: u16,
}

impl Server {
    fn start() -> Option<Self> {
        // The probes run the clients the MySQL image ships.
        programs_or_skip(&["mysql", "mysqladmin"], "VISITORS_REQUIRE_MARIADB")?;
        let db = MariaDb::start()?;
        db.sql(&format!(
            "CREATE DATABASE visitors; \
             CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'; \
             GRANT ALL ON visitors.* TO '{USER}'@'%'; \
             ALTER USER 'root'@'localhost' IDENTIFIED BY '{ROOT_PASSWORD}';"
        ));
        // In the container the clients' default socket and port are the server's; here a
        // client options file in the probe's HOME says where this server is.
        let options = format!("[client]\nsocket={}\nport={}\n", db.socket().display(), db.port);
        std::fs::write(db.dir().join(".my.cnf"), options).unwrap();
        Some(Self { port: db.port, db })
    }

    fn socket(&self) -> PathBuf {
        self.db.socket()
    }

    /// Runs a probe command of the MySQL container with the container's environment (the
    /// image's defaults, 3306 and its socket, pointed at this server).
    fn probe_passes(&self, probe: &Probe, password: &str) -> bool {
        self.probe_passes_with(probe, password, ROOT_PASSWORD)
    }

    fn probe_passes_with(&self, probe: &Probe, password: &str, root_password: &str) -> bool {
        let command = probe.exec.as_ref().unwrap().command.clone().unwrap();
        Command::new(&command[0])
            .args(&command[1..])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default() + ":/usr/sbin:/usr/bin")
            .env("HOME", self.db.dir())
            .env("MYSQL_TCP_PORT", self.port.to_string())
            .env("MYSQL_UNIX_PORT", self.socket())
            .env("MYSQL_DATABASE", "visitors")
            .env("MYSQL_USER", USER)
            .env("MYSQL_PASSWORD", password)
            .env("MYSQL_ROOT_PASSWORD", root_password)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
    }
}

fn probes() -> (Probe, Probe) {
    let mut app = VisitorsApp::new("ex", VisitorsAppSpec { size: 1, ..VisitorsAppSpec::default() });
    app.metadata.namespace = Some("shop".into());
    app.metadata.uid = Some("uid".into());
    let sts = statefulset(&app, "creds", Default::default(), None);
    let container = sts.spec.unwrap().template.spec.unwrap().containers.remove(0);
    (container.readiness_probe.unwrap(), container.liveness_probe.unwrap())
}

fn target(port: u16, password: &str) -> Target {
    Target { host: "127.0.0.1".into(), port, user: USER.into(), password: password.into(), ca_pem: None }
}

#[tokio::test]
async fn controller_select_one_succeeds_and_explains_failures() {
    let Some(server) = Server::start() else { return };
    let check = MysqlCheck { timeout: Duration::from_secs(5) };

    assert_eq!(check.select_one(&target(server.port, PASSWORD)).await, Ok(()));

    let denied = check.select_one(&target(server.port, "wrong")).await.unwrap_err();
    assert!(denied.starts_with("access denied for user visitors"), "{denied}");
    assert!(!denied.contains("wrong") && !denied.contains(PASSWORD), "no password in the reason: {denied}");

    let closed = visitors_test_support::free_port();
    assert_eq!(check.select_one(&target(closed, PASSWORD)).await, Err("connection refused".to_string()));
}

#[test]
fn readiness_probe_passes_only_when_the_application_user_can_query() {
    let Some(server) = Server::start() else { return };
    let (readiness, _) = probes();
    assert!(server.probe_passes(&readiness, PASSWORD), "the probe must pass against a running server");
    assert!(!server.probe_passes(&readiness, "wrong"), "the probe must fail when the credentials do not work");
}

#[test]
fn liveness_probe_follows_the_server_process() {
    let Some(mut server) = Server::start() else { return };
    let (_, liveness) = probes();
    assert!(server.probe_passes(&liveness, PASSWORD), "alive");
    assert!(
        server.probe_passes_with(&liveness, "wrong", "also-wrong"),
        "credentials never make liveness fail (a restart would not fix them)"
    );
    server.db.kill();
    assert!(!server.probe_passes(&liveness, PASSWORD), "a dead server fails liveness");
}

/// The controller's check over TLS against a server that requires it: with the server's CA it
/// connects (and the host name, `localhost`, is checked against the certificate); plain text
/// and a CA that signed nothing are refused.
#[tokio::test]
async fn controller_select_one_over_tls_verifies_the_ca() {
    let Some(db) = MariaDb::start_configured(&[], visitors_test_support::ServerTls::Required) else { return };
    db.sql(&format!(
        "CREATE DATABASE visitors; CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'; GRANT ALL ON visitors.* TO '{USER}'@'%';"
    ));
    let check = MysqlCheck { timeout: Duration::from_secs(5) };
    let ca = std::fs::read(db.ca_pem().expect("the server's CA")).unwrap();
    let target = |ca_pem: Option<Vec<u8>>| Target {
        host: "localhost".into(),
        port: db.port,
        user: USER.into(),
        password: PASSWORD.into(),
        ca_pem,
    };
    assert_eq!(check.select_one(&target(Some(ca))).await, Ok(()));
    assert!(check.select_one(&target(None)).await.is_err(), "plain text got in");
    let dir = tempfile::tempdir().unwrap();
    let other = visitors_test_support::tls::write_unrelated_ca(&dir.path().join("other.pem"));
    let refused = check.select_one(&target(Some(std::fs::read(other).unwrap()))).await;
    let why = refused.expect_err("a CA that signed nothing is trusted");
    assert!(why.starts_with("TLS error: MySQL's certificate is not signed by the app's CA"), "{why}");
}
