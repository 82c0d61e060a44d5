//! `restore`: checks every file against the manifest before touching the database, then
//! creates databases and tables, loads chunks in parallel with `LOAD DATA LOCAL INFILE` (one
//! statement, so one transaction, per chunk), and recreates views, routines and triggers last.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use futures::{StreamExt, TryStreamExt};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use crate::error::{AgentError, Result};
use crate::format::{
    ChunkEntry, Compression, DatabaseEntry, FileEntry, Manifest, load_data_sql, quote_ident, read_statements,
};
use crate::mysql::{ConnectionSettings, Connector, catalog};
use crate::progress::Progress;
use crate::storage::{S3Settings, Storage};
use crate::verify::{load_manifest, verify_files};

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
    /// Drop each database of the backup that exists on the server before restoring it.
    pub drop_existing: bool,
    /// Keep the restore out of the binary log (`sql_log_bin = 0`; needs the privilege).
    pub skip_binlog: bool,
    pub progress_interval: Duration,
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
            skip_binlog: false,
            progress_interval: Duration::from_secs(10),
        }
    }
}

pub struct RestoreReport {
    pub manifest: Manifest,
    pub tables: u64,
    pub rows: u64,
}

pub async fn run(options: &RestoreOptions) -> Result<RestoreReport> {
    let storage = Storage::open(&options.from, &options.s3, false)?;
    let manifest = load_manifest(&storage, options.expect_manifest_sha256.as_deref()).await?;
    let databases = select_databases(&manifest, &options.databases)?;
    verify_files(&storage, &manifest, options.parallelism.max(2)).await?;
    tracing::info!("all {} files of the backup match the manifest", manifest.files().len());

    let connector = Connector::new(options.connection.clone());
    let mut conn = connector.connect().await?;
    session_setup(&connector, &mut conn, options).await?;
    // Every check that can refuse the restore runs before the first write.
    let existed = preflight(&connector, &mut conn, &databases, options.drop_existing).await?;
    let mut modified = Vec::new();
    let written = write_all(&connector, conn, &storage, &databases, &manifest, options, &existed, &mut modified).await;
    let (tables, rows) = written.map_err(|error| partially_restored(error, &modified))?;
    Ok(RestoreReport { manifest, tables, rows })
}

/// A database the restore has begun to write, and how.
struct Modified {
    name: String,
    dropped: bool,
    existed: bool,
}

/// After the first write, an error also says which databases were changed.
fn partially_restored(error: AgentError, modified: &[Modified]) -> AgentError {
    if modified.is_empty() {
        return error;
    }
    let databases: Vec<String> = modified
        .iter()
        .map(|m| match (m.dropped, m.existed) {
            (true, true) => format!("database {} was dropped and is partially restored", m.name),
            (_, true) => format!(
                "database {0} existed and now holds partially restored tables (--drop-existing drops all of {0}, \
                 its other tables too)",
                m.name
            ),
            (_, false) => format!("database {} was created and is partially restored", m.name),
        })
        .collect();
    AgentError::PartiallyRestored { databases: databases.join(", "), error: Box::new(error) }
}

/// Refuses the restore before anything is written: an object of the backup that exists on
/// the server (unless `drop_existing`), or a server that refuses `LOAD DATA LOCAL INFILE`.
/// Returns the databases that exist.
async fn preflight(
    connector: &Connector,
    conn: &mut Conn,
    databases: &[DatabaseEntry],
    drop_existing: bool,
) -> Result<Vec<String>> {
    let local_infile: Option<i64> = conn
        .query_first("SELECT @@GLOBAL.local_infile")
        .await
        .map_err(|e| connector.error("reading local_infile", e))?;
    if local_infile == Some(0) && databases.iter().any(|d| d.tables.iter().any(|t| !t.chunks.is_empty())) {
        return Err(AgentError::LocalInfileDisabled);
    }
    let present: Vec<String> =
        conn.query("SHOW DATABASES").await.map_err(|e| connector.error("listing databases", e))?;
    let mut existed = Vec::new();
    for database in databases {
        if !present.contains(&database.name) {
            continue;
        }
        existed.push(database.name.clone());
        if drop_existing {
            continue;
        }
        // Objects of any type (base table, view, sequence, system-versioned table) conflict.
        let existing = catalog::existing_objects(connector, conn, &database.name).await?;
        if let Some((name, _)) = existing
            .iter()
            .find(|(name, _)| database.tables.iter().any(|t| &t.name == name) || database.view_names.contains(name))
        {
            return Err(AgentError::TableExists { table: format!("`{}`.`{name}`", database.name) });
        }
    }
    Ok(existed)
}

