//! The command line: `visitors-agent backup | restore | verify | inspect | delete | archive |
//! prune-archive | unpack`. Every invocation ends with the JSON summary as the last line of
//! stdout (and in `--summary-file`), exit code 0 only on full success.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use tracing::Instrument;
use visitors_agent_contract::command::{
    AgentCli, ArchiveArgs, BackupArgs, Command, ConnectionArgs, DeleteArgs, EncryptArgs, InspectArgs, PruneArchiveArgs,
    RestoreArgs, RestoredEvents, StorageArgs, UnpackArgs, VerifyArgs,
};
use visitors_agent_contract::env;
use visitors_agent_contract::summary::{AgentSummary, Operation, Snapshot, bounded_gtid};
use visitors_agent_contract::text::truncate_on_char_boundary;

use crate::backup::{self, BackupOptions};
use crate::binlog::archive::{self as archiver, ArchiveOptions};
use crate::binlog::prune::{self, PruneTarget};
use crate::binlog::replay::Target;
use crate::delete::{self, DeleteOptions};
use crate::drill::{self, DrillOptions};
use crate::encryption::SealKey;
use crate::error::{AgentError, Result};
use crate::format::Manifest;
use crate::mysql::{ConnectionSettings, TlsSettings};
use crate::physical::StreamSource;
use crate::restore::{self, EventStatus, PointInTimeOptions, RestoreOptions, RestoreStep};
use crate::storage::{S3Settings, Storage};
use crate::unpack::{self, UnpackOptions};
use crate::verify::{self, VerifyOptions};

pub fn s3_settings(storage: &StorageArgs) -> S3Settings {
    S3Settings {
        access_key_id: storage.aws_access_key_id.clone(),
        secret_access_key: non_empty_env(env::AWS_SECRET_ACCESS_KEY),
        session_token: non_empty_env(env::AWS_SESSION_TOKEN),
        region: storage.region().to_string(),
        endpoint: storage.aws_endpoint_url.clone().filter(|e| !e.is_empty()),
        force_path_style: storage.aws_s3_force_path_style,
    }
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Connection settings, or `None` without a host.
fn connection_settings(connection: &ConnectionArgs) -> Result<Option<ConnectionSettings>> {
    let Some(host) = connection.host.clone() else { return Ok(None) };
    let password = match &connection.password_file {
        Some(path) => Some(read_password_file(path)?),
        None => non_empty_env(env::MYSQL_PWD),
    };
    let tls = tls_settings(connection)?;
    Ok(Some(ConnectionSettings { host, port: connection.port(), user: connection.user().to_string(), password, tls }))
}

/// The TLS of `--ssl-mode` and `--ssl-ca`; the CA is read once, here.
pub fn tls_settings(connection: &ConnectionArgs) -> Result<TlsSettings> {
    let mode = connection.effective_ssl_mode().map_err(AgentError::Usage)?;
    let Some(path) = &connection.ssl_ca else {
        return TlsSettings::new(mode, None).map_err(|e| AgentError::Usage(e.to_string()));
    };
    let ca_error = |reason: String| AgentError::SslCaFile { path: path.display().to_string(), reason };
    let pem = std::fs::read(path).map_err(|e| ca_error(e.to_string()))?;
    TlsSettings::new(mode, Some(pem)).map_err(|e| ca_error(e.to_string()))
}

pub fn required_connection(connection: &ConnectionArgs) -> Result<ConnectionSettings> {
    connection_settings(connection)?.ok_or_else(|| AgentError::Usage("--host is required".into()))
}

fn read_password_file(path: &PathBuf) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| AgentError::PasswordFile { path: path.display().to_string(), reason: e.to_string() })?;
    Ok(text.lines().next().unwrap_or_default().to_string())
}

