//! The agent's command line as types: the agent parses it with these (`AgentCli::parse`), and
//! the controllers build their Jobs' arguments from them ([`AgentCli::to_args`]), so the two
//! sides cannot drift apart. What a Job passes through the environment (the database, the
//! storage and their credentials, see [`crate::env`]) is left out of the arguments.

use std::fmt::Display;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::env;

/// The default of `--parallelism`.
pub const DEFAULT_PARALLELISM: usize = 2;
/// The default of `archive --flush-seconds`.
pub const DEFAULT_FLUSH_SECONDS: u64 = 5;
/// The default of `archive --segment-mib`.
pub const DEFAULT_SEGMENT_MIB: u64 = 64;
/// The default of `archive --replica-server-id`: high, so that it is unlikely to be a server's.
pub const DEFAULT_REPLICA_SERVER_ID: u32 = 0x7F56_4F00;
/// The port used when neither `--port` nor `MYSQL_TCP_PORT` says another.
pub const DEFAULT_PORT: u16 = 3306;
/// The account used when neither `--user` nor `MYSQL_USER` says another.
pub const DEFAULT_USER: &str = "root";
/// The S3 region used when neither `--aws-region` nor `AWS_REGION` says another.
pub const DEFAULT_REGION: &str = "us-east-1";

const ENVIRONMENT_HELP: &str = "\
Environment:
  MYSQL_PWD               MySQL password (or --password-file; never a flag value)
  MYSQL_SSL_CA            CA certificate file of the server (or --ssl-ca)
  MYSQL_SSL_MODE          disabled, required, verify-ca or verify-identity (or --ssl-mode)
  AWS_ACCESS_KEY_ID       S3 access key id (or --aws-access-key-id)
  AWS_SECRET_ACCESS_KEY   S3 secret key (environment only)
  AWS_SESSION_TOKEN       S3 session token (environment only, optional)
  AWS_REGION              S3 region (default us-east-1)
  AWS_ENDPOINT_URL        S3-compatible endpoint, http:// allowed (optional)
  AWS_S3_FORCE_PATH_STYLE true to address buckets by path (always so with a custom endpoint)
  RUST_LOG                log filter (default info), logs and progress go to stderr
  OTEL_EXPORTER_OTLP_ENDPOINT  export spans over OTLP/HTTP to this collector (optional)
  TRACEPARENT             W3C trace context the spans continue (optional)

TLS to MySQL: encrypted by default (--ssl-mode=required); with --ssl-ca the server's certificate
must chain to that CA and name --host (verify-identity); --ssl-mode=disabled for plain text.

Exit status: 0 on full success, 1 on any failure (the summary's error says why), 2 on bad usage.";

#[derive(Parser, Debug, Clone, PartialEq)]
#[command(name = "visitors-agent", version, about = "Consistent, parallel, verifiable MySQL/MariaDB logical backups", after_help = ENVIRONMENT_HELP)]
pub struct AgentCli {
    /// Also write the JSON summary to this file (a Job passes /dev/termination-log).
    #[arg(long, global = true, value_name = "PATH")]
    pub summary_file: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

/// The command line of `visitors-archiver`: `visitors-agent archive` under a Lease, which keeps
/// one archiver per archive and carries its status to the backup controller.
#[derive(Parser, Debug, Clone, PartialEq)]
#[command(
    name = "visitors-archiver",
    version,
    about = "Archives a MySQL/MariaDB binary log continuously, holding a Kubernetes Lease",
    after_help = ENVIRONMENT_HELP
)]
pub struct ArchiverCli {
    /// The Lease, in the pod's namespace (POD_NAMESPACE), held while archiving; the archiver
    /// waits while another holder renews it.
    #[arg(long)]
    pub lease: String,
    #[command(flatten)]
    pub archive: ArchiveArgs,
}

impl ArchiverCli {
    /// The arguments (after the program's name) that parse back into `self`.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Rendered::default();
        args.value("--lease", &self.lease);
        self.archive.render(&mut args);
        args.0
    }
}

#[derive(Subcommand, Debug, Clone, PartialEq)]
pub enum Command {
    /// Back up databases to a directory or a bucket; manifest.json is written last.
    #[command(after_help = ENVIRONMENT_HELP)]
    Backup(BackupArgs),
    /// Check a backup completely, then restore it.
    #[command(after_help = ENVIRONMENT_HELP)]
    Restore(RestoreArgs),
    /// Check a backup's files and, with --host, compare a database with it.
    #[command(after_help = ENVIRONMENT_HELP)]
    Verify(VerifyArgs),
    /// Describe a backup from its manifest.
    #[command(after_help = ENVIRONMENT_HELP)]
    Inspect(InspectArgs),
    /// Delete one stored backup: manifest.json first, then its other files and folders.
    #[command(after_help = ENVIRONMENT_HELP)]
    Delete(DeleteArgs),
    /// Stream the server's binary log into an archive, in segments, until stopped (SIGTERM
    /// stores what is complete, then exits).
    #[command(after_help = ENVIRONMENT_HELP)]
    Archive(ArchiveArgs),
    /// Delete the archived binary log segments a base backup no longer needs: those wholly
    /// before its snapshot.
    #[command(after_help = ENVIRONMENT_HELP)]
    PruneArchive(PruneArchiveArgs),
    /// Extract a physical backup's files into a directory, every chunk's SHA-256 and every
    /// record's CRC-32 checked, for `mariadb-backup --prepare --target-dir DIR`.
    #[command(after_help = ENVIRONMENT_HELP)]
    Unpack(UnpackArgs),
}

