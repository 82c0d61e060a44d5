//! One point in time for all backup workers: commits are blocked for the moment it takes every
//! worker to open `START TRANSACTION WITH CONSISTENT SNAPSHOT` and to read the binary log
//! position, then released. On MariaDB the block is `BACKUP STAGE BLOCK_COMMIT`, which waits
//! only for commits in flight (not for long queries, as `FLUSH TABLES WITH READ LOCK` does);
//! elsewhere, or without the privilege for it, `FLUSH TABLES WITH READ LOCK`.
//!
//! Before the catalog is read, DDL is blocked ([`block_ddl`]: `BACKUP STAGE BLOCK_DDL` on
//! MariaDB, `LOCK INSTANCE FOR BACKUP` on MySQL 8) until the snapshot is open, so no table can
//! be created, altered or dropped between the catalog the backup describes and the rows it reads.

use futures::future::try_join_all;
use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use visitors_agent_contract::archive::ServerIdentity;

use super::Connector;
use super::wire::DataConn;
use crate::error::{AgentError, Result};
use crate::format::Position;

pub struct Snapshot {
    /// Data sessions inside the snapshot, each with an open read-only transaction.
    pub workers: Vec<DataConn>,
    /// How commits were blocked, for the manifest.
    pub method: &'static str,
    pub position: Option<Position>,
}

/// The server's "Lock wait timeout exceeded".
const LOCK_WAIT_TIMEOUT: u16 = 1205;

/// Data sessions return column values as stored, with no character set conversion, and
/// tolerate a slow storage upload stalling the reading of rows for up to an hour.
const WORKER_SETUP: [&str; 3] = [
    "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
    "SET NAMES binary",
    "SET SESSION net_write_timeout = 3600",
];

/// How DDL is kept out from the catalog read to the snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DdlBlock {
    /// MariaDB: `BACKUP STAGE START` + `BACKUP STAGE BLOCK_DDL`.
    BackupStage,
    /// MySQL 8: `LOCK INSTANCE FOR BACKUP`.
    LockInstance,
    /// Not available (no privilege, older server): DDL during the backup is not supported.
    None,
}

/// Blocks DDL on the server for as long as `coordinator`'s session holds the block (released
/// by [`open`] once the snapshot is open, or when the connection ends).
pub async fn block_ddl(coordinator: &mut Conn, mariadb: bool) -> DdlBlock {
    if mariadb {
        let staged = async {
            coordinator.query_drop("BACKUP STAGE START").await?;
            coordinator.query_drop("BACKUP STAGE BLOCK_DDL").await
        }
        .await;
        match staged {
            Ok(()) => return DdlBlock::BackupStage,
            Err(error) => {
                tracing::warn!("BACKUP STAGE BLOCK_DDL unavailable ({error}); DDL during the backup is not blocked");
                let _ = coordinator.query_drop("BACKUP STAGE END").await;
            }
        }
        return DdlBlock::None;
    }
    match coordinator.query_drop("LOCK INSTANCE FOR BACKUP").await {
        Ok(()) => DdlBlock::LockInstance,
        Err(error) => {
            tracing::warn!("LOCK INSTANCE FOR BACKUP unavailable ({error}); DDL during the backup is not blocked");
            DdlBlock::None
        }
    }
}

pub async fn open(
    connector: &Connector,
    coordinator: &mut Conn,
    worker_count: usize,
    mariadb: bool,
    ddl: DdlBlock,
) -> Result<Snapshot> {
    let mut workers = try_join_all((0..worker_count).map(|_| open_worker(connector))).await?;
    let method = match ddl {
        DdlBlock::BackupStage => {
            let during = "blocking commits for a consistent snapshot";
            connector.execute(coordinator, "BACKUP STAGE BLOCK_COMMIT", during).await?;
            BACKUP_STAGE
        }
        DdlBlock::LockInstance | DdlBlock::None => {
            block_commits(connector, coordinator, mariadb && ddl == DdlBlock::None).await?
        }
    };
    let started = start_transactions(connector, &mut workers).await;
    let position = if started.is_ok() { read_position(coordinator, mariadb).await } else { None };
    let released = release(connector, coordinator, method).await;
    let unlocked = match ddl {
        DdlBlock::LockInstance => connector.execute(coordinator, "UNLOCK INSTANCE", "releasing the DDL block").await,
        _ => Ok(()),
    };
    started?;
    released?;
    unlocked?;
    Ok(Snapshot { workers, method, position })
}

const BACKUP_STAGE: &str = "backup-stage-block-commit";

async fn open_worker(connector: &Connector) -> Result<DataConn> {
    let mut conn = connector.connect_data().await?;
    for sql in WORKER_SETUP {
        connector.execute_data(&mut conn, sql, "preparing a worker session").await?;
    }
    Ok(conn)
}

