//! The command line: `visitors-agent backup | restore | verify | inspect | delete`. Every run
//! ends with the JSON summary as the last line of stdout (and in `--summary-file`), exit code 0
//! only on full success.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use tracing::Instrument;
use visitors_api::agent_summary::{AgentSummary, Operation};
use visitors_api::text::truncate_on_char_boundary;

use crate::backup::{self, BackupOptions};
use crate::delete::{self, DeleteOptions};
use crate::error::{AgentError, Result};
use crate::format::{Compression, Manifest};
use crate::mysql::ConnectionSettings;
use crate::restore::{self, RestoreOptions, RestoreStep};
use crate::storage::{S3Settings, Storage};
use crate::verify::{self, VerifyOptions};

const ENVIRONMENT_HELP: &str = "\
Environment:
  MYSQL_PWD               MySQL password (or --password-file; never a flag value)
  AWS_ACCESS_KEY_ID       S3 access key id (or --aws-access-key-id)
  AWS_SECRET_ACCESS_KEY   S3 secret key (environment only)
  AWS_SESSION_TOKEN       S3 session token (environment only, optional)
  AWS_REGION              S3 region (default us-east-1)
  AWS_ENDPOINT_URL        S3-compatible endpoint, http:// allowed (optional)
  AWS_S3_FORCE_PATH_STYLE true to address buckets by path (always so with a custom endpoint)
  RUST_LOG                log filter (default info), logs and progress go to stderr
  OTEL_EXPORTER_OTLP_ENDPOINT  export spans over OTLP/HTTP to this collector (optional)
  TRACEPARENT             W3C trace context the spans continue (optional)

Exit status: 0 on full success, 1 on any failure (the summary's error says why), 2 on bad usage.";

#[derive(Parser, Debug)]
#[command(name = "visitors-agent", version, about = "Consistent, parallel, verifiable MySQL/MariaDB logical backups", after_help = ENVIRONMENT_HELP)]
pub struct Cli {
    /// Also write the JSON summary to this file (a Job passes /dev/termination-log).
    #[arg(long, global = true, value_name = "PATH")]
    pub summary_file: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
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
}

#[derive(Args, Debug, Clone)]
pub struct ConnectionArgs {
    /// MySQL server host.
    #[arg(long, env = "MYSQL_HOST")]
    pub host: Option<String>,
    #[arg(long, env = "MYSQL_TCP_PORT", default_value_t = 3306)]
    pub port: u16,
    #[arg(long, env = "MYSQL_USER", default_value = "root")]
    pub user: String,
    /// File holding the password (first line); otherwise MYSQL_PWD is used.
    #[arg(long, value_name = "PATH")]
    pub password_file: Option<PathBuf>,
    /// Database to include (repeatable); default: every non-system database.
    #[arg(long = "database", value_name = "NAME")]
    pub databases: Vec<String>,
}

#[derive(Args, Debug, Clone)]
pub struct StorageArgs {
    #[arg(long, env = "AWS_ACCESS_KEY_ID", hide_env_values = true)]
    pub aws_access_key_id: Option<String>,
    #[arg(long, env = "AWS_REGION", default_value = "us-east-1")]
    pub aws_region: String,
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    pub aws_endpoint_url: Option<String>,
    #[arg(long, env = "AWS_S3_FORCE_PATH_STYLE", default_value_t = false, action = clap::ArgAction::Set, value_parser = clap::builder::FalseyValueParser::new())]
    pub aws_s3_force_path_style: bool,
}

#[derive(Args, Debug)]
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
    #[arg(long, default_value_t = 2)]
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
}

#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// The backup: s3://bucket/prefix or file:///abs/path.
    #[arg(long, value_name = "LOCATION")]
    pub from: String,
    #[command(flatten)]
    pub connection: ConnectionArgs,
    #[command(flatten)]
    pub storage: StorageArgs,
    /// Chunks loaded at once.
    #[arg(long, default_value_t = 2)]
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
}

#[derive(Args, Debug)]
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
    /// Tables counted at once.
    #[arg(long, default_value_t = 2)]
    pub parallelism: usize,
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The backup to describe: s3://bucket/prefix or file:///abs/path.
    #[arg(long, value_name = "LOCATION")]
    pub from: String,
    #[command(flatten)]
    pub storage: StorageArgs,
}

#[derive(Args, Debug)]
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

