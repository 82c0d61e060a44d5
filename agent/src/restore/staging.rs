//! All-or-nothing restore of one database `D`:
//!
//! 1. a server lock (`GET_LOCK`, released when the connection ends, even on SIGKILL) keeps two
//!    restores of `D` apart; a staging schema left by an earlier restore that died is named in
//!    the log and dropped;
//! 2. the tables are created in the staging schema `visitors_restore_<hash of D>`, loaded and
//!    checked there (row counts, `CHECKSUM TABLE` when the backup has it), and the routines and
//!    triggers are rehearsed there;
//! 3. one `RENAME TABLE` statement (atomic) moves the staged tables into `D` and, with
//!    `--drop-existing`, the tables `D` held into `visitors_replaced_<hash of D>`;
//! 4. views, routines and triggers are recreated in `D`, and what was replaced is dropped.
//!
//! Until step 3 `D` is untouched, whatever fails and whenever the process is killed.
//!
//! In two invocations ([`RestoreStep`]): `--stage-only` does steps 1–2 and leaves the staging
//! schema with a marker table written last; `--from-stage` takes the lock again, refuses a
//! staging schema without the marker of this manifest, checks the staged tables again and does
//! 3–4.
//!
//! A restore to a point in time ([`super::point_in_time`]) takes these steps too, with its
//! replay between steps 2 and 3.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use std::collections::HashMap;

use super::context::{
    DatabaseRestore, STAGED_MARKER, check_staged_table, has_replayed_marker, lock_name, replaced_schema_name,
    staging_schema_name,
};
use super::indexes::{self, DeferredKeys};
use super::{EventStatus, RestoreStep, file_statements, load, run_file, session_setup};
use crate::error::{AgentError, Result};
use crate::format::{DatabaseEntry, quote_ident};
use crate::mysql::{Connector, catalog};

/// What `D` held just before the swap, for `--drop-existing`.
#[derive(Default)]
struct Existing {
    database: bool,
    tables: Vec<String>,
    views: Vec<String>,
    routines: Vec<(String, String)>,
    triggers: Vec<String>,
    trigger_statements: Vec<String>,
    events: Vec<String>,
}

