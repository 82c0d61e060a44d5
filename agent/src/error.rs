//! Every way the agent can fail, each with a one-line message a user can act on.
//! Messages never contain credentials: they are built from user names, addresses, paths
//! and server messages only.

use thiserror::Error;

pub type Result<T, E = AgentError> = std::result::Result<T, E>;

#[derive(Debug, Error)]
pub enum AgentError {
    #[error("invalid arguments: {0}")]
    Usage(String),

    #[error("cannot read the password file {path}: {reason}")]
    PasswordFile { path: String, reason: String },

    #[error(
        "MySQL at {address} rejected user '{user}': wrong user name or password (check MYSQL_PWD or --password-file)"
    )]
    WrongCredentials { user: String, address: String },

    /// MariaDB refuses a plain-text login to a server that requires TLS exactly as it refuses
    /// a wrong password (error 1045), so the two cannot be told apart without logging in again
    /// over TLS, which would hand the password to a server nobody verified.
    #[error(
        "MySQL at {address} rejected user '{user}' in plain text (--ssl-mode=disabled): either the user name or password is wrong (check MYSQL_PWD or --password-file), or the server requires TLS (drop --ssl-mode=disabled and pass its CA with --ssl-ca)"
    )]
    WrongCredentialsInPlainText { user: String, address: String },

    #[error(
        "cannot reach the MySQL server at {address} ({reason}): check --host and --port and that the server is running"
    )]
    Unreachable { address: String, reason: String },

    #[error("cannot use the CA file {path} of --ssl-ca: {reason}")]
    SslCaFile { path: String, reason: String },

    #[error(
        "the server at {address} does not offer TLS; configure ssl-cert/ssl-key on it, or pass --ssl-mode=disabled to connect in plain text"
    )]
    TlsNotOffered { address: String },

    #[error(
        "the server at {address} requires TLS (require_secure_transport=ON, or the account's REQUIRE SSL) and --ssl-mode=disabled was given: drop --ssl-mode=disabled to connect over TLS"
    )]
    TlsRequiredByServer { address: String },

    #[error(
        "the certificate of the server at {address} is not trusted ({reason}): pass the CA that signed it with --ssl-ca"
    )]
    TlsUntrusted { address: String, reason: String },

    #[error(
        "the certificate of the server at {address} does not name the host {host} ({reason}): connect with a --host the certificate names, or pass --ssl-mode=verify-ca to check only that the CA signed it"
    )]
    TlsWrongHost { address: String, host: String, reason: String },

    #[error("the TLS handshake with the server at {address} failed: {reason}")]
    Tls { address: String, reason: String },

    #[error("database '{0}' does not exist on the server: check --database")]
    MissingDatabase(String),

    #[error(
        "the MySQL connection was lost while {during} ({reason}): the server stopped or dropped the connection; run the operation again once it is back"
    )]
    ConnectionLost { during: String, reason: String },

    #[error("MySQL refused {during}: {message} (error {code})")]
    Server { during: String, code: u16, message: String },

    #[error("MySQL client error while {during}: {reason}")]
    Client { during: String, reason: String },

    #[error("bucket '{bucket}' does not exist: create it or fix the bucket name in {location}")]
    MissingBucket { bucket: String, location: String },

    #[error(
        "the object storage rejected the credentials for {location} ({reason}): check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and the bucket policy"
    )]
    StorageCredentialsRejected { location: String, reason: String },

    #[error("no space left on the device holding {location}: free some space or use a larger volume")]
    DiskFull { location: String },

    #[error("storage error at {location}: {reason}")]
    Storage { location: String, reason: String },

    #[error("invalid location '{location}': {reason}")]
    InvalidLocation { location: String, reason: String },

    #[error("{location} already holds a backup (manifest.json exists): back up to a new location")]
    BackupExists { location: String },

    #[error(
        "another backup is writing to this location, or one died there ({holder}): inspect and remove {location}/.backup.lock"
    )]
    BackupLocked { location: String, holder: String },

    #[error(
        "a backup is writing to {location}, or one died there ({holder}): nothing was deleted; if no backup runs there, delete with --break-lock"
    )]
    LocationLocked { location: String, holder: String },

    #[error(
        "{location} does not look like a backup ({reason}): nothing was deleted; name the folder or prefix of one backup, the one holding its manifest.json"
    )]
    NotABackup { location: String, reason: String },

    #[error(
        "the backup at {location} is incomplete: manifest.json is missing, so the backup never finished; use another backup"
    )]
    ManifestMissing { location: String },

    #[error("manifest.json at {location} is unreadable: {reason}")]
    ManifestInvalid { location: String, reason: String },

    #[error(
        "the backup is corrupt or was edited: manifest.json at {location} has SHA-256 {actual}, the backup run recorded {expected}; use another backup"
    )]
    ManifestChanged { location: String, expected: String, actual: String },

    #[error("the backup is incomplete: file {file} listed in manifest.json is missing; use another backup")]
    FileMissing { file: String },

    #[error("the backup is corrupt: file {file} has {actual} bytes, manifest.json says {expected}; use another backup")]
    SizeMismatch { file: String, expected: u64, actual: u64 },

    #[error(
        "the backup is corrupt: file {file} has SHA-256 {actual}, manifest.json says {expected}; use another backup"
    )]
    ChecksumMismatch { file: String, expected: String, actual: String },

    #[error(
        "the backup is corrupt: file {file} does not decrypt with the key that opens its manifest ({reason}); use another backup"
    )]
    Undecryptable { file: String, reason: String },

    /// `subject`: what was encrypted, "the backup" or a segment of its archive.
    #[error("{subject} was encrypted with key '{key_id}', {why}")]
    EncryptionKeyMissing { subject: &'static str, key_id: String, why: String },

    #[error("key '{key_id}' in the keys directory is not the key {subject} was encrypted with")]
    EncryptionKeyWrong { subject: &'static str, key_id: String },

    #[error("key '{key_id}' in the keys directory cannot be used: {reason}")]
    EncryptionKeyUnusable { key_id: String, reason: String },

    #[error("cannot use the encryption key file {path}: {reason}")]
    EncryptionKeyFile { path: String, reason: String },

    #[error("the backup file {file} cannot be loaded: {reason}")]
    BadChunk { file: String, reason: String },

    #[error("table {table} already exists on the server: restore into an empty database or pass --drop-existing")]
    TableExists { table: String },

    #[error("{object} already exists on the server: restore into an empty database or pass --drop-existing")]
    ObjectExists { object: String },

    #[error(
        "the server refuses LOAD DATA LOCAL INFILE: set the server variable local_infile=ON (SET GLOBAL local_infile=1)"
    )]
    LocalInfileDisabled,

    #[error("user '{user}' lacks a privilege needed while {operation}: {message}")]
    MissingPrivilege { user: String, operation: String, message: String },

    #[error("{0}; nothing was restored")]
    ServerCannotLoad(String),

    #[error("table {table}, column {column}: its values could not be restored as they are: {why}")]
    UnrestorableColumn { table: String, column: String, why: String },

    #[error(
        "{error}; restored before the failure: {restored} (the database that failed and those after it were left as they were)"
    )]
    PartiallyRestored { restored: String, error: Box<AgentError> },

    #[error(
        "{error}; the tables of database {database} were restored, but its views, routines or triggers are incomplete: fix the cause and restore again with --drop-existing"
    )]
    ObjectsIncomplete { database: String, error: Box<AgentError> },

    #[error("another restore of database {database} is running on this server: wait for it to end")]
    RestoreRunning { database: String },

    #[error(
        "the server has {available_mib} MiB free, and restoring database {database} needs about {needed_mib} MiB beside what it holds: free space on the server or restore fewer databases (--database)"
    )]
    InsufficientSpace { database: String, needed_mib: u64, available_mib: u64 },

    #[error("verification failed: {0}")]
    VerifyMismatch(String),

    #[error(
        "the restored table {table} does not hold what was backed up: its content digest is {actual}, the backup recorded {expected}; the dump did not store the rows it read, so this backup cannot be trusted: use another backup"
    )]
    ContentDiffers { table: String, expected: String, actual: String },

    #[error(
        "the restored table {table} reads back otherwise than the backup recorded, but this server ({server}) is not the version backed up ({backed_up}), whose text of a value may differ: drill on the backed-up version's image to tell"
    )]
    ContentDiffersAcrossVersions { table: String, server: String, backed_up: String },

    #[error("{object} of the backup is missing after the restore; this backup cannot be trusted: use another backup")]
    DrillObjectMissing { object: String },

    #[error(
        "the server holds database {database}: verify --deep restores the backup (and its accounts) into a scratch server, which must hold no database but the system ones"
    )]
    DrillTargetNotEmpty { database: String },

    #[error("the binary log archive at {location} is unreadable: {reason}")]
    ArchiveInvalid { location: String, reason: String },

    #[error(
        "another archiver stored segment {seq} of the archive at {location}: only one archiver may write an archive; this one stops"
    )]
    ArchiveConflict { location: String, seq: u64 },

    #[error("this archiver may no longer write the archive: {0}")]
    NotHolder(String),

    #[error("the server's binary log cannot be archived: {0}")]
    BinlogUnsuitable(String),

    #[error(
        "the binary log archive at {location} has a gap ({reason}): {message}; choose a target before the gap, or a base backup taken after it"
    )]
    ArchiveGap { location: String, reason: String, message: String },

    #[error("the target {target} is not archived yet: the archive at {location} holds transactions up to {archived}")]
    TargetNotArchived { target: String, location: String, archived: String },

    #[error("the base backup cannot start a replay from the archive at {location}: {reason}")]
    BaseNotInArchive { location: String, reason: String },

    #[error(
        "the binary log archive is corrupt: segment {file} has SHA-256 {actual}, its index record says {expected}; no restore can replay through it"
    )]
    SegmentChecksumMismatch { file: String, expected: String, actual: String },

    #[error("the archived binary log cannot be replayed: {0}")]
    ReplayUnsupported(String),

    #[error("the backup tool failed ({status}): {message}; nothing was kept")]
    BackupToolFailed { status: String, message: String },

    #[error(
        "the backup tool is {tool} and the server is {server}: a physical backup needs the tool of the server's own version (run it from the server's image); nothing was kept"
    )]
    BackupToolMismatch { tool: String, server: String },

    #[error("the physical backup's stream is not whole: {0}; nothing was kept")]
    BackupStreamInvalid(String),

    #[error(
        "the backup at {location} is a physical backup (the stream of {tool}): this command reads logical backups; restore it as docs/disaster-recovery.md says"
    )]
    PhysicalBackup { location: String, tool: String },

    #[error(
        "the backup at {location} is a logical backup (its tables' rows, which a restore loads over SQL): unpack extracts physical backups only; restore it with `visitors-agent restore`"
    )]
    LogicalBackup { location: String },

    #[error(
        "{dir} is not empty (it holds {entry}): unpack writes into a new or an empty directory; empty it or name another"
    )]
    UnpackTargetNotEmpty { dir: String, entry: String },

    #[error("cannot write {path} while unpacking into {dir}: {reason}")]
    UnpackWrite { dir: String, path: String, reason: String },

    /// Every chunk read matched its SHA-256: the stream is the one the backup tool wrote.
    #[error(
        "the physical backup's stream cannot be unpacked ({place}): {reason}; its chunks are those the backup stored, so the backup tool wrote this stream: use another backup"
    )]
    PhysicalStreamInvalid { place: String, reason: String },

    #[error(
        "the stream of the physical backup at {location} is not the one its manifest describes: {difference}; the manifest was edited or belongs to another backup: use another backup"
    )]
    StreamDiffersFromManifest { location: String, difference: String },

    #[error("internal error: {0}")]
    Internal(String),
}

