//! `backup`: (logical; [`crate::physical`] stores a physical one) reads the catalog, writes schema files, opens one snapshot for all workers,
//! streams every table (large ones split into primary key ranges) into compressed chunks,
//! and writes `manifest.json` last. On failure it removes what it wrote and leaves no manifest.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::join_all;
use mysql_async::Conn;
use sha2::{Digest, Sha256};
use tracing::Instrument;

use crate::content::{ContentDigest, encode_row_counting, enum_error_texts, select_sql};
use crate::encryption::{self, SealKey};
use crate::error::{AgentError, Result};
use crate::format::{
    ChunkEntry, Compression, DATA_FORMAT, DatabaseEntry, ENCRYPTED_FORMAT_VERSION, Envelope, FORMAT_NAME,
    FORMAT_VERSION, FileEntry, LOCK_FILE, MANIFEST_FILE, Manifest, ServerInfo, TableEntry, layout, load_data_sql,
    quote_ident, write_statements,
};
use crate::mysql::catalog::{self, Definitions, TableInfo};
use crate::mysql::connection::describe_server;
use crate::mysql::wire::{DataConn, WireError};
use crate::mysql::{ConnectionSettings, Connector, FirstRow, snapshot, users};
use crate::physical::{self, PhysicalOptions, StreamSource};
use crate::progress::Progress;
use crate::storage::{FileWriter, S3Settings, Storage, Syncer};

#[derive(Clone, Debug)]
pub struct BackupOptions {
    pub connection: ConnectionSettings,
    /// Databases to back up; empty means every non-system database.
    pub databases: Vec<String>,
    pub to: String,
    pub s3: S3Settings,
    pub compression: Compression,
    pub compression_level: Option<i32>,
    pub parallelism: usize,
    /// Uncompressed bytes after which a chunk file is closed and the next one begun: bounds
    /// the size of one transaction at restore.
    pub chunk_bytes: u64,
    /// Estimated table size above which a table is split into primary key ranges.
    pub split_bytes: u64,
    /// Record `CHECKSUM TABLE` of every table, read inside the snapshot.
    pub table_checksums: bool,
    /// Also back up the accounts that hold privileges on the databases, with those grants.
    pub users: bool,
    pub progress_interval: Duration,
    /// Encrypt every file but the manifest's envelope with age, to this key's recipient.
    pub encrypt: Option<SealKey>,
    /// A physical backup: store this stream of the server's backup tool instead of reading
    /// tables over SQL (the connection then only names the server).
    pub physical: Option<StreamSource>,
    /// Called once the catalog is read, before the snapshot opens (tests use it to try DDL).
    #[doc(hidden)]
    pub after_catalog: Option<Hook>,
}

/// A callback for tests.
#[derive(Clone)]
pub struct Hook(pub Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

impl BackupOptions {
    pub fn new(connection: ConnectionSettings, to: impl Into<String>) -> Self {
        Self {
            connection,
            databases: Vec::new(),
            to: to.into(),
            s3: S3Settings::default(),
            compression: Compression::Zstd,
            compression_level: None,
            parallelism: 2,
            chunk_bytes: 64 * 1024 * 1024,
            split_bytes: 128 * 1024 * 1024,
            table_checksums: false,
            users: false,
            progress_interval: Duration::from_secs(10),
            encrypt: None,
            physical: None,
            after_catalog: None,
        }
    }

    fn physical_options(&self) -> PhysicalOptions {
        PhysicalOptions {
            connection: self.connection.clone(),
            compression: self.compression,
            level: self.level(),
            chunk_bytes: self.chunk_bytes,
            encrypt: self.encrypt.clone(),
        }
    }

    fn level(&self) -> i32 {
        self.compression_level.unwrap_or(match self.compression {
            Compression::Zstd => 1,
            Compression::Gzip => 6,
            Compression::None => 0,
        })
    }
}

pub struct BackupReport {
    pub manifest: Manifest,
    pub manifest_sha256: String,
    pub manifest_bytes: u64,
}

/// Files written so far, removed if the backup fails.
type Written = Arc<Mutex<Vec<String>>>;

/// Takes a backup to `options.to`, holding the location's lock file; on failure, what it
/// wrote is removed.
pub async fn back_up(options: &BackupOptions) -> Result<BackupReport> {
    let storage = Storage::open(&options.to, &options.s3, true)?;
    if storage.exists(MANIFEST_FILE).await? {
        return Err(AgentError::BackupExists { location: options.to.clone() });
    }
    let lock_token = new_lock_token();
    if !storage.create(LOCK_FILE, Bytes::from(lock_token.clone())).await? {
        return Err(AgentError::BackupLocked {
            location: options.to.trim_end_matches('/').to_string(),
            holder: lock_holder(&storage).await,
        });
    }
    let written: Written = Arc::default();
    let result = match &options.physical {
        Some(stream) => match physical::store_backup(&options.physical_options(), stream, &storage, &written).await {
            Ok(manifest) => write_manifest(&storage, &written, manifest, options.encrypt.as_ref()).await,
            Err(error) => Err(error),
        },
        None => write_backup(options, &storage, &written).await,
    };
    if result.is_err() {
        // Only while holding the lock: no other run writes here.
        remove_written(&storage, &written).await;
    }
    release_lock(&storage, &lock_token).await;
    result
}

/// The token written into the lock file: who holds the lock (host, process and start time).
fn new_lock_token() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok().map(|h| h.trim().to_string()))
        .unwrap_or_else(|| "unknown-host".into());
    format!("host={host} pid={} started={}\n", std::process::id(), jiff::Timestamp::now())
}