impl DatabaseRestore<'_> {
    /// Restores the database, or does the part of it `options.step` asks; returns the rows
    /// loaded (or, `--from-stage`, checked).
    pub async fn restore(&self) -> Result<u64> {
        let name = &self.database.name;
        let staging = staging_schema_name(name);
        let mut conn = self.open_locked().await?;
        let step = self.context.options.step;
        let result = match step {
            RestoreStep::All => self.stage_and_swap(&mut conn, &staging).await,
            RestoreStep::StageOnly => self.stage_and_mark(&mut conn, &staging).await,
            RestoreStep::FromStage => self.swap_staged(&mut conn, &staging).await,
        };
        // A complete staged copy waits for `--from-stage`; anything else is dropped.
        if step != RestoreStep::StageOnly || result.is_err() {
            self.drop_staging(&mut conn, &staging).await;
        }
        let _ = conn.disconnect().await;
        result
    }

    /// A session holding the database's restore lock, for as long as it lives.
    pub(super) async fn open_locked(&self) -> Result<Conn> {
        let mut conn = self.session().await?;
        // The lock lives as long as this connection: it must not time out during the load.
        self.execute(&mut conn, "SET SESSION wait_timeout = 604800", "preparing the restore session").await?;
        self.lock(&mut conn).await?;
        Ok(conn)
    }

    /// Steps 1–2 for a restore that goes on elsewhere (a replay): the locked session, with the
    /// database staged and checked. A failure drops what was staged.
    pub(super) async fn open_and_stage(&self) -> Result<Conn> {
        let staging = staging_schema_name(&self.database.name);
        let mut conn = self.open_locked().await?;
        let staged = async {
            self.remove_leftovers(&mut conn).await?;
            self.stage(&mut conn, &staging).await
        }
        .await;
        if let Err(error) = staged {
            self.drop_staging(&mut conn, &staging).await;
            let _ = conn.disconnect().await;
            return Err(error);
        }
        Ok(conn)
    }

    /// Drops the staging schema, saying so when it cannot.
    pub(super) async fn drop_staging(&self, conn: &mut Conn, staging: &str) {
        if let Err(error) = self.drop_schema(conn, staging).await {
            tracing::warn!("could not drop the staging schema {staging}: {error}; drop it by hand");
        }
    }

    async fn stage_and_swap(&self, conn: &mut Conn, staging: &str) -> Result<u64> {
        self.remove_leftovers(conn).await?;
        let rows = self.stage(conn, staging).await?;
        self.swap_and_finish(conn, staging).await?;
        Ok(rows)
    }

    /// Steps 1–2 of `--stage-only`: the staged copy, checked, then its marker.
    async fn stage_and_mark(&self, conn: &mut Conn, staging: &str) -> Result<u64> {
        self.remove_leftovers(conn).await?;
        let rows = self.stage(conn, staging).await?;
        let marker = format!("{}.{}", quote_ident(staging), quote_ident(STAGED_MARKER));
        let create = format!("CREATE TABLE {marker} (manifest_sha256 CHAR(64) NOT NULL)");
        self.execute(conn, &create, "marking the staged copy complete").await?;
        conn.exec_drop(format!("INSERT INTO {marker} VALUES (?)"), (self.context.manifest_sha256,))
            .await
            .map_err(|e| self.context.connector.error("marking the staged copy complete", e))?;
        tracing::info!("database {}: staged and checked in {staging}", self.database.name);
        Ok(rows)
    }

    /// `--from-stage`: the staged copy of this manifest, checked again, swapped in.
    async fn swap_staged(&self, conn: &mut Conn, staging: &str) -> Result<u64> {
        let name = &self.database.name;
        let replaced = replaced_schema_name(name);
        if self.schema_exists(conn, &replaced).await? {
            tracing::warn!("found the schema {replaced}, left by an earlier restore of database {name}; dropping it");
            self.drop_schema(conn, &replaced).await?;
        }
        self.check_marker(conn, staging).await?;
        if has_replayed_marker(self.context.connector, conn, staging).await? {
            return Err(AgentError::VerifyMismatch(format!(
                "the copy of database {name} staged in {staging} was replayed to a point in time: swap it in with the \
                 same --binlog-archive and --until as the --stage-only run (database {name} was left as it was)"
            )));
        }
        self.check_staged(conn, staging).await?;
        tracing::info!("database {name}: the staged copy in {staging} matches the manifest");
        self.swap_and_finish(conn, staging).await?;
        Ok(self.database.tables.iter().map(|t| t.rows).sum())
    }

    /// The staging schema holds a complete copy staged from this very manifest.
    pub(super) async fn check_marker(&self, conn: &mut Conn, staging: &str) -> Result<()> {
        let name = &self.database.name;
        let not_staged = |why: String| {
            AgentError::VerifyMismatch(format!(
                "no complete staged copy of database {name} to swap in: {why}; run `restore --stage-only` first \
                 (database {name} was left as it was)"
            ))
        };
        let marked: Option<String> = conn
            .exec_first(
                "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
                (staging, STAGED_MARKER),
            )
            .await
            .map_err(|e| self.context.connector.error("looking for the staged copy", e))?;
        if marked.is_none() {
            let exists = self.schema_exists(conn, staging).await?;
            let why = if exists {
                format!("the schema {staging} has no {STAGED_MARKER} table (its staging did not finish)")
            } else {
                format!("there is no schema {staging}")
            };
            return Err(not_staged(why));
        }
        let sql = format!("SELECT manifest_sha256 FROM {}.{}", quote_ident(staging), quote_ident(STAGED_MARKER));
        let staged_from: Option<String> = conn
            .query_first(sql)
            .await
            .map_err(|e| self.context.connector.error("reading the staged copy's marker", e))?;
        match staged_from {
            Some(sha) if sha.eq_ignore_ascii_case(self.context.manifest_sha256) => Ok(()),
            other => Err(not_staged(format!(
                "{staging} was staged from a manifest with SHA-256 {}, not {}",
                other.unwrap_or_default(),
                self.context.manifest_sha256
            ))),
        }
    }

    /// Step 2: the tables created and loaded in the staging schema, each checked as soon as it
    /// is complete, the routines and triggers rehearsed there.
    async fn stage(&self, conn: &mut Conn, staging: &str) -> Result<u64> {
        let deferred_keys = self.create_staging(conn, staging).await?;
        let rows = load::load_database(self, staging, deferred_keys).await?;
        self.rehearse_objects(conn, staging).await?;
        Ok(rows)
    }

    /// Steps 3–4: the swap, then the views, routines and triggers.
    pub(super) async fn swap_and_finish(&self, conn: &mut Conn, staging: &str) -> Result<()> {
        let name = &self.database.name;
        let existing = self.existing(conn).await?;
        self.swap(conn, staging, &existing).await?;
        tracing::info!("database {name}: {} tables swapped in", self.tables_to_swap().len());
        self.finish_after_swap(conn, &existing)
            .await
            .map_err(|error| AgentError::ObjectsIncomplete { database: name.clone(), error: Box::new(error) })
    }

    async fn session(&self) -> Result<Conn> {
        let mut conn = self.context.connector.connect().await?;
        session_setup(self.context.connector, &mut conn, self.context.options).await?;
        Ok(conn)
    }

    async fn execute(&self, conn: &mut Conn, sql: &str, during: &str) -> Result<()> {
        self.context.connector.execute(conn, sql, during).await
    }

    async fn lock(&self, conn: &mut Conn) -> Result<()> {
        if !take_restore_lock(self.context.connector, conn, &self.database.name).await? {
            return Err(AgentError::RestoreRunning { database: self.database.name.clone() });
        }
        Ok(())
    }

    /// Drops the staging and replaced schemas of an earlier restore of this database that
    /// died (this restore holds the lock, so no live restore owns them).
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
            .map_err(|e| self.context.connector.error("listing databases", e))?;
        Ok(found.is_some())
    }

    async fn drop_schema(&self, conn: &mut Conn, schema: &str) -> Result<()> {
        drop_schema(self.context.connector, conn, schema).await
    }

    /// The staging schema, with the database's character set and collation, and its tables;
    /// returns the keys of the tables whose plain secondary keys are built after the load.
    async fn create_staging(&self, conn: &mut Conn, staging: &str) -> Result<HashMap<String, DeferredKeys>> {
        let create = self.database_statement(staging).await?;
        self.execute(conn, &create, "creating the staging schema").await?;
        self.execute(conn, &format!("USE {}", quote_ident(staging)), "selecting a database").await?;
        // Before the tables, whose defaults may name them.
        if let Some(file) = &self.database.sequences {
            for statement in file_statements(self.context.storage, file).await? {
                self.execute(conn, &statement, &format!("running {}", file.path)).await?;
            }
        }
        let mut files = Vec::with_capacity(self.database.tables.len());
        for table in &self.database.tables {
            files.push(file_statements(self.context.storage, &table.schema).await?);
        }
        let creates: Vec<&str> = files.iter().map(|statements| create_table_of(statements)).collect();
        let referenced = indexes::referenced_tables(creates.iter().copied());
        let mut deferred = HashMap::new();
        for (index, (table, statements)) in self.database.tables.iter().zip(&files).enumerate() {
            let keys = (table.data_bytes >= self.context.options.indexes_after_load_from_bytes)
                .then(|| indexes::split_plain_keys(&table.name, creates[index], &referenced))
                .flatten();
            let during = format!("running {}", table.schema.path);
            for statement in statements {
                let statement = match &keys {
                    Some(keys) if statement == creates[index] => &keys.create_without_keys,
                    _ => statement,
                };
                let statement = sequences_moved_to(statement, &self.database.name, staging);
                self.execute(conn, &statement, &during).await?;
            }
            if let Some(keys) = keys {
                deferred.insert(table.name.clone(), keys);
            }
        }
        Ok(deferred)
    }

    /// `database.sql`'s statement, for `schema` instead of the database.
    async fn database_statement(&self, schema: &str) -> Result<String> {
        let file = &self.database.schema;
        let statements = file_statements(self.context.storage, file).await?;
        let prefix = format!("CREATE DATABASE IF NOT EXISTS {}", quote_ident(&self.database.name));
        let statement = statements.iter().find(|s| s.starts_with(&prefix)).ok_or_else(|| AgentError::BadChunk {
            file: file.path.clone(),
            reason: format!("it does not hold `{prefix}`"),
        })?;
        Ok(format!("CREATE DATABASE {}{}", quote_ident(schema), &statement[prefix.len()..]))
    }

    /// Every staged table holds what the backup says (`--from-stage`: the copy may have changed
    /// since it was staged).
    async fn check_staged(&self, conn: &mut Conn, staging: &str) -> Result<()> {
        for table in &self.database.tables {
            check_staged_table(
                self.context.connector,
                conn,
                &self.database.name,
                staging,
                table,
                self.context.checksums_comparable,
            )
            .await?;
        }
        Ok(())
    }

    /// Creates the routines and triggers in the staging schema first, so that one the server
    /// refuses (a definer the user may not name, say) fails the restore before the swap. The
    /// triggers are dropped again: a table with triggers cannot move to another schema.
    /// Events are rehearsed disabled: one would otherwise run against the staged tables.
    async fn rehearse_objects(&self, conn: &mut Conn, staging: &str) -> Result<()> {
        let name = &self.database.name;
        let files = [&self.database.routines, &self.database.triggers, &self.database.events];
        for file in files.into_iter().flatten() {
            let mut session = self.session().await?;
            self.execute(&mut session, &format!("USE {}", quote_ident(staging)), "selecting a database").await?;
            for statement in file_statements(self.context.storage, file).await? {
                let statement = trigger_moved_to(&statement, name, staging);
                let statement = event_with_status(&statement, EventStatus::Disabled);
                self.execute(&mut session, &statement, &format!("rehearsing {}", file.path)).await?;
            }
            let _ = session.disconnect().await;
        }
        for trigger in catalog::trigger_names(self.context.connector, conn, staging).await? {
            let sql = format!("DROP TRIGGER {}.{}", quote_ident(staging), quote_ident(&trigger));
            self.execute(conn, &sql, "dropping a rehearsed trigger").await?;
        }
        for event in catalog::event_names(self.context.connector, conn, staging).await? {
            let sql = format!("DROP EVENT {}.{}", quote_ident(staging), quote_ident(&event));
            self.execute(conn, &sql, "dropping a rehearsed event").await?;
        }
        Ok(())
    }

    /// What the database holds now, when the restore is to replace it.
    async fn existing(&self, conn: &mut Conn) -> Result<Existing> {
        let name = &self.database.name;
        let database = self.schema_exists(conn, name).await?;
        if !database || !self.context.options.drop_existing {
            return Ok(Existing { database, ..Default::default() });
        }
        let objects = catalog::existing_objects(self.context.connector, conn, name).await?;
        let (views, tables): (Vec<_>, Vec<_>) = objects.into_iter().partition(|(_, kind)| kind == "VIEW");
        let routines = catalog::routine_kinds_and_names(self.context.connector, conn, name).await?;
        Ok(Existing {
            database,
            tables: tables.into_iter().map(|(table, _)| table).collect(),
            views: views.into_iter().map(|(view, _)| view).collect(),
            routines,
            triggers: catalog::trigger_names(self.context.connector, conn, name).await?,
            trigger_statements: catalog::triggers(self.context.connector, conn, name).await?.statements,
            events: catalog::event_names(self.context.connector, conn, name).await?,
        })
    }

    fn tables_to_swap(&self) -> Vec<String> {
        match &self.swap_tables {
            Some(tables) => tables.clone(),
            None => self.database.tables.iter().map(|t| t.name.clone()).collect(),
        }
    }

    /// One `RENAME TABLE` for the whole database: the staged tables in, what it held out.
    async fn swap(&self, conn: &mut Conn, staging: &str, existing: &Existing) -> Result<()> {
        let name = &self.database.name;
        let target = quote_ident(name);
        let replaced = quote_ident(&replaced_schema_name(name));
        let mut renames: Vec<String> =
            existing.tables.iter().map(|t| format!("{target}.{q} TO {replaced}.{q}", q = quote_ident(t))).collect();
        let sequences = catalog::table_names(self.context.connector, conn, staging, "SEQUENCE").await?;
        renames.extend(
            self.tables_to_swap()
                .iter()
                .chain(&sequences)
                .map(|t| format!("{}.{q} TO {target}.{q}", quote_ident(staging), q = quote_ident(t))),
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
        if existing.database && self.context.options.drop_existing {
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
            for event in &existing.events {
                let sql = format!("DROP EVENT IF EXISTS {target}.{}", quote_ident(event));
                self.execute(conn, &sql, "dropping a scheduled event").await?;
            }
        }
        self.point_defaults_at_swapped_sequences(conn).await?;
        self.create_views().await?;
        for file in [&self.database.routines, &self.database.triggers].into_iter().flatten() {
            let mut session = self.session().await?;
            run_file(self.context.connector, &mut session, self.context.storage, name, file).await?;
            let _ = session.disconnect().await;
        }
        self.create_events().await?;
        self.drop_schema(conn, &replaced_schema_name(name)).await
    }

    /// A default taken from a sequence of the database names it by its database; the staged
    /// table was created naming the staged sequence, so once both are swapped in the default
    /// names the database again (an instant change of the table's definition).
    async fn point_defaults_at_swapped_sequences(&self, conn: &mut Conn) -> Result<()> {
        let name = &self.database.name;
        let staging = staging_schema_name(name);
        let defaults: Vec<(String, String, String)> = conn
            .exec(
                "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_DEFAULT FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = ? AND COLUMN_DEFAULT LIKE ?",
                (name, format!("%{staging}%")),
            )
            .await
            .map_err(|e| self.context.connector.error("reading the defaults of the swapped tables", e))?;
        for (table, column, default) in defaults {
            let sql = format!(
                "ALTER TABLE {}.{} ALTER COLUMN {} SET DEFAULT {}",
                quote_ident(name),
                quote_ident(&table),
                quote_ident(&column),
                sequences_moved_to(&default, &staging, name)
            );
            self.execute(conn, &sql, "pointing a default at its restored sequence").await?;
        }
        Ok(())
    }

    /// The scheduled events, enabled or not as the restore asks.
    async fn create_events(&self) -> Result<()> {
        let Some(file) = &self.database.events else { return Ok(()) };
        let mut session = self.session().await?;
        self.execute(&mut session, &format!("USE {}", quote_ident(&self.database.name)), "selecting a database")
            .await?;
        for statement in file_statements(self.context.storage, file).await? {
            let statement = event_with_status(&statement, self.context.options.events);
            self.execute(&mut session, &statement, &format!("running {}", file.path)).await?;
        }
        let _ = session.disconnect().await;
        Ok(())
    }

    /// Views can depend on each other: each one is retried until none is left or a round
    /// makes no progress.
    async fn create_views(&self) -> Result<()> {
        let Some(file) = &self.database.views else { return Ok(()) };
        let mut pending = group_objects(file_statements(self.context.storage, file).await?);
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

/// Drops the staged copies of `databases`, made by a `--stage-only` before another of its
/// databases failed, so that a failed `--stage-only` leaves no staged copy behind. A copy is
/// dropped only under its database's restore lock: one a restore started since then holds is
/// its own.
pub(super) async fn drop_staged_copies(connector: &Connector, databases: &[String]) {
    for name in databases {
        let schema = staging_schema_name(name);
        if let Err(error) = drop_staged_copy(connector, name, &schema).await {
            tracing::warn!(
                "could not drop the staged copy {schema} of database {name}: {error}; the next restore of it does"
            );
        }
    }
}

/// Takes the restore lock of `database` for as long as `conn` lives; `false` if another
/// connection holds it.
async fn take_restore_lock(connector: &Connector, conn: &mut Conn, database: &str) -> Result<bool> {
    let held: Option<Option<i64>> = conn
        .exec_first("SELECT GET_LOCK(?, 0)", (lock_name(database),))
        .await
        .map_err(|e| connector.error("taking the restore lock", e))?;
    Ok(held.flatten() == Some(1))
}

async fn drop_schema(connector: &Connector, conn: &mut Conn, schema: &str) -> Result<()> {
    let sql = format!("DROP DATABASE IF EXISTS {}", quote_ident(schema));
    connector.execute(conn, &sql, "dropping a staging schema").await
}

async fn drop_staged_copy(connector: &Connector, name: &str, schema: &str) -> Result<()> {
    let mut conn = connector.connect().await?;
    if take_restore_lock(connector, &mut conn, name).await? {
        drop_schema(connector, &mut conn, schema).await?;
        tracing::info!("dropped the staged copy {schema} of database {name}: the run failed");
    } else {
        tracing::warn!("left the staged copy {schema} of database {name}: another restore of it is running");
    }
    let _ = conn.disconnect().await;
    Ok(())
}

/// The `CREATE TABLE` statement of a table's schema file (its other statements set the session).
fn create_table_of(statements: &[String]) -> &str {
    statements.iter().find(|s| s.starts_with("CREATE TABLE")).map(String::as_str).unwrap_or_default()
}

/// `statement` with every sequence of `database` it takes values from (`nextval(`db`.`s`)`,
/// `lastval(...)`, as the server prints a default) named in `schema` instead.
fn sequences_moved_to(statement: &str, database: &str, schema: &str) -> String {
    let mut moved = statement.to_string();
    for function in ["nextval(", "lastval("] {
        let from = format!("{function}{}.", quote_ident(database));
        moved = moved.replace(&from, &format!("{function}{}.", quote_ident(schema)));
    }
    moved
}

/// `statement` with the status of a `CREATE EVENT` (`ENABLE`, `DISABLE`, `DISABLE ON SLAVE`,
/// which `SHOW CREATE EVENT` prints right after `ON COMPLETION [NOT] PRESERVE`) set to `status`
/// (any other statement as it is).
pub(super) fn event_with_status(statement: &str, status: EventStatus) -> String {
    let Some(clause) = status.clause() else { return statement.to_string() };
    let tokens = header_tokens(statement, "DO");
    let is_event = tokens.first().is_some_and(|t| t.is_word("CREATE")) && tokens.iter().any(|t| t.is_word("EVENT"));
    let Some(preserve) = tokens.iter().position(|t| t.is_word("PRESERVE")).filter(|_| is_event) else {
        return statement.to_string();
    };
    let rest = &tokens[preserve + 1..];
    let status_words = match rest {
        [enable, ..] if enable.is_word("ENABLE") => 1,
        [disable, on, slave, ..] if disable.is_word("DISABLE") && on.is_word("ON") && slave.is_word("SLAVE") => 3,
        [disable, ..] if disable.is_word("DISABLE") => 1,
        _ => 0,
    };
    let mut changed = statement.to_string();
    match status_words {
        0 => changed.insert_str(tokens[preserve].end, &format!(" {clause}")),
        words => changed.replace_range(rest[0].start..rest[words - 1].end, clause),
    }
    changed
}

/// `statement` with the database of a `CREATE TRIGGER`'s name and table changed from
/// `database` to `schema` (any other statement as it is). The server keeps a trigger's text as
/// it was written, so a trigger created as `db.t_ins ... ON db.t` names its database: rehearsed
/// as it is, it would be created in the target database instead of the staging schema (and
/// collide with the target's trigger of that name).
fn trigger_moved_to(statement: &str, database: &str, schema: &str) -> String {
    let tokens = header_tokens(statement, "FOR");
    let Some(trigger) = tokens.iter().position(|t| t.is_word("TRIGGER")) else { return statement.to_string() };
    if !tokens.first().is_some_and(|t| t.is_word("CREATE")) {
        return statement.to_string();
    }
    let mut name = trigger + 1;
    if tokens.get(name).is_some_and(|t| t.is_word("IF")) {
        name += 3; // IF NOT EXISTS
    }
    let mut qualifiers: Vec<&Token> = qualifier_at(&tokens, name, database).into_iter().collect();
    if let Some(on) = tokens.iter().skip(name).position(|t| t.is_word("ON")) {
        qualifiers.extend(qualifier_at(&tokens, name + on + 1, database));
    }
    let mut moved = statement.to_string();
    for qualifier in qualifiers.into_iter().rev() {
        moved.replace_range(qualifier.start..qualifier.end, &quote_ident(schema));
    }
    moved
}

/// The token at `at` when it is the database part, `database`, of a qualified name.
fn qualifier_at<'a, 's>(tokens: &'a [Token<'s>], at: usize, database: &str) -> Option<&'a Token<'s>> {
    let (qualifier, dot, name) = (tokens.get(at)?, tokens.get(at + 1)?, tokens.get(at + 2)?);
    let qualified = dot.text == "." && name.identifier().is_some();
    (qualified && qualifier.identifier().as_deref() == Some(database)).then_some(qualifier)
}

/// A piece of a statement's text, with its byte range.
struct Token<'a> {
    text: &'a str,
    start: usize,
    end: usize,
}

