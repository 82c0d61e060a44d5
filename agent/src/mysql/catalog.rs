//! What a database holds: tables with their columns and keys, views, routines, triggers, and
//! the statements that recreate them.

use std::collections::HashMap;

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use super::{Connector, FirstRow, TextFields};
use crate::error::{AgentError, Result};
use crate::format::{binary_literal, quote_ident, quote_literal};

pub const SYSTEM_DATABASES: [&str; 4] = ["information_schema", "performance_schema", "mysql", "sys"];

#[derive(Clone, Debug)]
pub struct TableInfo {
    pub name: String,
    /// The server's estimate of the table's size, for planning and progress.
    pub data_length: u64,
    pub columns: Vec<String>,
    /// `DATA_TYPE` of each column of `columns` (lower case), e.g. `float` is selected as a
    /// double so that its text reads back to the same value.
    pub column_types: Vec<String>,
    /// `COLUMN_TYPE` of each column of `columns`, e.g. `enum('a','b')`: an ENUM's members.
    pub column_definitions: Vec<String>,
    /// The first primary key column, when it is an integer: the table can be split into ranges.
    pub integer_key: Option<String>,
    /// A system-versioned table whose rows are read with their history (`FOR SYSTEM_TIME
    /// ALL`): its last two columns are the period's start and end.
    pub history: bool,
}

/// How a system-versioned table's rows are kept: with their history, or the current rows only.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Versioning {
    /// Not system-versioned.
    None,
    /// Versioned by timestamps: the history is read, and loaded back with
    /// `system_versioning_insert_history`, through the period's columns (start, end).
    Timestamps(String, String),
    /// Versioned by transaction ids, which name transactions of the source server's
    /// `mysql.transaction_registry` and cannot be loaded into another: current rows only.
    TransactionIds,
}

/// The period columns of MariaDB's implicit system versioning (`WITH SYSTEM VERSIONING` alone).
const IMPLICIT_PERIOD: (&str, &str) = ("row_start", "row_end");

/// How a table of type `table_type` is versioned, from its `ROW START` / `ROW END` columns as
/// `(name, data type, generation expression)` (none for implicit versioning).
fn versioning(table_type: &str, period: &[(String, String, String)]) -> Versioning {
    if table_type != "SYSTEM VERSIONED" {
        return Versioning::None;
    }
    let find = |expression: &str| period.iter().find(|(_, _, e)| e.eq_ignore_ascii_case(expression));
    match (find("ROW START"), find("ROW END")) {
        (Some((_, kind, _)), _) if kind.eq_ignore_ascii_case("bigint") => Versioning::TransactionIds,
        (Some((start, ..)), Some((end, ..))) => Versioning::Timestamps(start.clone(), end.clone()),
        _ => Versioning::Timestamps(IMPLICIT_PERIOD.0.into(), IMPLICIT_PERIOD.1.into()),
    }
}

/// Objects of one kind as the statements that recreate them, with their names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Definitions {
    pub names: Vec<String>,
    pub statements: Vec<String>,
}

/// The databases to back up: the requested ones (each must exist), or all but the system ones.
pub async fn databases(connector: &Connector, conn: &mut Conn, requested: &[String]) -> Result<Vec<String>> {
    let existing: Vec<String> =
        conn.query("SHOW DATABASES").await.map_err(|e| connector.error("listing databases", e))?;
    if requested.is_empty() {
        return Ok(existing.into_iter().filter(|d| !SYSTEM_DATABASES.contains(&d.as_str())).collect());
    }
    for name in requested {
        if !existing.contains(name) {
            return Err(AgentError::MissingDatabase(name.clone()));
        }
    }
    Ok(requested.to_vec())
}

/// Every base table of every database but the system ones, with its database.
pub async fn all_tables(connector: &Connector, conn: &mut Conn) -> Result<Vec<(String, TableInfo)>> {
    let mut all = Vec::new();
    for database in databases(connector, conn, &[]).await? {
        for info in tables(connector, conn, &database).await? {
            all.push((database.clone(), info));
        }
    }
    Ok(all)
}

