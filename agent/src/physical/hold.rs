//! A replica held at one position for the tool's whole stream, so that the backup can also
//! record what every table holds at the snapshot: the rows and content digest a drill of the
//! run compares its restored copy with, as a logical run's drill does.
//!
//! The hold is a global read lock (`FLUSH TABLES WITH READ LOCK`) taken before the tool starts
//! and released once its stream has ended: the replica's applier waits meanwhile (it lags by
//! the stream's duration, then catches up) and stays running, so the replication manager sees
//! a replica that is behind, not one to repair. `mariadb-backup`'s own backup stages go through
//! the lock. Under it, a few sessions each open a consistent snapshot, which then all hold the
//! state the tool copies; the tables are read from them while the stream goes on, and after.
//! A primary is never held: its writers would wait. Its runs record no content.
//!
//! A hold never stands in the way of the replica's own management: while it holds, a watch
//! looks every half second, and lets go at once (by ending the lock's session) when the
//! replica stops receiving from its primary (a failover may be coming, and would promote this
//! replica) or when another session waits for a lock or changes replication (`STOP SLAVE`,
//! `CHANGE MASTER`, `SET GLOBAL`: a failover or a switchover acting on it). The backup then
//! goes on unheld and records no content.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use crate::content::{read_table_content, reading_session};
use crate::error::Result;
use crate::format::TableContent;
use crate::mysql::Connector;
use crate::mysql::catalog;
use crate::mysql::wire::DataConn;

/// How long the lock may wait for statements running on the replica; past it the backup goes
/// on unheld, and records no content.
const LOCK_WAIT_SECONDS: u32 = 60;

/// How often the watch looks for someone who wants the replica.
const WATCH_EVERY: Duration = Duration::from_millis(500);

/// The replica, held; [`Hold::release`] lets its applier go on.
pub struct Hold {
    lock: Conn,
    /// The server's GTID position under the lock (MariaDB's `gtid_binlog_pos`, MySQL's
    /// `gtid_executed`), which the tool's must equal.
    pub position: Option<String>,
    watch: Option<tokio::task::JoinHandle<()>>,
    let_go: Arc<AtomicBool>,
}

/// Reads every table of the snapshots opened under the lock, while the tool streams.
pub type ContentRead = tokio::task::JoinHandle<Result<Vec<TableContent>>>;

/// Holds the server if it is a replica, and starts reading its tables in `sessions` snapshots
/// opened under the lock; `None` for a primary, or when the lock could not be had in time (the
/// backup is then taken unheld, as from a primary).
pub async fn hold_replica(
    connector: &Connector,
    mariadb: bool,
    sessions: usize,
) -> Result<Option<(Hold, ContentRead)>> {
    let mut lock = connector.connect().await?;
    let status_sql = if mariadb { "SHOW SLAVE STATUS" } else { "SHOW REPLICA STATUS" };
    let replication: Vec<mysql_async::Row> =
        lock.query(status_sql).await.map_err(|e| connector.error("reading the replica's status", e))?;
    if replication.is_empty() {
        let _ = lock.disconnect().await;
        return Ok(None);
    }
    let locked = lock
        .query_drop(format!("SET SESSION lock_wait_timeout = {LOCK_WAIT_SECONDS}; FLUSH TABLES WITH READ LOCK"))
        .await;
    if let Err(error) = locked {
        tracing::warn!(
            "the replica could not be held within {LOCK_WAIT_SECONDS}s ({error}): the physical backup is taken \
             without the content of its tables, and its drills check tables and position only"
        );
        let _ = lock.disconnect().await;
        return Ok(None);
    }
    let mut hold = Hold { lock, position: None, watch: None, let_go: Arc::default() };
    match hold.open_snapshots(connector, mariadb, sessions).await {
        Ok((tables, snapshots)) => {
            hold.watch = Some(hold.start_watch(connector, mariadb).await?);
            tracing::info!(
                "replica held at {} for the backup tool's stream; reading its {} tables in {} snapshots",
                hold.position.as_deref().unwrap_or("(no GTID position)"),
                tables.len(),
                snapshots.len()
            );
            let connector = connector.clone();
            let read = tokio::spawn(async move { read_content(&connector, tables, snapshots).await });
            Ok(Some((hold, read)))
        }
        Err(error) => {
            hold.release(connector).await;
            Err(error)
        }
    }
}