/// Parses arguments, executes the command, prints the summary and returns the exit code.
pub async fn main() -> i32 {
    let cli = AgentCli::parse();
    let operation = match &cli.command {
        Command::Backup(_) => Operation::Backup,
        Command::Restore(_) => Operation::Restore,
        Command::Verify(_) => Operation::Verify,
        Command::Inspect(_) => Operation::Inspect,
        Command::Delete(_) => Operation::Delete,
        Command::Archive(_) => Operation::Archive,
        Command::PruneArchive(_) => Operation::PruneArchive,
        Command::Unpack(_) => Operation::Unpack,
    };
    let location = match &cli.command {
        Command::Backup(args) => args.to.clone(),
        Command::Restore(args) => args.from.clone(),
        Command::Verify(args) => args.from.clone(),
        Command::Inspect(args) => args.from.clone(),
        Command::Delete(args) => args.location.clone(),
        Command::Archive(args) => args.to.clone(),
        Command::PruneArchive(args) => args.archive.clone(),
        Command::Unpack(args) => args.from.clone(),
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
    let outcome = execute(cli.command).instrument(span.clone()).await;
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
        Command::Archive(_) => "archive",
        Command::PruneArchive(_) => "prune-archive",
        Command::Unpack(_) => "unpack",
    }
}

/// Executes one command; its summary, or the error that ended it.
async fn execute(command: Command) -> Result<AgentSummary> {
    match command {
        Command::Backup(args) => execute_backup(args).await,
        Command::Restore(args) => execute_restore(args).await,
        Command::Verify(args) => execute_verify(args).await,
        Command::Inspect(args) => execute_inspect(args).await,
        Command::Delete(args) => execute_delete(args).await,
        Command::Archive(args) => execute_archive(args).await,
        Command::PruneArchive(args) => execute_prune_archive(args).await,
        Command::Unpack(args) => execute_unpack(args).await,
    }
}

async fn execute_backup(args: BackupArgs) -> Result<AgentSummary> {
    let mut options = BackupOptions::new(required_connection(&args.connection)?, args.to.clone());
    options.databases = args.connection.databases.clone();
    options.s3 = s3_settings(&args.storage);
    options.compression = args.compression.into();
    options.compression_level = args.compression_level;
    options.parallelism = positive(args.parallelism, "--parallelism")?;
    options.chunk_bytes = args.chunk_bytes.unwrap_or(args.chunk_mib * 1024 * 1024).max(1);
    options.split_bytes = args.split_bytes.unwrap_or(args.split_mib * 1024 * 1024);
    options.table_checksums = args.table_checksums;
    options.users = args.users;
    options.progress_interval = Duration::from_secs(args.progress_interval);
    options.encrypt = seal_key(&args.encryption)?;
    options.physical = args.physical_stream.as_deref().map(StreamSource::parse);
    let report = backup::back_up(&options).await?;
    let mut summary = manifest_summary(&report.manifest, &args.to);
    summary.stored_bytes = Some(report.manifest.stored_bytes() + report.manifest_bytes);
    summary.manifest_sha256 = Some(report.manifest_sha256);
    summary.snapshot = report.manifest.position.as_ref().map(|position| Snapshot {
        time: position.time.clone(),
        binlog_file: position.binlog_file.clone(),
        binlog_position: position.binlog_position,
        gtid: bounded_gtid(position.gtid.clone()),
    });
    summary.snapshot_server = report.manifest.position.as_ref().and_then(|position| position.server.clone());
    Ok(summary)
}

async fn execute_restore(args: RestoreArgs) -> Result<AgentSummary> {
    let mut options = RestoreOptions::new(required_connection(&args.connection)?, args.from.clone());
    options.databases = args.connection.databases.clone();
    options.s3 = s3_settings(&args.storage);
    options.expect_manifest_sha256 = sha256_arg(args.expect_manifest_sha256)?;
    options.parallelism = positive(args.parallelism, "--parallelism")?;
    options.drop_existing = args.drop_existing;
    options.users = args.users;
    options.skip_binlog = args.skip_binlog;
    options.events = match args.events {
        RestoredEvents::AsBackedUp => EventStatus::AsBackedUp,
        RestoredEvents::Disabled => EventStatus::Disabled,
        RestoredEvents::DisabledOnReplica => EventStatus::DisabledOnReplica,
    };
    options.progress_interval = Duration::from_secs(args.progress_interval);
    options.decrypt_keys_dir = args.decrypt_keys_dir.clone();
    options.step = match (args.stage_only, args.from_stage) {
        (true, _) => RestoreStep::StageOnly,
        (_, true) => RestoreStep::FromStage,
        _ => RestoreStep::All,
    };
    let pitr = &args.point_in_time;
    if let Some(archive) = &pitr.binlog_archive {
        let target = Target::parse(pitr.until_time.as_deref(), pitr.until_gtid.as_deref())?;
        options.point_in_time = Some(PointInTimeOptions { archive: archive.clone(), s3: options.s3.clone(), target });
    }
    let report = restore::restore(&options).await?;
    let mut summary = manifest_summary(&report.manifest, &args.from);
    summary.tables = Some(report.tables);
    summary.rows = Some(report.rows);
    summary.replay = report.replay;
    Ok(summary)
}