/// Everything that writes, in order; `modified` lists each database as it is first touched.
#[allow(clippy::too_many_arguments)]
async fn write_all(
    connector: &Connector,
    mut conn: Conn,
    storage: &Storage,
    databases: &[DatabaseEntry],
    manifest: &Manifest,
    options: &RestoreOptions,
    existed: &[String],
    modified: &mut Vec<Modified>,
) -> Result<(u64, u64)> {
    prepare_databases(connector, &mut conn, storage, databases, options.drop_existing, existed, modified).await?;
    let _ = conn.disconnect().await;
    let (tables, rows) = load_all(connector, storage, databases, manifest.compression, options).await?;
    // A fresh connection: the first one sat idle through the load and may have timed out.
    let mut conn = connector.connect().await?;
    session_setup(connector, &mut conn, options).await?;
    create_views(connector, &mut conn, storage, databases).await?;
    for database in databases {
        run_optional_file(connector, &mut conn, storage, database, database.routines.as_ref()).await?;
        run_optional_file(connector, &mut conn, storage, database, database.triggers.as_ref()).await?;
    }
    let _ = conn.disconnect().await;
    Ok((tables, rows))
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
    ];
    if options.skip_binlog {
        statements.push("SET SESSION sql_log_bin = 0");
    }
    for sql in statements {
        connector.execute(conn, sql, "preparing the restore session").await?;
    }
    Ok(())
}

/// Creates each database and its tables (after `preflight`), dropping it first if asked.
async fn prepare_databases(
    connector: &Connector,
    conn: &mut Conn,
    storage: &Storage,
    databases: &[DatabaseEntry],
    drop_existing: bool,
    existed: &[String],
    modified: &mut Vec<Modified>,
) -> Result<()> {
    for database in databases {
        modified.push(Modified {
            name: database.name.clone(),
            dropped: drop_existing,
            existed: existed.contains(&database.name),
        });
        if drop_existing {
            let sql = format!("DROP DATABASE IF EXISTS {}", quote_ident(&database.name));
            connector.execute(conn, &sql, "dropping an existing database").await?;
        }
        run_file(connector, conn, storage, None, &database.schema).await?;
        for table in &database.tables {
            run_file(connector, conn, storage, Some(&database.name), &table.schema).await?;
        }
    }
    Ok(())
}

/// Runs the statements of a `.sql` file of the backup, in `database` when given.
async fn run_file(
    connector: &Connector,
    conn: &mut Conn,
    storage: &Storage,
    database: Option<&str>,
    file: &FileEntry,
) -> Result<()> {
    if let Some(database) = database {
        connector.execute(conn, &format!("USE {}", quote_ident(database)), "selecting a database").await?;
    }
    let text = read_text(storage, file).await?;
    for statement in read_statements(&text) {
        connector.execute(conn, &statement, &format!("running {}", file.path)).await?;
    }
    Ok(())
}

async fn run_optional_file(
    connector: &Connector,
    conn: &mut Conn,
    storage: &Storage,
    database: &DatabaseEntry,
    file: Option<&FileEntry>,
) -> Result<()> {
    match file {
        Some(file) => run_file(connector, conn, storage, Some(&database.name), file).await,
        None => Ok(()),
    }
}

async fn read_text(storage: &Storage, file: &FileEntry) -> Result<String> {
    let bytes = storage.read(&file.path).await?;
    String::from_utf8(bytes.to_vec())
        .map_err(|_| AgentError::BadChunk { file: file.path.clone(), reason: "not UTF-8 text".into() })
}

