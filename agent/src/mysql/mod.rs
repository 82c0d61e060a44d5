//! The MySQL side: connections and their errors, the catalog (what to back up), the shared
//! snapshot of backup workers, and row streaming and loading.

pub mod catalog;
pub mod connection;
pub mod snapshot;
pub mod tls;
pub mod users;
pub mod wire;

pub use connection::{ConnectionSettings, Connector};
pub use tls::{SslMode, TlsSettings};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row, Value};

use crate::error::{AgentError, Result};
use wire::DataConn;

/// A row of text values, `None` for NULL.
pub type TextFields = Vec<Option<Vec<u8>>>;

/// What the catalog's per-table checks need of a connection, a mysql_async one or a backup
/// data session ([`wire`]): the first row of a statement's result, as text.
pub trait FirstRow {
    fn first_row(
        &mut self,
        connector: &Connector,
        sql: &str,
        during: &str,
    ) -> impl Future<Output = Result<Option<TextFields>>> + Send;
}

impl FirstRow for Conn {
    async fn first_row(&mut self, connector: &Connector, sql: &str, during: &str) -> Result<Option<TextFields>> {
        let row: Option<Row> = self.query_first(sql).await.map_err(|e| connector.error(during, e))?;
        let Some(row) = row else { return Ok(None) };
        let fields = row.unwrap().into_iter().map(|value| match value {
            Value::NULL => Ok(None),
            Value::Bytes(bytes) => Ok(Some(bytes)),
            // The text protocol sends every value as bytes; anything else is a driver change.
            other => Err(AgentError::Internal(format!("unexpected value from the text protocol: {other:?}"))),
        });
        fields.collect::<Result<_>>().map(Some)
    }
}

impl FirstRow for DataConn {
    async fn first_row(&mut self, connector: &Connector, sql: &str, during: &str) -> Result<Option<TextFields>> {
        self.query_first(sql).await.map_err(|e| connector.wire_error(during, e))
    }
}