impl StorageArgs {
    fn settings(&self) -> S3Settings {
        S3Settings {
            access_key_id: self.aws_access_key_id.clone(),
            secret_access_key: non_empty_env("AWS_SECRET_ACCESS_KEY"),
            session_token: non_empty_env("AWS_SESSION_TOKEN"),
            region: self.aws_region.clone(),
            endpoint: self.aws_endpoint_url.clone().filter(|e| !e.is_empty()),
            force_path_style: self.aws_s3_force_path_style,
        }
    }
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl ConnectionArgs {
    /// Connection settings, or `None` without a host.
    fn settings(&self) -> Result<Option<ConnectionSettings>> {
        let Some(host) = self.host.clone() else { return Ok(None) };
        let password = match &self.password_file {
            Some(path) => Some(read_password_file(path)?),
            None => non_empty_env("MYSQL_PWD"),
        };
        Ok(Some(ConnectionSettings { host, port: self.port, user: self.user.clone(), password }))
    }

    fn required(&self) -> Result<ConnectionSettings> {
        self.settings()?.ok_or_else(|| AgentError::Usage("--host is required".into()))
    }
}

fn read_password_file(path: &PathBuf) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| AgentError::PasswordFile { path: path.display().to_string(), reason: e.to_string() })?;
    Ok(text.lines().next().unwrap_or_default().to_string())
}

/// Parses arguments, runs, prints the summary and returns the exit code.
pub async fn main() -> i32 {
    let cli = Cli::parse();
    let operation = match &cli.command {
        Command::Backup(_) => Operation::Backup,
        Command::Restore(_) => Operation::Restore,
        Command::Verify(_) => Operation::Verify,
        Command::Inspect(_) => Operation::Inspect,
        Command::Delete(_) => Operation::Delete,
    };
    let location = match &cli.command {
        Command::Backup(args) => args.to.clone(),
        Command::Restore(args) => args.from.clone(),
        Command::Verify(args) => args.from.clone(),
        Command::Inspect(args) => args.from.clone(),
        Command::Delete(args) => args.location.clone(),
    };
    let started = Instant::now();
    let started_at = jiff::Timestamp::now();
    let span = tracing::info_span!(
        "agent",
        "otel.name" = operation_name(&cli.command),
        "otel.status_code" = tracing::field::Empty,
        "error.kind" = tracing::field::Empty,
        location = %location,
    );
    crate::telemetry::continue_trace(&span);
    let outcome = run(cli.command).instrument(span.clone()).await;
    if let Err(error) = &outcome {
        span.record("otel.status_code", "ERROR");
        span.record("error.kind", error.kind());
    }
    drop(span);
    let mut summary = match outcome {
        Ok(summary) => summary,
        Err(error) => {
            let line = error.one_line();
            eprintln!("error: {line}");
            AgentSummary {
                ok: false,
                error: Some(line),
                error_kind: Some(error.kind().into()),
                location: Some(location),
                ..Default::default()
            }
        }
    };
    summary.operation = Some(operation);
    summary.started_at = Some(started_at.to_string());
    summary.finished_at = Some(jiff::Timestamp::now().to_string());
    summary.duration_seconds = Some((started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0);
    let line = summary.to_line();
    // A closed stdout (`| head`) is no reason to fail; the summary file still gets the line.
    let _ = writeln!(std::io::stdout(), "{line}");
    if let Some(path) = &cli.summary_file
        && let Err(error) = std::fs::write(path, &line)
    {
        eprintln!("warning: cannot write the summary to {}: {error}", path.display());
    }
    if summary.ok { 0 } else { 1 }
}

fn operation_name(command: &Command) -> &'static str {
    match command {
        Command::Backup(_) => "backup",
        Command::Restore(_) => "restore",
        Command::Verify(_) => "verify",
        Command::Inspect(_) => "inspect",
        Command::Delete(_) => "delete",
    }
}

async fn run(command: Command) -> Result<AgentSummary> {
    match command {
        Command::Backup(args) => run_backup(args).await,
        Command::Restore(args) => run_restore(args).await,
        Command::Verify(args) => run_verify(args).await,
        Command::Inspect(args) => run_inspect(args).await,
        Command::Delete(args) => run_delete(args).await,
    }
}

async fn run_backup(args: BackupArgs) -> Result<AgentSummary> {
    let mut options = BackupOptions::new(args.connection.required()?, args.to.clone());
    options.databases = args.connection.databases.clone();
    options.s3 = args.storage.settings();
    options.compression = args.compression;
    options.compression_level = args.compression_level;
    options.parallelism = positive(args.parallelism, "--parallelism")?;
    options.chunk_bytes = args.chunk_bytes.unwrap_or(args.chunk_mib * 1024 * 1024).max(1);
    options.split_bytes = args.split_bytes.unwrap_or(args.split_mib * 1024 * 1024);
    options.table_checksums = args.table_checksums;
    options.users = args.users;
    options.progress_interval = Duration::from_secs(args.progress_interval);
    let report = backup::run(&options).await?;
    let mut summary = manifest_summary(&report.manifest, &args.to);
    summary.stored_bytes = Some(report.manifest.stored_bytes() + report.manifest_bytes);
    summary.manifest_sha256 = Some(report.manifest_sha256);
    Ok(summary)
}