/// Who holds the lock, as its content says ("held by host ... pid ... started ...").
async fn lock_holder(storage: &Storage) -> String {
    match storage.read(LOCK_FILE).await {
        Ok(content) => {
            let text = String::from_utf8_lossy(&content);
            let field = |key: &str| {
                text.split_whitespace()
                    .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
                    .map(|value| visitors_agent_contract::text::truncate_on_char_boundary(value.to_string(), 100))
                    .unwrap_or_else(|| "unknown".into())
            };
            format!("held by host {} process {} started {}", field("host"), field("pid"), field("started"))
        }
        Err(_) => "the lock could not be read".into(),
    }
}

/// Removes the lock if it is still ours.
async fn release_lock(storage: &Storage, lock_token: &str) {
    match storage.read(LOCK_FILE).await {
        Ok(held) if held.as_ref() == lock_token.as_bytes() => {
            if let Err(error) = storage.delete(LOCK_FILE).await {
                tracing::warn!("could not remove the lock {LOCK_FILE}: {error}");
            }
        }
        Ok(_) => tracing::warn!("{LOCK_FILE} was replaced by another run; left in place"),
        Err(error) => tracing::warn!("could not read the lock {LOCK_FILE}: {error}"),
    }
}

async fn remove_written(storage: &Storage, written: &Written) {
    let paths = std::mem::take(&mut *written.lock().unwrap());
    for path in paths {
        if let Err(error) = storage.delete(&path).await {
            tracing::warn!("could not remove the partial file {path}: {error}");
        }
    }
}

/// One database as read from the catalog.
struct DatabasePlan {
    name: String,
    tables: Vec<TableInfo>,
    /// Each sequence's `CREATE SEQUENCE`; where it stands is read after the rows.
    sequences: Vec<(String, String)>,
    entry: DatabaseEntry,
}

/// Writes the backup, `manifest.json` last, noting each file in `written` before writing it.
async fn write_backup(options: &BackupOptions, storage: &Storage, written: &Written) -> Result<BackupReport> {
    let started_at = jiff::Timestamp::now();
    let connector = Connector::new(options.connection.clone());
    let mut coordinator = connector.connect().await?;
    connector.execute(&mut coordinator, "SET NAMES utf8mb4", "preparing the session").await?;
    let (flavour, version) = describe_server(&connector, &mut coordinator).await?;
    let mariadb = flavour == "mariadb";
    // A lock that cannot be had in 10 s (a long DDL or another backup holds it) fails the
    // backup with the server's lock wait timeout error instead of blocking writes for long.
    connector.execute(&mut coordinator, "SET SESSION lock_wait_timeout = 10", "preparing the session").await?;
    // From here to the open snapshot no DDL runs: the catalog read is the one the rows match.
    let ddl = snapshot::block_ddl(&mut coordinator, mariadb).await;
    let names = catalog::databases(&connector, &mut coordinator, &options.databases).await?;
    let mut catalogs = Vec::with_capacity(names.len());
    for name in names {
        catalogs.push(read_database(&connector, &mut coordinator, name).await?);
    }
    let users = match options.users {
        true => Some(
            users::read(&connector, &mut coordinator, &catalogs.iter().map(|c| c.name.clone()).collect::<Vec<_>>())
                .await?,
        ),
        false => None,
    };
    if let Some(hook) = &options.after_catalog {
        (hook.0)();
    }

    let parallelism = options.parallelism.max(1);
    let snapshot = snapshot::open(&connector, &mut coordinator, parallelism, mariadb, ddl).await?;
    let _ = coordinator.disconnect().await;
    tracing::info!("snapshot open for {parallelism} workers ({}, DDL blocked: {ddl:?})", snapshot.method);
    let output = Output {
        storage: storage.clone(),
        written: written.clone(),
        syncer: Arc::new(storage.syncer()),
        seal: options.encrypt.clone(),
        // An encrypted backup's storage learns no database or table name from its paths either.
        names: if options.encrypt.is_some() { layout::Names::opaque() } else { layout::Names::Plain },
    };
    let mut plans = Vec::with_capacity(catalogs.len());
    for catalog in catalogs {
        plans.push(store_database(&output, catalog).await?);
    }
    let (users, user_names) = match users {
        Some(users) => {
            (store_optional(&output, layout::USERS, "users and grants", &users.statements).await?, users.names)
        }
        None => (None, Vec::new()),
    };
    let results = dump_all(connector.clone(), &output, options, &plans, snapshot.workers).await?;
    store_sequences(&output, &connector, &mut plans).await?;
    // Every file is durable before the manifest names it.
    output.syncer.finish().await?;

    let encryption = options.encrypt.as_ref().map(SealKey::manifest_entry);
    let manifest = Manifest {
        format: FORMAT_NAME.into(),
        format_version: if encryption.is_some() { ENCRYPTED_FORMAT_VERSION } else { FORMAT_VERSION },
        tool: format!("visitors-agent {}", env!("CARGO_PKG_VERSION")),
        server: ServerInfo { version, flavour },
        started_at: started_at.to_string(),
        finished_at: jiff::Timestamp::now().to_string(),
        consistency: snapshot.method.into(),
        position: snapshot.position,
        compression: options.compression,
        data_format: DATA_FORMAT.into(),
        databases: assemble(plans, results),
        users,
        user_names,
        encryption,
        physical: None,
    };
    write_manifest(storage, written, manifest, options.encrypt.as_ref()).await
}