impl Token<'_> {
    fn is_word(&self, word: &str) -> bool {
        self.text.eq_ignore_ascii_case(word)
    }

    /// The name a bare or backquoted identifier stands for.
    fn identifier(&self) -> Option<String> {
        if let Some(quoted) = self.text.strip_prefix('`').and_then(|t| t.strip_suffix('`')) {
            return Some(quoted.replace("``", "`"));
        }
        let bare = !self.text.is_empty() && self.text.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '$');
        bare.then(|| self.text.to_string())
    }
}

/// The tokens of a statement up to the word `stop` (`FOR EACH ROW` ends a trigger's header,
/// `DO` an event's): words, backquoted names, quoted strings, and single characters.
fn header_tokens<'s>(statement: &'s str, stop: &str) -> Vec<Token<'s>> {
    let bytes = statement.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if matches!(c, b'`' | b'\'' | b'"') {
            i += 1;
            while i < bytes.len() {
                if bytes[i] == c && bytes.get(i + 1) == Some(&c) {
                    i += 2;
                } else if bytes[i] == c {
                    i += 1;
                    break;
                } else {
                    i += 1;
                }
            }
        } else if c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80 {
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric() || matches!(bytes[i], b'_' | b'$') || bytes[i] >= 0x80)
            {
                i += 1;
            }
        } else {
            i += 1;
        }
        let token = Token { text: &statement[start..i], start, end: i };
        if token.is_word(stop) {
            break;
        }
        tokens.push(token);
    }
    tokens
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
    fn a_trigger_naming_its_database_is_rehearsed_in_the_staging_schema() {
        let moved = |statement: &str| trigger_moved_to(statement, "app", "visitors_restore_1");
        assert_eq!(
            moved(
                "CREATE DEFINER=`root`@`localhost` TRIGGER app.a_logged AFTER INSERT ON app.a FOR EACH ROW INSERT INTO app.log VALUES (1)"
            ),
            "CREATE DEFINER=`root`@`localhost` TRIGGER `visitors_restore_1`.a_logged AFTER INSERT ON `visitors_restore_1`.a FOR EACH ROW INSERT INTO app.log VALUES (1)"
        );
        assert_eq!(
            moved(
                "create definer='u'@'%' trigger if not exists `app`.`t``x` before update on `app`.`t y` for each row set @a = 1"
            ),
            "create definer='u'@'%' trigger if not exists `visitors_restore_1`.`t``x` before update on `visitors_restore_1`.`t y` for each row set @a = 1"
        );
        let unqualified = "CREATE TRIGGER a_logged AFTER INSERT ON a FOR EACH ROW INSERT INTO app.log VALUES (1)";
        assert_eq!(moved(unqualified), unqualified, "an unqualified trigger goes where USE says");
        let other = "CREATE TRIGGER other.x AFTER INSERT ON other.a FOR EACH ROW SET @a = 1";
        assert_eq!(moved(other), other, "only the restored database's name is moved");
        let set = "SET SESSION sql_mode = 'STRICT_TRANS_TABLES'";
        assert_eq!(moved(set), set);
        let function = "CREATE DEFINER=`root`@`localhost` FUNCTION `twice`(x INT) RETURNS int(11) RETURN 2 * x";
        assert_eq!(moved(function), function);
        let non_ascii = "CREATE TRIGGER `hård`.`tr` AFTER INSERT ON `hård`.`t` FOR EACH ROW SET @a = 1";
        assert_eq!(
            trigger_moved_to(non_ascii, "hård", "s"),
            "CREATE TRIGGER `s`.`tr` AFTER INSERT ON `s`.`t` FOR EACH ROW SET @a = 1"
        );
    }

    #[test]
    fn an_event_is_recreated_with_the_status_asked_for() {
        let event = |status: &str| {
            format!(
                "CREATE DEFINER=`root`@`localhost` EVENT `PRESERVE ENABLE` ON SCHEDULE EVERY 1 HOUR STARTS \
                 '2026-11-27 22:13:37' ON COMPLETION NOT PRESERVE {status} COMMENT 'DISABLE' DO insert into t values ('ENABLE')"
            )
        };
        let cases = [
            ("ENABLE", EventStatus::Disabled, "DISABLE"),
            ("ENABLE", EventStatus::DisabledOnReplica, "DISABLE ON SLAVE"),
            ("DISABLE ON SLAVE", EventStatus::Disabled, "DISABLE"),
            ("DISABLE", EventStatus::DisabledOnReplica, "DISABLE ON SLAVE"),
            ("ENABLE", EventStatus::AsBackedUp, "ENABLE"),
            ("DISABLE ON SLAVE", EventStatus::AsBackedUp, "DISABLE ON SLAVE"),
        ];
        for (backed_up, status, expected) in cases {
            assert_eq!(event_with_status(&event(backed_up), status), event(expected), "{backed_up} as {status:?}");
        }
        let preserved = "CREATE EVENT e ON SCHEDULE AT '2030-01-01 00:00:00' ON COMPLETION PRESERVE DO SET @a = 1";
        assert_eq!(
            event_with_status(preserved, EventStatus::Disabled),
            "CREATE EVENT e ON SCHEDULE AT '2030-01-01 00:00:00' ON COMPLETION PRESERVE DISABLE DO SET @a = 1"
        );
        let routine = "CREATE PROCEDURE p() SELECT 'ON COMPLETION PRESERVE ENABLE'";
        assert_eq!(event_with_status(routine, EventStatus::Disabled), routine);
    }

    #[test]
    fn a_staged_table_takes_its_defaults_from_the_staged_sequences() {
        let create = "CREATE TABLE `t` (\n  `id` int(11) NOT NULL DEFAULT nextval(`app`.`s`),\n  `o` int DEFAULT nextval(`other`.`s`),\n  `p` int DEFAULT lastval(`app`.`s``x`)\n)";
        assert_eq!(
            sequences_moved_to(create, "app", "visitors_restore_1"),
            "CREATE TABLE `t` (\n  `id` int(11) NOT NULL DEFAULT nextval(`visitors_restore_1`.`s`),\n  `o` int DEFAULT nextval(`other`.`s`),\n  `p` int DEFAULT lastval(`visitors_restore_1`.`s``x`)\n)"
        );
        assert_eq!(
            sequences_moved_to("nextval(`visitors_restore_1`.`s`)", "visitors_restore_1", "app"),
            "nextval(`app`.`s`)"
        );
    }

    #[test]
    fn free_space_is_that_of_the_disk_holding_the_path() {
        let disks = vec![("/".to_string(), 100), ("/var/lib/mysql".to_string(), 7), ("/var".to_string(), 50)];
        assert_eq!(free_kib_at("/var/lib/mysql/", &disks), Some(7));
        assert_eq!(free_kib_at("/srv/data/", &disks), Some(100));
        assert_eq!(free_kib_at("relative", &disks), None);
    }
}