#[derive(Args, Debug, Clone, Default, PartialEq)]
pub struct ConnectionArgs {
    /// MySQL server host.
    #[arg(long, env = env::MYSQL_HOST)]
    pub host: Option<String>,
    /// MySQL server port (default 3306).
    #[arg(long, env = env::MYSQL_TCP_PORT)]
    pub port: Option<u16>,
    /// MySQL account (default root).
    #[arg(long, env = env::MYSQL_USER)]
    pub user: Option<String>,
    /// File holding the password (first line); otherwise MYSQL_PWD is used.
    #[arg(long, value_name = "PATH")]
    pub password_file: Option<PathBuf>,
    /// Database to include (repeatable); default: every non-system database.
    #[arg(long = "database", value_name = "NAME")]
    pub databases: Vec<String>,
    /// PEM file of the CA the server's certificate must chain to (implies
    /// --ssl-mode=verify-identity unless --ssl-mode says otherwise).
    #[arg(long, value_name = "PATH", env = env::MYSQL_SSL_CA)]
    pub ssl_ca: Option<PathBuf>,
    /// TLS to the server [default: verify-identity with --ssl-ca, otherwise required].
    #[arg(long, value_enum, value_name = "MODE", env = env::MYSQL_SSL_MODE)]
    pub ssl_mode: Option<SslMode>,
}

/// How the agent uses TLS to MySQL, as `mysql --ssl-mode` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SslMode {
    /// Plain text.
    Disabled,
    /// Encrypted; any certificate is accepted.
    Required,
    /// Encrypted; the certificate must chain to --ssl-ca, whatever host it names.
    VerifyCa,
    /// Encrypted; the certificate must chain to --ssl-ca and name the host connected to.
    VerifyIdentity,
}

#[derive(Args, Debug, Clone, Default, PartialEq)]
pub struct StorageArgs {
    #[arg(long, env = env::AWS_ACCESS_KEY_ID, hide_env_values = true)]
    pub aws_access_key_id: Option<String>,
    /// S3 region (default us-east-1).
    #[arg(long, env = env::AWS_REGION)]
    pub aws_region: Option<String>,
    #[arg(long, env = env::AWS_ENDPOINT_URL)]
    pub aws_endpoint_url: Option<String>,
    #[arg(long, env = env::AWS_S3_FORCE_PATH_STYLE, default_value_t = false, action = clap::ArgAction::Set, value_parser = clap::builder::FalseyValueParser::new())]
    pub aws_s3_force_path_style: bool,
}

/// Compression of a backup's data chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Compression {
    Zstd,
    Gzip,
    None,
}

#[derive(Args, Debug, Clone, PartialEq)]
pub struct BackupArgs {
    /// Where to write: s3://bucket/prefix or file:///abs/path (must not hold a backup yet).
    #[arg(long, value_name = "LOCATION")]
    pub to: String,
    #[command(flatten)]
    pub connection: ConnectionArgs,
    #[command(flatten)]
    pub storage: StorageArgs,
    #[arg(long, value_enum, default_value = "zstd")]
    pub compression: Compression,
    /// Compression level (zstd default 1, gzip default 6).
    #[arg(long)]
    pub compression_level: Option<i32>,
    /// Worker connections, all in one snapshot.
    #[arg(long, default_value_t = DEFAULT_PARALLELISM)]
    pub parallelism: usize,
    /// Uncompressed MiB per chunk file (one transaction each at restore).
    #[arg(long, default_value_t = 64)]
    pub chunk_mib: u64,
    /// Tables estimated larger than this many MiB are split into primary key ranges.
    #[arg(long, default_value_t = 128)]
    pub split_mib: u64,
    /// Split tables by this many bytes instead of --split-mib (for testing).
    #[arg(long, hide = true)]
    pub split_bytes: Option<u64>,
    /// Close chunk files after this many bytes instead of --chunk-mib (for testing).
    #[arg(long, hide = true)]
    pub chunk_bytes: Option<u64>,
    /// Record CHECKSUM TABLE of every table (read in the snapshot) for `verify --checksum`.
    #[arg(long)]
    pub table_checksums: bool,
    /// Also back up the accounts with privileges on the databases, and those grants (users.sql).
    #[arg(long)]
    pub users: bool,
    /// Seconds between progress lines on stderr (0: none).
    #[arg(long, default_value_t = 10)]
    pub progress_interval: u64,
    #[command(flatten)]
    pub encryption: EncryptArgs,
    /// A physical backup: store the stream `mariadb-backup --backup --stream=mbstream` writes,
    /// read from standard input (`-`) or from this named pipe (made if missing), whose
    /// `<pipe>.status` and `<pipe>.log` then hold the tool's exit status and messages. --host
    /// names the server the tool reads, for its identity, version and clock.
    #[arg(long, value_name = "PIPE")]
    pub physical_stream: Option<String>,
}

