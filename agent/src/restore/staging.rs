//! All-or-nothing restore of one database `D`:
//!
//! 1. a server lock (`GET_LOCK`, released when the connection ends, even on SIGKILL) keeps two
//!    restores of `D` apart; a staging schema left by an earlier run that died is named in the
//!    log and dropped;
//! 2. the tables are created in the staging schema `visitors_restore_<hash of D>`, loaded and
//!    checked there (row counts, `CHECKSUM TABLE` when the backup has it), and the routines and
//!    triggers are rehearsed there;
//! 3. one `RENAME TABLE` statement (atomic) moves the staged tables into `D` and, with
//!    `--drop-existing`, the tables `D` held into `visitors_replaced_<hash of D>`;
//! 4. views, routines and triggers are recreated in `D`, and what was replaced is dropped.
//!
//! Until step 3 `D` is untouched, whatever fails and whenever the process is killed.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use sha2::{Digest, Sha256};

use super::{RestoreOptions, file_statements, load, run_file, session_setup};
use crate::error::{AgentError, Result};
use crate::format::{DatabaseEntry, Manifest, quote_ident};
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

fn lock_name(database: &str) -> String {
    format!("visitors-restore:{}", short_hash(database))
}

fn short_hash(name: &str) -> String {
    hex::encode(&Sha256::digest(name.as_bytes())[..8])
}

pub(super) struct DatabaseRestore<'a> {
    pub connector: &'a Connector,
    pub storage: &'a Storage,
    pub database: &'a DatabaseEntry,
    pub manifest: &'a Manifest,
    pub options: &'a RestoreOptions,
    /// The target runs the backup's server version: `CHECKSUM TABLE` values compare.
    pub checksums_comparable: bool,
}

/// What `D` held just before the swap, for `--drop-existing`.
#[derive(Default)]
struct Existing {
    database: bool,
    tables: Vec<String>,
    views: Vec<String>,
    routines: Vec<(String, String)>,
    triggers: Vec<String>,
    trigger_statements: Vec<String>,
}