pub async fn create_database_sql(connector: &Connector, conn: &mut Conn, database: &str) -> Result<String> {
    let row: Option<(String, String)> = conn
        .query_first(format!("SHOW CREATE DATABASE {}", quote_ident(database)))
        .await
        .map_err(|e| connector.error("reading a database definition", e))?;
    let (_, sql) = row.ok_or_else(|| AgentError::MissingDatabase(database.into()))?;
    Ok(sql.replacen("CREATE DATABASE ", "CREATE DATABASE IF NOT EXISTS ", 1))
}

/// Base tables with their columns (generated ones left out) and key, in three queries
/// whatever the number of tables (information_schema queries are costly on the server).
pub async fn tables(connector: &Connector, conn: &mut Conn, database: &str) -> Result<Vec<TableInfo>> {
    let during = "listing tables";
    let rows: Vec<(String, Option<u64>, String)> = conn
        .exec(
            "SELECT TABLE_NAME, DATA_LENGTH, TABLE_TYPE FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = ? AND TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED') ORDER BY TABLE_NAME",
            (database,),
        )
        .await
        .map_err(|e| connector.error(during, e))?;
    // A generated column has a GENERATION_EXPRESSION (MariaDB and MySQL); MySQL 8 marks
    // columns with an expression default `DEFAULT_GENERATED` in EXTRA, which are stored data.
    let column_rows: Vec<(String, String, String, String, String)> = conn
        .exec(
            "SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, COALESCE(GENERATION_EXPRESSION, '') \
             FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? \
             AND COALESCE(GENERATION_EXPRESSION, '') IN ('', 'ROW START', 'ROW END') \
             ORDER BY TABLE_NAME, ORDINAL_POSITION",
            (database,),
        )
        .await
        .map_err(|e| connector.error(during, e))?;
    let key_rows: Vec<(String, String, String)> = conn
        .exec(
            "SELECT k.TABLE_NAME, k.COLUMN_NAME, c.DATA_TYPE FROM information_schema.KEY_COLUMN_USAGE k \
             JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA = k.TABLE_SCHEMA \
               AND c.TABLE_NAME = k.TABLE_NAME AND c.COLUMN_NAME = k.COLUMN_NAME \
             WHERE k.TABLE_SCHEMA = ? AND k.CONSTRAINT_NAME = 'PRIMARY' AND k.ORDINAL_POSITION = 1",
            (database,),
        )
        .await
        .map_err(|e| connector.error(during, e))?;
    // Per table: the columns' names, data types and column types; and the period's columns
    // of a system-versioned table, as (name, data type, expression).
    type Columns = (Vec<String>, Vec<String>, Vec<String>);
    let mut columns: HashMap<String, Columns> = HashMap::new();
    let mut periods: HashMap<String, Vec<(String, String, String)>> = HashMap::new();
    for (table, column, data_type, definition, expression) in column_rows {
        if !expression.is_empty() {
            periods.entry(table).or_default().push((column, data_type, expression));
            continue;
        }
        let entry = columns.entry(table).or_default();
        entry.0.push(column);
        entry.1.push(data_type.to_ascii_lowercase());
        entry.2.push(definition);
    }
    let mut keys: HashMap<String, String> = key_rows
        .into_iter()
        .filter(|(_, _, kind)| is_integer_type(kind))
        .map(|(table, column, _)| (table, column))
        .collect();
    Ok(rows
        .into_iter()
        .map(|(name, data_length, table_type)| {
            let (mut columns, mut column_types, mut column_definitions) = columns.remove(&name).unwrap_or_default();
            let history = match versioning(&table_type, &periods.remove(&name).unwrap_or_default()) {
                Versioning::Timestamps(start, end) => {
                    columns.extend([start, end]);
                    column_types.extend(["timestamp".to_string(), "timestamp".to_string()]);
                    column_definitions.extend(["timestamp(6)".to_string(), "timestamp(6)".to_string()]);
                    true
                }
                Versioning::TransactionIds => {
                    tracing::info!(
                        "{database}.{name} is versioned by transaction ids, which mean nothing on another server: \
                         its current rows are backed up, not its history"
                    );
                    false
                }
                Versioning::None => false,
            };
            TableInfo {
                columns,
                column_types,
                column_definitions,
                integer_key: keys.remove(&name),
                data_length: data_length.unwrap_or(0),
                history,
                name,
            }
        })
        .collect())
}

fn is_integer_type(data_type: &str) -> bool {
    matches!(data_type.to_ascii_lowercase().as_str(), "tinyint" | "smallint" | "mediumint" | "int" | "bigint")
}