/// Client-side encryption of what a backup or an archiver stores.
#[derive(Args, Debug, Clone, Default, PartialEq)]
pub struct EncryptArgs {
    /// Encrypt every stored file with age, to the recipient of this file: an age identity
    /// (`AGE-SECRET-KEY-1...`, as age-keygen writes it) or only its recipient (`age1...`).
    #[arg(long, value_name = "PATH", requires = "encrypt_key_id")]
    pub encrypt_key_file: Option<PathBuf>,
    /// The name of the key, recorded beside what it encrypted (never the key): the file a
    /// restore looks for in its --decrypt-keys-dir. Letters, digits, '.', '_' and '-', at most 63.
    #[arg(long, value_name = "ID", requires = "encrypt_key_file")]
    pub encrypt_key_id: Option<String>,
}

impl EncryptArgs {
    fn render(&self, args: &mut Rendered) {
        args.optional("--encrypt-key-file", self.encrypt_key_file.as_ref().map(|path| path.display()))
            .optional("--encrypt-key-id", self.encrypt_key_id.as_ref());
    }
}

/// How a restore recreates the backup's scheduled events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum RestoredEvents {
    /// Enabled or disabled as they were backed up.
    #[default]
    AsBackedUp,
    /// All disabled.
    Disabled,
    /// Disabled as on a replica (DISABLE ON SLAVE): for a server that replicates from the one
    /// that runs them.
    DisabledOnReplica,
}

impl RestoredEvents {
    /// The name `--events` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            RestoredEvents::AsBackedUp => "as-backed-up",
            RestoredEvents::Disabled => "disabled",
            RestoredEvents::DisabledOnReplica => "disabled-on-replica",
        }
    }
}

#[derive(Args, Debug, Clone, PartialEq)]
pub struct RestoreArgs {
    /// The backup: s3://bucket/prefix or file:///abs/path.
    #[arg(long, value_name = "LOCATION")]
    pub from: String,
    #[command(flatten)]
    pub connection: ConnectionArgs,
    #[command(flatten)]
    pub storage: StorageArgs,
    /// Chunks loaded at once.
    #[arg(long, default_value_t = DEFAULT_PARALLELISM)]
    pub parallelism: usize,
    /// Refuse the backup unless manifest.json has this SHA-256 (the backup run's manifestSha256).
    #[arg(long, value_name = "HEX")]
    pub expect_manifest_sha256: Option<String>,
    /// Drop each database of the backup that exists on the server, then restore it.
    #[arg(long)]
    pub drop_existing: bool,
    /// Recreate the accounts and grants of a backup taken with --users (existing accounts are kept).
    #[arg(long)]
    pub users: bool,
    /// Keep the restore out of the binary log (sql_log_bin=0; needs the privilege).
    #[arg(long)]
    pub skip_binlog: bool,
    /// Whether the scheduled events come back enabled.
    #[arg(long, value_enum, default_value = "as-backed-up")]
    pub events: RestoredEvents,
    /// Seconds between progress lines on stderr (0: none).
    #[arg(long, default_value_t = 10)]
    pub progress_interval: u64,
    /// Only load and check each database in its staging schema and leave it there, marked
    /// complete, for --from-stage; the target is not touched.
    #[arg(long, conflicts_with = "from_stage")]
    pub stage_only: bool,
    /// Check the copy staged by --stage-only from this backup against the manifest again (row
    /// counts, checksums) and swap it in; refused when there is none.
    #[arg(long)]
    pub from_stage: bool,
    /// Decrypt an encrypted backup, and the encrypted segments of its --binlog-archive, with the
    /// age identities in this directory's files named by their key ids (a Kubernetes Secret
    /// mounted as a volume: one file per key id).
    #[arg(long, value_name = "DIR")]
    pub decrypt_keys_dir: Option<PathBuf>,
    #[command(flatten)]
    pub point_in_time: PointInTimeArgs,
}

/// A restore to a point in time: the base backup, then the archived transactions after it.
#[derive(Args, Debug, Clone, Default, PartialEq)]
pub struct PointInTimeArgs {
    /// The binary log archive of the backed-up server (as `archive --to` wrote it): replay its
    /// transactions after the backup's snapshot, up to --until-time or --until-gtid.
    #[arg(long, value_name = "LOCATION", requires = "until")]
    pub binlog_archive: Option<String>,
    /// Replay every transaction committed at or before this time (RFC 3339, to the second, for
    /// example 2026-11-25T17:59:00Z), and none after it.
    #[arg(long, value_name = "TIME", group = "until", requires = "binlog_archive")]
    pub until_time: Option<String>,
    /// Replay up to and including these transactions (a MariaDB position `0-1-42` or a MySQL
    /// GTID set), and stop before the first one outside it.
    #[arg(long, value_name = "GTIDS", group = "until", requires = "binlog_archive")]
    pub until_gtid: Option<String>,
}