/// Where a backup's files go: the storage, the list of files written (removed if the backup
/// fails) and the syncer that makes finished files durable.
struct Output {
    storage: Storage,
    written: Written,
    syncer: Arc<Syncer>,
    seal: Option<SealKey>,
    names: layout::Names,
}

impl Output {
    /// Notes a file before it is written, so that a failed backup removes it.
    fn starting(&self, path: &str) {
        self.written.lock().unwrap().push(path.to_string());
    }
}

/// Plans the work, then lets every worker take tasks until none is left or one fails.
async fn dump_all(
    connector: Connector,
    output: &Output,
    options: &BackupOptions,
    plans: &[DatabasePlan],
    mut workers: Vec<DataConn>,
) -> Result<Vec<TaskResult>> {
    let tasks = plan_tasks(&connector, &mut workers[0], plans, options).await?;
    let expected: u64 = plans.iter().flat_map(|p| &p.tables).map(|t| t.data_length).sum();
    let progress = Progress::new("backup", expected);
    let reporter = progress.report_every(options.progress_interval);
    let context = Arc::new(DumpContext {
        connector,
        storage: output.storage.clone(),
        written: output.written.clone(),
        syncer: output.syncer.clone(),
        layout: output.names.clone(),
        options: options.clone(),
        progress: progress.clone(),
        names: plans.iter().map(|p| (p.name.clone(), p.tables.iter().map(|t| t.name.clone()).collect())).collect(),
        queue: Mutex::new(tasks),
        failed: AtomicBool::new(false),
    });
    let outcomes =
        join_all(workers.into_iter().map(|conn| tokio::spawn(dump_worker(context.clone(), conn).in_current_span())))
            .await;
    if let Some(reporter) = reporter {
        reporter.abort();
    }
    // A worker that panicked or was cancelled failed like one that returned its error.
    let results = collect_results(outcomes.into_iter().map(|joined| joined.map_err(AgentError::from).and_then(|r| r)))?;
    tracing::info!("{}", progress.final_line());
    Ok(results)
}

/// Stores `manifest.json`, create-only: the last file of a backup, the one that makes it whole.
/// If the write fails (a timeout after the store took it, say), the stored manifest is read
/// back: ours, the backup is whole; another run's, the files it lists are left alone.
async fn write_manifest(
    storage: &Storage,
    written: &Written,
    manifest: Manifest,
    seal: Option<&SealKey>,
) -> Result<BackupReport> {
    let text = manifest_text(&manifest, seal)?;
    let manifest_sha256 = hex::encode(Sha256::digest(&text));
    let manifest_bytes = text.len() as u64;
    match storage.create(MANIFEST_FILE, Bytes::from(text)).await {
        Ok(true) => {}
        // On S3, a retried create whose first attempt was stored finds its own manifest.
        Ok(false) => match storage.read(MANIFEST_FILE).await {
            Ok(stored) if hex::encode(Sha256::digest(&stored)) == manifest_sha256 => {
                tracing::warn!("{MANIFEST_FILE} was already stored by an earlier attempt of this write; it is ours");
            }
            Ok(_) => {
                // Another run's manifest: its files have the same names as ours; keep them all.
                written.lock().unwrap().clear();
                return Err(AgentError::BackupExists { location: storage.location().to_string() });
            }
            Err(error) => return Err(error),
        },
        Err(error) => {
            // The manifest may be in place without being durable (its fsync failed): the run
            // fails, so it goes first, then the files it names.
            written.lock().unwrap().insert(0, MANIFEST_FILE.to_string());
            return Err(error);
        }
    }
    Ok(BackupReport { manifest, manifest_sha256, manifest_bytes })
}

