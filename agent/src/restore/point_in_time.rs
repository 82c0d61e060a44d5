//! A restore to a point in time: every database of the backup is staged as in any restore,
//! then the archived transactions after the backup's snapshot are replayed into the staging
//! schemas up to the target, and only then is anything swapped in. Before the first write the
//! whole replay runs dry: every segment it needs is read and checked against its SHA-256, and
//! what cannot be replayed is refused, so a bad archive or target touches nothing.
//!
//! In two invocations (`--stage-only`, then `--from-stage`), the first leaves beside each
//! staged copy a second marker ([`REPLAYED_MARKER`]): the archive, the target, what was
//! replayed, and each staged table's row count and checksum after the replay, which the second
//! checks again before the swap.

use std::collections::{BTreeMap, HashMap};

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use serde::{Deserialize, Serialize};
use visitors_agent_contract::summary::Replay;

use super::context::{
    DatabaseRestore, REPLAYED_MARKER, RestoreContext, STAGED_MARKER, has_replayed_marker, nowhere_schema_name,
    staging_schema_name,
};
use super::statements::EventStatuses;
use super::{RestoreStep, session_setup};
use crate::binlog::event::{Format, RawEvent, Transaction, with_statement_end};
use crate::binlog::replay::{
    self, DryRun, Replayer, Sink, Statement, Target, UserValue, UserVariable, binlog_statement,
};
use crate::encryption::Keyring;
use crate::error::{AgentError, Result};
use crate::format::{DatabaseEntry, quote_ident};
use crate::mysql::{Connector, catalog};
use crate::storage::{S3Settings, Storage};

/// Row events held before they are sent in one `BINLOG` statement.
const BINLOG_STATEMENT_BYTES: usize = 4 << 20;

/// Where a restore to a point in time reads and stops.
#[derive(Clone, Debug)]
pub struct PointInTimeOptions {
    pub archive: String,
    pub s3: S3Settings,
    pub target: Target,
}

/// What `--stage-only` recorded of a replayed copy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct ReplayedCopy {
    archive: String,
    target: String,
    replay: Replay,
    tables: Vec<TableFacts>,
    /// The status each staged event is to have once swapped in (staged, they are disabled).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    events: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
struct TableFacts {
    name: String,
    rows: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checksum: Option<u64>,
}

/// Restores `databases` to `pitr`'s target: returns the tables and rows restored, and the
/// replay.
pub(super) async fn restore_to_target(
    context: &RestoreContext<'_>,
    databases: &[DatabaseEntry],
    pitr: &PointInTimeOptions,
) -> Result<(u64, u64, Replay)> {
    match context.options.step {
        RestoreStep::FromStage => swap_replayed(context, databases, pitr).await,
        step => stage_and_replay(context, databases, pitr, step).await,
    }
}