impl DatabaseRestore<'_> {
    /// Restores the database; returns the rows loaded.
    pub async fn run(&self) -> Result<u64> {
        let name = &self.database.name;
        let staging = staging_schema_name(name);
        let mut conn = self.session().await?;
        // The lock lives as long as this connection: it must not time out during the load.
        self.execute(&mut conn, "SET SESSION wait_timeout = 604800", "preparing the restore session").await?;
        self.lock(&mut conn).await?;
        self.remove_leftovers(&mut conn).await?;
        let result = self.stage_and_swap(&mut conn, &staging).await;
        if let Err(error) = self.drop_schema(&mut conn, &staging).await {
            tracing::warn!("could not drop the staging schema {staging}: {error}; drop it by hand");
        }
        let _ = conn.disconnect().await;
        result
    }

    async fn stage_and_swap(&self, conn: &mut Conn, staging: &str) -> Result<u64> {
        let name = &self.database.name;
        self.create_staging(conn, staging).await?;
        let rows = load::load_database(
            self.connector,
            self.storage,
            self.database,
            staging,
            self.manifest.compression,
            self.options,
        )
        .await?;
        self.check_staged(conn, staging).await?;
        self.rehearse_objects(conn, staging).await?;
        let existing = self.existing(conn).await?;
        self.swap(conn, staging, &existing).await?;
        tracing::info!("database {name}: {} tables swapped in", self.database.tables.len());
        self.finish_after_swap(conn, &existing)
            .await
            .map_err(|error| AgentError::ObjectsIncomplete { database: name.clone(), error: Box::new(error) })?;
        Ok(rows)
    }

    async fn session(&self) -> Result<Conn> {
        let mut conn = self.connector.connect().await?;
        session_setup(self.connector, &mut conn, self.options).await?;
        Ok(conn)
    }

    async fn execute(&self, conn: &mut Conn, sql: &str, during: &str) -> Result<()> {
        self.connector.execute(conn, sql, during).await
    }

    async fn lock(&self, conn: &mut Conn) -> Result<()> {
        let held: Option<Option<i64>> = conn
            .exec_first("SELECT GET_LOCK(?, 0)", (lock_name(&self.database.name),))
            .await
            .map_err(|e| self.connector.error("taking the restore lock", e))?;
        if held.flatten() != Some(1) {
            return Err(AgentError::RestoreRunning { database: self.database.name.clone() });
        }
        Ok(())
    }

    /// Drops the staging and replaced schemas of an earlier restore of this database that
    /// died (this run holds the lock, so no live run owns them).
    async fn remove_leftovers(&self, conn: &mut Conn) -> Result<()> {
        let name = &self.database.name;
        for schema in [staging_schema_name(name), replaced_schema_name(name)] {
            if self.schema_exists(conn, &schema).await? {
                tracing::warn!(
                    "found the schema {schema}, left by an earlier restore of database {name} that did not finish \
                     (killed or failed); dropping it"
                );
                self.drop_schema(conn, &schema).await?;
            }
        }
        Ok(())
    }

    async fn schema_exists(&self, conn: &mut Conn, schema: &str) -> Result<bool> {
        let found: Option<String> = conn
            .exec_first("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", (schema,))
            .await
            .map_err(|e| self.connector.error("listing databases", e))?;
        Ok(found.is_some())
    }

    async fn drop_schema(&self, conn: &mut Conn, schema: &str) -> Result<()> {
        let sql = format!("DROP DATABASE IF EXISTS {}", quote_ident(schema));
        self.execute(conn, &sql, "dropping a staging schema").await
    }

    /// The staging schema, with the database's character set and collation, and its tables.
    async fn create_staging(&self, conn: &mut Conn, staging: &str) -> Result<()> {
        let create = self.database_statement(staging).await?;
        self.execute(conn, &create, "creating the staging schema").await?;
        for table in &self.database.tables {
            run_file(self.connector, conn, self.storage, staging, &table.schema).await?;
        }
        Ok(())
    }

    /// `database.sql`'s statement, for `schema` instead of the database.
    async fn database_statement(&self, schema: &str) -> Result<String> {
        let file = &self.database.schema;
        let statements = file_statements(self.storage, file).await?;
        let prefix = format!("CREATE DATABASE IF NOT EXISTS {}", quote_ident(&self.database.name));
        let statement = statements.iter().find(|s| s.starts_with(&prefix)).ok_or_else(|| AgentError::BadChunk {
            file: file.path.clone(),
            reason: format!("it does not hold `{prefix}`"),
        })?;
        Ok(format!("CREATE DATABASE {}{}", quote_ident(schema), &statement[prefix.len()..]))
    }

    /// Every staged table holds what the backup says: its row count, and its `CHECKSUM TABLE`
    /// when the backup recorded one on the same server version.
    async fn check_staged(&self, conn: &mut Conn, staging: &str) -> Result<()> {
        let name = &self.database.name;
        for table in &self.database.tables {
            let described = format!("the staged copy of `{name}`.`{}`", table.name);
            let rows = catalog::count_rows(self.connector, conn, staging, &table.name).await?;
            if rows != table.rows {
                return Err(AgentError::VerifyMismatch(format!(
                    "{described} has {rows} rows, the backup {}; database {name} was left as it was",
                    table.rows
                )));
            }
            let Some(expected) = table.checksum.filter(|_| self.checksums_comparable) else { continue };
            let actual = catalog::checksum_table(self.connector, conn, staging, &table.name).await?;
            if actual != Some(expected) {
                return Err(AgentError::VerifyMismatch(format!(
                    "{described} has checksum {}, the backup {expected}; database {name} was left as it was",
                    actual.unwrap_or(0)
                )));
            }
        }
        Ok(())
    }

    /// Creates the routines and triggers in the staging schema first, so that one the server
    /// refuses (a definer the user may not name, say) fails the restore before the swap. The
    /// triggers are dropped again: a table with triggers cannot move to another schema.
    async fn rehearse_objects(&self, conn: &mut Conn, staging: &str) -> Result<()> {
        for file in [&self.database.routines, &self.database.triggers].into_iter().flatten() {
            let mut session = self.session().await?;
            run_file(self.connector, &mut session, self.storage, staging, file).await?;
            let _ = session.disconnect().await;
        }
        for trigger in self.triggers_of(conn, staging).await? {
            let sql = format!("DROP TRIGGER {}.{}", quote_ident(staging), quote_ident(&trigger));
            self.execute(conn, &sql, "dropping a rehearsed trigger").await?;
        }
        Ok(())
    }

    async fn triggers_of(&self, conn: &mut Conn, schema: &str) -> Result<Vec<String>> {
        conn.exec("SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ?", (schema,))
            .await
            .map_err(|e| self.connector.error("listing triggers", e))
    }

    /// What the database holds now, when the restore is to replace it.
    async fn existing(&self, conn: &mut Conn) -> Result<Existing> {
        let name = &self.database.name;
        let database = self.schema_exists(conn, name).await?;
        if !database || !self.options.drop_existing {
            return Ok(Existing { database, ..Default::default() });
        }
        let objects = catalog::existing_objects(self.connector, conn, name).await?;
        let (views, tables): (Vec<_>, Vec<_>) = objects.into_iter().partition(|(_, kind)| kind == "VIEW");
        let routines: Vec<(String, String)> = conn
            .exec(
                "SELECT ROUTINE_TYPE, ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = ?",
                (name,),
            )
            .await
            .map_err(|e| self.connector.error("listing routines", e))?;
        Ok(Existing {
            database,
            tables: tables.into_iter().map(|(table, _)| table).collect(),
            views: views.into_iter().map(|(view, _)| view).collect(),
            routines,
            triggers: self.triggers_of(conn, name).await?,
            trigger_statements: catalog::triggers(self.connector, conn, name).await?,
        })
    }

    /// One `RENAME TABLE` for the whole database: the staged tables in, what it held out.
    async fn swap(&self, conn: &mut Conn, staging: &str, existing: &Existing) -> Result<()> {
        let name = &self.database.name;
        let target = quote_ident(name);
        let replaced = quote_ident(&replaced_schema_name(name));
        let mut renames: Vec<String> =
            existing.tables.iter().map(|t| format!("{target}.{q} TO {replaced}.{q}", q = quote_ident(t))).collect();
        renames.extend(
            self.database
                .tables
                .iter()
                .map(|t| format!("{}.{q} TO {target}.{q}", quote_ident(staging), q = quote_ident(&t.name))),
        );
        if !existing.database {
            let create = self.database_statement(name).await?;
            self.execute(conn, &create, "creating the database").await?;
        }
        if !existing.tables.is_empty() {
            self.execute(conn, &format!("CREATE DATABASE {replaced}"), "creating the schema for replaced tables")
                .await?;
        }
        // A table with triggers cannot move to another schema: the triggers of the tables
        // being replaced go just before the swap, and come back if it fails.
        for trigger in &existing.triggers {
            let sql = format!("DROP TRIGGER {target}.{}", quote_ident(trigger));
            self.execute(conn, &sql, "dropping a trigger of a replaced table").await?;
        }
        if renames.is_empty() {
            return Ok(());
        }
        let swapped =
            self.execute(conn, &format!("RENAME TABLE {}", renames.join(", ")), "swapping in the tables").await;
        if let Err(error) = swapped {
            self.undo_failed_swap(existing).await;
            return Err(error);
        }
        Ok(())
    }

    /// Puts back what [`Self::swap`] changed before its `RENAME TABLE` failed.
    async fn undo_failed_swap(&self, existing: &Existing) {
        let name = &self.database.name;
        let undone = async {
            let mut session = self.session().await?;
            if !existing.trigger_statements.is_empty() {
                self.execute(&mut session, &format!("USE {}", quote_ident(name)), "selecting a database").await?;
                for statement in &existing.trigger_statements {
                    self.execute(&mut session, statement, "recreating a trigger after a failed swap").await?;
                }
            }
            if !existing.database {
                self.execute(&mut session, &format!("DROP DATABASE IF EXISTS {}", quote_ident(name)), "undoing")
                    .await?;
            }
            let replaced = quote_ident(&replaced_schema_name(name));
            self.execute(&mut session, &format!("DROP DATABASE IF EXISTS {replaced}"), "undoing").await
        };
        if let Err(error) = undone.await {
            tracing::error!("database {name}: could not undo the preparations of the failed swap: {error}");
        }
    }

    /// After the swap: the database's options, views, routines and triggers as in the backup,
    /// then what was replaced is dropped.
    async fn finish_after_swap(&self, conn: &mut Conn, existing: &Existing) -> Result<()> {
        let name = &self.database.name;
        let target = quote_ident(name);
        if existing.database && self.options.drop_existing {
            let create = self.database_statement(name).await?;
            let options = create.trim_start_matches(&format!("CREATE DATABASE {target}")).to_string();
            if !options.trim().is_empty() {
                self.execute(conn, &format!("ALTER DATABASE {target}{options}"), "setting the database's options")
                    .await?;
            }
            for view in &existing.views {
                self.execute(conn, &format!("DROP VIEW IF EXISTS {target}.{}", quote_ident(view)), "dropping a view")
                    .await?;
            }
            for (kind, routine) in &existing.routines {
                let sql = format!("DROP {kind} IF EXISTS {target}.{}", quote_ident(routine));
                self.execute(conn, &sql, "dropping a routine").await?;
            }
        }
        self.create_views().await?;
        for file in [&self.database.routines, &self.database.triggers].into_iter().flatten() {
            let mut session = self.session().await?;
            run_file(self.connector, &mut session, self.storage, name, file).await?;
            let _ = session.disconnect().await;
        }
        self.drop_schema(conn, &replaced_schema_name(name)).await
    }

    /// Views can depend on each other: each one is retried until none is left or a round
    /// makes no progress.
    async fn create_views(&self) -> Result<()> {
        let Some(file) = &self.database.views else { return Ok(()) };
        let mut pending = group_objects(file_statements(self.storage, file).await?);
        while !pending.is_empty() {
            let mut failed = Vec::new();
            let mut last_error = None;
            let before = pending.len();
            for statements in pending {
                if let Err(error) = self.create_object(&statements).await {
                    last_error = Some(error);
                    failed.push(statements);
                }
            }
            if failed.len() == before {
                return Err(last_error.expect("a failed view has an error"));
            }
            pending = failed;
        }
        Ok(())
    }

    async fn create_object(&self, statements: &[String]) -> Result<()> {
        let mut session = self.session().await?;
        let use_database = format!("USE {}", quote_ident(&self.database.name));
        self.execute(&mut session, &use_database, "selecting a database").await?;
        for statement in statements {
            self.execute(&mut session, statement, "creating a view").await?;
        }
        let _ = session.disconnect().await;
        Ok(())
    }
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