/// A database's catalog, read while DDL is blocked, before anything is stored.
struct DatabaseCatalog {
    name: String,
    create: String,
    tables: Vec<(TableInfo, String)>,
    views: Vec<(String, Vec<String>)>,
    routines: Definitions,
    triggers: Definitions,
    sequences: Vec<(String, String)>,
    events: Definitions,
}

async fn read_database(connector: &Connector, conn: &mut Conn, name: String) -> Result<DatabaseCatalog> {
    let create = catalog::create_database_sql(connector, conn, &name).await?;
    let mut tables = Vec::new();
    for table in catalog::tables(connector, conn, &name).await? {
        let create = catalog::create_table_sql(connector, conn, &name, &table.name).await?;
        tables.push((table, create));
    }
    Ok(DatabaseCatalog {
        create,
        tables,
        views: catalog::views(connector, conn, &name).await?,
        routines: catalog::routines(connector, conn, &name).await?,
        triggers: catalog::triggers(connector, conn, &name).await?,
        sequences: catalog::sequences(connector, conn, &name).await?,
        events: catalog::events(connector, conn, &name).await?,
        name,
    })
}

/// Stores a database's schema, view, routine, trigger and event files (its sequences come
/// after its rows, [`store_sequences`]).
async fn store_database(output: &Output, catalog: DatabaseCatalog) -> Result<DatabasePlan> {
    let name = catalog.name;
    let schema =
        store_sql(output, &output.names.database_schema(&name), &format!("database {name}"), &[catalog.create]).await?;
    let mut entries = Vec::with_capacity(catalog.tables.len());
    let mut tables = Vec::with_capacity(catalog.tables.len());
    for (table, create) in catalog.tables {
        let statements = ["SET NAMES utf8mb4".to_string(), create];
        let header = format!("table {}.{}", quote_ident(&name), quote_ident(&table.name));
        let file = store_sql(output, &output.names.table_schema(&name, &table.name), &header, &statements).await?;
        entries.push(TableEntry {
            name: table.name.clone(),
            schema: file,
            load_sql: load_data_sql(&quote_ident(&table.name), &table.columns, "/dev/stdin"),
            columns: table.columns.clone(),
            history: table.history,
            rows: 0,
            data_bytes: 0,
            checksum: None,
            content_digest: None,
            chunks: Vec::new(),
        });
        tables.push(table);
    }
    let view_names = catalog.views.iter().map(|(view, _)| view.clone()).collect();
    let view_statements: Vec<String> = catalog.views.into_iter().flat_map(|(_, statements)| statements).collect();
    let views =
        store_optional(output, &output.names.views(&name), &format!("views of {name}"), &view_statements).await?;
    let routines = store_optional(
        output,
        &output.names.routines(&name),
        &format!("routines of {name}"),
        &catalog.routines.statements,
    )
    .await?;
    let triggers = store_optional(
        output,
        &output.names.triggers(&name),
        &format!("triggers of {name}"),
        &catalog.triggers.statements,
    )
    .await?;
    let events =
        store_optional(output, &output.names.events(&name), &format!("events of {name}"), &catalog.events.statements)
            .await?;
    let entry = DatabaseEntry {
        name: name.clone(),
        schema,
        tables: entries,
        views,
        view_names,
        routines,
        routine_names: catalog.routines.names,
        triggers,
        trigger_names: catalog.triggers.names,
        sequences: None,
        sequence_names: Vec::new(),
        events,
        event_names: catalog.events.names,
    };
    Ok(DatabasePlan { name, tables, sequences: catalog.sequences, entry })
}

/// Stores each database's sequences with where they stand, read once every row is: a sequence
/// is not transactional, so read in the snapshot it could stand before values the rows hold.
async fn store_sequences(output: &Output, connector: &Connector, plans: &mut [DatabasePlan]) -> Result<()> {
    if plans.iter().all(|plan| plan.sequences.is_empty()) {
        return Ok(());
    }
    let mut conn = connector.connect().await?;
    for plan in plans.iter_mut().filter(|plan| !plan.sequences.is_empty()) {
        let mut statements = vec!["SET NAMES utf8mb4".to_string()];
        for (name, create) in &plan.sequences {
            statements.push(create.clone());
            statements.push(catalog::sequence_position_sql(connector, &mut conn, &plan.name, name).await?);
        }
        let path = output.names.sequences(&plan.name);
        plan.entry.sequences =
            Some(store_sql(output, &path, &format!("sequences of {}", plan.name), &statements).await?);
        plan.entry.sequence_names = plan.sequences.iter().map(|(name, _)| name.clone()).collect();
    }
    let _ = conn.disconnect().await;
    Ok(())
}

async fn store_sql(output: &Output, path: &str, header: &str, statements: &[String]) -> Result<FileEntry> {
    let text = write_statements(header, statements);
    let (path, content) = match &output.seal {
        Some(key) => (format!("{path}{}", encryption::SUFFIX), key.seal(text.as_bytes())?),
        None => (path.to_string(), text.into_bytes()),
    };
    output.starting(&path);
    let file = output.storage.put(&path, Bytes::from(content)).await?;
    output.syncer.add(&path);
    Ok(file)
}