/// Views can depend on each other: each one is retried until none is left or a round
/// makes no progress.
async fn create_views(
    connector: &Connector,
    conn: &mut Conn,
    storage: &Storage,
    databases: &[DatabaseEntry],
) -> Result<()> {
    let mut pending = Vec::new();
    for database in databases {
        if let Some(file) = &database.views {
            let text = read_text(storage, file).await?;
            pending.extend(
                group_objects(read_statements(&text)).into_iter().map(|object| (database.name.clone(), object)),
            );
        }
    }
    while !pending.is_empty() {
        let mut failed = Vec::new();
        let mut last_error = None;
        let before = pending.len();
        for (database, statements) in pending {
            match run_object(connector, conn, &database, &statements).await {
                Ok(()) => {}
                Err(error) => {
                    last_error = Some(error);
                    failed.push((database, statements));
                }
            }
        }
        if failed.len() == before {
            return Err(last_error.expect("a failed view has an error"));
        }
        pending = failed;
    }
    Ok(())
}

async fn run_object(connector: &Connector, conn: &mut Conn, database: &str, statements: &[String]) -> Result<()> {
    connector.execute(conn, &format!("USE {}", quote_ident(database)), "selecting a database").await?;
    for statement in statements {
        connector.execute(conn, statement, "creating a view").await?;
    }
    Ok(())
}

/// Groups `SET` statements with the object statement that follows them.
fn group_objects(statements: Vec<String>) -> Vec<Vec<String>> {
    let mut objects = Vec::new();
    let mut current = Vec::new();
    for statement in statements {
        let is_setting = statement.trim_start().to_ascii_uppercase().starts_with("SET ");
        current.push(statement);
        if !is_setting {
            objects.push(std::mem::take(&mut current));
        }
    }
    objects
}

struct LoadTask {
    target: String,
    columns: Vec<String>,
    chunk: ChunkEntry,
}

struct LoadContext {
    connector: Connector,
    storage: Storage,
    compression: Compression,
    progress: Arc<Progress>,
    queue: Mutex<VecDeque<LoadTask>>,
}

/// Loads every chunk with `parallelism` connections, largest chunks first.
async fn load_all(
    connector: &Connector,
    storage: &Storage,
    databases: &[DatabaseEntry],
    compression: Compression,
    options: &RestoreOptions,
) -> Result<(u64, u64)> {
    let mut tasks = Vec::new();
    for database in databases {
        for table in &database.tables {
            let target = format!("{}.{}", quote_ident(&database.name), quote_ident(&table.name));
            for chunk in &table.chunks {
                tasks.push(LoadTask { target: target.clone(), columns: table.columns.clone(), chunk: chunk.clone() });
            }
        }
    }
    tasks.sort_by_key(|task| std::cmp::Reverse(task.chunk.data_bytes));
    let tables = databases.iter().map(|d| d.tables.len() as u64).sum();
    let rows = tasks.iter().map(|t| t.chunk.rows).sum();
    let expected = tasks.iter().map(|t| t.chunk.data_bytes).sum();
    let progress = Progress::new("restore", expected);
    let reporter = progress.report_every(options.progress_interval);
    let context = Arc::new(LoadContext {
        connector: connector.clone(),
        storage: storage.clone(),
        compression,
        progress: progress.clone(),
        queue: Mutex::new(tasks.into()),
    });
    let workers = (0..options.parallelism.max(1)).map(|_| tokio::spawn(load_worker(context.clone(), options.clone())));
    let outcomes = join_all(workers).await;
    if let Some(reporter) = reporter {
        reporter.abort();
    }
    for outcome in outcomes {
        outcome??;
    }
    tracing::info!("{}", progress.final_line());
    Ok((tables, rows))
}

async fn load_worker(context: Arc<LoadContext>, options: RestoreOptions) -> Result<()> {
    let mut conn = context.connector.connect().await?;
    session_setup(&context.connector, &mut conn, &options).await?;
    loop {
        let task = context.queue.lock().unwrap().pop_front();
        let Some(task) = task else { break };
        if let Err(error) = load_chunk(&context, &mut conn, &task).await {
            // Others stop at their next chunk.
            context.queue.lock().unwrap().clear();
            return Err(error);
        }
    }
    let _ = conn.disconnect().await;
    Ok(())
}