#[derive(Args, Debug, Clone, PartialEq)]
pub struct ArchiveArgs {
    /// The archive: s3://bucket/prefix or file:///abs/path. Created when empty; otherwise
    /// archiving resumes exactly after the last stored transaction.
    #[arg(long, value_name = "LOCATION")]
    pub to: String,
    #[command(flatten)]
    pub connection: ConnectionArgs,
    #[command(flatten)]
    pub storage: StorageArgs,
    /// Store a segment at least this often while there are writes.
    #[arg(long, default_value_t = DEFAULT_FLUSH_SECONDS)]
    pub flush_seconds: u64,
    /// Close a segment once it holds this many MiB of events (a transaction is never split).
    #[arg(long, default_value_t = DEFAULT_SEGMENT_MIB)]
    pub segment_mib: u64,
    /// The server id the archiver registers with as a replica; it must differ from every
    /// server's and replica's id (a second archiver with the same id is disconnected by the
    /// server).
    #[arg(long, default_value_t = DEFAULT_REPLICA_SERVER_ID)]
    pub replica_server_id: u32,
    /// Segments are encrypted like a backup's files; each segment's record names its key id.
    #[command(flatten)]
    pub encryption: EncryptArgs,
}

#[derive(Args, Debug, Clone, PartialEq)]
pub struct PruneArchiveArgs {
    /// The archive: s3://bucket/prefix or file:///abs/path.
    #[arg(value_name = "ARCHIVE")]
    pub archive: String,
    /// The oldest base backup still kept: segments wholly before its snapshot are deleted.
    #[arg(long, value_name = "LOCATION")]
    pub before_backup: String,
    #[command(flatten)]
    pub storage: StorageArgs,
}

#[derive(Args, Debug, Clone, PartialEq)]
pub struct VerifyArgs {
    /// The backup to compare the database with: s3://bucket/prefix or file:///abs/path.
    #[arg(long, value_name = "LOCATION")]
    pub from: String,
    #[command(flatten)]
    pub connection: ConnectionArgs,
    #[command(flatten)]
    pub storage: StorageArgs,
    /// Refuse the backup unless manifest.json has this SHA-256 (the backup run's manifestSha256).
    #[arg(long, value_name = "HEX")]
    pub expect_manifest_sha256: Option<String>,
    /// Also compare CHECKSUM TABLE with the backup (needs a backup taken with --table-checksums).
    #[arg(long)]
    pub checksum: bool,
    /// A restore drill: restore the backup into the server (a scratch one, holding none of the
    /// backup's databases), then compare every table's rows and content digest with the backup
    /// and check its views, routines, triggers and accounts exist.
    #[arg(long, conflicts_with = "checksum")]
    pub deep: bool,
    /// Tables counted (with --deep: loaded, then read back) at once.
    #[arg(long, default_value_t = DEFAULT_PARALLELISM)]
    pub parallelism: usize,
    /// Decrypt an encrypted backup with the age identity in this directory's file named by the
    /// backup's key id (a Kubernetes Secret mounted as a volume: one file per key id).
    #[arg(long, value_name = "DIR")]
    pub decrypt_keys_dir: Option<PathBuf>,
}

#[derive(Args, Debug, Clone, PartialEq)]
pub struct InspectArgs {
    /// The backup to describe: s3://bucket/prefix or file:///abs/path.
    #[arg(long, value_name = "LOCATION")]
    pub from: String,
    #[command(flatten)]
    pub storage: StorageArgs,
    /// Decrypt an encrypted backup with the age identity in this directory's file named by the
    /// backup's key id (a Kubernetes Secret mounted as a volume: one file per key id).
    #[arg(long, value_name = "DIR")]
    pub decrypt_keys_dir: Option<PathBuf>,
}

#[derive(Args, Debug, Clone, PartialEq)]
pub struct UnpackArgs {
    /// The physical backup: s3://bucket/prefix or file:///abs/path.
    #[arg(long, value_name = "LOCATION")]
    pub from: String,
    /// The directory the backup's files go into, as `mbstream -x` writes them: made if missing,
    /// refused unless empty, and emptied again (but kept) when the unpack fails.
    #[arg(long, value_name = "DIR")]
    pub into: PathBuf,
    #[command(flatten)]
    pub storage: StorageArgs,
    /// Refuse the backup unless manifest.json has this SHA-256 (the backup run's manifestSha256).
    #[arg(long, value_name = "HEX")]
    pub expect_manifest_sha256: Option<String>,
    /// Decrypt an encrypted backup with the age identity in this directory's file named by the
    /// backup's key id (a Kubernetes Secret mounted as a volume: one file per key id).
    #[arg(long, value_name = "DIR")]
    pub decrypt_keys_dir: Option<PathBuf>,
}

#[derive(Args, Debug, Clone, PartialEq)]
pub struct DeleteArgs {
    /// The backup to delete: s3://bucket/prefix or file:///abs/path. Refused unless every file
    /// there is a backup file; a location with no files left succeeds (already deleted).
    #[arg(value_name = "LOCATION")]
    pub location: String,
    #[command(flatten)]
    pub storage: StorageArgs,
    /// Delete even when a backup's .backup.lock is there (only when no backup runs there).
    #[arg(long)]
    pub break_lock: bool,
}

impl SslMode {
    /// The name `--ssl-mode` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disabled => "disabled",
            SslMode::Required => "required",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyIdentity => "verify-identity",
        }
    }

    /// Whether the server's certificate is checked against a CA.
    pub fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyIdentity)
    }
}

impl Display for SslMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Compression {
    /// The name `--compression` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::Zstd => "zstd",
            Compression::Gzip => "gzip",
            Compression::None => "none",
        }
    }
}

/// Arguments as the agent's parser reads them: every value that is not its parser's default
/// source (the environment) is written out, a flag only when it is set.
#[derive(Default)]
struct Rendered(Vec<String>);

