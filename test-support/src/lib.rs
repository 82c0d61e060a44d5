//! Real servers for tests, shared by every crate that talks to MySQL: a throwaway MariaDB
//! (Debian's `mariadb-server`) started on a free port in a temporary directory and killed when
//! dropped, offering TLS with a certificate of its own test CA ([`tls`]). Without the programs,
//! tests skip with a line saying why, unless `VISITORS_REQUIRE_MARIADB=1` (CI) asks them to fail.

pub mod otlp;
pub mod tls;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A program on the PATH or in the sbin folders.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"])
        .map(|dir| Path::new(dir).join(name))
        .find(|candidate| candidate.is_file())
}

/// Whether `variable=1` asks missing programs to fail the tests instead of skipping them.
pub fn required(variable: &str) -> bool {
    std::env::var(variable).is_ok_and(|v| v == "1")
}

/// The programs, or `None` (with a SKIPPED line saying which is missing) when one is missing;
/// a failure instead when `require_variable=1`.
pub fn programs_or_skip(names: &[&str], require_variable: &str) -> Option<Vec<PathBuf>> {
    let found: Vec<Option<PathBuf>> = names.iter().map(|n| find_program(n)).collect();
    if let Some(missing) = names.iter().zip(&found).find(|(_, f)| f.is_none()).map(|(n, _)| n) {
        let message = format!("`{missing}` is not installed (see docs/development.md for the test requirements)");
        if required(require_variable) {
            panic!("{message}, and {require_variable}=1 requires it");
        }
        eprintln!("SKIPPED: {message}");
        return None;
    }
    Some(found.into_iter().flatten().collect())
}

/// A TCP port free on the loopback interface right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Whether the tests run as root (mariadbd then needs `--user=root`).
pub fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

/// A MariaDB server in a temporary directory, on a free port of 127.0.0.1 and its own socket,
/// with the binary log and `LOAD DATA LOCAL` on; root logs in over the socket. It offers TLS
/// unless started with [`ServerTls::Off`]. Killed when dropped.
pub struct MariaDb {
    child: Option<Child>,
    dir: tempfile::TempDir,
    pub port: u16,
    client: PathBuf,
    server: PathBuf,
    /// Server options besides the harness's own.
    options: Vec<String>,
    /// The CA of the server's certificate, when it offers TLS.
    ca_pem: Option<PathBuf>,
}

/// Whether and how a test server offers TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerTls {
    /// A certificate for `localhost` and `127.0.0.1`; plain text still accepted.
    On,
    /// TLS only: `--require-secure-transport=ON`.
    Required,
    /// A certificate for these names alone.
    Names(Vec<String>),
    /// No TLS at all.
    Off,
}

/// The names of the test server's certificate.
pub const SERVER_NAMES: [&str; 2] = ["localhost", "127.0.0.1"];

impl MariaDb {
    pub fn start() -> Option<Self> {
        Self::start_with(&[])
    }

    /// A server started with `options` too (kept across [`MariaDb::restart`]).
    pub fn start_with(options: &[&str]) -> Option<Self> {
        Self::start_configured(options, ServerTls::On)
    }

    /// A server started with `options` too, offering TLS as `tls` says.
    pub fn start_configured(options: &[&str], tls: ServerTls) -> Option<Self> {
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
        let mut options: Vec<String> = options.iter().map(ToString::to_string).collect();
        let ca_pem = tls_options(dir.path(), &tls, &mut options);
        let mut server = Self { child: None, dir, port, client, server, options, ca_pem };
        server.spawn();
        server.wait_until_ready();
        Some(server)
    }

    /// A server on a copy of another's data directory (a prepared physical backup), moved
    /// into its own folder: its accounts are the copy's.
    pub fn start_on_copy(copy: &Path) -> Option<Self> {
        let programs = programs_or_skip(&["mariadbd", "mariadb"], "VISITORS_REQUIRE_MARIADB")?;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tmp")).unwrap();
        std::fs::rename(copy, dir.path().join("data")).expect("move the copy into the server's folder");
        let mut options = vec!["--skip-slave-start".to_string()];
        let ca_pem = tls_options(dir.path(), &ServerTls::On, &mut options);
        let (server, client) = (programs[0].clone(), programs[1].clone());
        let mut server = Self { child: None, dir, port: free_port(), client, server, options, ca_pem };
        server.spawn();
        server.wait_until_ready();
        Some(server)
    }

    /// Starts mariadbd on the data directory and port of this server.
    fn spawn(&mut self) {
        let dir = self.dir.path();
        let root_user: &[&str] = if is_root() { &["--user=root"] } else { &[] };
        let child = Command::new(&self.server)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--socket={}", dir.join("mysql.sock").display()))
            .arg(format!("--pid-file={}", dir.join("mysql.pid").display()))
            .arg(format!("--log-error={}", dir.join("error.log").display()))
            .arg(format!("--log-bin={}", dir.join("binlog").display()))
            .arg(format!("--tmpdir={}", dir.join("tmp").display()))
            .arg(format!("--port={}", self.port))
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
            .args(&self.options)
            .args(root_user)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd starts");
        self.child = Some(child);
    }