/// The text of `manifest.json`: the manifest, or for an encrypted backup its envelope.
fn manifest_text(manifest: &Manifest, seal: Option<&SealKey>) -> Result<Vec<u8>> {
    fn pretty(value: &impl serde::Serialize) -> Result<Vec<u8>> {
        serde_json::to_vec_pretty(value).map_err(|e| AgentError::Internal(e.to_string()))
    }
    let text = pretty(manifest)?;
    let (Some(key), Some(encryption)) = (seal, &manifest.encryption) else { return Ok(text) };
    let sealed = key.seal(&text)?;
    pretty(&Envelope {
        format: manifest.format.clone(),
        format_version: manifest.format_version,
        encryption: encryption.clone(),
        position: manifest.position.clone(),
        sealed_manifest: base64::Engine::encode(&base64::engine::general_purpose::STANDARD, sealed),
    })
}

async fn store_optional(output: &Output, path: &str, header: &str, statements: &[String]) -> Result<Option<FileEntry>> {
    if statements.is_empty() {
        return Ok(None);
    }
    store_sql(output, path, header, statements).await.map(Some)
}

/// A unit of work for one worker.
#[derive(Clone, Debug)]
enum Task {
    Range(RangeTask),
    Checksum { database: usize, table: usize },
}

#[derive(Clone, Debug)]
struct RangeTask {
    database: usize,
    table: usize,
    range: usize,
    select: String,
    estimated_bytes: u64,
    /// The ENUM columns whose error value is written as a text of its own, to count.
    error_value_texts: Vec<(usize, &'static str)>,
}

/// Splits large tables with an integer key into ranges and orders work largest first.
async fn plan_tasks(
    connector: &Connector,
    conn: &mut DataConn,
    plans: &[DatabasePlan],
    options: &BackupOptions,
) -> Result<VecDeque<Task>> {
    let mut ranges = Vec::new();
    let mut checksums = Vec::new();
    for (database, plan) in plans.iter().enumerate() {
        for (table, info) in plan.tables.iter().enumerate() {
            if options.table_checksums {
                checksums.push(Task::Checksum { database, table });
            }
            if info.columns.is_empty() {
                continue;
            }
            let bounds = split_points(connector, conn, &plan.name, info, options.split_bytes).await?;
            let pieces = bounds.len() + 1;
            for range in 0..pieces {
                let lower = range.checked_sub(1).map(|i| bounds[i]);
                let upper = bounds.get(range).copied();
                ranges.push(RangeTask {
                    database,
                    table,
                    range,
                    select: select_sql(&plan.name, info, lower, upper)?,
                    estimated_bytes: info.data_length / pieces as u64,
                    error_value_texts: enum_error_texts(info),
                });
            }
        }
    }
    ranges.sort_by_key(|task| std::cmp::Reverse(task.estimated_bytes));
    Ok(ranges.into_iter().map(Task::Range).chain(checksums).collect())
}

/// Key values that cut a table into pieces of about `split_bytes` each (equal key widths).
async fn split_points(
    connector: &Connector,
    conn: &mut DataConn,
    database: &str,
    table: &TableInfo,
    split_bytes: u64,
) -> Result<Vec<i128>> {
    let Some(key) = &table.integer_key else { return Ok(Vec::new()) };
    if split_bytes == 0 || table.data_length <= split_bytes {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT CAST(MIN({k}) AS CHAR), CAST(MAX({k}) AS CHAR) FROM {}.{}",
        quote_ident(database),
        quote_ident(&table.name),
        k = quote_ident(key)
    );
    let bounds = conn.first_row(connector, &sql, "reading key ranges").await?.unwrap_or_default();
    let parse = |i: usize| bounds.get(i)?.as_deref().and_then(|v| std::str::from_utf8(v).ok()?.parse::<i128>().ok());
    let (Some(min), Some(max)) = (parse(0), parse(1)) else { return Ok(Vec::new()) };
    let pieces = table.data_length.div_ceil(split_bytes).min(1024) as i128;
    let width = (max - min + 1).max(1);
    let mut points: Vec<i128> = (1..pieces).map(|i| min + width * i / pieces).filter(|p| *p > min).collect();
    points.dedup();
    Ok(points)
}

struct DumpContext {
    connector: Connector,
    storage: Storage,
    written: Written,
    syncer: Arc<Syncer>,
    /// How chunk paths name their database and table.
    layout: layout::Names,
    options: BackupOptions,
    progress: Arc<Progress>,
    /// Database names with their table names, indexed as in the tasks.
    names: Vec<(String, Vec<String>)>,
    queue: Mutex<VecDeque<Task>>,
    /// Set by the first worker that fails, so the others stop early.
    failed: AtomicBool,
}

/// What a worker produced for one task.
enum TaskResult {
    Chunks { database: usize, table: usize, range: usize, chunks: Vec<ChunkEntry>, digest: ContentDigest },
    Checksum { database: usize, table: usize, checksum: Option<u64> },
}

/// The error a worker returns when it stopped because another one failed.
const STOPPED: &str = "stopped after another worker failed";

async fn dump_worker(context: Arc<DumpContext>, mut conn: DataConn) -> Result<Vec<TaskResult>> {
    let mut results = Vec::new();
    loop {
        if context.failed.load(Ordering::Relaxed) {
            return Err(AgentError::Internal(STOPPED.into()));
        }
        let task = context.queue.lock().unwrap().pop_front();
        let Some(task) = task else { break };
        let outcome = match task {
            Task::Range(range) => {
                let (database, table) = context.names(range.database, range.table);
                let span = tracing::info_span!("dump", database = %database, table = %table, range = range.range);
                dump_range(&context, &mut conn, &range).instrument(span).await
            }
            Task::Checksum { database, table } => {
                let (database_name, table_name) = context.names(database, table);
                let span = tracing::info_span!("checksum", database = %database_name, table = %table_name);
                checksum(&context, &mut conn, database, table).instrument(span).await
            }
        };
        match outcome {
            Ok(result) => results.push(result),
            Err(error) => {
                context.failed.store(true, Ordering::Relaxed);
                return Err(error);
            }
        }
    }
    let _ = conn.execute("COMMIT").await;
    conn.disconnect().await;
    Ok(results)
}

async fn checksum(context: &DumpContext, conn: &mut DataConn, database: usize, table: usize) -> Result<TaskResult> {
    let (database_name, table_name) = context.names(database, table);
    let connector = &context.connector;
    let checksum = if catalog::checksum_is_reproducible(connector, conn, &database_name, &table_name).await? {
        catalog::checksum_table(connector, conn, &database_name, &table_name).await?
    } else {
        tracing::info!(
            "no checksum for {database_name}.{table_name}: it has generated columns, which make it irreproducible"
        );
        None
    };
    Ok(TaskResult::Checksum { database, table, checksum })
}

impl DumpContext {
    fn names(&self, database: usize, table: usize) -> (String, String) {
        let (database_name, tables) = &self.names[database];
        (database_name.clone(), tables[table].clone())
    }