async fn execute_verify(args: VerifyArgs) -> Result<AgentSummary> {
    if args.deep {
        return execute_drill(args).await;
    }
    let options = VerifyOptions {
        from: args.from.clone(),
        s3: s3_settings(&args.storage),
        expect_manifest_sha256: sha256_arg(args.expect_manifest_sha256)?,
        connection: connection_settings(&args.connection)?,
        databases: args.connection.databases.clone(),
        checksum: args.checksum,
        parallelism: positive(args.parallelism, "--parallelism")?,
        decrypt_keys_dir: args.decrypt_keys_dir.clone(),
    };
    let report = verify::verify(&options).await?;
    Ok(manifest_summary(&report.manifest, &args.from))
}

async fn execute_drill(args: VerifyArgs) -> Result<AgentSummary> {
    if !args.connection.databases.is_empty() {
        return Err(AgentError::Usage(
            "--deep restores and checks every database of the backup: drop --database".into(),
        ));
    }
    let options = DrillOptions {
        from: args.from.clone(),
        s3: s3_settings(&args.storage),
        expect_manifest_sha256: sha256_arg(args.expect_manifest_sha256)?,
        connection: required_connection(&args.connection)?,
        parallelism: positive(args.parallelism, "--parallelism")?,
        progress_interval: std::time::Duration::from_secs(10),
        decrypt_keys_dir: args.decrypt_keys_dir.clone(),
    };
    let report = drill::drill(&options).await?;
    let mut summary = manifest_summary(&report.manifest, &args.from);
    summary.tables = Some(report.tables);
    summary.rows = Some(report.rows);
    summary.restore_seconds = report.restore_seconds;
    summary.content_compared = Some(report.content_compared);
    Ok(summary)
}

async fn execute_inspect(args: InspectArgs) -> Result<AgentSummary> {
    let storage = Storage::open(&args.from, &s3_settings(&args.storage), false)?;
    if storage.exists(crate::binlog::layout::ARCHIVE_FILE).await? {
        let (text, stored_bytes) = crate::binlog::layout::describe(&storage).await?;
        let _ = write!(std::io::stdout(), "{text}");
        return Ok(AgentSummary {
            ok: true,
            location: Some(args.from),
            stored_bytes: Some(stored_bytes),
            ..Default::default()
        });
    }
    let manifest = verify::load_manifest(&storage, None, args.decrypt_keys_dir.as_deref()).await?;
    let _ = write!(std::io::stdout(), "{}", describe(&manifest));
    Ok(manifest_summary(&manifest, &args.from))
}

async fn execute_delete(args: DeleteArgs) -> Result<AgentSummary> {
    let options =
        DeleteOptions { location: args.location.clone(), s3: s3_settings(&args.storage), break_lock: args.break_lock };
    let report = delete::delete(&options).await?;
    Ok(AgentSummary {
        ok: true,
        location: Some(args.location),
        stored_bytes: Some(report.deleted_bytes),
        manifest_sha256: report.manifest_sha256,
        ..Default::default()
    })
}

/// Archives until SIGTERM or Ctrl-C, logging the archive's state every half minute.
async fn execute_archive(args: ArchiveArgs) -> Result<AgentSummary> {
    let options = archive_options(&args)?;
    let stop = crate::shutdown::on_signal();
    let mut observer = LogObserver::default();
    archiver::archive(&options, &mut observer, stop).await?;
    Ok(AgentSummary { ok: true, location: Some(args.to), ..Default::default() })
}