pub async fn create_table_sql(connector: &Connector, conn: &mut Conn, database: &str, table: &str) -> Result<String> {
    let row: Option<(String, String)> = conn
        .query_first(format!("SHOW CREATE TABLE {}.{}", quote_ident(database), quote_ident(table)))
        .await
        .map_err(|e| connector.error("reading a table definition", e))?;
    Ok(row.map(|(_, sql)| sql).unwrap_or_default())
}

/// The names of a database's tables of `TABLE_TYPE` `table_type` (`BASE TABLE`, `VIEW`), in
/// name order.
pub async fn table_names(
    connector: &Connector,
    conn: &mut Conn,
    database: &str,
    table_type: &str,
) -> Result<Vec<String>> {
    conn.exec(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = ? ORDER BY TABLE_NAME",
        (database, table_type),
    )
    .await
    .map_err(|e| connector.error(&format!("listing the tables of type {table_type}"), e))
}

/// The routines of a database, as `(ROUTINE_TYPE, ROUTINE_NAME)`.
pub async fn routine_kinds_and_names(
    connector: &Connector,
    conn: &mut Conn,
    database: &str,
) -> Result<Vec<(String, String)>> {
    conn.exec(
        "SELECT ROUTINE_TYPE, ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = ?",
        (database,),
    )
    .await
    .map_err(|e| connector.error("listing routines", e))
}

/// The names of a database's triggers.
pub async fn trigger_names(connector: &Connector, conn: &mut Conn, database: &str) -> Result<Vec<String>> {
    conn.exec("SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ?", (database,))
        .await
        .map_err(|e| connector.error("listing triggers", e))
}

/// Views of a database in name order, each as the statements that recreate it.
pub async fn views(connector: &Connector, conn: &mut Conn, database: &str) -> Result<Vec<(String, Vec<String>)>> {
    let during = "reading view definitions";
    let names = table_names(connector, conn, database, "VIEW").await?;
    let mut views = Vec::new();
    for name in names {
        let row: Option<(String, String, String, String)> = conn
            .query_first(format!("SHOW CREATE VIEW {}.{}", quote_ident(database), quote_ident(&name)))
            .await
            .map_err(|e| connector.error(during, e))?;
        if let Some((_, sql, charset, collation)) = row {
            views.push((name, vec![session_charset(&charset, &collation), sql]));
        }
    }
    Ok(dependencies_first(database, views))
}

/// Orders views so that each comes after the views of the same database it selects from
/// (`SHOW CREATE VIEW` qualifies every name as `db`.`name`), so `views.sql` runs in one pass.
fn dependencies_first(database: &str, mut pending: Vec<(String, Vec<String>)>) -> Vec<(String, Vec<String>)> {
    let qualified = |view: &str| format!("{}.{}", quote_ident(database), quote_ident(view));
    let mut ordered: Vec<(String, Vec<String>)> = Vec::with_capacity(pending.len());
    while !pending.is_empty() {
        let names: Vec<String> = pending.iter().map(|(name, _)| qualified(name)).collect();
        let ready = pending.iter().position(|(name, statements)| {
            let body = statements.last().map(String::as_str).unwrap_or_default();
            !names.iter().any(|other| *other != qualified(name) && body.contains(other.as_str()))
        });
        // A cycle cannot be created in MySQL; should the text mislead us, keep name order.
        ordered.push(pending.remove(ready.unwrap_or(0)));
    }
    ordered
}

/// Stored procedures and functions, each as the statements that recreate it.
pub async fn routines(connector: &Connector, conn: &mut Conn, database: &str) -> Result<Definitions> {
    let during = "reading routine definitions";
    let names: Vec<(String, String)> = conn
        .exec(
            "SELECT ROUTINE_TYPE, ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = ? \
             ORDER BY ROUTINE_TYPE, ROUTINE_NAME",
            (database,),
        )
        .await
        .map_err(|e| connector.error(during, e))?;
    let mut definitions = Definitions::default();
    for (kind, name) in names {
        let sql = format!("SHOW CREATE {kind} {}.{}", quote_ident(database), quote_ident(&name));
        let row: Option<mysql_async::Row> = conn.query_first(sql).await.map_err(|e| connector.error(during, e))?;
        let Some(row) = row else { continue };
        let create: Option<String> = row.get(2).flatten();
        let Some(create) = create else {
            return Err(AgentError::MissingPrivilege {
                user: connector.settings().user.clone(),
                operation: "reading routine definitions".into(),
                message: format!(
                    "cannot read the body of {kind} `{name}` (grant SELECT on mysql.proc or SHOW CREATE ROUTINE)"
                ),
            });
        };
        definitions.names.push(routine_name(&kind, &name));
        definitions.statements.extend(session_of(&row, 1, 3));
        definitions.statements.push(create);
    }
    Ok(definitions)
}

