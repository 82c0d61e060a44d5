//! `restore`: checks the manifest and every file before touching the database, then restores
//! each database all or nothing: its tables are created and loaded in a staging schema beside
//! it, checked there, and swapped in with one `RENAME TABLE`; views, routines and triggers are
//! recreated after the swap, and what was replaced is dropped (see [`staging`]).
//!
//! The restore can also run as two processes ([`RestoreStep`]): `--stage-only` loads and
//! checks every database in its staging schema and leaves it there, marked complete;
//! `--from-stage` checks the staged copy against the manifest again and swaps it in. The
//! restore controller runs them as the init and main containers of one pod, so that it can
//! show `Running` and then `Verifying`.

mod context;
mod indexes;
mod load;
mod point_in_time;
mod staging;
mod statements;

use std::time::Duration;

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use tracing::Instrument;
use visitors_agent_contract::summary::Replay;

use crate::error::{AgentError, Result};
use crate::format::{DatabaseEntry, FileEntry, Manifest, quote_ident, read_statements};
use crate::mysql::connection::describe_server;
use crate::mysql::{ConnectionSettings, Connector, catalog};
use crate::storage::{S3Settings, Storage};
use crate::verify::{load_manifest_and_sha256, logical_only, verify_files, verify_object_files};

use context::RestoreContext;
pub use context::{REPLAYED_MARKER, STAGED_MARKER, replaced_schema_name, staging_schema_name};
pub use point_in_time::PointInTimeOptions;

/// Which part of a restore one invocation does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RestoreStep {
    /// Load, check and swap in: the whole restore.
    #[default]
    All,
    /// Load and check every database in its staging schema, and leave it there marked as
    /// complete for [`RestoreStep::FromStage`]; the target is not touched.
    StageOnly,
    /// Check the staged copy left by [`RestoreStep::StageOnly`] against the manifest again
    /// (row counts, checksums) and swap it in; no data is read from the backup.
    FromStage,
}

/// How a restore recreates the scheduled events of a backup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EventStatus {
    /// Enabled or disabled as they were backed up: the restored database runs as it did.
    #[default]
    AsBackedUp,
    /// All disabled (a drill's scratch server must not change what it checks).
    Disabled,
    /// Disabled on this server as replication disables them on a replica (`DISABLE ON SLAVE`),
    /// for a replica seeded from a backup.
    DisabledOnReplica,
}

impl EventStatus {
    /// The clause of `CREATE EVENT` that sets it; none to keep the backed-up one.
    pub fn clause(self) -> Option<&'static str> {
        match self {
            Self::AsBackedUp => None,
            Self::Disabled => Some("DISABLE"),
            Self::DisabledOnReplica => Some("DISABLE ON SLAVE"),
        }
    }
}

/// Below this size a table's index build after the load would cost more statements than the
/// sorted build saves.
pub const INDEXES_AFTER_LOAD_FROM_BYTES: u64 = 32 << 20;

#[derive(Clone, Debug)]
pub struct RestoreOptions {
    pub connection: ConnectionSettings,
    pub from: String,
    pub s3: S3Settings,
    /// The manifest's SHA-256 as the backup run reported it; a different manifest is refused.
    pub expect_manifest_sha256: Option<String>,
    /// Databases of the backup to restore; empty means all of them.
    pub databases: Vec<String>,
    pub parallelism: usize,
    /// Replace what each database of the backup holds on the server (every table, view,
    /// routine and trigger), instead of refusing to overwrite a table or view.
    pub drop_existing: bool,
    /// Recreate the accounts and grants of a backup taken with `--users`.
    pub users: bool,
    /// Keep the restore out of the binary log (`sql_log_bin = 0`; needs the privilege).
    pub skip_binlog: bool,
    pub progress_interval: Duration,
    /// The whole restore, or one of its two steps.
    pub step: RestoreStep,
    /// Tables with at least this many bytes of data get their plain secondary keys after the
    /// load instead of during it (see `restore::indexes`).
    pub indexes_after_load_from_bytes: u64,
    /// Restore to a point in time: replay the archive after the backup, up to a target.
    pub point_in_time: Option<PointInTimeOptions>,
    /// Where the keys of encrypted backups are, one file per key id.
    pub decrypt_keys_dir: Option<std::path::PathBuf>,
    /// Whether the scheduled events come back enabled.
    pub events: EventStatus,
}

impl RestoreOptions {
    pub fn new(connection: ConnectionSettings, from: impl Into<String>) -> Self {
        Self {
            connection,
            from: from.into(),
            s3: S3Settings::default(),
            expect_manifest_sha256: None,
            databases: Vec::new(),
            parallelism: 2,
            drop_existing: false,
            users: false,
            skip_binlog: false,
            progress_interval: Duration::from_secs(10),
            step: RestoreStep::All,
            indexes_after_load_from_bytes: INDEXES_AFTER_LOAD_FROM_BYTES,
            point_in_time: None,
            decrypt_keys_dir: None,
            events: EventStatus::AsBackedUp,
        }
    }
}

