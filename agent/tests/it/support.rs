//! Real servers for the tests: a throwaway MariaDB (from visitors-test-support) with the
//! agent's account, and a moto S3 server on a free port, killed when dropped. Without the
//! programs the tests skip, unless VISITORS_REQUIRE_MARIADB=1 / VISITORS_REQUIRE_S3=1 asks them
//! to fail.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::ops::{Deref, DerefMut};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use visitors_agent::mysql::{ConnectionSettings, TlsSettings};
pub use visitors_test_support::{ServerTls, free_port, programs_or_skip};

pub const USER: &str = "agent";
pub const PASSWORD: &str = "Pa55-word-never-shown";

/// The shared throwaway server, with an account for the agent that has every privilege. It
/// offers TLS, which the agent uses by default.
pub struct MariaDb(visitors_test_support::MariaDb);

impl MariaDb {
    pub fn start() -> Option<Self> {
        Self::start_with(&[])
    }

    /// A server logging in row format, as the VisitorsApp controller runs it (what the
    /// archiver needs).
    pub fn start_row_logging() -> Option<Self> {
        Self::start_with(&["--binlog-format=ROW"])
    }

    fn start_with(options: &[&str]) -> Option<Self> {
        Self::start_configured(options, ServerTls::On)
    }

    /// The primary of a replicated app: server id 1, replicating with GTIDs as the VisitorsApp
    /// controller runs it.
    pub fn start_primary() -> Option<Self> {
        let options = visitors_test_support::MariaDb::replication_options(1);
        Self::start_with(&options.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// A read-only replica of `primary` with its own `server_id`, caught up with it. The
    /// agent's account reaches it by replication (a replica writes nothing of its own).
    pub fn start_replica_of(primary: &MariaDb, server_id: u32) -> Option<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let options = visitors_test_support::MariaDb::replication_options(server_id);
        let options: Vec<&str> = options.iter().map(String::as_str).collect();
        let server = visitors_test_support::MariaDb::start_configured(&options, ServerTls::On)?;
        server.replicate_from(primary, USER, PASSWORD);
        Some(Self(server))
    }

    /// A server on a prepared copy of another's data directory, with the copy's accounts.
    pub fn start_on_copy(copy: &std::path::Path) -> Option<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Some(Self(visitors_test_support::MariaDb::start_on_copy(copy)?))
    }

    /// A server started with `options` too, offering TLS as `tls` says.
    pub fn start_configured(options: &[&str], tls: ServerTls) -> Option<Self> {
        // What the agent's binaries do first: mysql_async's TLS needs a process-wide provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let server = visitors_test_support::MariaDb::start_configured(options, tls)?;
        server.sql(&format!(
            "CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'; GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'%' WITH GRANT OPTION;"
        ));
        Some(Self(server))
    }

    /// The agent's settings by default: TLS without checking the certificate.
    pub fn settings(&self) -> ConnectionSettings {
        self.settings_with(TlsSettings::required())
    }

    pub fn settings_with(&self, tls: TlsSettings) -> ConnectionSettings {
        ConnectionSettings {
            host: "127.0.0.1".into(),
            port: self.port,
            user: USER.into(),
            password: Some(PASSWORD.into()),
            tls,
        }
    }
}

impl Deref for MariaDb {
    type Target = visitors_test_support::MariaDb;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for MariaDb {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
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