impl Rendered {
    fn value(&mut self, flag: &str, value: impl Display) -> &mut Self {
        self.0.extend([flag.to_string(), value.to_string()]);
        self
    }

    fn optional(&mut self, flag: &str, value: Option<impl Display>) -> &mut Self {
        if let Some(value) = value {
            self.value(flag, value);
        }
        self
    }

    fn flag(&mut self, flag: &str, set: bool) -> &mut Self {
        if set {
            self.0.push(flag.to_string());
        }
        self
    }

    fn word(&mut self, word: impl Display) -> &mut Self {
        self.0.push(word.to_string());
        self
    }
}

impl AgentCli {
    /// The arguments (after the program's name) that parse back into `self`.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Rendered::default();
        args.optional("--summary-file", self.summary_file.as_ref().map(|path| path.display()));
        args.0.extend(self.command.to_args());
        args.0
    }
}

impl Command {
    /// The subcommand and its arguments.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Rendered::default();
        match self {
            Command::Backup(backup) => {
                args.word("backup").value("--to", &backup.to);
                backup.connection.render(&mut args);
                backup.storage.render(&mut args);
                args.value("--compression", backup.compression.as_str())
                    .optional("--compression-level", backup.compression_level)
                    .value("--parallelism", backup.parallelism)
                    .value("--chunk-mib", backup.chunk_mib)
                    .value("--split-mib", backup.split_mib)
                    .optional("--split-bytes", backup.split_bytes)
                    .optional("--chunk-bytes", backup.chunk_bytes)
                    .flag("--table-checksums", backup.table_checksums)
                    .flag("--users", backup.users)
                    .value("--progress-interval", backup.progress_interval)
                    .optional("--physical-stream", backup.physical_stream.as_ref());
                backup.encryption.render(&mut args);
            }
            Command::Restore(restore) => {
                args.word("restore").value("--from", &restore.from);
                restore.connection.render(&mut args);
                restore.storage.render(&mut args);
                args.flag("--drop-existing", restore.drop_existing)
                    .value("--parallelism", restore.parallelism)
                    .value("--progress-interval", restore.progress_interval)
                    .optional("--expect-manifest-sha256", restore.expect_manifest_sha256.as_ref())
                    .flag("--users", restore.users)
                    .flag("--skip-binlog", restore.skip_binlog)
                    .optional(
                        "--events",
                        Some(restore.events.as_str()).filter(|_| restore.events != RestoredEvents::AsBackedUp),
                    )
                    .flag("--stage-only", restore.stage_only)
                    .flag("--from-stage", restore.from_stage)
                    .optional("--decrypt-keys-dir", restore.decrypt_keys_dir.as_ref().map(|path| path.display()));
                let pitr = &restore.point_in_time;
                args.optional("--binlog-archive", pitr.binlog_archive.as_ref())
                    .optional("--until-time", pitr.until_time.as_ref())
                    .optional("--until-gtid", pitr.until_gtid.as_ref());
            }
            Command::Verify(verify) => {
                args.word("verify").value("--from", &verify.from);
                verify.connection.render(&mut args);
                verify.storage.render(&mut args);
                args.optional("--expect-manifest-sha256", verify.expect_manifest_sha256.as_ref())
                    .flag("--checksum", verify.checksum)
                    .flag("--deep", verify.deep)
                    .value("--parallelism", verify.parallelism)
                    .optional("--decrypt-keys-dir", verify.decrypt_keys_dir.as_ref().map(|path| path.display()));
            }
            Command::Inspect(inspect) => {
                args.word("inspect").value("--from", &inspect.from);
                inspect.storage.render(&mut args);
                args.optional("--decrypt-keys-dir", inspect.decrypt_keys_dir.as_ref().map(|path| path.display()));
            }
            Command::Delete(delete) => {
                args.word("delete").word(&delete.location);
                delete.storage.render(&mut args);
                args.flag("--break-lock", delete.break_lock);
            }
            Command::Archive(archive) => {
                args.word("archive");
                archive.render(&mut args);
            }
            Command::PruneArchive(prune) => {
                args.word("prune-archive").word(&prune.archive).value("--before-backup", &prune.before_backup);
                prune.storage.render(&mut args);
            }
            Command::Unpack(unpack) => {
                args.word("unpack").value("--from", &unpack.from).value("--into", unpack.into.display());
                unpack.storage.render(&mut args);
                args.optional("--expect-manifest-sha256", unpack.expect_manifest_sha256.as_ref())
                    .optional("--decrypt-keys-dir", unpack.decrypt_keys_dir.as_ref().map(|path| path.display()));
            }
        }
        args.0
    }
}

impl ArchiveArgs {
    /// Archiving to `to` with every option at its default.
    pub fn to(to: impl Into<String>) -> Self {
        ArchiveArgs {
            to: to.into(),
            connection: ConnectionArgs::default(),
            storage: StorageArgs::default(),
            flush_seconds: DEFAULT_FLUSH_SECONDS,
            segment_mib: DEFAULT_SEGMENT_MIB,
            replica_server_id: DEFAULT_REPLICA_SERVER_ID,
            encryption: EncryptArgs::default(),
        }
    }

