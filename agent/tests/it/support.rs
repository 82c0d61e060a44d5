//! Real servers for the tests: a throwaway MariaDB and a moto S3 server, each started on a
//! free port in a temporary directory and killed when dropped. Without the programs the tests
//! skip, unless VISITORS_REQUIRE_MARIADB=1 / VISITORS_REQUIRE_S3=1 asks them to fail.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use visitors_agent::mysql::ConnectionSettings;

pub const USER: &str = "agent";
pub const PASSWORD: &str = "Pa55-word-never-shown";

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"])
        .map(|dir| Path::new(dir).join(name))
        .find(|candidate| candidate.is_file())
}

fn required(variable: &str) -> bool {
    std::env::var(variable).is_ok_and(|v| v == "1")
}

/// Skips (returns None) or fails when a program is missing.
fn programs_or_skip(names: &[&str], require_variable: &str) -> Option<Vec<PathBuf>> {
    let found: Vec<Option<PathBuf>> = names.iter().map(|n| find_program(n)).collect();
    if let Some(missing) = names.iter().zip(&found).find(|(_, f)| f.is_none()).map(|(n, _)| n) {
        let message = format!("`{missing}` is not installed (see docs/agent.md for the test requirements)");
        if required(require_variable) {
            panic!("{message}, and {require_variable}=1 requires it");
        }
        eprintln!("SKIPPED: {message}");
        return None;
    }
    Some(found.into_iter().flatten().collect())
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

pub struct MariaDb {
    child: Option<Child>,
    dir: tempfile::TempDir,
    pub port: u16,
    client: PathBuf,
}

impl MariaDb {
    pub fn start() -> Option<Self> {
        let programs = programs_or_skip(&["mariadbd", "mariadb-install-db", "mariadb"], "VISITORS_REQUIRE_MARIADB")?;
        let (server, install, client) = (programs[0].clone(), programs[1].clone(), programs[2].clone());
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let root_user: &[&str] = if is_root() { &["--user=root"] } else { &[] };
        let installed = Command::new(&install)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .args(["--auth-root-authentication-method=socket", "--skip-test-db"])
            .args(root_user)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("mariadb-install-db runs");
        assert!(
            installed.status.success(),
            "mariadb-install-db failed: {}",
            String::from_utf8_lossy(&installed.stderr)
        );
        let port = free_port();
        let child = Command::new(&server)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", dir.path().join("mysql.sock").display()))
            .arg(format!("--pid-file={}", dir.path().join("mysql.pid").display()))
            .arg(format!("--log-error={}", dir.path().join("error.log").display()))
            .arg(format!("--log-bin={}", dir.path().join("binlog").display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .arg(format!("--port={port}"))
            .args([
                "--bind-address=127.0.0.1",
                "--server-id=1",
                "--skip-name-resolve",
                "--local-infile=1",
                "--innodb-buffer-pool-size=64M",
                "--innodb-log-file-size=32M",
                "--innodb-flush-log-at-trx-commit=2",
                "--sync-binlog=0",
                "--skip-innodb-doublewrite",
                "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_unicode_ci",
            ])
            .args(root_user)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd starts");
        let mut server = Self { child: Some(child), dir, port, client };
        server.wait_until_ready();
        server.sql(&format!(
            "CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'; GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'%' WITH GRANT OPTION;"
        ));
        Some(server)
    }

    fn wait_until_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.try_sql("SELECT 1").is_ok() {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("mariadbd exited with {status}: {}", self.error_log());
            }
            assert!(Instant::now() < deadline, "mariadbd did not start: {}", self.error_log());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    pub fn settings(&self) -> ConnectionSettings {
        ConnectionSettings {
            host: "127.0.0.1".into(),
            port: self.port,
            user: USER.into(),
            password: Some(PASSWORD.into()),
        }
    }

    /// The `mariadb` client connected as root, for commands a person would type.
    pub fn client_shell_prefix(&self) -> String {
        format!(
            "{} --no-defaults --socket={} -uroot --default-character-set=utf8mb4",
            self.client.display(),
            self.dir.path().join("mysql.sock").display()
        )
    }

    fn try_sql(&self, sql: &str) -> Result<String, String> {
        let output = Command::new(&self.client)
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.dir.path().join("mysql.sock").display()))
            .args([
                "-uroot",
                "--database=mysql",
                "--batch",
                "--skip-column-names",
                "--default-character-set=utf8mb4",
                "-e",
                sql,
            ])
            .output()
            .map_err(|e| e.to_string())?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    /// Runs SQL as root and returns its tab-separated output; panics on failure.
    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql).unwrap_or_else(|e| panic!("SQL failed: {e}\n{sql}"))
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.kill();
    }
}

pub struct Moto {
    child: Child,
    pub port: u16,
}

impl Moto {
    pub fn start() -> Option<Self> {
        let program = programs_or_skip(&["moto_server"], "VISITORS_REQUIRE_S3")?.remove(0);
        let port = free_port();
        let child = Command::new(program)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server starts");
        let moto = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while moto.request("GET", "/moto-api/", "").is_err() {
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(moto)
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A plain HTTP request; returns the status code.
    fn request(&self, method: &str, path: &str, body: &str) -> std::io::Result<u16> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        )?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok());
        status.ok_or_else(|| std::io::Error::other(format!("bad HTTP response: {response}")))
    }

    pub fn create_bucket(&self, bucket: &str) {
        let status = self.request("PUT", &format!("/{bucket}"), "").unwrap();
        assert_eq!(status, 200, "creating bucket {bucket}");
    }

    /// From now on moto checks request signatures.
    pub fn require_signatures(&self) {
        let status = self.request("POST", "/moto-api/reset-auth", "0").unwrap();
        assert_eq!(status, 200);
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