/// Loads one chunk in one transaction: it is committed only when every row loaded without a
/// warning, as many rows as the manifest says; otherwise it is rolled back.
async fn load_chunk(context: &LoadContext, conn: &mut Conn, task: &LoadTask) -> Result<()> {
    let path = &task.chunk.file.path;
    context.connector.execute(conn, "START TRANSACTION", &format!("loading {path}")).await?;
    match load_in_transaction(context, conn, task).await {
        Ok(loaded) => {
            context.connector.execute(conn, "COMMIT", &format!("committing {path}")).await?;
            context.progress.add(loaded, 0);
            Ok(())
        }
        Err(error) => {
            if let Err(rollback) = conn.query_drop("ROLLBACK").await {
                tracing::warn!("{path}: rollback failed: {rollback}");
            }
            Err(error)
        }
    }
}

async fn load_in_transaction(context: &LoadContext, conn: &mut Conn, task: &LoadTask) -> Result<u64> {
    let path = &task.chunk.file.path;
    let progress = context.progress.clone();
    let data = context
        .storage
        .decompressed(&task.chunk.file, context.compression)
        .await?
        .inspect_ok(move |piece| progress.add(0, piece.len() as u64))
        .boxed();
    // The handler must be Sync; the stream is only Send, so it travels inside a Mutex.
    let data = std::sync::Mutex::new(Some(data));
    conn.set_infile_handler(async move {
        let stream = data.lock().unwrap().take().expect("the infile handler runs once");
        Ok(stream)
    });
    let sql = load_data_sql(&task.target, &task.columns, path);
    let during = format!("loading {path}");
    conn.query_drop(sql).await.map_err(|e| context.connector.error(&during, e))?;
    let loaded = conn.affected_rows();
    if conn.get_warnings() > 0
        && let Some((level, code, message)) = first_warning(context, conn, path, &task.columns).await?
    {
        return Err(AgentError::BadChunk {
            file: path.clone(),
            reason: format!(
                "loading it into {} raised {level} {code}: {message}; the chunk was rolled back",
                task.target
            ),
        });
    }
    if loaded != task.chunk.rows {
        return Err(AgentError::BadChunk {
            file: path.clone(),
            reason: format!(
                "{loaded} rows loaded into {}, the manifest says {} (a duplicate key or a table that was not \
                 empty?); the chunk was rolled back",
                task.target, task.chunk.rows
            ),
        });
    }
    Ok(loaded)
}

/// The first warning of a load that changed data (level `Warning` or `Error`; `Note`s are
/// logged only): a value the server had to adjust is not restored as it was backed up.
/// A warning about a column that is not loaded (a generated column, computed from the loaded
/// ones exactly as on the source) does not change stored data and is logged only.
async fn first_warning(
    context: &LoadContext,
    conn: &mut Conn,
    path: &str,
    loaded_columns: &[String],
) -> Result<Option<(String, u32, String)>> {
    let warnings: Vec<(String, u32, String)> =
        conn.query("SHOW WARNINGS").await.map_err(|e| context.connector.error("reading the load's warnings", e))?;
    let mut first = None;
    for (level, code, message) in warnings {
        let about_unloaded_column = warned_column(&message).is_some_and(|c| !loaded_columns.contains(&c));
        if level.eq_ignore_ascii_case("Note") || about_unloaded_column {
            tracing::info!("{path}: {level} {code}: {message}");
        } else if first.is_none() {
            first = Some((level, code, message));
        }
    }
    Ok(first)
}

/// The column a server warning names ("... for column 'c' at row 1").
fn warned_column(message: &str) -> Option<String> {
    let rest = &message[message.find("column '")? + "column '".len()..];
    let end = rest.rfind("' at row").or_else(|| rest.rfind('\''))?;
    Some(rest[..end].to_string())
}

#[cfg(test)]
mod tests {
    use super::warned_column;

    #[test]
    fn warnings_name_their_column() {
        let column = |m: &str| warned_column(m);
        assert_eq!(column("Out of range value for column 'doubled' at row 1").as_deref(), Some("doubled"));
        assert_eq!(column("Data truncated for column 'it''s' at row 12").as_deref(), Some("it''s"));
        assert_eq!(column("Duplicate entry '1' for key 'PRIMARY'"), None);
    }
}