/// How the manifest names a routine: its type and name, `PROCEDURE add_visit`.
pub fn routine_name(kind: &str, name: &str) -> String {
    format!("{kind} {name}")
}

/// Triggers in table and firing order, each as the statements that recreate it.
pub async fn triggers(connector: &Connector, conn: &mut Conn, database: &str) -> Result<Definitions> {
    let during = "reading trigger definitions";
    let names: Vec<String> = conn
        .exec(
            "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ? \
             ORDER BY EVENT_OBJECT_TABLE, EVENT_MANIPULATION, ACTION_TIMING, ACTION_ORDER",
            (database,),
        )
        .await
        .map_err(|e| connector.error(during, e))?;
    let mut definitions = Definitions::default();
    for name in names {
        let sql = format!("SHOW CREATE TRIGGER {}.{}", quote_ident(database), quote_ident(&name));
        let row: Option<mysql_async::Row> = conn.query_first(sql).await.map_err(|e| connector.error(during, e))?;
        let Some(row) = row else { continue };
        definitions.statements.extend(session_of(&row, 1, 3));
        definitions.statements.push(text_at(&row, 2));
        definitions.names.push(name);
    }
    Ok(definitions)
}

/// The sequences of a database in name order, as `(name, CREATE SEQUENCE statement)`; the
/// statement holds the sequence's bounds, increment, cache and cycle, not where it stands.
pub async fn sequences(connector: &Connector, conn: &mut Conn, database: &str) -> Result<Vec<(String, String)>> {
    let mut sequences = Vec::new();
    for name in table_names(connector, conn, database, "SEQUENCE").await? {
        let sql = format!("SHOW CREATE SEQUENCE {}.{}", quote_ident(database), quote_ident(&name));
        let row: Option<(String, String)> =
            conn.query_first(sql).await.map_err(|e| connector.error("reading sequence definitions", e))?;
        if let Some((_, create)) = row {
            sequences.push((name, create));
        }
    }
    Ok(sequences)
}

/// The statement that sets a sequence back where it stands now: its next value is the first
/// one the server has not handed out or cached (`next_not_cached_value`, as after a server
/// restart), in its current cycle. Read after the rows: no value a row holds is given again.
pub async fn sequence_position_sql(
    connector: &Connector,
    conn: &mut Conn,
    database: &str,
    name: &str,
) -> Result<String> {
    let sql = format!("SELECT next_not_cached_value, cycle_count FROM {}.{}", quote_ident(database), quote_ident(name));
    let row: Option<(i64, i64)> =
        conn.query_first(sql).await.map_err(|e| connector.error("reading where a sequence stands", e))?;
    let (next, round) = row.ok_or_else(|| AgentError::Internal(format!("sequence {database}.{name} has no row")))?;
    Ok(format!("DO SETVAL({}, {next}, 0, {round})", quote_ident(name)))
}

