//! Loading a database's chunks into its staging schema with `LOAD DATA LOCAL INFILE`,
//! `parallelism` connections at once, largest tables first; one transaction per chunk. A table
//! whose plain secondary keys were left out gets them as soon as its last chunk is in, and each
//! table is checked against the manifest as soon as it is complete, by the next free
//! connection, while the others go on loading.

use std::cmp::Reverse;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use futures::future::join_all;
use futures::{StreamExt, TryStreamExt};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use tracing::Instrument;

use super::context::{DatabaseRestore, check_staged_table};
use super::indexes::DeferredKeys;
use super::{RestoreOptions, session_setup};
use crate::error::{AgentError, Result};
use crate::format::{ChunkEntry, Compression, DatabaseEntry, TableEntry, load_data_sql, quote_ident};
use crate::mysql::Connector;
use crate::progress::Progress;
use crate::storage::Storage;

struct LoadTask {
    target: String,
    table: String,
    columns: Vec<String>,
    chunk: ChunkEntry,
}

struct IndexTask {
    target: String,
    table: String,
    keys: DeferredKeys,
}

enum Work {
    Chunk(LoadTask),
    Indexes(IndexTask),
    Check(TableEntry),
}

/// What is left to do: chunks, largest first, with the index builds and checks of the tables
/// that are complete ahead of them.
#[derive(Default)]
struct Queue {
    work: VecDeque<Work>,
    chunks_left: HashMap<String, usize>,
    deferred: HashMap<String, IndexTask>,
    /// The tables to check once they are complete.
    checks: HashMap<String, TableEntry>,
}

impl Queue {
    fn next(&mut self) -> Option<Work> {
        self.work.pop_front()
    }

    /// Counts a loaded chunk of `table`; once it was the last, the table's index build (or,
    /// without one, its check) is next.
    fn chunk_done(&mut self, table: &str) {
        let left = self.chunks_left.get_mut(table).expect("a queued table");
        *left -= 1;
        if *left == 0 {
            self.table_loaded(table);
        }
    }

    fn table_loaded(&mut self, table: &str) {
        match self.deferred.remove(table) {
            Some(task) => self.work.push_front(Work::Indexes(task)),
            None => self.table_complete(table),
        }
    }

    /// The table holds all it will hold: its check is next.
    fn table_complete(&mut self, table: &str) {
        if let Some(entry) = self.checks.remove(table) {
            self.work.push_front(Work::Check(entry));
        }
    }

    fn clear(&mut self) {
        self.work.clear();
        self.deferred.clear();
        self.checks.clear();
    }
}

struct LoadContext {
    connector: Connector,
    storage: Storage,
    compression: Compression,
    progress: Arc<Progress>,
    queue: Mutex<Queue>,
    database: String,
    schema: String,
    checksums_comparable: bool,
    /// A table's rows include history rows, whose period columns are loaded as they are.
    history: bool,
}

/// Loads every chunk of the database into the same tables of `schema`, adds the keys of
/// `deferred_keys` (by table) back after their table's load, and checks each table once it is
/// complete; returns the rows loaded.
pub(super) async fn load_database(
    restore: &DatabaseRestore<'_>,
    schema: &str,
    deferred_keys: HashMap<String, DeferredKeys>,
) -> Result<u64> {
    let (database, options) = (restore.database, restore.context.options);
    let planned = plan(database, schema, deferred_keys);
    let workers = options.parallelism.max(1).min(planned.queue.work.len()).max(1);
    let progress = Progress::new("restore", planned.data_bytes);
    let reporter = progress.report_every(options.progress_interval);
    let context = Arc::new(LoadContext {
        connector: restore.context.connector.clone(),
        storage: restore.context.storage.clone(),
        compression: restore.context.manifest.compression,
        progress: progress.clone(),
        queue: Mutex::new(planned.queue),
        database: database.name.clone(),
        schema: schema.to_string(),
        checksums_comparable: restore.context.checksums_comparable,
        history: database.tables.iter().any(|table| table.history),
    });
    let workers = (0..workers).map(|_| tokio::spawn(load_worker(context.clone(), options.clone()).in_current_span()));
    let outcomes = join_all(workers).await;
    if let Some(reporter) = reporter {
        reporter.abort();
    }
    for outcome in outcomes {
        outcome??;
    }
    tracing::info!("{}: {}", database.name, progress.final_line());
    Ok(planned.rows)
}

struct Plan {
    queue: Queue,
    rows: u64,
    data_bytes: u64,
}