    fn render(&self, args: &mut Rendered) {
        args.value("--to", &self.to);
        self.connection.render(args);
        self.storage.render(args);
        args.value("--flush-seconds", self.flush_seconds)
            .value("--segment-mib", self.segment_mib)
            .value("--replica-server-id", self.replica_server_id);
        self.encryption.render(args);
    }
}

impl ConnectionArgs {
    fn render(&self, args: &mut Rendered) {
        args.optional("--host", self.host.as_ref())
            .optional("--port", self.port)
            .optional("--user", self.user.as_ref())
            .optional("--password-file", self.password_file.as_ref().map(|path| path.display()));
        for database in &self.databases {
            args.value("--database", database);
        }
        args.optional("--ssl-ca", self.ssl_ca.as_ref().map(|path| path.display()))
            .optional("--ssl-mode", self.ssl_mode);
    }

    /// The TLS mode in effect: `--ssl-mode` when given, otherwise `verify-identity` with
    /// `--ssl-ca` and `required` without; an error (for the user) when a verifying mode has no
    /// CA to verify with.
    pub fn effective_ssl_mode(&self) -> Result<SslMode, String> {
        let mode =
            self.ssl_mode.unwrap_or(if self.ssl_ca.is_some() { SslMode::VerifyIdentity } else { SslMode::Required });
        if mode.verifies() && self.ssl_ca.is_none() {
            return Err(format!(
                "--ssl-mode={mode} checks the server's certificate against a CA: pass the CA's PEM file with --ssl-ca, or use --ssl-mode=required"
            ));
        }
        Ok(mode)
    }

    /// The port to connect to.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(DEFAULT_PORT)
    }

    /// The account to connect as.
    pub fn user(&self) -> &str {
        self.user.as_deref().unwrap_or(DEFAULT_USER)
    }
}

impl StorageArgs {
    fn render(&self, args: &mut Rendered) {
        args.optional("--aws-access-key-id", self.aws_access_key_id.as_ref())
            .optional("--aws-region", self.aws_region.as_ref())
            .optional("--aws-endpoint-url", self.aws_endpoint_url.as_ref());
        if self.aws_s3_force_path_style {
            args.value("--aws-s3-force-path-style", true);
        }
    }

    /// The S3 region.
    pub fn region(&self) -> &str {
        self.aws_region.as_deref().unwrap_or(DEFAULT_REGION)
    }
}

impl BackupArgs {
    /// A backup to `to` with every option at its default.
    pub fn to(to: impl Into<String>) -> Self {
        BackupArgs {
            to: to.into(),
            connection: ConnectionArgs::default(),
            storage: StorageArgs::default(),
            compression: Compression::Zstd,
            compression_level: None,
            parallelism: DEFAULT_PARALLELISM,
            chunk_mib: 64,
            split_mib: 128,
            split_bytes: None,
            chunk_bytes: None,
            table_checksums: false,
            users: false,
            progress_interval: 10,
            encryption: EncryptArgs::default(),
            physical_stream: None,
        }
    }
}

impl RestoreArgs {
    /// A restore from `from` with every option at its default.
    pub fn from(from: impl Into<String>) -> Self {
        RestoreArgs {
            from: from.into(),
            connection: ConnectionArgs::default(),
            storage: StorageArgs::default(),
            parallelism: DEFAULT_PARALLELISM,
            expect_manifest_sha256: None,
            drop_existing: false,
            users: false,
            skip_binlog: false,
            events: RestoredEvents::AsBackedUp,
            progress_interval: 10,
            stage_only: false,
            from_stage: false,
            decrypt_keys_dir: None,
            point_in_time: PointInTimeArgs::default(),
        }
    }
}

impl UnpackArgs {
    /// An unpack of `from` into `into` with every option at its default.
    pub fn new(from: impl Into<String>, into: impl Into<PathBuf>) -> Self {
        UnpackArgs {
            from: from.into(),
            into: into.into(),
            storage: StorageArgs::default(),
            expect_manifest_sha256: None,
            decrypt_keys_dir: None,
        }
    }
}

impl DeleteArgs {
    /// A delete of `location` with every option at its default.
    pub fn of(location: impl Into<String>) -> Self {
        DeleteArgs { location: location.into(), storage: StorageArgs::default(), break_lock: false }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[String]) -> AgentCli {
        let program = std::iter::once("visitors-agent".to_string());
        AgentCli::try_parse_from(program.chain(args.iter().cloned())).unwrap_or_else(|e| panic!("{e}: {args:?}"))
    }