impl Hold {
    /// The position, the tables and the snapshot sessions, all under the lock.
    async fn open_snapshots(
        &mut self,
        connector: &Connector,
        mariadb: bool,
        sessions: usize,
    ) -> Result<(Vec<Table>, Vec<DataConn>)> {
        let position_sql = if mariadb { "SELECT @@GLOBAL.gtid_binlog_pos" } else { "SELECT @@GLOBAL.gtid_executed" };
        let position: Option<String> = self
            .lock
            .query_first(position_sql)
            .await
            .map_err(|e| connector.error("reading the held replica's position", e))?;
        self.position = position.filter(|p| !p.trim().is_empty());
        let tables = catalog::all_tables(connector, &mut self.lock).await?;
        let mut snapshots = Vec::with_capacity(sessions);
        for _ in 0..sessions.max(1) {
            let mut conn = reading_session(connector).await?;
            let snapshot = "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY";
            connector.execute_data(&mut conn, snapshot, "opening a snapshot of the held replica").await?;
            snapshots.push(conn);
        }
        Ok((tables, snapshots))
    }

    /// Watches, on a session of its own, for someone who wants the replica; ends the lock's
    /// session when someone does.
    async fn start_watch(&mut self, connector: &Connector, mariadb: bool) -> Result<tokio::task::JoinHandle<()>> {
        let lock_id = self.lock.id();
        let mut watcher = connector.connect().await?;
        let (connector, let_go) = (connector.clone(), self.let_go.clone());
        Ok(tokio::spawn(async move {
            loop {
                tokio::time::sleep(WATCH_EVERY).await;
                let Some(why) = wanted(&mut watcher, mariadb, lock_id).await else { continue };
                let_go.store(true, Ordering::SeqCst);
                tracing::warn!("letting go of the replica: {why}; the run records no content of its tables");
                if let Err(error) = watcher.query_drop(format!("KILL {lock_id}")).await {
                    tracing::warn!("{}", connector.error("ending the replica's hold", error));
                }
                let _ = watcher.disconnect().await;
                return;
            }
        }))
    }

    /// Whether the hold let go of the replica before the tool's stream ended.
    pub fn let_go_early(&self) -> bool {
        self.let_go.load(Ordering::SeqCst)
    }

    /// Lets the replica's applier go on; whether it was held to the end.
    pub async fn release(mut self, connector: &Connector) -> bool {
        if let Some(watch) = self.watch.take() {
            watch.abort();
            let _ = watch.await;
        }
        let held = !self.let_go_early();
        let mut lock = self.lock;
        if held && let Err(error) = lock.query_drop("UNLOCK TABLES").await {
            tracing::warn!("{}", connector.error("releasing the replica", error));
        }
        let _ = lock.disconnect().await;
        tracing::info!("replica released");
        held
    }
}

/// Every table's rows and content digest in the snapshots, each session reading its share of
/// the tables (the largest first, each to the least loaded session).
async fn read_content(connector: &Connector, tables: Vec<Table>, sessions: Vec<DataConn>) -> Result<Vec<TableContent>> {
    let shares = shares(tables, sessions.len());
    let reads = sessions.into_iter().zip(shares).map(|(conn, share)| read_share(connector, conn, share));
    let read: Result<Vec<Vec<TableContent>>> = futures::future::join_all(reads).await.into_iter().collect();
    let mut content: Vec<TableContent> = read?.into_iter().flatten().collect();
    content.sort_by(|a, b| (&a.database, &a.table).cmp(&(&b.database, &b.table)));
    Ok(content)
}