/// The work of a database's load, in the order it starts.
fn plan(database: &DatabaseEntry, schema: &str, mut deferred_keys: HashMap<String, DeferredKeys>) -> Plan {
    let mut tasks = Vec::new();
    let mut queue = Queue::default();
    for table in &database.tables {
        let target = format!("{}.{}", quote_ident(schema), quote_ident(&table.name));
        for chunk in &table.chunks {
            tasks.push(LoadTask {
                target: target.clone(),
                table: table.name.clone(),
                columns: table.columns.clone(),
                chunk: chunk.clone(),
            });
        }
        queue.checks.insert(table.name.clone(), table.clone());
        if let Some(keys) = deferred_keys.remove(&table.name) {
            queue.deferred.insert(table.name.clone(), IndexTask { target, table: table.name.clone(), keys });
        }
        queue.chunks_left.insert(table.name.clone(), table.chunks.len());
        if table.chunks.is_empty() {
            queue.table_loaded(&table.name);
        }
    }
    // The tables whose keys come after the load go first, so their index builds run while the
    // other connections still load; then larger tables first, each one's larger chunks first.
    let table_bytes: HashMap<&str, u64> = database.tables.iter().map(|t| (t.name.as_str(), t.data_bytes)).collect();
    tasks.sort_by_key(|task| {
        let keys_after_load = queue.deferred.contains_key(&task.table);
        (Reverse(keys_after_load), Reverse(table_bytes[task.table.as_str()]), Reverse(task.chunk.data_bytes))
    });
    let rows = tasks.iter().map(|t| t.chunk.rows).sum();
    let data_bytes = tasks.iter().map(|t| t.chunk.data_bytes).sum();
    queue.work.extend(tasks.into_iter().map(Work::Chunk));
    Plan { queue, rows, data_bytes }
}

async fn load_worker(context: Arc<LoadContext>, options: RestoreOptions) -> Result<()> {
    let mut conn = context.connector.connect().await?;
    session_setup(&context.connector, &mut conn, &options).await?;
    if context.history {
        let sql = "SET SESSION system_versioning_insert_history = 1";
        context.connector.execute(&mut conn, sql, "preparing to load the history of system-versioned tables").await?;
    }
    loop {
        let work = context.queue.lock().unwrap().next();
        let done = match work {
            None => break,
            Some(Work::Chunk(task)) => {
                let span = tracing::info_span!("load", table = %task.table, chunk = %task.chunk.file.path, rows = task.chunk.rows);
                let loaded = load_chunk(&context, &mut conn, &task).instrument(span).await;
                if loaded.is_ok() {
                    context.queue.lock().unwrap().chunk_done(&task.table);
                }
                loaded
            }
            Some(Work::Indexes(task)) => {
                let span = tracing::info_span!("build_indexes", table = %task.table, keys = task.keys.keys.len());
                let built = build_indexes(&context, &mut conn, &task).instrument(span).await;
                if built.is_ok() {
                    context.queue.lock().unwrap().table_complete(&task.table);
                }
                built
            }
            Some(Work::Check(table)) => {
                let span = tracing::info_span!("check", table = %table.name, rows = table.rows);
                check_table(&context, &mut conn, &table).instrument(span).await
            }
        };
        if let Err(error) = done {
            // Others stop at their next task. The connection is dropped, not reused: the
            // server rolls back what the chunk loaded when it goes away.
            context.queue.lock().unwrap().clear();
            return Err(error);
        }
    }
    let _ = conn.disconnect().await;
    Ok(())
}

async fn check_table(context: &LoadContext, conn: &mut Conn, table: &TableEntry) -> Result<()> {
    let (database, schema) = (&context.database, &context.schema);
    check_staged_table(&context.connector, conn, database, schema, table, context.checksums_comparable).await
}

/// Adds a table's plain secondary keys back once its rows are in (one sorted build per key).
async fn build_indexes(context: &LoadContext, conn: &mut Conn, task: &IndexTask) -> Result<()> {
    let during = format!("adding the secondary keys of {} after its load", task.table);
    context.connector.execute(conn, &task.keys.alter_statement(&task.target), &during).await
}

/// Loads one chunk in one transaction: it is committed only when every row loaded without a
/// warning, as many rows as the manifest says, from bytes that match the manifest.
async fn load_chunk(context: &LoadContext, conn: &mut Conn, task: &LoadTask) -> Result<()> {
    let path = &task.chunk.file.path;
    context.connector.execute(conn, "START TRANSACTION", &format!("loading {path}")).await?;
    let loaded = load_in_transaction(context, conn, task).await?;
    context.connector.execute(conn, "COMMIT", &format!("committing {path}")).await?;
    context.progress.add(loaded, 0);
    Ok(())
}