async fn stage_and_replay(
    context: &RestoreContext<'_>,
    databases: &[DatabaseEntry],
    pitr: &PointInTimeOptions,
    step: RestoreStep,
) -> Result<(u64, u64, Replay)> {
    let archive = Storage::open(&pitr.archive, &pitr.s3, false)?;
    let plan = replay::plan(&archive, context.manifest.position.as_ref(), pitr.target.clone()).await?;
    let schemas: HashMap<String, String> =
        databases.iter().map(|d| (d.name.clone(), staging_schema_name(&d.name))).collect();
    let known = server_databases(context.connector).await?;
    // The base backup's key and the segments' may differ: a key rotated since, or an
    // archive encrypted from a later run on.
    let keys = Keyring::new(context.options.decrypt_keys_dir.as_deref());
    let replayer = Replayer::new(&archive, &plan, &schemas, known, &keys);
    let dry = replayer.replay_into(&mut DryRun).await?;
    tracing::info!(
        "the archive holds {} transactions to replay to {} ({} segments, each checked against its SHA-256)",
        dry.transactions,
        pitr.target,
        dry.segments
    );

    let mut staged: Vec<(DatabaseRestore<'_>, Conn)> = Vec::new();
    let mut statuses = EventStatuses::default();
    for database in databases {
        let restore = context.database(database, None);
        let conn = match restore.open_and_stage().await {
            Ok(conn) => conn,
            Err(error) => return Err(drop_all(staged, error).await),
        };
        staged.push((restore, conn));
        let (restore, _) = staged.last().expect("just staged");
        let staging = staging_schema_name(&database.name);
        if let Err(error) = restore.stage_objects_for_replay(&staging, &mut statuses).await {
            return Err(drop_all(staged, error).await);
        }
    }
    let names: Vec<&str> = databases.iter().map(|d| d.name.as_str()).collect();
    let nowhere = nowhere_schema_name(&names);
    let (report, statuses) = match replay_into_staging(context, &replayer, statuses, &nowhere).await {
        Ok(replayed) => replayed,
        Err(error) => return Err(drop_all(staged, error).await),
    };
    for (restore, conn) in &mut staged {
        let staging = staging_schema_name(&restore.database.name);
        if let Err(error) = advance_sequences_past_their_keys(context.connector, conn, &staging).await {
            return Err(drop_all(staged, error).await);
        }
    }
    let replay = report.summary();
    tracing::info!("replayed {} transactions ({} events) into the staging schemas", report.transactions, report.events);

    let (mut tables, mut rows) = (0, 0);
    let mut swapped = Vec::new();
    for (restore, mut conn) in staged {
        let name = restore.database.name.clone();
        let staging = staging_schema_name(&name);
        let facts = match table_facts(context.connector, &mut conn, &staging).await {
            Ok(facts) => facts,
            Err(error) => return Err(failed_after(&swapped, restore, conn, error).await),
        };
        tables += facts.len() as u64;
        rows += facts.iter().map(|t| t.rows).sum::<u64>();
        let done = if step == RestoreStep::StageOnly {
            let copy = ReplayedCopy {
                archive: pitr.archive.clone(),
                target: pitr.target.to_string(),
                replay: replay.clone(),
                tables: facts,
                events: statuses.of(&staging),
            };
            mark(context.connector, &mut conn, &staging, context.manifest_sha256, &copy).await
        } else {
            let names = facts.iter().map(|t| t.name.clone()).collect();
            swap_replayed_copy(context, restore.database, names, &mut conn, &statuses.of(&staging)).await
        };
        if let Err(error) = done {
            return Err(failed_after(&swapped, restore, conn, error).await);
        }
        swapped.push(name);
        let _ = conn.disconnect().await;
    }
    Ok((tables, rows, replay))
}

/// `--from-stage`: each copy replayed by `--stage-only` to this very target from this
/// archive, whose tables still hold what was recorded then, swapped in.
async fn swap_replayed(
    context: &RestoreContext<'_>,
    databases: &[DatabaseEntry],
    pitr: &PointInTimeOptions,
) -> Result<(u64, u64, Replay)> {
    let (mut tables, mut rows) = (0, 0);
    let mut replay = None;
    let mut swapped: Vec<String> = Vec::new();
    for database in databases {
        let name = &database.name;
        let staging = staging_schema_name(name);
        let restore = context.database(database, None);
        let mut conn = restore.open_locked().await?;
        let checked = async {
            restore.check_marker(&mut conn, &staging).await?;
            let copy = read_replayed(context.connector, &mut conn, &staging).await?;
            let not_this = |what: String| {
                AgentError::VerifyMismatch(format!(
                    "the copy of database {name} staged in {staging} was replayed {what}; run `restore --stage-only` again (database {name} was left as it was)"
                ))
            };
            let copy = copy.ok_or_else(|| not_this("by no point-in-time restore".into()))?;
            if copy.archive != pitr.archive || copy.target != pitr.target.to_string() {
                return Err(not_this(format!("from {} to {}, not from {} to {}", copy.archive, copy.target, pitr.archive, pitr.target)));
            }
            let now = table_facts(context.connector, &mut conn, &staging).await?;
            compare_facts(name, &staging, &copy.tables, &now)?;
            Ok(copy)
        }
        .await;
        let copy = match checked {
            Ok(copy) => copy,
            Err(error) => {
                let _ = conn.disconnect().await;
                return Err(partial(&swapped, error));
            }
        };
        let names = copy.tables.iter().map(|t| t.name.clone()).collect();
        let done = swap_replayed_copy(context, database, names, &mut conn, &copy.events).await;
        let _ = conn.disconnect().await;
        done.map_err(|error| partial(&swapped, error))?;
        tracing::info!("database {name}: the replayed copy matched what was recorded and is swapped in");
        tables += copy.tables.len() as u64;
        rows += copy.tables.iter().map(|t| t.rows).sum::<u64>();
        replay = Some(copy.replay);
        swapped.push(name.clone());
    }
    Ok((tables, rows, replay.unwrap_or_default()))
}

/// Swaps in a replayed copy of `database`: its `tables`, and its views, routines, triggers and
/// events as the replay left them in the staging schema; the staging schema is dropped after.
async fn swap_replayed_copy(
    context: &RestoreContext<'_>,
    database: &DatabaseEntry,
    tables: Vec<String>,
    conn: &mut Conn,
    events: &BTreeMap<String, String>,
) -> Result<()> {
    let staging = staging_schema_name(&database.name);
    let mut restore = context.database(database, Some(tables));
    let swapped = async {
        restore.objects = Some(restore.replayed_objects(conn, &staging, events).await?);
        restore.swap_and_finish(conn, &staging).await
    }
    .await;
    restore.drop_staging(conn, &staging).await;
    swapped
}

/// MariaDB does not log the values a statement takes from a sequence when the table it writes
/// has triggers (10.11, measured: the rows are logged, the sequence's row is not), so a replay
/// can leave a sequence before keys the replayed rows hold, and its next value would be one of
/// them. Each staged sequence a column takes its default from is moved past the largest (for a
/// descending one, below the smallest) value of that column; `SETVAL` never moves one back.
async fn advance_sequences_past_their_keys(connector: &Connector, conn: &mut Conn, staging: &str) -> Result<()> {
    let during = "moving the replayed sequences past their keys";
    let defaults: Vec<(String, String, String)> = conn
        .exec(
            "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_DEFAULT FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND COLUMN_DEFAULT LIKE 'nextval(%'",
            (staging,),
        )
        .await
        .map_err(|e| connector.error(during, e))?;
    for (table, column, default) in defaults {
        let Some(sequence) = sequence_in_default(&default, staging) else { continue };
        let sequence = format!("{}.{}", quote_ident(staging), quote_ident(&sequence));
        let increment: Option<i64> = conn
            .query_first(format!("SELECT increment FROM {sequence}"))
            .await
            .map_err(|e| connector.error(during, e))?;
        let extreme = if increment.unwrap_or(1) < 0 { "MIN" } else { "MAX" };
        let sql = format!(
            "SELECT CAST({extreme}({}) AS CHAR) FROM {}.{}",
            quote_ident(&column),
            quote_ident(staging),
            quote_ident(&table)
        );
        let held: Option<Option<String>> = conn.query_first(sql).await.map_err(|e| connector.error(during, e))?;
        if let Some(value) = held.flatten().and_then(|v| v.parse::<i64>().ok()) {
            connector.execute(conn, &format!("DO SETVAL({sequence}, {value}, 1)"), during).await?;
        }
    }
    Ok(())
}

/// The sequence of `schema` a default takes values from (`nextval(`schema`.`s`)`), if any.
fn sequence_in_default(default: &str, schema: &str) -> Option<String> {
    let rest = default.strip_prefix("nextval(")?.strip_suffix(')')?;
    let rest = rest.strip_prefix(&format!("{}.", quote_ident(schema)))?;
    let name = rest.strip_prefix('`')?.strip_suffix('`')?;
    Some(name.replace("``", "`"))
}

async fn server_databases(connector: &Connector) -> Result<Vec<String>> {
    let mut conn = connector.connect().await?;
    let names: Vec<String> = conn.query("SHOW DATABASES").await.map_err(|e| connector.error("listing databases", e))?;
    let _ = conn.disconnect().await;
    Ok(names)
}

/// Replays into the staging schemas; returns the replay and the status each staged event is
/// to have.
async fn replay_into_staging(
    context: &RestoreContext<'_>,
    replayer: &Replayer<'_>,
    statuses: EventStatuses,
    nowhere: &str,
) -> Result<(replay::ReplayReport, EventStatuses)> {
    let mut conn = context.connector.connect().await?;
    session_setup(context.connector, &mut conn, context.options).await?;
    let mut applier = Applier::new(context.connector, conn, statuses, nowhere.to_string());
    let report = replayer.replay_into(&mut applier).await;
    let drop = format!("DROP DATABASE IF EXISTS {}", quote_ident(nowhere));
    if let Err(error) = applier.execute(&drop, "dropping the empty schema of the replay").await {
        tracing::warn!("could not drop the empty schema {nowhere}: {error}; drop it by hand");
    }
    let _ = applier.conn.disconnect().await;
    Ok((report?, applier.events))
}

/// Drops every staged copy (their connections still hold the locks) and returns `error`.
async fn drop_all(staged: Vec<(DatabaseRestore<'_>, Conn)>, error: AgentError) -> AgentError {
    for (restore, mut conn) in staged {
        restore.drop_staging(&mut conn, &staging_schema_name(&restore.database.name)).await;
        let _ = conn.disconnect().await;
    }
    error
}

/// A failure after `swapped` were swapped in: this copy is dropped, and the error says
/// which databases were restored.
async fn failed_after(
    swapped: &[String],
    restore: DatabaseRestore<'_>,
    mut conn: Conn,
    error: AgentError,
) -> AgentError {
    restore.drop_staging(&mut conn, &staging_schema_name(&restore.database.name)).await;
    let _ = conn.disconnect().await;
    partial(swapped, error)
}

fn partial(swapped: &[String], error: AgentError) -> AgentError {
    if swapped.is_empty() {
        error
    } else {
        AgentError::PartiallyRestored { restored: swapped.join(", "), error: Box::new(error) }
    }
}

/// The tables of a staging schema (its markers, views and sequences aside), with their row
/// counts (a system-versioned table's history rows included) and checksums.
async fn table_facts(connector: &Connector, conn: &mut Conn, staging: &str) -> Result<Vec<TableFacts>> {
    let mut objects = catalog::existing_objects(connector, conn, staging).await?;
    objects.sort();
    let mut facts = Vec::new();
    for (name, kind) in objects {
        let versioned = kind == "SYSTEM VERSIONED";
        if !(versioned || kind == "BASE TABLE") || name == STAGED_MARKER || name == REPLAYED_MARKER {
            continue;
        }
        let rows = catalog::count_rows(connector, conn, staging, &name, versioned).await?;
        let checksum = if catalog::checksum_is_reproducible(connector, conn, staging, &name).await? {
            catalog::checksum_table(connector, conn, staging, &name).await?
        } else {
            None
        };
        facts.push(TableFacts { name, rows, checksum });
    }
    Ok(facts)
}

fn compare_facts(database: &str, staging: &str, recorded: &[TableFacts], now: &[TableFacts]) -> Result<()> {
    if recorded == now {
        return Ok(());
    }
    let differs = recorded
        .iter()
        .find(|r| !now.contains(r))
        .map(|r| format!("table {} (recorded {} rows, checksum {:?})", r.name, r.rows, r.checksum))
        .or_else(|| now.iter().find(|n| !recorded.contains(n)).map(|n| format!("table {} (not recorded)", n.name)))
        .unwrap_or_default();
    Err(AgentError::VerifyMismatch(format!(
        "the replayed copy of database {database} in {staging} changed since it was staged: {differs}; database {database} was left as it was"
    )))
}

async fn mark(
    connector: &Connector,
    conn: &mut Conn,
    staging: &str,
    manifest_sha256: &str,
    copy: &ReplayedCopy,
) -> Result<()> {
    let replayed = format!("{}.{}", quote_ident(staging), quote_ident(REPLAYED_MARKER));
    let during = "recording the replayed copy";
    connector.execute(conn, &format!("CREATE TABLE {replayed} (facts LONGTEXT NOT NULL)"), during).await?;
    let json = serde_json::to_string(copy).map_err(|e| AgentError::Internal(e.to_string()))?;
    conn.exec_drop(format!("INSERT INTO {replayed} VALUES (?)"), (json,))
        .await
        .map_err(|e| connector.error(during, e))?;
    // The staged marker last: a copy without it is the leftover of a restore that died.
    let marker = format!("{}.{}", quote_ident(staging), quote_ident(STAGED_MARKER));
    connector.execute(conn, &format!("CREATE TABLE {marker} (manifest_sha256 CHAR(64) NOT NULL)"), during).await?;
    conn.exec_drop(format!("INSERT INTO {marker} VALUES (?)"), (manifest_sha256,))
        .await
        .map_err(|e| connector.error(during, e))?;
    tracing::info!("{staging}: staged, replayed and recorded");
    Ok(())
}

/// The record of a replayed copy in `staging`, if it has one.
async fn read_replayed(connector: &Connector, conn: &mut Conn, staging: &str) -> Result<Option<ReplayedCopy>> {
    if !has_replayed_marker(connector, conn, staging).await? {
        return Ok(None);
    }
    let sql = format!("SELECT facts FROM {}.{}", quote_ident(staging), quote_ident(REPLAYED_MARKER));
    let text: Option<String> =
        conn.query_first(sql).await.map_err(|e| connector.error("reading the replayed copy", e))?;
    let copy = text.and_then(|t| serde_json::from_str(&t).ok());
    copy.map(Some).ok_or_else(|| AgentError::VerifyMismatch(format!("{staging}.{REPLAYED_MARKER} is unreadable")))
}

/// The [`Sink`] that replays: one session on the target server.
struct Applier<'a> {
    connector: &'a Connector,
    conn: Conn,
    /// Whether the events of the segment being replayed carry checksums.
    checksums: bool,
    /// The table maps of the statement being replayed: every `BINLOG` statement of its rows
    /// begins with them.
    maps: Vec<u8>,
    /// Its rows events not sent yet, and where the last of them begins.
    rows: Vec<u8>,
    last_rows_at: usize,
    /// The status each staged event is to have once swapped in.
    events: EventStatuses,
    /// Collation id → `_charset` introducer and collation name, for user variables.
    collations: HashMap<u32, (String, String)>,
    /// The empty schema a statement from a database that is not restored runs in.
    nowhere: String,
}

impl<'a> Applier<'a> {
    fn new(connector: &'a Connector, conn: Conn, events: EventStatuses, nowhere: String) -> Self {
        Applier {
            connector,
            conn,
            checksums: true,
            maps: Vec::new(),
            rows: Vec::new(),
            last_rows_at: 0,
            events,
            collations: HashMap::new(),
            nowhere,
        }
    }

    /// `SET @name := value`, text in the character set and collation the server logged.
    async fn user_variable_sql(&mut self, variable: &UserVariable) -> Result<String> {
        let value = match &variable.value {
            UserValue::Null => "NULL".to_string(),
            UserValue::Integer(number) => number.clone(),
            UserValue::Real(number) => format!("{number:e}"),
            UserValue::Text { bytes, collation_id } => {
                let (charset, collation) = self.collation(*collation_id).await?;
                format!("_{charset} X'{}' COLLATE {}", hex::encode(bytes), quote_ident(&collation))
            }
        };
        Ok(format!("SET @{} := {value}", quote_ident(&variable.name)))
    }

    async fn collation(&mut self, id: u32) -> Result<(String, String)> {
        if let Some(known) = self.collations.get(&id) {
            return Ok(known.clone());
        }
        let found: Option<(String, String)> = self
            .conn
            .exec_first(
                "SELECT CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLLATIONS WHERE ID = ?",
                (id,),
            )
            .await
            .map_err(|e| self.connector.error("reading a collation", e))?;
        let found = found.ok_or_else(|| {
            AgentError::ReplayUnsupported(format!("a user variable in collation {id}, which the server does not have"))
        })?;
        self.collations.insert(id, found.clone());
        Ok(found)
    }

    async fn execute(&mut self, sql: &str, during: &str) -> Result<()> {
        self.connector.execute(&mut self.conn, sql, during).await
    }

    /// Sends the rows held as one `BINLOG` statement that is a whole statement for the server:
    /// the table maps, then the rows, the last flagged as the statement's end. A statement's
    /// rows sent in several parts must be so: while a statement is open the server keeps its
    /// tables, and it silently skips rows whose table map came in a later part.
    async fn send_rows(&mut self) -> Result<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let last = with_statement_end(RawEvent(&self.rows[self.last_rows_at..]), self.checksums)
            .map_err(|e| AgentError::ReplayUnsupported(e.to_string()))?;
        let mut events = Vec::with_capacity(self.maps.len() + self.rows.len());
        events.extend_from_slice(&self.maps);
        events.extend_from_slice(&self.rows[..self.last_rows_at]);
        events.extend_from_slice(&last);
        self.rows.clear();
        self.last_rows_at = 0;
        self.execute(&binlog_statement(&events), "replaying row events").await
    }

    /// Ends the statement being replayed: its rows sent, its table maps forgotten.
    async fn end_statement(&mut self) -> Result<()> {
        self.send_rows().await?;
        self.maps.clear();
        Ok(())
    }
}