    fn stopped(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }
}

/// Rows are encoded into a buffer of about this size before it goes to the compressor.
const ENCODE_BUFFER_BYTES: usize = 512 * 1024;

/// Streams one key range into one or more chunk files: this task reads and encodes rows while
/// a second one compresses, hashes and writes the previous buffers, so both cores can work on
/// one range (a worker that compressed in turn left its connection idle meanwhile).
async fn dump_range(context: &Arc<DumpContext>, conn: &mut DataConn, task: &RangeTask) -> Result<TaskResult> {
    let (buffers, received) = tokio::sync::mpsc::channel(BUFFERS_IN_FLIGHT);
    let (recycle, recycled) = tokio::sync::mpsc::unbounded_channel();
    let writer = tokio::spawn(write_chunks(context.clone(), task.clone(), received, recycle).in_current_span());
    let read = read_rows(context, conn, task, buffers, recycled).await;
    let written = writer.await.map_err(AgentError::from).and_then(|chunks| chunks);
    match (read, written) {
        (Ok(digest), Ok(chunks)) => {
            Ok(TaskResult::Chunks { database: task.database, table: task.table, range: task.range, chunks, digest })
        }
        // Reading stopped because the writer failed: the writer's error says why.
        (Err(AgentError::Internal(message)), Err(error)) if message == STOPPED => Err(error),
        (Err(error), _) | (Ok(_), Err(error)) => Err(error),
    }
}

/// Encoded rows on their way from the reading task to the writing one.
enum Piece {
    Rows {
        data: Vec<u8>,
        rows: u64,
        /// Fields holding an ENUM's error value.
        error_values: u64,
    },
    /// Every row was read: the last chunk can be closed. A channel that closes without it
    /// means reading failed, and the open chunk is removed.
    End,
}

/// Buffers waiting for the writer besides the one it compresses: bounds memory.
const BUFFERS_IN_FLIGHT: usize = 2;

async fn read_rows(
    context: &DumpContext,
    conn: &mut DataConn,
    task: &RangeTask,
    buffers: tokio::sync::mpsc::Sender<Piece>,
    mut recycled: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
) -> Result<ContentDigest> {
    let failed = |e: WireError| context.connector.wire_error("reading rows", e);
    let writer_gone = || AgentError::Internal(STOPPED.into());
    let mut rows = conn.query(&task.select).await.map_err(failed)?;
    let flush_at = ENCODE_BUFFER_BYTES.min(context.options.chunk_bytes as usize);
    // Buffers come back from the writer: fresh ones cost the allocator new, zeroed pages.
    let mut new_buffer = || match recycled.try_recv() {
        Ok(mut buffer) => {
            buffer.clear();
            buffer
        }
        Err(_) => Vec::with_capacity(flush_at + 64 * 1024),
    };
    let mut buffer = new_buffer();
    let (mut buffered_rows, mut error_values) = (0u64, 0u64);
    let mut digest = ContentDigest::default();
    while let Some(row) = rows.next().await.map_err(failed)? {
        let line_start = buffer.len();
        error_values += encode_row_counting(&mut buffer, &row, &task.error_value_texts).map_err(failed)?;
        digest.add_row(&buffer[line_start..]);
        buffered_rows += 1;
        if buffer.len() >= flush_at {
            if context.stopped() {
                return Err(writer_gone());
            }
            let data = std::mem::replace(&mut buffer, new_buffer());
            let piece = Piece::Rows { data, rows: buffered_rows, error_values };
            buffers.send(piece).await.map_err(|_| writer_gone())?;
            (buffered_rows, error_values) = (0, 0);
        }
    }
    if !buffer.is_empty() {
        let piece = Piece::Rows { data: buffer, rows: buffered_rows, error_values };
        buffers.send(piece).await.map_err(|_| writer_gone())?;
    }
    buffers.send(Piece::End).await.map_err(|_| writer_gone())?;
    Ok(digest)
}

/// Writes the buffers of one range into its chunk files, until the reader says it is done.
async fn write_chunks(
    context: Arc<DumpContext>,
    task: RangeTask,
    mut buffers: tokio::sync::mpsc::Receiver<Piece>,
    recycle: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
) -> Result<Vec<ChunkEntry>> {
    let mut chunks = ChunkSequence::new(&context, &task);
    while let Some(piece) = buffers.recv().await {
        match piece {
            Piece::Rows { data, rows, error_values } => {
                chunks.write(&data, rows, error_values).await?;
                let _ = recycle.send(data);
            }
            Piece::End => return chunks.finish().await,
        }
    }
    chunks.abort().await;
    Err(AgentError::Internal(STOPPED.into()))
}

/// The chunk files of one range: a new file after `chunk_bytes` of rows.
struct ChunkSequence<'a> {
    context: &'a DumpContext,
    task: &'a RangeTask,
    /// The chunk being written: its writer, rows, bytes and ENUM error values so far.
    open: Option<(FileWriter, u64, u64, u64)>,
    done: Vec<ChunkEntry>,
}