/// Scheduled events in name order, each as the statements that recreate it (with the
/// `sql_mode`, time zone and character set it was created with). Listed with `SHOW EVENTS`,
/// which fails without the `EVENT` privilege where `information_schema.EVENTS` would silently
/// show none.
pub async fn events(connector: &Connector, conn: &mut Conn, database: &str) -> Result<Definitions> {
    let during = "reading scheduled events";
    let listed: Vec<mysql_async::Row> =
        conn.query(format!("SHOW EVENTS FROM {}", quote_ident(database))).await.map_err(|e| match e {
            mysql_async::Error::Server(ref server) if matches!(server.code, 1044 | 1142) => {
                AgentError::MissingPrivilege {
                    user: connector.settings().user.clone(),
                    operation: during.into(),
                    message: format!(
                        "cannot list the scheduled events of database {database} (grant EVENT on it): {}",
                        server.message
                    ),
                }
            }
            other => connector.error(during, other),
        })?;
    let mut names: Vec<String> = listed.iter().filter_map(|row| row.get::<String, _>(1)).collect();
    names.sort();
    let mut definitions = Definitions::default();
    for name in names {
        let sql = format!("SHOW CREATE EVENT {}.{}", quote_ident(database), quote_ident(&name));
        let row: Option<mysql_async::Row> = conn.query_first(sql).await.map_err(|e| connector.error(during, e))?;
        let Some(row) = row else { continue };
        let [sql_mode, charset] = session_of(&row, 1, 4);
        let zone = Some(text_at(&row, 2)).filter(|zone| !zone.is_empty()).unwrap_or_else(|| "SYSTEM".into());
        let time_zone = format!("SET SESSION time_zone = {}", quote_literal(&zone));
        definitions.statements.extend([sql_mode, time_zone, charset, text_at(&row, 3)]);
        definitions.names.push(name);
    }
    Ok(definitions)
}

/// The names of a database's scheduled events (none listed without the `EVENT` privilege).
pub async fn event_names(connector: &Connector, conn: &mut Conn, database: &str) -> Result<Vec<String>> {
    conn.exec("SELECT EVENT_NAME FROM information_schema.EVENTS WHERE EVENT_SCHEMA = ?", (database,))
        .await
        .map_err(|e| connector.error("listing scheduled events", e))
}

/// The `SET`s of the session an object was created in, from its `SHOW CREATE` row: the
/// `sql_mode` in field `sql_mode`, the client character set and collation in fields `charset`
/// and `charset + 1`.
fn session_of(row: &mysql_async::Row, sql_mode: usize, charset: usize) -> [String; 2] {
    [session_sql_mode(&text_at(row, sql_mode)), session_charset(&text_at(row, charset), &text_at(row, charset + 1))]
}

/// The text of field `index` of a row, empty when it is NULL or missing.
fn text_at(row: &mysql_async::Row, index: usize) -> String {
    row.get::<Option<String>, _>(index).flatten().unwrap_or_default()
}

fn session_sql_mode(mode: &str) -> String {
    format!("SET SESSION sql_mode = {}", quote_literal(mode))
}

/// The session in which a view, routine, trigger or event is recreated. Its text was read over
/// a utf8mb4 connection, so it is sent back as utf8mb4 whatever client created it (replaying
/// it as the original client character set would encode non-ASCII text twice); the original
/// `collation_connection` is kept, so string literals get the same character set and collation.
/// The original client character set is named in a comment ([`CREATED_WITH`]): a restore
/// creates an object whose text is ASCII with it, as it was (the same text in every ASCII-based
/// character set).
fn session_charset(original_client_charset: &str, collation: &str) -> String {
    let mut set = format!(
        "SET SESSION character_set_client = utf8mb4, SESSION collation_connection = {}",
        quote_literal(collation)
    );
    let plain = |name: &str| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain(original_client_charset) {
        set.push_str(&format!(" /* {CREATED_WITH} {original_client_charset} */"));
    }
    set
}

/// The comment that names, in a session's `SET`, the client character set an object was created
/// with.
pub const CREATED_WITH: &str = "created with character_set_client";

/// Rows in a table (exact), for `verify`; with `history`, a system-versioned table's history
/// rows too.
pub async fn count_rows(
    connector: &Connector,
    conn: &mut impl FirstRow,
    database: &str,
    table: &str,
    history: bool,
) -> Result<u64> {
    let all = if history { " FOR SYSTEM_TIME ALL" } else { "" };
    let sql = format!("SELECT COUNT(*) FROM {}.{}{all}", quote_ident(database), quote_ident(table));
    let row = conn.first_row(connector, &sql, "counting rows").await?;
    Ok(number_in(row, 0, "COUNT(*)")?.unwrap_or(0))
}

/// `CHECKSUM TABLE`; `None` when the table is missing.
pub async fn checksum_table(
    connector: &Connector,
    conn: &mut impl FirstRow,
    database: &str,
    table: &str,
) -> Result<Option<u64>> {
    let sql = format!("CHECKSUM TABLE {}.{}", quote_ident(database), quote_ident(table));
    let row = conn.first_row(connector, &sql, "computing a table checksum").await?;
    number_in(row, 1, "CHECKSUM TABLE")
}

