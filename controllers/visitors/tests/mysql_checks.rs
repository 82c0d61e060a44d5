//! The database checks against a real server: the controller's `SELECT 1` (mysql_async) and
//! the exact probe commands the StatefulSet builder puts in the MySQL container, run with the
//! same environment variables the container has.
//!
//! Uses a throwaway MariaDB (`mariadbd`, `mariadb-install-db`, `mysql`, `mysqladmin` on the
//! PATH or in /usr/sbin). Without them the tests print SKIPPED and pass, unless
//! `VISITORS_REQUIRE_MARIADB=1` asks them to fail.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Probe;
use visitors_api::{VisitorsApp, VisitorsAppSpec};
use visitors_controller::build::mysql::statefulset;
use visitors_controller::db::{DatabaseProbe, MysqlProbe, Target};

const USER: &str = "visitors";
const PASSWORD: &str = "s3cret-Never-Logged";
const ROOT_PASSWORD: &str = "r00t-Never-Logged";

fn program(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"])
        .map(|dir| Path::new(dir).join(name))
        .find(|candidate| candidate.is_file())
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

struct Server {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn socket(&self) -> PathBuf {
        self.dir.path().join("mysql.sock")
    }

    /// Starts a server with the database and accounts the MySQL image's entrypoint creates.
    fn start() -> Option<Self> {
        let names = ["mariadbd", "mariadb-install-db", "mysql", "mysqladmin"];
        if let Some(missing) = names.iter().find(|n| program(n).is_none()) {
            assert!(
                std::env::var("VISITORS_REQUIRE_MARIADB").as_deref() != Ok("1"),
                "`{missing}` is not installed and VISITORS_REQUIRE_MARIADB=1 requires it"
            );
            eprintln!("SKIPPED: `{missing}` is not installed");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let root_user: &[&str] = if is_root() { &["--user=root"] } else { &[] };
        let installed = Command::new(program("mariadb-install-db").unwrap())
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .args(root_user)
            .output()
            .expect("mariadb-install-db runs");
        assert!(installed.status.success(), "{}", String::from_utf8_lossy(&installed.stderr));
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(program("mariadbd").unwrap())
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", dir.path().join("mysql.sock").display()))
            .arg(format!("--pid-file={}", dir.path().join("mysql.pid").display()))
            .arg(format!("--log-error={}", dir.path().join("error.log").display()))
            .arg(format!("--port={port}"))
            .args(["--bind-address=127.0.0.1", "--skip-name-resolve", "--innodb-buffer-pool-size=32M"])
            .args(root_user)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd starts");
        // In the container the clients' default socket and port are the server's; here a
        // client options file in the probe's HOME says where this server is.
        let options = format!("[client]\nsocket={}\nport={port}\n", dir.path().join("mysql.sock").display());
        std::fs::write(dir.path().join(".my.cnf"), options).unwrap();
        let server = Self { child, dir, port };
        server.wait_for_socket();
        server.root_sql(&format!(
            "ALTER USER 'root'@'localhost' IDENTIFIED BY '{ROOT_PASSWORD}'; \
             CREATE DATABASE visitors; \
             CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'; \
             GRANT ALL ON visitors.* TO '{USER}'@'%';"
        ));
        Some(server)
    }

    fn wait_for_socket(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.socket().exists() {
            assert!(Instant::now() < deadline, "mariadbd did not start: {}", self.error_log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    fn root_sql(&self, sql: &str) {
        let output = Command::new(program("mysql").unwrap())
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-uroot", "-e", sql])
            .output()
            .unwrap();
        assert!(output.status.success(), "{sql}: {}", String::from_utf8_lossy(&output.stderr));
    }

    /// Runs a probe command of the MySQL container with the container's environment (the
    /// image's defaults, 3306 and its socket, pointed at this server).
    fn run_probe(&self, probe: &Probe, password: &str) -> bool {
        self.run_probe_with(probe, password, ROOT_PASSWORD)
    }

    fn run_probe_with(&self, probe: &Probe, password: &str, root_password: &str) -> bool {
        let command = probe.exec.as_ref().unwrap().command.clone().unwrap();
        Command::new(&command[0])
            .args(&command[1..])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default() + ":/usr/sbin:/usr/bin")
            .env("HOME", self.dir.path())
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
    let sts = statefulset(&app, "creds", None);
    let container = sts.spec.unwrap().template.spec.unwrap().containers.remove(0);
    (container.readiness_probe.unwrap(), container.liveness_probe.unwrap())
}

fn target(port: u16, password: &str) -> Target {
    Target { host: "127.0.0.1".into(), port, user: USER.into(), password: password.into() }
}

#[tokio::test]
async fn controller_select_one_succeeds_and_explains_failures() {
    let Some(server) = Server::start() else { return };
    let probe = MysqlProbe { timeout: Duration::from_secs(5) };

    assert_eq!(probe.select_one(&target(server.port, PASSWORD)).await, Ok(()));

    let denied = probe.select_one(&target(server.port, "wrong")).await.unwrap_err();
    assert!(denied.starts_with("access denied for user visitors"), "{denied}");
    assert!(!denied.contains("wrong") && !denied.contains(PASSWORD), "no password in the reason: {denied}");

    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    assert_eq!(probe.select_one(&target(closed, PASSWORD)).await, Err("connection refused".to_string()));
}

#[test]
fn readiness_probe_passes_only_when_the_application_user_can_query() {
    let Some(server) = Server::start() else { return };
    let (readiness, _) = probes();
    assert!(server.run_probe(&readiness, PASSWORD), "the probe must pass against a running server");
    assert!(!server.run_probe(&readiness, "wrong"), "the probe must fail when the credentials do not work");
}

#[test]
fn liveness_probe_follows_the_server_process() {
    let Some(mut server) = Server::start() else { return };
    let (_, liveness) = probes();
    assert!(server.run_probe(&liveness, PASSWORD), "alive");
    assert!(
        server.run_probe_with(&liveness, "wrong", "also-wrong"),
        "credentials never make liveness fail (a restart would not fix them)"
    );
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    assert!(!server.run_probe(&liveness, PASSWORD), "a dead server fails liveness");
}
