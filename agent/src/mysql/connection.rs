//! Opening connections and turning driver errors into ones a user can act on.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder};

use super::tls::{self, HandshakeFailure, TlsSettings};
use super::wire::{DataConn, Login, WireError};
use crate::error::{AgentError, Result};

/// Server error codes the agent tells apart.
mod codes {
    pub const ACCESS_DENIED: u16 = 1045;
    pub const BAD_DB: u16 = 1049;
    pub const SPECIFIC_ACCESS_DENIED: u16 = 1227;
    pub const SERVER_SHUTDOWN: u16 = 1053;
    pub const CONNECTION_KILLED: u16 = 1927;
    pub const QUERY_INTERRUPTED: u16 = 1317;
    pub const LOCAL_INFILE_DISABLED_MYSQL: u16 = 3948;
    pub const NOT_ALLOWED_COMMAND: u16 = 1148;
    pub const LOCAL_INFILE_DISABLED_MARIADB: u16 = 4166;
    pub const SECURE_TRANSPORT_REQUIRED: u16 = 3159;
}

#[derive(Clone)]
pub struct ConnectionSettings {
    pub host: String,
    pub port: u16,
    pub user: String,
    /// Never printed: `Debug` is implemented by hand below.
    pub password: Option<String>,
    /// TLS: `--ssl-mode` and the CA of `--ssl-ca`.
    pub tls: TlsSettings,
}

impl std::fmt::Debug for ConnectionSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionSettings")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("tls", &self.tls)
            .finish()
    }
}

impl ConnectionSettings {
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Opens connections with fixed session settings and maps their errors.
#[derive(Clone, Debug)]
pub struct Connector {
    settings: ConnectionSettings,
}

/// Every session reads and writes times in UTC, so TIMESTAMP values survive a move between
/// servers in different time zones.
const SESSION_TIME_ZONE: &str = "SET time_zone = '+00:00'";

impl Connector {
    pub fn new(settings: ConnectionSettings) -> Self {
        Self { settings }
    }

    pub fn settings(&self) -> &ConnectionSettings {
        &self.settings
    }

    pub async fn connect(&self) -> Result<Conn> {
        match Conn::new(self.opts()).await {
            Ok(conn) => Ok(conn),
            Err(error) => Err(self.explain_refusal(self.error("connecting", error))),
        }
    }

    fn opts(&self) -> OptsBuilder {
        OptsBuilder::default()
            .ip_or_hostname(self.settings.host.clone())
            .tcp_port(self.settings.port)
            .user(Some(self.settings.user.clone()))
            .pass(self.settings.password.clone())
            .prefer_socket(false)
            .ssl_opts(self.settings.tls.ssl_opts())
            .stmt_cache_size(0)
            .init(vec![SESSION_TIME_ZONE])
    }

    /// A plain-text login refused as if the password were wrong may be refused for want of TLS
    /// (see [`AgentError::WrongCredentialsInPlainText`]): the error says both.
    fn explain_refusal(&self, error: AgentError) -> AgentError {
        match error {
            AgentError::WrongCredentials { user, address } if !self.settings.tls.enabled() => {
                AgentError::WrongCredentialsInPlainText { user, address }
            }
            other => other,
        }
    }

    /// Opens a backup data session ([`super::wire`]) with the same session settings.
    pub async fn connect_data(&self) -> Result<DataConn> {
        let settings = &self.settings;
        let tls = settings.tls.client_config().map_err(|e| tls_failure(settings, &e))?;
        let login = Login {
            host: &settings.host,
            port: settings.port,
            user: &settings.user,
            password: settings.password.as_deref(),
            tls,
        };
        let mut conn = match DataConn::connect(login).await {
            Ok(conn) => conn,
            Err(error) => return Err(self.explain_refusal(self.wire_error("connecting", error))),
        };
        self.execute_data(&mut conn, SESSION_TIME_ZONE, "preparing the session").await?;
        Ok(conn)
    }

    /// Runs a statement that returns nothing.
    pub async fn execute(&self, conn: &mut Conn, sql: &str, during: &str) -> Result<()> {
        conn.query_drop(sql).await.map_err(|e| self.error(during, e))
    }

    /// Runs a statement that returns nothing, in a data session.
    pub async fn execute_data(&self, conn: &mut DataConn, sql: &str, during: &str) -> Result<()> {
        conn.execute(sql).await.map_err(|e| self.wire_error(during, e))
    }

    pub fn error(&self, during: &str, error: mysql_async::Error) -> AgentError {
        map_error(&self.settings, during, error)
    }