async fn load_in_transaction(context: &LoadContext, conn: &mut Conn, task: &LoadTask) -> Result<u64> {
    let path = &task.chunk.file.path;
    let progress = context.progress.clone();
    // A failure of the chunk's own bytes (changed since the check, unreadable) ends the load
    // with a driver error; it is kept here to name it as what it is.
    let stream_failure: Arc<Mutex<Option<String>>> = Arc::default();
    let seen_failure = stream_failure.clone();
    let data = context
        .storage
        .decompressed(&task.chunk.file, context.compression)
        .await?
        .inspect_ok(move |piece| progress.add(0, piece.len() as u64))
        .inspect_err(move |error| {
            seen_failure.lock().unwrap().get_or_insert_with(|| error.to_string());
        })
        .boxed();
    // The handler must be Sync; the stream is only Send, so it travels inside a Mutex.
    let data = std::sync::Mutex::new(Some(data));
    conn.set_infile_handler(async move {
        let stream = data.lock().unwrap().take().expect("the infile handler runs once");
        Ok(stream)
    });
    let sql = load_data_sql(&task.target, &task.columns, path);
    let during = format!("loading {path}");
    let loaded = conn.query_drop(sql).await;
    if let Some(reason) = stream_failure.lock().unwrap().take() {
        return Err(AgentError::BadChunk { file: path.clone(), reason: format!("{reason}; nothing of it was kept") });
    }
    loaded.map_err(|e| context.connector.error(&during, e))?;
    let loaded = conn.affected_rows();
    let warnings = u64::from(conn.get_warnings());
    if warnings > 0 {
        let (changed, listed) = data_changing_warnings(context, conn, path, &task.columns).await?;
        let expected = task.chunk.enum_error_values;
        if !only_enum_error_values(&changed, listed, warnings, expected)
            && let Some((level, code, message)) = changed.into_iter().next()
        {
            let reason =
                format!("loading it into {} raised {level} {code}: {message}; nothing of it was kept", task.target);
            return Err(AgentError::BadChunk { file: path.clone(), reason });
        }
    }
    if loaded != task.chunk.rows {
        return Err(AgentError::BadChunk {
            file: path.clone(),
            reason: format!(
                "{loaded} rows loaded into {}, the manifest says {} (a duplicate key?); nothing of it was kept",
                task.target, task.chunk.rows
            ),
        });
    }
    Ok(loaded)
}

/// The warnings of a load that changed data (level `Warning` or `Error`; `Note`s are logged
/// only): a value the server had to adjust is not restored as it was backed up. A warning about
/// a column that is not loaded (a generated column, computed from the loaded ones exactly as on
/// the source) does not change stored data and is logged only. Also how many warnings the
/// server listed.
async fn data_changing_warnings(
    context: &LoadContext,
    conn: &mut Conn,
    path: &str,
    loaded_columns: &[String],
) -> Result<(Vec<(String, u32, String)>, u64)> {
    let warnings: Vec<(String, u32, String)> =
        conn.query("SHOW WARNINGS").await.map_err(|e| context.connector.error("reading the load's warnings", e))?;
    let listed = warnings.len() as u64;
    let mut changed = Vec::new();
    for (level, code, message) in warnings {
        let about_unloaded_column = warned_column(&message).is_some_and(|c| !loaded_columns.contains(&c));
        if level.eq_ignore_ascii_case("Note") || about_unloaded_column {
            tracing::info!("{path}: {level} {code}: {message}");
        } else {
            changed.push((level, code, message));
        }
    }
    Ok((changed, listed))
}

/// Whether the data-changing warnings of a load (`changed`, of the `listed` warnings the server
/// listed out of the `total` it raised) are exactly those of the chunk's `expected` ENUM error
/// values: each raises one warning 1265 and stores the index 0, as on the source. Any other
/// warning, or one more 1265 (a value that is truly no member), fails the chunk. When the
/// server listed fewer warnings than it raised, all it raised must be the error values'.
fn only_enum_error_values(changed: &[(String, u32, String)], listed: u64, total: u64, expected: u64) -> bool {
    const DATA_TRUNCATED: u32 = 1265;
    let counted = if listed < total { total } else { changed.len() as u64 };
    expected > 0 && counted == expected && changed.iter().all(|(_, code, _)| *code == DATA_TRUNCATED)
}