#[derive(Debug)]
pub struct RestoreReport {
    pub manifest: Manifest,
    pub tables: u64,
    pub rows: u64,
    /// A restore to a point in time: what was replayed after the backup.
    pub replay: Option<Replay>,
}

pub async fn restore(options: &RestoreOptions) -> Result<RestoreReport> {
    let storage = Storage::open(&options.from, &options.s3, false)?;
    let (manifest, manifest_sha256) = load_manifest_and_sha256(
        &storage,
        options.expect_manifest_sha256.as_deref(),
        options.decrypt_keys_dir.as_deref(),
    )
    .await?;
    logical_only(&manifest, &options.from)?;
    let databases = select_databases(&manifest, &options.databases)?;
    if options.users && manifest.users.is_none() {
        return Err(AgentError::Usage("the backup holds no users: it was taken without --users".into()));
    }
    if options.step == RestoreStep::FromStage {
        // The data was checked when it was staged, and is checked again where it is staged.
        verify_object_files(&storage, &manifest, options.parallelism.max(2)).await?;
        tracing::info!("the object files of the backup match the manifest; its data is checked where it is staged");
    } else {
        verify_files(&storage, &manifest, options.parallelism.max(2)).await?;
        tracing::info!("all {} files of the backup match the manifest", manifest.files().len());
    }

    let connector = Connector::new(options.connection.clone());
    let mut conn = connector.connect().await?;
    session_setup(&connector, &mut conn, options).await?;
    // Every check that can refuse the restore runs before the first write.
    preflight(&connector, &mut conn, &databases, options.drop_existing).await?;
    // The staged copy already takes its room: the swap needs none.
    if options.step != RestoreStep::FromStage {
        staging::check_space(&connector, &mut conn, &databases).await?;
    }
    let (_, server_version) = describe_server(&connector, &mut conn).await?;
    let checksums_comparable = server_version == manifest.server.version;
    let _ = conn.disconnect().await;

    let context = RestoreContext {
        connector: &connector,
        storage: &storage,
        manifest: &manifest,
        manifest_sha256: &manifest_sha256,
        options,
        checksums_comparable,
    };
    if let Some(pitr) = &options.point_in_time {
        let (tables, rows, replay) = point_in_time::restore_to_target(&context, &databases, pitr).await?;
        if options.step != RestoreStep::StageOnly {
            let names: Vec<&str> = databases.iter().map(|d| d.name.as_str()).collect();
            restore_users_if_asked(&connector, &storage, &manifest, options, &names.join(", ")).await?;
        }
        return Ok(RestoreReport { manifest, tables, rows, replay: Some(replay) });
    }

    let mut restored = Vec::new();
    let (mut tables, mut rows) = (0, 0);
    for database in &databases {
        let span = tracing::info_span!("restore.database", database = %database.name);
        match context.database(database, None).restore().instrument(span).await {
            Ok(loaded) => {
                restored.push(database.name.clone());
                tables += database.tables.len() as u64;
                rows += loaded;
            }
            // Staging is all or nothing too: the copies staged before the failure go.
            Err(error) if options.step == RestoreStep::StageOnly => {
                staging::drop_staged_copies(&connector, &restored).await;
                return Err(error);
            }
            // Staging touches no target: a failure there leaves every database as it was.
            Err(error) if restored.is_empty() => return Err(error),
            Err(error) => {
                return Err(AgentError::PartiallyRestored { restored: restored.join(", "), error: Box::new(error) });
            }
        }
    }
    if options.step == RestoreStep::StageOnly {
        tracing::info!("{} databases staged and checked; `restore --from-stage` swaps them in", restored.len());
    } else {
        restore_users_if_asked(&connector, &storage, &manifest, options, &restored.join(", ")).await?;
    }
    Ok(RestoreReport { manifest, tables, rows, replay: None })
}

/// With `--users`, the backup's accounts and grants, after `restored` databases were restored.
async fn restore_users_if_asked(
    connector: &Connector,
    storage: &Storage,
    manifest: &Manifest,
    options: &RestoreOptions,
    restored: &str,
) -> Result<()> {
    let Some(file) = manifest.users.as_ref().filter(|_| options.users) else { return Ok(()) };
    restore_users(connector, storage, file, options)
        .await
        .map_err(|error| AgentError::PartiallyRestored { restored: restored.to_string(), error: Box::new(error) })
}

/// Creates the backup's accounts that do not exist and grants them their privileges.
async fn restore_users(
    connector: &Connector,
    storage: &Storage,
    file: &FileEntry,
    options: &RestoreOptions,
) -> Result<()> {
    let mut conn = connector.connect().await?;
    session_setup(connector, &mut conn, options).await?;
    for statement in file_statements(storage, file).await? {
        connector.execute(&mut conn, &statement, "recreating users and grants").await?;
    }
    let _ = conn.disconnect().await;
    tracing::info!("users and grants recreated");
    Ok(())
}