async fn run_restore(args: RestoreArgs) -> Result<AgentSummary> {
    let mut options = RestoreOptions::new(args.connection.required()?, args.from.clone());
    options.databases = args.connection.databases.clone();
    options.s3 = args.storage.settings();
    options.expect_manifest_sha256 = sha256_arg(args.expect_manifest_sha256)?;
    options.parallelism = positive(args.parallelism, "--parallelism")?;
    options.drop_existing = args.drop_existing;
    options.users = args.users;
    options.skip_binlog = args.skip_binlog;
    options.progress_interval = Duration::from_secs(args.progress_interval);
    options.step = match (args.stage_only, args.from_stage) {
        (true, _) => RestoreStep::StageOnly,
        (_, true) => RestoreStep::FromStage,
        _ => RestoreStep::All,
    };
    let report = restore::run(&options).await?;
    let mut summary = manifest_summary(&report.manifest, &args.from);
    summary.tables = Some(report.tables);
    summary.rows = Some(report.rows);
    Ok(summary)
}

async fn run_verify(args: VerifyArgs) -> Result<AgentSummary> {
    let options = VerifyOptions {
        from: args.from.clone(),
        s3: args.storage.settings(),
        expect_manifest_sha256: sha256_arg(args.expect_manifest_sha256)?,
        connection: args.connection.settings()?,
        databases: args.connection.databases.clone(),
        checksum: args.checksum,
        parallelism: positive(args.parallelism, "--parallelism")?,
    };
    let report = verify::run(&options).await?;
    Ok(manifest_summary(&report.manifest, &args.from))
}

async fn run_inspect(args: InspectArgs) -> Result<AgentSummary> {
    let storage = Storage::open(&args.from, &args.storage.settings(), false)?;
    let manifest = verify::load_manifest(&storage, None).await?;
    let _ = write!(std::io::stdout(), "{}", describe(&manifest));
    Ok(manifest_summary(&manifest, &args.from))
}

async fn run_delete(args: DeleteArgs) -> Result<AgentSummary> {
    let options =
        DeleteOptions { location: args.location.clone(), s3: args.storage.settings(), break_lock: args.break_lock };
    let report = delete::run(&options).await?;
    Ok(AgentSummary {
        ok: true,
        location: Some(args.location),
        stored_bytes: Some(report.deleted_bytes),
        manifest_sha256: report.manifest_sha256,
        ..Default::default()
    })
}

fn sha256_arg(value: Option<String>) -> Result<Option<String>> {
    match value {
        Some(hex) if !verify::is_sha256_hex(&hex) => Err(AgentError::Usage(format!(
            "--expect-manifest-sha256 must be 64 hexadecimal digits (a SHA-256), got '{}'",
            truncate_on_char_boundary(hex, 80)
        ))),
        other => Ok(other),
    }
}

fn positive(value: usize, flag: &str) -> Result<usize> {
    if value == 0 {
        return Err(AgentError::Usage(format!("{flag} must be at least 1")));
    }
    Ok(value)
}

/// The summary fields a manifest gives.
fn manifest_summary(manifest: &Manifest, location: &str) -> AgentSummary {
    AgentSummary {
        ok: true,
        location: Some(location.to_string()),
        server_version: Some(manifest.server.version.clone()),
        tables: Some(manifest.table_count()),
        rows: Some(manifest.row_count()),
        data_bytes: Some(manifest.data_bytes()),
        stored_bytes: Some(manifest.stored_bytes()),
        consistent_position: manifest
            .position
            .as_ref()
            .and_then(|p| p.describe())
            .map(|p| truncate_on_char_boundary(p, 1024)),
        ..Default::default()
    }
}

/// A human-readable description of a backup, for `inspect`.
pub fn describe(manifest: &Manifest) -> String {
    let mut out = format!(
        "{} version {}, taken by {} from {} {}\n{} .. {}, consistency: {}, compression: {}\n",
        manifest.format,
        manifest.format_version,
        manifest.tool,
        manifest.server.flavour,
        manifest.server.version,
        manifest.started_at,
        manifest.finished_at,
        manifest.consistency,
        manifest.compression.name(),
    );
    if let Some(position) = manifest.position.as_ref().and_then(|p| p.describe()) {
        out.push_str(&format!("position: {position}\n"));
    }
    for database in &manifest.databases {
        out.push_str(&format!("database {}\n", database.name));
        for table in &database.tables {
            out.push_str(&format!(
                "  table {}: {} rows, {} bytes in {} chunks\n",
                table.name,
                table.rows,
                table.data_bytes,
                table.chunks.len()
            ));
        }
        if !database.view_names.is_empty() {
            out.push_str(&format!("  views: {}\n", database.view_names.join(", ")));
        }
        out.push_str(&format!(
            "  routines: {}, triggers: {}\n",
            if database.routines.is_some() { "yes" } else { "none" },
            if database.triggers.is_some() { "yes" } else { "none" }
        ));
    }
    if manifest.users.is_some() {
        out.push_str("users and grants: yes (restore --users)\n");
    }
    out
}