/// The column a server warning names ("... for column 'c' at row 1").
fn warned_column(message: &str) -> Option<String> {
    let rest = &message[message.find("column '")? + "column '".len()..];
    let end = rest.rfind("' at row").or_else(|| rest.rfind('\''))?;
    Some(rest[..end].to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::{DeferredKeys, Work, only_enum_error_values, plan, warned_column};
    use crate::format::{ChunkEntry, DatabaseEntry, FileEntry, TableEntry};

    fn truncated(column: &str, row: u32) -> (String, u32, String) {
        ("Warning".into(), 1265, format!("Data truncated for column '{column}' at row {row}"))
    }

    /// Each case: the data-changing warnings listed, how many the server listed and raised,
    /// the ENUM error values the chunk holds, and whether the load stands.
    #[test]
    fn only_the_expected_enum_error_values_may_warn() {
        let two = vec![truncated("e", 1), truncated("e", 4)];
        let other = vec![truncated("e", 1), ("Warning".into(), 1366, "Incorrect integer value".into())];
        type Case = (Vec<(String, u32, String)>, u64, u64, u64, bool);
        let cases: Vec<Case> = vec![
            (two.clone(), 2, 2, 2, true),
            (two.clone(), 3, 3, 2, true),
            (two.clone(), 2, 2, 1, false),
            (two.clone(), 2, 2, 0, false),
            (two.clone(), 2, 3, 2, false),
            (two.clone(), 2, 3, 3, true),
            (other, 2, 2, 2, false),
            (vec![truncated("e", 1)], 1, 1, 2, false),
        ];
        for (changed, listed, total, expected, stands) in cases {
            assert_eq!(
                only_enum_error_values(&changed, listed, total, expected),
                stands,
                "{changed:?} {listed} {total} {expected}"
            );
        }
    }

    fn file(path: &str) -> FileEntry {
        FileEntry { path: path.into(), bytes: 1, sha256: String::new() }
    }

    fn table(name: &str, chunk_bytes: &[u64]) -> TableEntry {
        let chunks: Vec<ChunkEntry> = chunk_bytes
            .iter()
            .enumerate()
            .map(|(i, &data_bytes)| ChunkEntry {
                file: file(&format!("{name}/{i}")),
                rows: 1,
                data_bytes,
                enum_error_values: 0,
            })
            .collect();
        TableEntry {
            name: name.into(),
            schema: file(&format!("{name}.sql")),
            columns: vec!["id".into()],
            history: false,
            load_sql: String::new(),
            rows: chunks.len() as u64,
            data_bytes: chunk_bytes.iter().sum(),
            checksum: None,
            content_digest: None,
            chunks,
        }
    }

    fn describe(work: &Work) -> String {
        match work {
            Work::Chunk(task) => format!("load {}", task.chunk.file.path),
            Work::Indexes(task) => format!("keys {}", task.table),
            Work::Check(table) => format!("check {}", table.name),
        }
    }

    /// Each table is checked as soon as it is complete (after its keys, when they come after
    /// the load), by the next free connection, before the loads still queued.
    #[test]
    fn a_table_is_checked_as_soon_as_it_is_complete() {
        let database = DatabaseEntry {
            name: "app".into(),
            schema: file("app.sql"),
            tables: vec![table("small", &[10]), table("empty", &[]), table("big", &[100, 90])],
            views: None,
            view_names: Vec::new(),
            routines: None,
            routine_names: Vec::new(),
            triggers: None,
            trigger_names: Vec::new(),
            sequences: None,
            sequence_names: Vec::new(),
            events: None,
            event_names: Vec::new(),
        };
        let keys = DeferredKeys { create_without_keys: String::new(), keys: vec!["KEY `a` (`a`)".into()] };
        let mut queue = plan(&database, "staging", HashMap::from([("big".to_string(), keys)])).queue;
        let mut order = Vec::new();
        while let Some(work) = queue.next() {
            order.push(describe(&work));
            match work {
                Work::Chunk(task) => queue.chunk_done(&task.table),
                Work::Indexes(task) => queue.table_complete(&task.table),
                Work::Check(_) => {}
            }
        }
        assert_eq!(
            order,
            ["check empty", "load big/0", "load big/1", "keys big", "check big", "load small/0", "check small"]
        );
    }

    #[test]
    fn warnings_name_their_column() {
        let column = |m: &str| warned_column(m);
        assert_eq!(column("Out of range value for column 'doubled' at row 1").as_deref(), Some("doubled"));
        assert_eq!(column("Data truncated for column 'it''s' at row 12").as_deref(), Some("it''s"));
        assert_eq!(column("Duplicate entry '1' for key 'PRIMARY'"), None);
    }
}