impl Sink for Applier<'_> {
    async fn format(&mut self, format: &Format) -> Result<()> {
        self.end_statement().await?;
        self.checksums = format.checksums;
        let statement = binlog_statement(&format.event_bytes);
        self.execute(&statement, "replaying a format description").await
    }

    async fn begin(&mut self, _: &Transaction) -> Result<()> {
        self.end_statement().await?;
        self.execute("BEGIN", "replaying a transaction").await
    }

    async fn table_map(&mut self, event: &[u8]) -> Result<()> {
        if !self.rows.is_empty() {
            // A table map after rows begins another statement.
            self.end_statement().await?;
        }
        self.maps.extend_from_slice(event);
        Ok(())
    }

    async fn rows(&mut self, event: &[u8]) -> Result<()> {
        self.last_rows_at = self.rows.len();
        self.rows.extend_from_slice(event);
        if self.rows.len() >= BINLOG_STATEMENT_BYTES {
            self.send_rows().await?;
        }
        Ok(())
    }

    async fn statement_end(&mut self) -> Result<()> {
        self.end_statement().await
    }

    async fn statement(&mut self, schema: Option<&str>, statement: &Statement) -> Result<()> {
        self.end_statement().await?;
        for setting in &statement.settings {
            self.execute(setting, "replaying a statement's session settings").await?;
        }
        for variable in &statement.user_variables {
            let sql = self.user_variable_sql(variable).await?;
            self.execute(&sql, "replaying a statement's user variables").await?;
        }
        let sql = match schema {
            Some(schema) => {
                self.execute(&format!("USE {}", quote_ident(schema)), "selecting a staging schema").await?;
                self.events.staged(schema, &statement.sql)
            }
            None => {
                let nowhere = quote_ident(&self.nowhere);
                self.execute(&format!("CREATE DATABASE IF NOT EXISTS {nowhere}"), "creating an empty schema").await?;
                self.execute(&format!("USE {nowhere}"), "selecting an empty schema").await?;
                self.events.staged_qualified(&statement.sql)
            }
        };
        self.execute(&sql, "replaying a statement").await
    }

    async fn commit(&mut self) -> Result<()> {
        self.end_statement().await?;
        self.execute("COMMIT", "replaying a transaction").await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_names_the_sequence_it_takes_values_from() {
        assert_eq!(
            sequence_in_default("nextval(`visitors_restore_1`.`ids`)", "visitors_restore_1"),
            Some("ids".into())
        );
        assert_eq!(
            sequence_in_default("nextval(`visitors_restore_1`.`a``b`)", "visitors_restore_1"),
            Some("a`b".into())
        );
        assert_eq!(sequence_in_default("nextval(`other`.`ids`)", "visitors_restore_1"), None, "another database's");
        assert_eq!(sequence_in_default("current_timestamp()", "visitors_restore_1"), None);
    }
}