/// Whether `CHECKSUM TABLE` of the table depends only on its rows. MariaDB 10.11 gives two
/// tables holding the same rows different checksums when they have a generated column
/// (virtual or stored; measured), so such a table's checksum can be neither recorded nor
/// compared.
pub async fn checksum_is_reproducible(
    connector: &Connector,
    conn: &mut impl FirstRow,
    database: &str,
    table: &str,
) -> Result<bool> {
    let sql = format!(
        "SELECT COUNT(*) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = {} AND TABLE_NAME = {} AND COALESCE(GENERATION_EXPRESSION, '') <> ''",
        binary_literal(database),
        binary_literal(table)
    );
    let row = conn.first_row(connector, &sql, "listing generated columns").await?;
    Ok(number_in(row, 0, "COUNT(*)")?.unwrap_or(0) == 0)
}

/// The number in field `index` of a row; `None` for no row or NULL.
fn number_in(row: Option<TextFields>, index: usize, what: &str) -> Result<Option<u64>> {
    let Some(text) = row.and_then(|mut fields| fields.get_mut(index).and_then(Option::take)) else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&text);
    text.parse().map(Some).map_err(|_| AgentError::Internal(format!("{what} returned '{text}', not a number")))
}

/// The views, routines (as [`routine_name`]), triggers, sequences and events of a database.
#[derive(Clone, Debug, Default)]
pub struct ObjectNames {
    pub views: Vec<String>,
    pub routines: Vec<String>,
    pub triggers: Vec<String>,
    pub sequences: Vec<String>,
    pub events: Vec<String>,
}

pub async fn object_names(connector: &Connector, conn: &mut Conn, database: &str) -> Result<ObjectNames> {
    let views = table_names(connector, conn, database, "VIEW").await?;
    let routines = routine_kinds_and_names(connector, conn, database).await?;
    let triggers = trigger_names(connector, conn, database).await?;
    let routines = routines.iter().map(|(kind, name)| routine_name(kind, name)).collect();
    let sequences = table_names(connector, conn, database, "SEQUENCE").await?;
    let events = event_names(connector, conn, database).await?;
    Ok(ObjectNames { views, routines, triggers, sequences, events })
}

/// The tables of every type (base, view, sequence, system-versioned) that exist in a database,
/// as `(name, TABLE_TYPE)`.
pub async fn existing_objects(connector: &Connector, conn: &mut Conn, database: &str) -> Result<Vec<(String, String)>> {
    conn.exec("SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", (database,))
        .await
        .map_err(|e| connector.error("listing existing tables", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_versioned_table_keeps_its_history_when_its_period_is_of_timestamps() {
        let column =
            |name: &str, kind: &str, expression: &str| (name.to_string(), kind.to_string(), expression.to_string());
        let timestamps = |start: &str, end: &str| Versioning::Timestamps(start.into(), end.into());
        let cases = [
            ("BASE TABLE", vec![], Versioning::None),
            ("SYSTEM VERSIONED", vec![], timestamps("row_start", "row_end")),
            (
                "SYSTEM VERSIONED",
                vec![column("valid_from", "timestamp", "ROW START"), column("valid_to", "timestamp", "ROW END")],
                timestamps("valid_from", "valid_to"),
            ),
            (
                "SYSTEM VERSIONED",
                vec![column("e", "bigint", "ROW END"), column("s", "bigint", "ROW START")],
                Versioning::TransactionIds,
            ),
        ];
        for (table_type, period, expected) in cases {
            assert_eq!(versioning(table_type, &period), expected, "{table_type} {period:?}");
        }
    }

    #[test]
    fn views_come_after_the_views_they_select_from() {
        let view = |name: &str, body: &str| (name.to_string(), vec!["SET x".to_string(), body.to_string()]);
        let views = vec![
            view("a", "CREATE VIEW `a` AS select `d`.`b`.`x` from `d`.`b`"),
            view("b", "CREATE VIEW `b` AS select `d`.`c`.`x` from `d`.`c`"),
            view("c", "CREATE VIEW `c` AS select `d`.`t`.`x` from `d`.`t`"),
        ];
        let order: Vec<String> = dependencies_first("d", views).into_iter().map(|(name, _)| name).collect();
        assert_eq!(order, ["c", "b", "a"]);
    }
}