/// The options of `archive` (shared with the archiver binary).
pub fn archive_options(args: &ArchiveArgs) -> Result<ArchiveOptions> {
    Ok(ArchiveOptions {
        connection: required_connection(&args.connection)?,
        to: args.to.clone(),
        s3: s3_settings(&args.storage),
        flush: Duration::from_secs(positive(args.flush_seconds as usize, "--flush-seconds")? as u64),
        segment_bytes: positive(args.segment_mib as usize, "--segment-mib")? as u64 * 1024 * 1024,
        replica_server_id: args.replica_server_id,
        seal: seal_key(&args.encryption)?,
    })
}

fn seal_key(args: &EncryptArgs) -> Result<Option<SealKey>> {
    match (&args.encrypt_key_file, &args.encrypt_key_id) {
        (Some(path), Some(id)) => Ok(Some(SealKey::load(path, id)?)),
        (None, None) => Ok(None),
        _ => Err(AgentError::Usage("--encrypt-key-file and --encrypt-key-id go together".into())),
    }
}

/// Logs the archive's state when it changes, and every half minute.
#[derive(Default)]
struct LogObserver {
    last: Option<(visitors_agent_contract::archive::ArchiverState, Option<String>)>,
    logged: Option<Instant>,
}

impl archiver::Observer for LogObserver {
    async fn report(&mut self, status: &visitors_agent_contract::archive::ArchiveStatus) -> Result<()> {
        let state = (status.state, status.reason.clone());
        if self.last.as_ref() != Some(&state) || self.logged.is_none_or(|at| at.elapsed() >= Duration::from_secs(30)) {
            tracing::info!(
                state = ?status.state,
                lag_seconds = status.lag_seconds,
                segments = status.segments,
                "archived up to {}{}",
                status.last_recoverable_time.as_deref().unwrap_or("(nothing yet)"),
                status.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
            );
            self.last = Some(state);
            self.logged = Some(Instant::now());
        }
        Ok(())
    }

    fn prune_before(&self) -> Option<visitors_agent_contract::archive::PruneBefore> {
        None
    }
}

async fn execute_prune_archive(args: PruneArchiveArgs) -> Result<AgentSummary> {
    let s3 = s3_settings(&args.storage);
    let backup = Storage::open(&args.before_backup, &s3, false)?;
    // The position only: an encrypted backup has it in the clear, no key is needed.
    let position = verify::load_position(&backup).await?;
    let target = PruneTarget::from_manifest(position.as_ref(), &args.before_backup)?;
    let archive = Storage::open(&args.archive, &s3, false)?;
    let report = prune::prune(&archive, &target).await?;
    tracing::info!("{report}");
    Ok(AgentSummary {
        ok: true,
        location: Some(args.archive),
        stored_bytes: Some(report.stored_bytes),
        ..Default::default()
    })
}

async fn execute_unpack(args: UnpackArgs) -> Result<AgentSummary> {
    let options = UnpackOptions {
        s3: s3_settings(&args.storage),
        expect_manifest_sha256: sha256_arg(args.expect_manifest_sha256)?,
        decrypt_keys_dir: args.decrypt_keys_dir.clone(),
        ..UnpackOptions::new(args.from.clone(), args.into.clone())
    };
    let report = unpack::unpack(&options).await?;
    let mut summary = manifest_summary(&report.manifest, &args.from);
    summary.manifest_sha256 = Some(report.manifest_sha256);
    summary.files_written = Some(report.files);
    summary.bytes_written = Some(report.bytes);
    Ok(summary)
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
        // A physical backup counts no table or row: it holds files.
        tables: manifest.physical.is_none().then(|| manifest.table_count()),
        rows: manifest.physical.is_none().then(|| manifest.row_count()),
        data_bytes: Some(manifest.data_bytes()),
        stored_bytes: Some(manifest.stored_bytes()),
        consistent_position: manifest
            .position
            .as_ref()
            .and_then(|p| p.describe())
            .map(|p| truncate_on_char_boundary(p, 1024)),
        encryption_key_id: manifest.encryption.as_ref().map(|e| e.key_id.clone()),
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
    if let Some(server) = manifest.position.as_ref().and_then(|p| p.server.as_ref()) {
        out.push_str(&format!("taken on: {server}\n"));
    }
    if let Some(encryption) = &manifest.encryption {
        out.push_str(&format!(
            "encryption: {}, key id {}, recipient {}\n",
            encryption.scheme, encryption.key_id, encryption.recipient
        ));
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
