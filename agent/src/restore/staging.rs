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
    DatabaseRestore, ObjectStatements, STAGED_MARKER, check_staged_table, has_replayed_marker, lock_name,
    replaced_schema_name, staging_schema_name,
};
use super::indexes::{self, DeferredKeys};
use super::statements::{EventStatuses, event_with_clause, event_with_status, sequences_moved_to, trigger_moved_to};
use super::{EventStatus, RestoreStep, file_statements, load, session_setup};
use crate::binlog::replay::requalify;
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
        let objects = match &self.objects {
            Some(objects) => objects.clone(),
            None => self.backed_up_objects().await?,
        };
        // Routines first: a view may call a function, and a routine's body is not checked
        // until it runs.
        self.run_in(name, objects.routines, "creating routines").await?;
        self.create_views(name, objects.views).await?;
        self.run_in(name, objects.triggers, "creating triggers").await?;
        let events = objects.events.iter().map(|statement| event_with_status(statement, self.context.options.events));
        self.run_in(name, events.collect(), "creating scheduled events").await?;
        self.drop_schema(conn, &replaced_schema_name(name)).await
    }

    /// The backup's views, routines, triggers and events.
    async fn backed_up_objects(&self) -> Result<ObjectStatements> {
        let database = self.database;
        Ok(ObjectStatements {
            views: group_objects(self.statements_of(&database.views).await?),
            routines: self.statements_of(&database.routines).await?,
            triggers: self.statements_of(&database.triggers).await?,
            events: self.statements_of(&database.events).await?,
        }
        .in_original_charsets())
    }

    async fn statements_of(&self, file: &Option<crate::format::FileEntry>) -> Result<Vec<String>> {
        match file {
            Some(file) => file_statements(self.context.storage, file).await,
            None => Ok(Vec::new()),
        }
    }

    /// Runs `statements` in one session whose database is `schema`.
    async fn run_in(&self, schema: &str, statements: Vec<String>, during: &str) -> Result<()> {
        if statements.is_empty() {
            return Ok(());
        }
        let mut session = self.session().await?;
        self.execute(&mut session, &format!("USE {}", quote_ident(schema)), "selecting a database").await?;
        for statement in statements {
            self.execute(&mut session, &statement, during).await?;
        }
        let _ = session.disconnect().await;
        Ok(())
    }

    /// Before a replay: the backup's views, triggers and events created in the staging schema
    /// too (its routines are, from the rehearsal), so that the replay changes them as the
    /// server did, with every name of the database moved to the staging schema; the events
    /// disabled, their statuses noted in `statuses`.
    pub(super) async fn stage_objects_for_replay(&self, staging: &str, statuses: &mut EventStatuses) -> Result<()> {
        let name = &self.database.name;
        let objects = self.backed_up_objects().await?;
        let views = objects.views.iter().map(|view| moved_to(view, name, staging)).collect();
        self.create_views(staging, views).await?;
        self.run_in(staging, moved_to(&objects.triggers, name, staging), "staging triggers for the replay").await?;
        statuses.add_backed_up(staging, &objects.events);
        let events = moved_to(&objects.events, name, staging);
        let events = events.iter().map(|event| event_with_status(event, EventStatus::Disabled)).collect();
        self.run_in(staging, events, "staging events for the replay").await
    }

    /// After a replay: the views, routines, triggers and events of the staging schema, with
    /// every name of the staging schema moved back to the database and each event given the
    /// status `statuses` holds for it; the staged triggers are dropped (a table with triggers
    /// cannot move to another schema).
    pub(super) async fn replayed_objects(
        &self,
        conn: &mut Conn,
        staging: &str,
        statuses: &std::collections::BTreeMap<String, String>,
    ) -> Result<ObjectStatements> {
        let connector = self.context.connector;
        let name = &self.database.name;
        let views = catalog::views(connector, conn, staging).await?;
        let routines = catalog::routines(connector, conn, staging).await?;
        let triggers = catalog::triggers(connector, conn, staging).await?;
        let events = catalog::events(connector, conn, staging).await?;
        let events: Vec<String> = events
            .statements
            .iter()
            .map(|statement| {
                let status = super::statements::event_change(statement)
                    .and_then(|change| statuses.get(&change.name).cloned())
                    .unwrap_or_else(|| "DISABLE".into());
                event_with_clause(statement, &status)
            })
            .collect();
        let objects = ObjectStatements {
            views: views.iter().map(|(_, statements)| moved_to(statements, staging, name)).collect(),
            routines: moved_to(&routines.statements, staging, name),
            triggers: moved_to(&triggers.statements, staging, name),
            events: moved_to(&events, staging, name),
        }
        .in_original_charsets();
        for trigger in &triggers.names {
            let sql = format!("DROP TRIGGER {}.{}", quote_ident(staging), quote_ident(trigger));
            self.execute(conn, &sql, "dropping a replayed trigger before the swap").await?;
        }
        Ok(objects)
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

    /// Views can depend on each other: each one is retried until none is left or a round
    /// makes no progress.
    async fn create_views(&self, schema: &str, mut pending: Vec<Vec<String>>) -> Result<()> {
        while !pending.is_empty() {
            let mut failed = Vec::new();
            let mut last_error = None;
            let before = pending.len();
            for statements in pending {
                if let Err(error) = self.create_object(schema, &statements).await {
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

    async fn create_object(&self, schema: &str, statements: &[String]) -> Result<()> {
        let mut session = self.session().await?;
        let use_database = format!("USE {}", quote_ident(schema));
        self.execute(&mut session, &use_database, "selecting a database").await?;
        for statement in statements {
            self.execute(&mut session, statement, "creating a view").await?;
        }
        let _ = session.disconnect().await;
        Ok(())
    }
}

/// `statements` with every name qualified by `from` qualified by `to` instead.
fn moved_to(statements: &[String], from: &str, to: &str) -> Vec<String> {
    statements.iter().map(|statement| requalify(statement, from, to)).collect()
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
    fn free_space_is_that_of_the_disk_holding_the_path() {
        let disks = vec![("/".to_string(), 100), ("/var/lib/mysql".to_string(), 7), ("/var".to_string(), 50)];
        assert_eq!(free_kib_at("/var/lib/mysql/", &disks), Some(7));
        assert_eq!(free_kib_at("/srv/data/", &disks), Some(100));
        assert_eq!(free_kib_at("relative", &disks), None);
    }
}