    fn every_command() -> Vec<Command> {
        let connection = ConnectionArgs {
            host: Some("db".into()),
            port: Some(3307),
            user: Some("backup".into()),
            password_file: Some("/run/password".into()),
            databases: vec!["visitors".into(), "other".into()],
            ssl_ca: Some("/run/tls/ca.pem".into()),
            ssl_mode: Some(SslMode::VerifyCa),
        };
        let storage = StorageArgs {
            aws_access_key_id: Some("AKIA".into()),
            aws_region: Some("eu-west-3".into()),
            aws_endpoint_url: Some("http://minio:9000".into()),
            aws_s3_force_path_style: true,
        };
        let backup = BackupArgs {
            connection: connection.clone(),
            storage: storage.clone(),
            compression: Compression::Gzip,
            compression_level: Some(9),
            parallelism: 4,
            chunk_mib: 16,
            split_mib: 32,
            split_bytes: Some(1000),
            chunk_bytes: Some(2000),
            table_checksums: true,
            users: true,
            progress_interval: 30,
            encryption: EncryptArgs {
                encrypt_key_file: Some("/run/backup-key/key.txt".into()),
                encrypt_key_id: Some("nightly-2026.k1".into()),
            },
            ..BackupArgs::to("s3://bucket/prefix")
        };
        let point_in_time = PointInTimeArgs {
            binlog_archive: Some("s3://bucket/prefix/_binlog/nightly".into()),
            until_time: Some("2026-11-25T17:59:00Z".into()),
            until_gtid: None,
        };
        let archive = ArchiveArgs {
            connection: connection.clone(),
            storage: storage.clone(),
            flush_seconds: 2,
            segment_mib: 8,
            replica_server_id: 77,
            encryption: EncryptArgs {
                encrypt_key_file: Some("/run/backup-key/k2".into()),
                encrypt_key_id: Some("k2".into()),
            },
            ..ArchiveArgs::to("s3://bucket/prefix/_binlog/nightly")
        };
        let restore = RestoreArgs {
            connection: connection.clone(),
            storage: storage.clone(),
            parallelism: 3,
            expect_manifest_sha256: Some("ab".repeat(32)),
            drop_existing: true,
            users: true,
            skip_binlog: true,
            events: RestoredEvents::DisabledOnReplica,
            progress_interval: 0,
            stage_only: true,
            decrypt_keys_dir: Some("/run/backup-keys".into()),
            ..RestoreArgs::from("file:///backup/x")
        };
        let verify = VerifyArgs {
            from: "file:///backup/x".into(),
            connection,
            storage: storage.clone(),
            expect_manifest_sha256: Some("cd".repeat(32)),
            checksum: true,
            deep: false,
            parallelism: 5,
            decrypt_keys_dir: Some("/run/backup-keys".into()),
        };
        vec![
            Command::Backup(BackupArgs::to("file:///backup/plain")),
            Command::Backup(backup.clone()),
            Command::Backup(BackupArgs {
                physical_stream: Some("/var/run/visitors-physical/mbstream".into()),
                ..backup
            }),
            Command::Restore(RestoreArgs::from("s3://bucket/plain")),
            Command::Restore(RestoreArgs { stage_only: false, from_stage: true, ..restore.clone() }),
            Command::Restore(RestoreArgs { point_in_time: point_in_time.clone(), ..restore.clone() }),
            Command::Restore(RestoreArgs {
                point_in_time: PointInTimeArgs { until_time: None, until_gtid: Some("0-1-42".into()), ..point_in_time },
                ..restore.clone()
            }),
            Command::Restore(restore),
            Command::Archive(ArchiveArgs::to("file:///backup/_binlog/x")),
            Command::Archive(archive),
            Command::PruneArchive(PruneArchiveArgs {
                archive: "s3://b/p/_binlog/n".into(),
                before_backup: "s3://b/p/run".into(),
                storage: storage.clone(),
            }),
            Command::Verify(VerifyArgs { checksum: false, deep: true, ..verify.clone() }),
            Command::Verify(VerifyArgs { decrypt_keys_dir: None, ..verify.clone() }),
            Command::Verify(verify),
            Command::Inspect(InspectArgs { from: "s3://b/p".into(), storage: storage.clone(), decrypt_keys_dir: None }),
            Command::Inspect(InspectArgs {
                from: "s3://b/p".into(),
                storage: storage.clone(),
                decrypt_keys_dir: Some("/run/backup-keys".into()),
            }),
            Command::Unpack(UnpackArgs::new("file:///backup/disk", "/var/lib/mysql")),
            Command::Unpack(UnpackArgs {
                storage: storage.clone(),
                expect_manifest_sha256: Some("ef".repeat(32)),
                decrypt_keys_dir: Some("/run/backup-keys".into()),
                ..UnpackArgs::new("s3://b/p/disk-29391720", "/var/lib/visitors-drill/data")
            }),
            Command::Delete(DeleteArgs { break_lock: true, storage, ..DeleteArgs::of("s3://b/p/run") }),
            Command::Delete(DeleteArgs::of("file:///backup/run")),
            Command::Backup(BackupArgs { connection: tls_only(Some("/ca.pem"), None), ..BackupArgs::to("file:///b") }),
            Command::Restore(RestoreArgs {
                connection: tls_only(None, Some(SslMode::Disabled)),
                ..RestoreArgs::from("file:///b")
            }),
            Command::Archive(ArchiveArgs {
                connection: tls_only(Some("/ca.pem"), Some(SslMode::VerifyIdentity)),
                ..ArchiveArgs::to("file:///b/_binlog/n")
            }),
            Command::Verify(VerifyArgs {
                connection: tls_only(None, Some(SslMode::Required)),
                ..verify_defaults("file:///b")
            }),
        ]
    }

    fn tls_only(ssl_ca: Option<&str>, ssl_mode: Option<SslMode>) -> ConnectionArgs {
        ConnectionArgs { ssl_ca: ssl_ca.map(PathBuf::from), ssl_mode, ..ConnectionArgs::default() }
    }