async fn block_commits(connector: &Connector, coordinator: &mut Conn, mariadb: bool) -> Result<&'static str> {
    if mariadb {
        let staged = async {
            coordinator.query_drop("BACKUP STAGE START").await?;
            coordinator.query_drop("BACKUP STAGE BLOCK_COMMIT").await
        }
        .await;
        match staged {
            Ok(()) => return Ok(BACKUP_STAGE),
            Err(error) => {
                tracing::warn!("BACKUP STAGE unavailable ({error}); using FLUSH TABLES WITH READ LOCK");
                let _ = coordinator.query_drop("BACKUP STAGE END").await;
            }
        }
    }
    let during = "locking tables for a consistent snapshot";
    connector.execute(coordinator, "FLUSH TABLES WITH READ LOCK", during).await.map_err(|error| match error {
        AgentError::Server { code: LOCK_WAIT_TIMEOUT, message, .. } => AgentError::Server {
            during: format!(
                "{during} (waited lock_wait_timeout = 10 s: a long query, DDL or another backup holds a table \
                 lock; retry when it has ended)"
            ),
            code: LOCK_WAIT_TIMEOUT,
            message,
        },
        other => other,
    })?;
    Ok("flush-tables-with-read-lock")
}

async fn start_transactions(connector: &Connector, workers: &mut [DataConn]) -> Result<()> {
    try_join_all(workers.iter_mut().map(|conn| {
        connector.execute_data(conn, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY", "opening the snapshot")
    }))
    .await?;
    Ok(())
}

async fn release(connector: &Connector, coordinator: &mut Conn, method: &str) -> Result<()> {
    let sql = if method == BACKUP_STAGE { "BACKUP STAGE END" } else { "UNLOCK TABLES" };
    connector.execute(coordinator, sql, "releasing the snapshot lock").await
}

/// The binary log position while commits are blocked, and the server it is a position of;
/// `None` when the server does not log or the user may not see it.
///
/// On a MariaDB replica, `gtid_binlog_pos` holds exactly the snapshot's transactions: with
/// `log_slave_updates` every applied transaction is in the replica's own binary log, written in
/// the commit the block holds back. A MariaDB server without a binary log (a replica that does
/// not log) has its applied transactions in `gtid_current_pos`. MySQL's `gtid_executed` holds
/// them either way.
async fn read_position(coordinator: &mut Conn, mariadb: bool) -> Option<Position> {
    // MySQL 8.4 renamed SHOW MASTER STATUS.
    let mut status: Option<mysql_async::Row> = coordinator.query_first("SHOW MASTER STATUS").await.ok().flatten();
    if status.is_none() && !mariadb {
        status = coordinator.query_first("SHOW BINARY LOG STATUS").await.ok().flatten();
    }
    let (binlog_file, binlog_position) = match status {
        Some(row) => (row.get::<String, _>(0), row.get::<u64, _>(1)),
        None => (None, None),
    };
    let gtid_sql = match (mariadb, binlog_file.is_some()) {
        (true, true) => "SELECT @@GLOBAL.gtid_binlog_pos",
        (true, false) => "SELECT @@GLOBAL.gtid_current_pos",
        (false, _) => "SELECT @@GLOBAL.gtid_executed",
    };
    let gtid: Option<String> = coordinator.query_first(gtid_sql).await.ok().flatten();
    let position =
        Position { gtid: gtid.filter(|g| !g.is_empty()), binlog_file, binlog_position, time: None, server: None };
    if position == Position::default() {
        return None;
    }
    let now: Option<i64> = coordinator.query_first("SELECT UNIX_TIMESTAMP()").await.ok().flatten();
    let time = now.and_then(|seconds| jiff::Timestamp::from_second(seconds).ok()).map(|t| t.to_string());
    let server = server_identity(coordinator, mariadb).await;
    Some(Position { time, server, ..position })
}

/// Which server this is: its id, host name and (MySQL) UUID, as the binary log archive
/// records the servers it follows.
pub(crate) async fn server_identity(coordinator: &mut Conn, mariadb: bool) -> Option<ServerIdentity> {
    let sql = if mariadb {
        "SELECT @@GLOBAL.server_id, @@hostname, NULL, VERSION()"
    } else {
        "SELECT @@GLOBAL.server_id, @@hostname, @@GLOBAL.server_uuid, VERSION()"
    };
    let row: (u32, Option<String>, Option<String>, String) = coordinator.query_first(sql).await.ok().flatten()?;
    let (server_id, hostname, server_uuid, version) = row;
    Some(ServerIdentity {
        flavor: if mariadb { "mariadb" } else { "mysql" }.into(),
        version,
        server_id,
        server_uuid: server_uuid.filter(|u| !u.is_empty()),
        hostname: hostname.filter(|h| !h.is_empty()),
    })
}