    pub fn wire_error(&self, during: &str, error: WireError) -> AgentError {
        let settings = &self.settings;
        match error {
            WireError::Server { code, message } => server_error(settings, during, code, message),
            WireError::Io(io) => io_error(settings, during, io.to_string()),
            WireError::Closed => io_error(settings, during, "connection closed".into()),
            WireError::TlsNotOffered => AgentError::TlsNotOffered { address: settings.address() },
            WireError::Tls(error) => tls_failure(settings, &error),
            other @ (WireError::UnsupportedAuthPlugin(_) | WireError::Protocol(_) | WireError::TlsServerName(_)) => {
                AgentError::Client { during: during.into(), reason: other.to_string() }
            }
        }
    }
}

/// The user-facing error for a driver error.
pub fn map_error(settings: &ConnectionSettings, during: &str, error: mysql_async::Error) -> AgentError {
    use mysql_async::{DriverError, Error};
    if let Some(tls) = tls::rustls_error(&error) {
        return tls_failure(settings, tls);
    }
    match error {
        Error::Driver(DriverError::NoClientSslFlagFromServer) => {
            AgentError::TlsNotOffered { address: settings.address() }
        }
        Error::Server(server) => server_error(settings, during, server.code, server.message),
        Error::Io(io) => io_error(settings, during, io.to_string()),
        Error::Driver(DriverError::ConnectionClosed) => io_error(settings, during, "connection closed".into()),
        other => AgentError::Client { during: during.into(), reason: other.to_string() },
    }
}

/// The user-facing error for an error the server sent.
fn server_error(settings: &ConnectionSettings, during: &str, code: u16, message: String) -> AgentError {
    match code {
        codes::ACCESS_DENIED => {
            AgentError::WrongCredentials { user: settings.user.clone(), address: settings.address() }
        }
        codes::BAD_DB => AgentError::MissingDatabase(quoted_name(&message)),
        codes::SERVER_SHUTDOWN | codes::CONNECTION_KILLED | codes::QUERY_INTERRUPTED => {
            AgentError::ConnectionLost { during: during.into(), reason: message }
        }
        codes::LOCAL_INFILE_DISABLED_MYSQL | codes::LOCAL_INFILE_DISABLED_MARIADB | codes::NOT_ALLOWED_COMMAND => {
            AgentError::LocalInfileDisabled
        }
        codes::SPECIFIC_ACCESS_DENIED => {
            AgentError::MissingPrivilege { user: settings.user.clone(), operation: during.into(), message }
        }
        _ if requires_secure_transport(code, &message) => {
            AgentError::TlsRequiredByServer { address: settings.address() }
        }
        code => AgentError::Server { during: during.into(), code, message },
    }
}

/// The server refuses plain text (`require_secure_transport=ON`): MySQL says so with its own
/// code, MariaDB with its message.
fn requires_secure_transport(code: u16, message: &str) -> bool {
    code == codes::SECURE_TRANSPORT_REQUIRED || message.contains("insecure transport are prohibited")
}

/// The user-facing error for a failed TLS handshake.
fn tls_failure(settings: &ConnectionSettings, error: &rustls::Error) -> AgentError {
    let address = settings.address();
    match HandshakeFailure::of(error) {
        HandshakeFailure::Untrusted(reason) => AgentError::TlsUntrusted { address, reason },
        HandshakeFailure::WrongHost(reason) => {
            AgentError::TlsWrongHost { address, host: settings.host.clone(), reason }
        }
        HandshakeFailure::Other(reason) => AgentError::Tls { address, reason },
    }
}

/// The user-facing error for a connection that failed or ended: unreachable while connecting,
/// lost afterwards.
fn io_error(settings: &ConnectionSettings, during: &str, reason: String) -> AgentError {
    if during == "connecting" {
        AgentError::Unreachable { address: settings.address(), reason }
    } else {
        AgentError::ConnectionLost { during: during.into(), reason }
    }
}

/// The name in a server message such as "Unknown database 'x'".
fn quoted_name(message: &str) -> String {
    message.split('\'').nth(1).unwrap_or(message).to_string()
}

/// Server flavour (`mariadb` or `mysql`) and full version, for the manifest.
pub async fn describe_server(connector: &Connector, conn: &mut Conn) -> Result<(String, String)> {
    let version: Option<String> =
        conn.query_first("SELECT VERSION()").await.map_err(|e| connector.error("reading the server version", e))?;
    let version = version.unwrap_or_default();
    let flavour = if version.to_ascii_lowercase().contains("mariadb") { "mariadb" } else { "mysql" };
    Ok((flavour.into(), version))
}