impl<'a> ChunkSequence<'a> {
    fn new(context: &'a DumpContext, task: &'a RangeTask) -> Self {
        Self { context, task, open: None, done: Vec::new() }
    }

    async fn write(&mut self, data: &[u8], rows: u64, error_values: u64) -> Result<()> {
        if self.open.is_none() {
            let (database, table) = self.context.names(self.task.database, self.task.table);
            let options = &self.context.options;
            let mut path =
                self.context.layout.chunk(&database, &table, self.task.range, self.done.len(), options.compression);
            if options.encrypt.is_some() {
                path.push_str(encryption::SUFFIX);
            }
            self.context.written.lock().unwrap().push(path.clone());
            let writer = self.context.storage.sealed_writer(
                &path,
                options.compression,
                options.level(),
                options.encrypt.as_ref(),
            )?;
            self.open = Some((writer, 0, 0, 0));
        }
        let (writer, chunk_rows, chunk_bytes, chunk_error_values) = self.open.as_mut().expect("a chunk is open");
        if let Err(error) = writer.write(data).await {
            self.abort().await;
            return Err(error);
        }
        *chunk_rows += rows;
        *chunk_bytes += data.len() as u64;
        *chunk_error_values += error_values;
        self.context.progress.add(rows, data.len() as u64);
        if *chunk_bytes >= self.context.options.chunk_bytes {
            self.close().await?;
        }
        Ok(())
    }

    async fn close(&mut self) -> Result<()> {
        if let Some((writer, rows, data_bytes, enum_error_values)) = self.open.take() {
            let file = writer.finish().await?;
            self.context.syncer.add(&file.path);
            self.done.push(ChunkEntry { file, rows, data_bytes, enum_error_values });
        }
        Ok(())
    }

    async fn finish(mut self) -> Result<Vec<ChunkEntry>> {
        self.close().await?;
        Ok(self.done)
    }

    async fn abort(&mut self) {
        if let Some((writer, ..)) = self.open.take() {
            writer.abort().await;
        }
    }
}