    /// Stops the server (SIGKILL, as a crash) and starts it again on the same data and port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
        self.wait_until_ready();
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

    /// The PEM file of the CA that signed the server's certificate (`--ssl-ca`), when the
    /// server offers TLS.
    pub fn ca_pem(&self) -> Option<&Path> {
        self.ca_pem.as_deref()
    }

    /// The server's Unix socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("mysql.sock")
    }

    /// The server's temporary directory (data, socket, logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The `mariadb` client connected as root, for commands a person would type.
    pub fn client_shell_prefix(&self) -> String {
        format!(
            "{} --no-defaults --socket={} -uroot --default-character-set=utf8mb4",
            self.client.display(),
            self.dir.path().join("mysql.sock").display()
        )
    }

    /// Runs SQL as root over the socket; the client's error text on failure.
    pub fn try_sql(&self, sql: &str) -> Result<String, String> {
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

    /// The options of one server of a set replicating with GTIDs, as the VisitorsApp
    /// controller runs them: its own server id, a binary log that holds what it applies too,
    /// strict GTID order, row format, and no replication at start-up.
    pub fn replication_options(server_id: u32) -> Vec<String> {
        vec![
            format!("--server-id={server_id}"),
            "--log-slave-updates".into(),
            "--gtid-strict-mode=ON".into(),
            "--binlog-format=ROW".into(),
            "--skip-slave-start".into(),
        ]
    }

    /// Makes this server a read-only replica of `primary`, replicating with GTIDs from the
    /// primary's first transaction as `user` (an account of the primary); returns once it has
    /// applied everything the primary had. A replica must have written nothing of its own:
    /// the primary's accounts reach it by replication.
    pub fn replicate_from(&self, primary: &MariaDb, user: &str, password: &str) {
        self.sql(&format!(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, MASTER_USER = '{user}', \
             MASTER_PASSWORD = '{password}', MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1; \
             SET GLOBAL read_only = ON; START SLAVE",
            primary.port
        ));
        self.catch_up_with(primary);
    }

    /// Waits until this replica has applied everything `primary` has logged.
    pub fn catch_up_with(&self, primary: &MariaDb) {
        let position = primary.sql("SELECT @@GLOBAL.gtid_binlog_pos");
        let waited = self.sql(&format!("SELECT MASTER_GTID_WAIT('{}', 60)", position.trim()));
        assert_eq!(
            waited.trim(),
            "0",
            "the replica did not apply {} within 60 s: {}",
            position.trim(),
            self.sql("SHOW SLAVE STATUS")
        );
    }

    /// Whether both replication threads of this replica run.
    pub fn is_replicating(&self) -> bool {
        let running =
            "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'SLAVE_RUNNING'";
        self.sql(running).trim() == "ON"
    }

    /// Makes this replica a primary, as a failover does: replication stopped and forgotten,
    /// writes allowed.
    pub fn promote(&self) {
        self.sql("STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF");
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Writes the certificates `tls` asks for into `dir` and adds their server options; the CA's
/// PEM file, if any.
fn tls_options(dir: &Path, tls: &ServerTls, options: &mut Vec<String>) -> Option<PathBuf> {
    let names: Vec<String> = match tls {
        ServerTls::Off => return None,
        ServerTls::Names(names) => names.clone(),
        ServerTls::On | ServerTls::Required => SERVER_NAMES.iter().map(ToString::to_string).collect(),
    };
    let files = tls::write_server_files(&dir.join("tls"), &names);
    options.extend([
        format!("--ssl-ca={}", files.ca.display()),
        format!("--ssl-cert={}", files.cert.display()),
        format!("--ssl-key={}", files.key.display()),
    ]);
    if *tls == ServerTls::Required {
        options.push("--require-secure-transport=ON".into());
    }
    Some(files.ca)
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Extracts mariadb-backup's `stream` into the new folder `target` with `mbstream -x`, then
/// prepares it with `mariadb-backup --prepare`: a data directory a server starts on. Fails the
/// test if either tool fails.
pub fn extract_and_prepare(stream: &[u8], target: &Path) {
    extract(stream, target);
    prepare(target);
}

/// Extracts mariadb-backup's `stream` into the new folder `target` with `mbstream -x`. Fails
/// the test if it fails.
pub fn extract(stream: &[u8], target: &Path) {
    use std::io::Write;
    std::fs::create_dir(target).unwrap_or_else(|e| panic!("create {}: {e}", target.display()));
    let mut extract = Command::new("mbstream")
        .arg("-x")
        .arg("-C")
        .arg(target)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("mbstream starts");
    extract.stdin.take().expect("its input").write_all(stream).expect("mbstream reads the stream");
    assert!(extract.wait().unwrap().success(), "mbstream extracts the stream");
}

/// Prepares the extracted backup in `target` with `mariadb-backup --prepare`: a data directory
/// a server starts on. Fails the test if it fails.
pub fn prepare(target: &Path) {
    let prepared = Command::new("mariadb-backup")
        .arg("--prepare")
        .arg(format!("--target-dir={}", target.display()))
        .output()
        .expect("mariadb-backup starts");
    assert!(prepared.status.success(), "mariadb-backup --prepare: {}", String::from_utf8_lossy(&prepared.stderr));
}