    fn verify_defaults(from: &str) -> VerifyArgs {
        VerifyArgs {
            from: from.into(),
            connection: ConnectionArgs::default(),
            storage: StorageArgs::default(),
            expect_manifest_sha256: None,
            checksum: false,
            deep: false,
            parallelism: DEFAULT_PARALLELISM,
            decrypt_keys_dir: None,
        }
    }

    #[test]
    fn every_command_parses_back_into_itself() {
        for command in every_command() {
            for summary_file in [None, Some(PathBuf::from("/dev/termination-log"))] {
                let cli = AgentCli { summary_file, command: command.clone() };
                assert_eq!(parse(&cli.to_args()), cli);
            }
        }
    }

    #[test]
    fn the_archivers_command_line_parses_back_into_itself() {
        let cli =
            ArchiverCli { lease: "nightly-archiver".into(), archive: ArchiveArgs::to("file:///backup/_binlog/n") };
        let program = std::iter::once("visitors-archiver".to_string());
        let parsed = ArchiverCli::try_parse_from(program.chain(cli.to_args())).unwrap();
        assert_eq!(parsed, cli);
    }

    #[test]
    fn a_point_in_time_needs_an_archive_and_one_target() {
        let base = ["restore", "--from", "file:///b"];
        let parse = |extra: &[&str]| {
            let args = std::iter::once("visitors-agent").chain(base).chain(extra.iter().copied());
            AgentCli::try_parse_from(args)
        };
        assert!(parse(&["--until-time", "2026-11-25T17:59:00Z"]).is_err(), "a target without an archive");
        assert!(parse(&["--binlog-archive", "file:///a"]).is_err(), "an archive without a target");
        assert!(parse(&["--binlog-archive", "file:///a", "--until-time", "t", "--until-gtid", "0-1-2"]).is_err());
        assert!(parse(&["--binlog-archive", "file:///a", "--until-gtid", "0-1-2"]).is_ok());
    }

    #[test]
    fn defaults_are_the_parsers_defaults() {
        let backup = parse(&["backup".into(), "--to".into(), "file:///b".into()]);
        assert_eq!(backup.command, Command::Backup(BackupArgs::to("file:///b")));
        let restore = parse(&["restore".into(), "--from".into(), "file:///b".into()]);
        assert_eq!(restore.command, Command::Restore(RestoreArgs::from("file:///b")));
        let delete = parse(&["delete".into(), "file:///b".into()]);
        assert_eq!(delete.command, Command::Delete(DeleteArgs::of("file:///b")));
        let unpack = parse(&["unpack".into(), "--from".into(), "file:///b".into(), "--into".into(), "/d".into()]);
        assert_eq!(unpack.command, Command::Unpack(UnpackArgs::new("file:///b", "/d")));
    }

    #[test]
    fn an_unpack_renders_as_a_drill_job_runs_it() {
        let unpack = UnpackArgs {
            expect_manifest_sha256: Some("ab".repeat(32)),
            decrypt_keys_dir: Some("/run/backup-keys".into()),
            ..UnpackArgs::new("s3://b/p/disk-1", "/var/lib/mysql")
        };
        let expected = [
            "unpack",
            "--from",
            "s3://b/p/disk-1",
            "--into",
            "/var/lib/mysql",
            "--expect-manifest-sha256",
            &"ab".repeat(32),
            "--decrypt-keys-dir",
            "/run/backup-keys",
        ];
        assert_eq!(Command::Unpack(unpack).to_args(), expected);
    }

    #[test]
    fn ssl_modes_render_as_the_mysql_client_names_them() {
        let names: Vec<_> = SslMode::value_variants().iter().map(|mode| mode.as_str()).collect();
        assert_eq!(names, ["disabled", "required", "verify-ca", "verify-identity"]);
        for mode in SslMode::value_variants() {
            let parsed = parse(&["backup".into(), "--to".into(), "file:///b".into(), format!("--ssl-mode={mode}")]);
            let Command::Backup(backup) = parsed.command else { panic!("{parsed:?}") };
            assert_eq!(backup.connection.ssl_mode, Some(*mode));
        }
    }

    #[test]
    fn the_ssl_mode_defaults_to_verifying_with_a_ca_and_to_encrypting_without() {
        let mode = |ssl_ca: Option<&str>, ssl_mode| tls_only(ssl_ca, ssl_mode).effective_ssl_mode();
        assert_eq!(mode(None, None), Ok(SslMode::Required));
        assert_eq!(mode(Some("/ca.pem"), None), Ok(SslMode::VerifyIdentity));
        assert_eq!(mode(Some("/ca.pem"), Some(SslMode::VerifyCa)), Ok(SslMode::VerifyCa));
        assert_eq!(mode(Some("/ca.pem"), Some(SslMode::Disabled)), Ok(SslMode::Disabled));
        assert_eq!(mode(None, Some(SslMode::Disabled)), Ok(SslMode::Disabled));
        for verifying in [SslMode::VerifyCa, SslMode::VerifyIdentity] {
            let error = mode(None, Some(verifying)).unwrap_err();
            assert!(error.contains("--ssl-ca") && error.contains(verifying.as_str()), "{error}");
        }
    }

    #[test]
    fn the_environment_is_not_rendered_into_arguments() {
        let args = Command::Restore(RestoreArgs::from("file:///b")).to_args();
        assert!(args.iter().all(|arg| !arg.starts_with("--host") && !arg.starts_with("--aws")), "{args:?}");
    }
}
