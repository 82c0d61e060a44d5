//! Reads one MySQL server as the controller's decisions need it: its id, whether it takes
//! writes, its transactions, its replication and its semi-synchronous state. Each read is
//! bounded by a short timeout: a server that does not answer in time is one that does not
//! answer.

use std::time::Duration;

use mysql_async::Row;
use mysql_async::prelude::Queryable;

use super::server::{History, Position, Replication, Server};
use super::sql::Flavor;
use crate::db::{Target, connect};

/// The longest one server's reading takes before it counts as not answering.
pub const READ_TIMEOUT: Duration = Duration::from_millis(1500);

/// Why a server could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("no answer within {} ms", READ_TIMEOUT.as_millis())]
    Timeout,
    #[error(transparent)]
    Sql(#[from] mysql_async::Error),
    #[error("unexpected answer: {0}")]
    Answer(String),
}

/// Server `target` as it answers now.
pub async fn read(target: &Target) -> Result<Server, ReadError> {
    match tokio::time::timeout(READ_TIMEOUT, read_unbounded(target)).await {
        Ok(result) => result,
        Err(_) => Err(ReadError::Timeout),
    }
}

async fn read_unbounded(target: &Target) -> Result<Server, ReadError> {
    let mut conn = connect(target, None).await?;
    let result = read_on(&mut conn).await;
    let _ = conn.disconnect().await;
    result
}

type StateRow = (u32, i64, Option<String>, Option<String>, i64, Option<String>, i64);

async fn read_on(conn: &mut mysql_async::Conn) -> Result<Server, ReadError> {
    let version: Option<String> = conn.query_first("SELECT VERSION()").await?;
    let flavor = Flavor::of_version(&version.unwrap_or_default());
    let state: Option<StateRow> = conn.query_first(flavor.state_query()).await?;
    let (server_id, read_only, position, history, armed, ssl_ca, users) =
        state.ok_or_else(|| ReadError::Answer("the state query returned no row".into()))?;
    let replica_rows: Vec<Row> = conn.query(flavor.replica_status()).await?;
    let semi_sync: Vec<(String, String)> = conn.query(flavor.semi_sync_status()).await?;
    let count = |suffix: &str| {
        semi_sync
            .iter()
            .find(|(name, _)| name.to_ascii_lowercase().ends_with(suffix))
            .and_then(|(_, value)| value.parse::<u32>().ok())
            .unwrap_or(0)
    };
    let waiting = count("_wait_sessions");
    // Listing the binary logs waits behind a commit that waits for an acknowledgement.
    let first_binlog = match waiting {
        0 => {
            let logs: Vec<Row> = conn.query("SHOW BINARY LOGS").await?;
            logs.first().and_then(|row| row.get_opt::<String, usize>(0)).and_then(Result::ok)
        }
        _ => None,
    };
    Ok(Server {
        flavor,
        server_id,
        read_only: read_only != 0,
        position: Position::parse(position.as_deref().unwrap_or_default()).map_err(ReadError::Answer)?,
        history: History::parse(flavor, history.as_deref().unwrap_or_default()).map_err(ReadError::Answer)?,
        semi_sync_armed: armed != 0,
        semi_sync_clients: count("_clients"),
        semi_sync_waiting: waiting,
        ssl_ca: ssl_ca.filter(|ca| !ca.is_empty()),
        has_replication_user: users > 0,
        replica: replica_rows.first().map(|row| replication(flavor, row)).transpose()?,
        first_binlog,
    })
}

fn replication(flavor: Flavor, row: &Row) -> Result<Replication, ReadError> {
    let columns = flavor.replica_columns();
    let text =
        |column: &str| row.get_opt::<Option<String>, &str>(column).and_then(Result::ok).flatten().unwrap_or_default();
    let number = |column: &str| text(column).trim().parse::<u32>().unwrap_or(0);
    let mut received = Position::parse(&text(columns.received)).map_err(ReadError::Answer)?;
    if flavor == Flavor::MySql {
        received = received.union(&Position::parse(&text("Executed_Gtid_Set")).map_err(ReadError::Answer)?);
    }
    let io = text(columns.io_running);
    let error = [("Last_IO_Errno", "Last_IO_Error"), ("Last_SQL_Errno", "Last_SQL_Error")]
        .into_iter()
        .map(|(errno, message)| (number(errno), text(message)))
        .find(|(errno, _)| *errno != 0);
    Ok(Replication {
        source_host: text(columns.source_host),
        receiving: io == "Yes" || io == "Connecting",
        connected: io == "Yes",
        applying: text(columns.sql_running) == "Yes",
        received,
        lag_seconds: text(columns.lag).trim().parse().ok(),
        error,
    })
}