/// Why someone wants the replica, if someone does: it no longer receives from its primary,
/// or a session other than the lock's waits for a lock or acts on replication. A watch that
/// cannot read the server says so too: the hold is let go rather than kept blind.
async fn wanted(watcher: &mut Conn, mariadb: bool, lock_id: u32) -> Option<String> {
    let status_sql = if mariadb { "SHOW SLAVE STATUS" } else { "SHOW REPLICA STATUS" };
    let receiving_column = if mariadb { "Slave_IO_Running" } else { "Replica_IO_Running" };
    let status: Vec<mysql_async::Row> = match watcher.query(status_sql).await {
        Ok(status) => status,
        Err(error) => return Some(format!("the replica's status cannot be read ({error})")),
    };
    let receiving = status.first().and_then(|row| row.get_opt::<String, _>(receiving_column)).and_then(|r| r.ok());
    if receiving.as_deref() != Some("Yes") {
        return Some(format!(
            "it no longer receives from its primary ({receiving_column}: {})",
            receiving.unwrap_or_default()
        ));
    }
    let waiting: std::result::Result<Option<(u64, String)>, _> = watcher
        .exec_first(
            "SELECT ID, LEFT(COALESCE(INFO, STATE), 80) FROM information_schema.PROCESSLIST \
             WHERE ID NOT IN (?, CONNECTION_ID()) AND USER <> 'system user' AND COMMAND <> 'Daemon' \
             AND (STATE LIKE '%lock%' OR INFO REGEXP '^[[:space:]]*(STOP|START|CHANGE|RESET|SET[[:space:]]+GLOBAL)')",
            (lock_id,),
        )
        .await;
    match waiting {
        Ok(Some((id, what))) => Some(format!("session {id} wants it ({what})")),
        Ok(None) => None,
        Err(error) => Some(format!("the replica's sessions cannot be read ({error})")),
    }
}

type Table = (String, catalog::TableInfo);

/// The tables split over `sessions`: the largest first, each to the least loaded.
fn shares(mut tables: Vec<Table>, sessions: usize) -> Vec<Vec<Table>> {
    tables.sort_by_key(|(_, info)| std::cmp::Reverse(info.data_length));
    let mut shares: Vec<(u64, Vec<Table>)> = (0..sessions.max(1)).map(|_| (0, Vec::new())).collect();
    for table in tables {
        let lightest = shares.iter_mut().min_by_key(|(load, _)| *load).expect("one share at least");
        lightest.0 += table.1.data_length.max(1);
        lightest.1.push(table);
    }
    shares.into_iter().map(|(_, share)| share).collect()
}

async fn read_share(connector: &Connector, mut conn: DataConn, share: Vec<Table>) -> Result<Vec<TableContent>> {
    let mut content = Vec::with_capacity(share.len());
    for (database, info) in share {
        match read_table_content(connector, &mut conn, &database, &info).await {
            Ok((rows, digest)) => content.push(TableContent {
                database,
                table: info.name.clone(),
                columns: info.columns.clone(),
                rows,
                content_digest: digest.to_text(),
            }),
            Err(error) => {
                conn.disconnect().await;
                return Err(error);
            }
        }
    }
    conn.disconnect().await;
    Ok(content)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(name: &str, data_length: u64) -> Table {
        let info = catalog::TableInfo {
            name: name.into(),
            data_length,
            columns: Vec::new(),
            column_types: Vec::new(),
            column_definitions: Vec::new(),
            integer_key: None,
            history: false,
        };
        ("db".into(), info)
    }

    #[test]
    fn tables_are_shared_largest_first_to_the_least_loaded_session() {
        let names = |shares: Vec<Vec<Table>>| -> Vec<Vec<String>> {
            shares.into_iter().map(|s| s.into_iter().map(|(_, t)| t.name).collect()).collect()
        };
        let tables = || vec![table("a", 10), table("b", 70), table("c", 30), table("d", 30), table("e", 0)];
        assert_eq!(names(shares(tables(), 2)), [vec!["b", "e"], vec!["c", "d", "a"]]);
        assert_eq!(names(shares(tables(), 1)), [vec!["b", "c", "d", "a", "e"]]);
        assert_eq!(names(shares(tables(), 0)), [vec!["b", "c", "d", "a", "e"]]);
        assert_eq!(names(shares(Vec::new(), 3)), [Vec::<String>::new(), Vec::new(), Vec::new()]);
    }
}
