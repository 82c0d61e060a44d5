//! `verify --deep`, the restore drill: restores a backup into a scratch server, then proves the
//! restored server holds what was backed up. Every file's SHA-256 is checked before anything is
//! loaded (a restore does so), then each table's row count and content digest (see
//! [`crate::content`]) are compared with the manifest, and the views, routines, triggers,
//! sequences, scheduled events (restored disabled) and accounts the backup names must exist. The first difference fails the drill, naming the
//! table, chunk or object.
//!
//! The server must be a scratch one, holding no database but the system ones: a drill never
//! replaces data, and creates the backup's accounts.

use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt, TryStreamExt};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use crate::content::read_table;
use crate::error::{AgentError, Result};
use crate::format::{DatabaseEntry, Manifest, TableEntry, quote_ident};
use crate::mysql::catalog::{self, TableInfo};
use crate::mysql::connection::describe_server;
use crate::mysql::{ConnectionSettings, Connector};
use crate::physical::drill::check_prepared_copy;
use crate::restore::{self, RestoreOptions};
use crate::storage::{S3Settings, Storage};
use crate::verify::{load_manifest, logical_only};

#[derive(Clone, Debug)]
pub struct DrillOptions {
    pub from: String,
    pub s3: S3Settings,
    /// The manifest's SHA-256 as the backup run reported it; a different manifest is refused.
    pub expect_manifest_sha256: Option<String>,
    /// The scratch server the backup is restored into.
    pub connection: ConnectionSettings,
    /// Connections that load, then read back, tables at once.
    pub parallelism: usize,
    pub progress_interval: Duration,
    /// Where the keys of encrypted backups are, one file per key id.
    pub decrypt_keys_dir: Option<std::path::PathBuf>,
}

#[derive(Debug)]
pub struct DrillReport {
    pub manifest: Manifest,
    pub tables: u64,
    pub rows: u64,
    /// Wall time of the restore alone: what a restore of this backup takes (its RTO); none
    /// for a physical run, restored before its drill's server started.
    pub restore_seconds: Option<f64>,
    /// Wall time of the comparison after the restore.
    pub compare_seconds: f64,
    /// Whether every table's rows and content digest were compared with what the backup read
    /// (false: a physical run of a primary, whose tables were checked only).
    pub content_compared: bool,
}

pub async fn drill(options: &DrillOptions) -> Result<DrillReport> {
    let storage = Storage::open(&options.from, &options.s3, false)?;
    let manifest =
        load_manifest(&storage, options.expect_manifest_sha256.as_deref(), options.decrypt_keys_dir.as_deref()).await?;
    let connector = Connector::new(options.connection.clone());
    if manifest.physical.is_some() {
        return physical_drill(&connector, manifest, options.parallelism).await;
    }
    logical_only(&manifest, &options.from)?;
    refuse_a_server_that_is_not_scratch(&connector).await?;

    let started = Instant::now();
    let restored = restore::restore(&restore_options(options, &manifest)).await?;
    let restore_seconds = started.elapsed().as_secs_f64();
    tracing::info!("restored {} tables, {} rows in {restore_seconds:.1} s", restored.tables, restored.rows);

    let started = Instant::now();
    let server = server_version(&connector).await?;
    let rows = compare_tables(&connector, &manifest, &server, options.parallelism.max(1)).await?;
    check_objects(&connector, &manifest).await?;
    let compare_seconds = started.elapsed().as_secs_f64();
    tracing::info!(
        "every table's rows and content digest, and every view, routine, trigger and account match the backup \
         ({compare_seconds:.1} s)"
    );
    Ok(DrillReport {
        tables: manifest.table_count(),
        rows,
        manifest,
        restore_seconds: Some(restore_seconds),
        compare_seconds,
        content_compared: true,
    })
}

/// A physical run is restored before its drill's server starts (the server runs on the
/// prepared copy): the drill checks the copy only, and the restore's time is the database's.
async fn physical_drill(connector: &Connector, manifest: Manifest, parallelism: usize) -> Result<DrillReport> {
    let started = Instant::now();
    let checked = check_prepared_copy(connector, &manifest, parallelism).await?;
    Ok(DrillReport {
        manifest,
        tables: checked.tables,
        rows: checked.rows,
        restore_seconds: None,
        compare_seconds: started.elapsed().as_secs_f64(),
        content_compared: checked.content_compared,
    })
}

fn restore_options(options: &DrillOptions, manifest: &Manifest) -> RestoreOptions {
    let mut restore = RestoreOptions::new(options.connection.clone(), options.from.clone());
    restore.s3 = options.s3.clone();
    restore.expect_manifest_sha256 = options.expect_manifest_sha256.clone();
    restore.parallelism = options.parallelism;
    restore.users = manifest.users.is_some();
    restore.progress_interval = options.progress_interval;
    restore.decrypt_keys_dir = options.decrypt_keys_dir.clone();
    // An event left to run would change what the drill then compares.
    restore.events = restore::EventStatus::Disabled;
    restore
}

/// A drill restores accounts and databases: the server must be a scratch one, holding no
/// database but the system ones (and an empty `test`, which some installers create).
async fn refuse_a_server_that_is_not_scratch(connector: &Connector) -> Result<()> {
    let mut conn = connector.connect().await?;
    let present: Vec<(String, u64)> = conn
        .query(
            "SELECT s.SCHEMA_NAME, COUNT(t.TABLE_NAME) FROM information_schema.SCHEMATA s \
             LEFT JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = s.SCHEMA_NAME GROUP BY s.SCHEMA_NAME",
        )
        .await
        .map_err(|e| connector.error("listing databases", e))?;
    let _ = conn.disconnect().await;
    let scratch =
        |name: &str, tables: u64| catalog::SYSTEM_DATABASES.contains(&name) || (name == "test" && tables == 0);
    match present.into_iter().find(|(name, tables)| !scratch(name, *tables)) {
        Some((database, _)) => Err(AgentError::DrillTargetNotEmpty { database }),
        None => Ok(()),
    }
}