/// The first real error of any worker, or every worker's results.
fn collect_results(outcomes: impl IntoIterator<Item = Result<Vec<TaskResult>>>) -> Result<Vec<TaskResult>> {
    let mut results = Vec::new();
    let mut first_error = None;
    for outcome in outcomes {
        match outcome {
            Ok(mut worker_results) => results.append(&mut worker_results),
            Err(AgentError::Internal(message)) if message == STOPPED => {}
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    match first_error {
        Some(error) => Err(error),
        None => Ok(results),
    }
}

/// Puts chunk lists, row counts, content digests and checksums into the manifest's database
/// entries.
fn assemble(plans: Vec<DatabasePlan>, results: Vec<TaskResult>) -> Vec<DatabaseEntry> {
    let mut entries: Vec<DatabaseEntry> = plans.into_iter().map(|plan| plan.entry).collect();
    let mut ranges: BTreeMap<(usize, usize, usize), Vec<ChunkEntry>> = BTreeMap::new();
    // A table without ranges (no columns) has the digest of no rows.
    let mut digests: BTreeMap<(usize, usize), ContentDigest> = BTreeMap::new();
    for result in results {
        match result {
            TaskResult::Chunks { database, table, range, chunks, digest } => {
                ranges.insert((database, table, range), chunks);
                digests.entry((database, table)).or_default().merge(digest);
            }
            TaskResult::Checksum { database, table, checksum } => entries[database].tables[table].checksum = checksum,
        }
    }
    for ((database, table, _), chunks) in ranges {
        let entry = &mut entries[database].tables[table];
        entry.rows += chunks.iter().map(|c| c.rows).sum::<u64>();
        entry.data_bytes += chunks.iter().map(|c| c.data_bytes).sum::<u64>();
        entry.chunks.extend(chunks);
    }
    for (database, entry) in entries.iter_mut().enumerate() {
        for (table, table_entry) in entry.tables.iter_mut().enumerate() {
            let digest = digests.get(&(database, table)).copied().unwrap_or_default();
            table_entry.content_digest = Some(digest.to_text());
        }
    }
    entries
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use async_trait::async_trait;
    use futures::stream::BoxStream;
    use object_store::local::LocalFileSystem;
    use object_store::path::Path;
    use object_store::{
        CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
        PutOptions, PutPayload, PutResult,
    };

    use super::*;

    /// A volume whose fsync fails: every durable write lands, then reports the failure.
    #[derive(Debug)]
    struct FsyncFails(LocalFileSystem);

    impl std::fmt::Display for FsyncFails {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "FsyncFails({})", self.0)
        }
    }

    #[async_trait]
    impl ObjectStore for FsyncFails {
        async fn put_opts(&self, at: &Path, payload: PutPayload, opts: PutOptions) -> object_store::Result<PutResult> {
            self.0.put_opts(at, payload, opts).await?;
            let fsync = std::io::Error::other("fsync: input/output error");
            Err(object_store::Error::Generic { store: "FsyncFails", source: Box::new(fsync) })
        }
        async fn put_multipart_opts(
            &self,
            at: &Path,
            opts: PutMultipartOptions,
        ) -> object_store::Result<Box<dyn MultipartUpload>> {
            self.0.put_multipart_opts(at, opts).await
        }
        async fn get_opts(&self, at: &Path, options: GetOptions) -> object_store::Result<GetResult> {
            self.0.get_opts(at, options).await
        }
        fn delete_stream(
            &self,
            locations: BoxStream<'static, object_store::Result<Path>>,
        ) -> BoxStream<'static, object_store::Result<Path>> {
            self.0.delete_stream(locations)
        }
        fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
            self.0.list(prefix)
        }
        async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
            self.0.list_with_delimiter(prefix).await
        }
        async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> object_store::Result<()> {
            self.0.copy_opts(from, to, options).await
        }
    }

    /// A manifest whose fsync failed is in place but not durable: the backup fails, and the
    /// manifest goes with the files it names (before, reading it back passed for success).
    #[tokio::test]
    async fn a_manifest_whose_fsync_failed_fails_the_backup_and_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let location = format!("file://{}", dir.path().display());
        let storage = Storage::open(&location, &S3Settings::default(), true).unwrap();
        let storage =
            storage.with_durable_store(Arc::new(FsyncFails(LocalFileSystem::new_with_prefix(dir.path()).unwrap())));
        storage.put("db/data.tsv", Bytes::from_static(b"1\n")).await.unwrap();
        let written: Written = Arc::new(Mutex::new(vec!["db/data.tsv".to_string()]));
        let manifest = Manifest {
            format: "visitors-backup".into(),
            format_version: 1,
            tool: "test".into(),
            server: crate::format::ServerInfo { version: "10.11".into(), flavour: "mariadb".into() },
            started_at: "2026-11-23T00:00:00Z".into(),
            finished_at: "2026-11-23T00:00:01Z".into(),
            consistency: "test".into(),
            position: None,
            compression: Compression::Zstd,
            data_format: "tsv".into(),
            databases: Vec::new(),
            users: None,
            user_names: Vec::new(),
            encryption: None,
            physical: None,
        };

        let outcome = write_manifest(&storage, &written, manifest, None).await;
        assert!(matches!(outcome, Err(AgentError::Storage { .. })), "got {:?}", outcome.map(|r| r.manifest_sha256));
        assert_eq!(written.lock().unwrap().first().map(String::as_str), Some(MANIFEST_FILE));
        remove_written(&storage, &written).await;
        assert!(!dir.path().join(MANIFEST_FILE).exists(), "no manifest may stay after a failed backup");
        assert!(!dir.path().join("db/data.tsv").exists());
    }
}