/// Refuses the restore before anything is written: an object of the backup that exists on
/// the server (unless `drop_existing`), or a server that refuses `LOAD DATA LOCAL INFILE`.
async fn preflight(
    connector: &Connector,
    conn: &mut Conn,
    databases: &[DatabaseEntry],
    drop_existing: bool,
) -> Result<()> {
    let local_infile: Option<i64> = conn
        .query_first("SELECT @@GLOBAL.local_infile")
        .await
        .map_err(|e| connector.error("reading local_infile", e))?;
    if local_infile == Some(0) && databases.iter().any(|d| d.tables.iter().any(|t| !t.chunks.is_empty())) {
        return Err(AgentError::LocalInfileDisabled);
    }
    refuse_history_the_server_cannot_load(conn, databases).await?;
    let present: Vec<String> =
        conn.query("SHOW DATABASES").await.map_err(|e| connector.error("listing databases", e))?;
    for database in databases {
        if drop_existing || !present.contains(&database.name) {
            continue;
        }
        // Objects of any type (base table, view, sequence, system-versioned table) conflict.
        let existing = catalog::existing_objects(connector, conn, &database.name).await?;
        if let Some((name, _)) = existing.iter().find(|(name, _)| {
            database.tables.iter().any(|t| &t.name == name)
                || database.view_names.contains(name)
                || database.sequence_names.contains(name)
        }) {
            return Err(AgentError::TableExists { table: format!("`{}`.`{name}`", database.name) });
        }
        if let Some(object) = existing_object_of(connector, conn, database).await? {
            return Err(AgentError::ObjectExists { object });
        }
    }
    Ok(())
}

/// A routine, trigger or event of the backup that exists in its database on the server, which
/// creating it after the swap would fail on.
async fn existing_object_of(
    connector: &Connector,
    conn: &mut Conn,
    database: &DatabaseEntry,
) -> Result<Option<String>> {
    let name = quote_ident(&database.name);
    let found = catalog::object_names(connector, conn, &database.name).await?;
    let kinds = [
        ("routine", &database.routine_names, &found.routines),
        ("trigger", &database.trigger_names, &found.triggers),
        ("scheduled event", &database.event_names, &found.events),
    ];
    Ok(kinds.into_iter().find_map(|(kind, backed_up, present)| {
        backed_up.iter().find(|object| present.contains(object)).map(|object| format!("{kind} {object} of {name}"))
    }))
}

/// The history rows of system-versioned tables load only where `system_versioning_insert_history`
/// exists (MariaDB 10.11 and later): elsewhere the restore is refused before the first write.
async fn refuse_history_the_server_cannot_load(conn: &mut Conn, databases: &[DatabaseEntry]) -> Result<()> {
    let Some((database, table)) =
        databases.iter().find_map(|d| Some((d, d.tables.iter().find(|t| t.history && !t.chunks.is_empty())?)))
    else {
        return Ok(());
    };
    if conn.query_drop("SELECT @@SESSION.system_versioning_insert_history").await.is_ok() {
        return Ok(());
    }
    Err(AgentError::ServerCannotLoad(format!(
        "table {}.{} holds the history of a system-versioned table, which only a server with \
         system_versioning_insert_history (MariaDB 10.11 and later) can load back",
        quote_ident(&database.name),
        quote_ident(&table.name)
    )))
}

fn select_databases(manifest: &Manifest, requested: &[String]) -> Result<Vec<DatabaseEntry>> {
    if let Some(missing) = requested.iter().find(|name| !manifest.databases.iter().any(|d| &d.name == *name)) {
        return Err(AgentError::Usage(format!("database '{missing}' is not in the backup")));
    }
    Ok(manifest.databases.iter().filter(|d| requested.is_empty() || requested.contains(&d.name)).cloned().collect())
}

/// Session settings of every restore connection: loads skip foreign key checks (tables load
/// in any order) but keep unique checks (measured: cheaper per chunk than turning them off).
async fn session_setup(connector: &Connector, conn: &mut Conn, options: &RestoreOptions) -> Result<()> {
    let mut statements = vec![
        "SET SESSION foreign_key_checks = 0",
        "SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION'",
        // Every warning of a chunk is listed, so that an ENUM's error values (one warning each,
        // expected) are told apart from a value the server had to adjust.
        "SET SESSION max_error_count = 65535",
    ];
    if options.skip_binlog {
        statements.push("SET SESSION sql_log_bin = 0");
    }
    for sql in statements {
        connector.execute(conn, sql, "preparing the restore session").await?;
    }
    Ok(())
}

async fn file_statements(storage: &Storage, file: &FileEntry) -> Result<Vec<String>> {
    let bytes = storage.read_entry(file).await?;
    let text = String::from_utf8(bytes.to_vec())
        .map_err(|_| AgentError::BadChunk { file: file.path.clone(), reason: "not UTF-8 text".into() })?;
    Ok(read_statements(&text))
}