async fn server_version(connector: &Connector) -> Result<String> {
    let mut conn = connector.connect().await?;
    let (_, version) = describe_server(connector, &mut conn).await?;
    let _ = conn.disconnect().await;
    Ok(version)
}

/// Compares every table's rows with the manifest; returns the rows read. A digest that differs
/// on a server of another version than the one backed up may be the versions' text of a value,
/// not the backup: it is told apart.
async fn compare_tables(connector: &Connector, manifest: &Manifest, server: &str, parallelism: usize) -> Result<u64> {
    let mut conn = connector.connect().await?;
    let mut work = Vec::new();
    for database in &manifest.databases {
        let restored = catalog::tables(connector, &mut conn, &database.name).await?;
        for table in &database.tables {
            let Some(info) = restored.iter().find(|info| info.name == table.name) else {
                return Err(AgentError::DrillObjectMissing {
                    object: format!("table {}", table_name(database, table)),
                });
            };
            work.push((database, table, info.clone()));
        }
    }
    let _ = conn.disconnect().await;
    let counts: Vec<u64> = stream::iter(work)
        .map(|(database, table, info)| async move {
            match compare_table(connector, database, table, info).await {
                Err(AgentError::ContentDiffers { table, .. }) if !same_release(server, &manifest.server.version) => {
                    Err(AgentError::ContentDiffersAcrossVersions {
                        table,
                        server: server.to_string(),
                        backed_up: manifest.server.version.clone(),
                    })
                }
                other => other,
            }
        })
        .buffer_unordered(parallelism)
        .try_collect()
        .await?;
    Ok(counts.into_iter().sum())
}

/// Reads a restored table as the backup read it and compares its rows and digest.
async fn compare_table(
    connector: &Connector,
    database: &DatabaseEntry,
    table: &TableEntry,
    info: TableInfo,
) -> Result<u64> {
    let name = table_name(database, table);
    if info.columns != table.columns {
        return Err(AgentError::VerifyMismatch(format!(
            "table {name} has the columns {:?}, the backup {:?}",
            info.columns, table.columns
        )));
    }
    let (rows, digest) = read_table(connector, &database.name, &info).await?;
    if rows != table.rows {
        return Err(AgentError::VerifyMismatch(format!("table {name} has {rows} rows, the backup {}", table.rows)));
    }
    match &table.content_digest {
        Some(expected) if *expected != digest.to_text() => {
            Err(AgentError::ContentDiffers { table: name, expected: expected.clone(), actual: digest.to_text() })
        }
        Some(_) => Ok(rows),
        None => {
            tracing::info!("{name}: the backup has no content digest (taken by an older agent); rows counted only");
            Ok(rows)
        }
    }
}

/// The views, routines, triggers, sequences and events of every database, and the accounts, the
/// backup names.
async fn check_objects(connector: &Connector, manifest: &Manifest) -> Result<()> {
    let mut conn = connector.connect().await?;
    for database in &manifest.databases {
        let found = catalog::object_names(connector, &mut conn, &database.name).await?;
        let db = quote_ident(&database.name);
        let expected = [
            ("view", &database.view_names, &found.views),
            ("trigger", &database.trigger_names, &found.triggers),
            ("sequence", &database.sequence_names, &found.sequences),
            ("event", &database.event_names, &found.events),
        ];
        for (kind, names, present) in expected {
            if let Some(name) = names.iter().find(|n| !present.contains(n)) {
                return Err(AgentError::DrillObjectMissing { object: format!("{kind} {db}.{}", quote_ident(name)) });
            }
        }
        if let Some(routine) = database.routine_names.iter().find(|n| !found.routines.contains(n)) {
            return Err(AgentError::DrillObjectMissing { object: format!("{routine} in {db}") });
        }
    }
    if !manifest.user_names.is_empty() {
        let accounts = accounts(connector, &mut conn).await?;
        if let Some(user) = manifest.user_names.iter().find(|u| !accounts.contains(u)) {
            return Err(AgentError::DrillObjectMissing { object: format!("account {user}") });
        }
    }
    let _ = conn.disconnect().await;
    Ok(())
}

/// Every account, as `'name'@'host'` (each has at least USAGE).
async fn accounts(connector: &Connector, conn: &mut Conn) -> Result<Vec<String>> {
    conn.query("SELECT DISTINCT GRANTEE FROM information_schema.USER_PRIVILEGES")
        .await
        .map_err(|e| connector.error("listing accounts", e))
}

/// Whether two `VERSION()` texts name the same server release: their numbers, whatever the
/// build's suffixes say (MariaDB adds `-log` while binary logging is on).
fn same_release(a: &str, b: &str) -> bool {
    let number = |version: &str| version.split('-').next().unwrap_or_default().to_string();
    number(a) == number(b)
}

fn table_name(database: &DatabaseEntry, table: &TableEntry) -> String {
    format!("{}.{}", quote_ident(&database.name), quote_ident(&table.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_is_its_number_whatever_the_builds_suffixes() {
        assert!(same_release("10.11.19-MariaDB-0+deb12u1", "10.11.19-MariaDB-0+deb12u1-log"));
        assert!(same_release("8.4.3", "8.4.3"));
        assert!(!same_release("10.11.19-MariaDB", "11.8.3-MariaDB"));
        assert!(!same_release("8.4.3", "8.0.40"));
    }
}