impl AgentError {
    /// A stable camelCase name of the error, for the summary's `errorKind`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Usage(_) => "usage",
            Self::PasswordFile { .. } => "passwordFile",
            Self::WrongCredentials { .. } | Self::WrongCredentialsInPlainText { .. } => "wrongCredentials",
            Self::Unreachable { .. } => "unreachable",
            Self::SslCaFile { .. } => "sslCaFile",
            Self::TlsNotOffered { .. } => "tlsNotOffered",
            Self::TlsRequiredByServer { .. } => "tlsRequiredByServer",
            Self::TlsUntrusted { .. } => "tlsUntrusted",
            Self::TlsWrongHost { .. } => "tlsWrongHost",
            Self::Tls { .. } => "tls",
            Self::MissingDatabase(_) => "missingDatabase",
            Self::ConnectionLost { .. } => "connectionLost",
            Self::Server { .. } => "server",
            Self::Client { .. } => "client",
            Self::MissingBucket { .. } => "missingBucket",
            Self::StorageCredentialsRejected { .. } => "storageCredentialsRejected",
            Self::DiskFull { .. } => "diskFull",
            Self::Storage { .. } => "storage",
            Self::InvalidLocation { .. } => "invalidLocation",
            Self::BackupExists { .. } => "backupExists",
            Self::BackupLocked { .. } | Self::LocationLocked { .. } => "backupLocked",
            Self::NotABackup { .. } => "notABackup",
            Self::ManifestMissing { .. } => "manifestMissing",
            Self::ManifestInvalid { .. } => "manifestInvalid",
            // Refused like a corrupt chunk: the manifest is a file of the backup too.
            Self::ManifestChanged { .. } => "checksumMismatch",
            Self::FileMissing { .. } => "fileMissing",
            Self::SizeMismatch { .. } => "sizeMismatch",
            Self::ChecksumMismatch { .. } => "checksumMismatch",
            // A ciphertext that fails its authentication is a corrupt file like any other.
            Self::Undecryptable { .. } => "checksumMismatch",
            Self::EncryptionKeyMissing { .. } => "encryptionKeyMissing",
            Self::EncryptionKeyWrong { .. } | Self::EncryptionKeyUnusable { .. } => "encryptionKeyWrong",
            Self::EncryptionKeyFile { .. } => "encryptionKeyFile",
            Self::BadChunk { .. } => "badChunk",
            Self::TableExists { .. } => "tableExists",
            Self::ObjectExists { .. } => "objectExists",
            Self::LocalInfileDisabled => "localInfileDisabled",
            Self::MissingPrivilege { .. } => "missingPrivilege",
            Self::UnrestorableColumn { .. } => "unrestorableColumn",
            Self::ServerCannotLoad(_) => "serverCannotLoad",
            Self::PartiallyRestored { error, .. } | Self::ObjectsIncomplete { error, .. } => error.kind(),
            Self::RestoreRunning { .. } => "restoreRunning",
            Self::InsufficientSpace { .. } => "insufficientSpace",
            Self::VerifyMismatch(_) => "verifyMismatch",
            Self::ContentDiffers { .. } => "contentDiffers",
            Self::BackupToolFailed { .. } => "backupToolFailed",
            Self::BackupToolMismatch { .. } => "backupToolMismatch",
            Self::BackupStreamInvalid(_) => "backupStreamInvalid",
            Self::PhysicalBackup { .. } => "physicalBackup",
            Self::ContentDiffersAcrossVersions { .. } => "contentDiffersAcrossVersions",
            Self::DrillObjectMissing { .. } => "objectMissing",
            Self::DrillTargetNotEmpty { .. } => "targetNotEmpty",
            Self::ArchiveInvalid { .. } => "archiveInvalid",
            Self::ArchiveConflict { .. } => "archiveConflict",
            Self::NotHolder(_) => "notHolder",
            Self::BinlogUnsuitable(_) => "binlogUnsuitable",
            Self::ArchiveGap { .. } => "archiveGap",
            Self::TargetNotArchived { .. } => "targetNotArchived",
            Self::BaseNotInArchive { .. } => "baseNotInArchive",
            Self::SegmentChecksumMismatch { .. } => "checksumMismatch",
            Self::ReplayUnsupported(_) => "replayUnsupported",
            Self::LogicalBackup { .. } => "logicalBackup",
            Self::UnpackTargetNotEmpty { .. } => "directoryNotEmpty",
            Self::UnpackWrite { .. } => "unpackWrite",
            Self::PhysicalStreamInvalid { .. } => "physicalStreamInvalid",
            Self::StreamDiffersFromManifest { .. } => "streamDiffersFromManifest",
            Self::Internal(_) => "internal",
        }
    }

    /// One line, whatever the server put in its message.
    pub fn one_line(&self) -> String {
        self.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
    }
}

impl From<tokio::task::JoinError> for AgentError {
    fn from(error: tokio::task::JoinError) -> Self {
        Self::Internal(format!("a worker task failed: {error}"))
    }
}