/// Refuses up front a restore whose largest database cannot fit beside what the server holds,
/// when the server can tell its free space (MariaDB's `information_schema.DISKS`, a plugin).
pub(super) async fn check_space(connector: &Connector, conn: &mut Conn, databases: &[DatabaseEntry]) -> Result<()> {
    let Some((largest, needed)) = databases
        .iter()
        .map(|d| (d.name.clone(), d.tables.iter().map(|t| t.data_bytes).sum::<u64>()))
        .max_by_key(|(_, bytes)| *bytes)
    else {
        return Ok(());
    };
    let datadir: Option<String> =
        conn.query_first("SELECT @@datadir").await.map_err(|e| connector.error("reading the data directory", e))?;
    let disks: Vec<(String, u64)> = match conn.query("SELECT Path, Available FROM information_schema.DISKS").await {
        Ok(disks) => disks,
        Err(_) => {
            tracing::info!(
                "the server does not tell its free space (information_schema.DISKS is not installed): the restore \
                 needs room for a second copy of its largest database ({largest}, about {} MiB of data)",
                needed / (1024 * 1024)
            );
            return Ok(());
        }
    };
    let Some(available_kib) = free_kib_at(&datadir.unwrap_or_default(), &disks) else { return Ok(()) };
    if available_kib.saturating_mul(1024) < needed {
        return Err(AgentError::InsufficientSpace {
            database: largest,
            needed_mib: needed.div_ceil(1024 * 1024),
            available_mib: available_kib / 1024,
        });
    }
    Ok(())
}

/// Free KiB of the disk whose mount path is the longest prefix of `path`.
fn free_kib_at(path: &str, disks: &[(String, u64)]) -> Option<u64> {
    disks
        .iter()
        .filter(|(mount, _)| path.starts_with(mount.as_str()))
        .max_by_key(|(mount, _)| mount.len())
        .map(|(_, available)| *available)
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

    #[test]
    fn free_space_is_that_of_the_disk_holding_the_path() {
        let disks = vec![("/".to_string(), 100), ("/var/lib/mysql".to_string(), 7), ("/var".to_string(), 50)];
        assert_eq!(free_kib_at("/var/lib/mysql/", &disks), Some(7));
        assert_eq!(free_kib_at("/srv/data/", &disks), Some(100));
        assert_eq!(free_kib_at("relative", &disks), None);
    }
}
