//! What the steps of a restore share: the restore's context ([`RestoreContext`]) and the
//! restore of one database in it ([`DatabaseRestore`]); the names of the schemas and of the
//! lock a restore of a database uses; the marker tables of a staged copy; and the check of a
//! staged table against the manifest.
//!
//! The steps: [`super::staging`] restores one database all or nothing (its methods on
//! [`DatabaseRestore`]), with [`super::load`] loading its chunks; [`super::point_in_time`]
//! stages, replays and swaps with those same methods.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use sha2::{Digest, Sha256};

use super::RestoreOptions;
use crate::error::{AgentError, Result};
use crate::format::{DatabaseEntry, Manifest, TableEntry};
use crate::mysql::{Connector, catalog};
use crate::storage::Storage;

/// The schema a restore of `database` loads into before the swap.
pub fn staging_schema_name(database: &str) -> String {
    format!("visitors_restore_{}", short_hash(database))
}

/// The schema that holds, for a moment after the swap, the tables `database` held before.
pub fn replaced_schema_name(database: &str) -> String {
    format!("visitors_replaced_{}", short_hash(database))
}

/// The empty schema a replay into the staging schemas of `databases` runs a statement in when
/// it came from a database that is not restored (and names the restored ones by name).
pub fn nowhere_schema_name(databases: &[&str]) -> String {
    format!("visitors_nowhere_{}", short_hash(&databases.join("\n")))
}

/// The server lock (`GET_LOCK`) that keeps two restores of `database` apart.
pub(super) fn lock_name(database: &str) -> String {
    format!("visitors-restore:{}", short_hash(database))
}

fn short_hash(name: &str) -> String {
    hex::encode(&Sha256::digest(name.as_bytes())[..8])
}

/// The table, in a staging schema, that marks it as loaded and checked by `--stage-only` from
/// the manifest whose SHA-256 it holds. Written last: a staging schema without it is the
/// leftover of a restore that died.
pub const STAGED_MARKER: &str = "visitors_restore_staged";

/// The marker table, in a staging schema, of a copy replayed to a point in time.
pub const REPLAYED_MARKER: &str = "visitors_restore_replayed";

/// What the databases of one restore share.
pub(super) struct RestoreContext<'a> {
    pub connector: &'a Connector,
    pub storage: &'a Storage,
    pub manifest: &'a Manifest,
    /// The SHA-256 of the manifest read, recorded in (and compared with) the staged marker.
    pub manifest_sha256: &'a str,
    pub options: &'a RestoreOptions,
    /// The target runs the backup's server version: `CHECKSUM TABLE` values compare.
    pub checksums_comparable: bool,
}

impl RestoreContext<'_> {
    /// The restore of `database`; `swap_tables` as in [`DatabaseRestore::swap_tables`].
    pub fn database<'d>(
        &'d self,
        database: &'d DatabaseEntry,
        swap_tables: Option<Vec<String>>,
    ) -> DatabaseRestore<'d> {
        DatabaseRestore { context: self, database, swap_tables, objects: None }
    }
}

/// The restore of one database of a restore. Its steps (lock, stage, check, swap) are its
/// methods in [`super::staging`].
pub(super) struct DatabaseRestore<'a> {
    pub context: &'a RestoreContext<'a>,
    pub database: &'a DatabaseEntry,
    /// The tables to swap in, when they are not the manifest's (a copy replayed to a point in
    /// time may have gained or lost some).
    pub swap_tables: Option<Vec<String>>,
    /// The views, routines, triggers and events to create after the swap, when they are not the
    /// backup's (a copy replayed to a point in time holds them as the replay left them).
    pub objects: Option<ObjectStatements>,
}

/// A database's views (each with the settings it is created in), routines, triggers and events,
/// as the statements that create them.
#[derive(Clone, Debug, Default)]
pub(super) struct ObjectStatements {
    pub views: Vec<Vec<String>>,
    pub routines: Vec<String>,
    pub triggers: Vec<String>,
    pub events: Vec<String>,
}

impl ObjectStatements {
    /// Each object whose text is ASCII created with the client character set it was created with.
    pub fn in_original_charsets(self) -> Self {
        use super::statements::in_original_charsets;
        ObjectStatements {
            views: self.views.into_iter().map(in_original_charsets).collect(),
            routines: in_original_charsets(self.routines),
            triggers: in_original_charsets(self.triggers),
            events: in_original_charsets(self.events),
        }
    }
}

/// Whether `staging` holds the record of a replay.
pub(super) async fn has_replayed_marker(connector: &Connector, conn: &mut Conn, staging: &str) -> Result<bool> {
    let found: Option<String> = conn
        .exec_first(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (staging, REPLAYED_MARKER),
        )
        .await
        .map_err(|e| connector.error("looking for the replayed copy's record", e))?;
    Ok(found.is_some())
}

/// The staged copy of `table` holds what the backup says: its row count, and its
/// `CHECKSUM TABLE` when the backup recorded one on the same server version.
pub(super) async fn check_staged_table(
    connector: &Connector,
    conn: &mut Conn,
    database: &str,
    staging: &str,
    table: &TableEntry,
    checksums_comparable: bool,
) -> Result<()> {
    let described = format!("the staged copy of `{database}`.`{}`", table.name);
    let rows = catalog::count_rows(connector, conn, staging, &table.name, table.history).await?;
    if rows != table.rows {
        return Err(AgentError::VerifyMismatch(format!(
            "{described} has {rows} rows, the backup {}; database {database} was left as it was",
            table.rows
        )));
    }
    let Some(expected) = table.checksum.filter(|_| checksums_comparable) else { return Ok(()) };
    if !catalog::checksum_is_reproducible(connector, conn, staging, &table.name).await? {
        tracing::info!("{described}: checksum not compared (generated columns make it irreproducible)");
        return Ok(());
    }
    let actual = catalog::checksum_table(connector, conn, staging, &table.name).await?;
    if actual != Some(expected) {
        return Err(AgentError::VerifyMismatch(format!(
            "{described} has checksum {}, the backup {expected}; database {database} was left as it was",
            actual.unwrap_or(0)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_names_are_fixed_per_database_and_fit_mysql_limits() {
        assert_eq!(staging_schema_name("shop"), staging_schema_name("shop"));
        assert_ne!(staging_schema_name("shop"), staging_schema_name("shop2"));
        let long = "é".repeat(64);
        assert!(staging_schema_name(&long).len() <= 64 && replaced_schema_name(&long).len() <= 64);
        assert!(lock_name(&long).len() <= 64);
        assert!(staging_schema_name("shop").starts_with("visitors_restore_"));
    }
}
