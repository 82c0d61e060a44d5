//! The drill of a physical run, once a server runs on its prepared copy (the drill's database
//! pod unpacks the run, every chunk's SHA-256 checked and the stream's position compared with
//! the manifest, and prepares it before its server starts): every table opens and passes
//! `CHECK TABLE`, and, when the run recorded its tables' content (a replica held at the
//! snapshot, see [`super::hold`]), the copy holds exactly those tables, each with the rows and
//! content digest recorded. Without recorded content the drill says it checked tables only.

use futures::stream::{self, StreamExt, TryStreamExt};
use mysql_async::prelude::Queryable;

use crate::content::read_table;
use crate::error::{AgentError, Result};
use crate::format::{Manifest, TableContent, quote_ident};
use crate::mysql::Connector;
use crate::mysql::catalog::{self, TableInfo};

/// What the drill checked of the copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyChecked {
    pub tables: u64,
    pub rows: u64,
    /// Whether every table's rows and digest were compared with the run's recorded content.
    pub content_compared: bool,
}

pub async fn check_prepared_copy(
    connector: &Connector,
    manifest: &Manifest,
    parallelism: usize,
) -> Result<CopyChecked> {
    let tables = copy_tables(connector).await?;
    check_tables(connector, &tables).await?;
    let recorded = manifest.physical.as_ref().and_then(|p| p.content.as_ref());
    let Some(recorded) = recorded else {
        tracing::info!(
            "every one of the copy's {} tables passes CHECK TABLE; the run recorded no content (a run of a primary): \
             its rows were not compared",
            tables.len()
        );
        return Ok(CopyChecked { tables: tables.len() as u64, rows: 0, content_compared: false });
    };
    let pairs = pair_tables(recorded, tables)?;
    let count = pairs.len() as u64;
    let rows: Vec<u64> = stream::iter(pairs)
        .map(|(recorded, info)| compare_table(connector, recorded, info))
        .buffer_unordered(parallelism.max(1))
        .try_collect()
        .await?;
    let rows = rows.into_iter().sum();
    tracing::info!(
        "every one of the copy's {count} tables passes CHECK TABLE and holds the rows recorded ({rows} rows)"
    );
    Ok(CopyChecked { tables: count, rows, content_compared: true })
}

type Table = (String, TableInfo);

async fn copy_tables(connector: &Connector) -> Result<Vec<Table>> {
    let mut conn = connector.connect().await?;
    let tables = catalog::all_tables(connector, &mut conn).await;
    let _ = conn.disconnect().await;
    tables
}

/// `CHECK TABLE` of every table: InnoDB reads every page of it, its indexes included.
async fn check_tables(connector: &Connector, tables: &[Table]) -> Result<()> {
    let mut conn = connector.connect().await?;
    for (database, info) in tables {
        let name = format!("{}.{}", quote_ident(database), quote_ident(&info.name));
        let results: Vec<(String, String, String, String)> = conn
            .query(format!("CHECK TABLE {name}"))
            .await
            .map_err(|e| connector.error("checking a table of the prepared copy", e))?;
        if let Some(problem) = check_problem(&results) {
            let _ = conn.disconnect().await;
            return Err(AgentError::VerifyMismatch(format!(
                "table {name} of the prepared copy fails CHECK TABLE: {problem}"
            )));
        }
    }
    let _ = conn.disconnect().await;
    Ok(())
}

/// What `CHECK TABLE`'s rows (`Table`, `Op`, `Msg_type`, `Msg_text`) say is wrong, if anything:
/// an error, or a final status other than OK.
fn check_problem(results: &[(String, String, String, String)]) -> Option<String> {
    let errors: Vec<&str> = results
        .iter()
        .filter(|(_, _, kind, _)| kind.eq_ignore_ascii_case("error"))
        .map(|(_, _, _, t)| t.as_str())
        .collect();
    if !errors.is_empty() {
        return Some(errors.join("; "));
    }
    let status = results.iter().rev().find(|(_, _, kind, _)| kind.eq_ignore_ascii_case("status"));
    match status {
        Some((_, _, _, text)) if text.eq_ignore_ascii_case("OK") => None,
        Some((_, _, _, text)) => Some(text.clone()),
        None => Some("no status".into()),
    }
}

/// Each recorded table with the copy's table of its name; a table missing from either side
/// is a copy that does not hold what was backed up.
fn pair_tables(recorded: &[TableContent], mut copy: Vec<Table>) -> Result<Vec<(&TableContent, TableInfo)>> {
    let mut pairs = Vec::with_capacity(recorded.len());
    for table in recorded {
        let Some(at) = copy.iter().position(|(database, info)| *database == table.database && info.name == table.table)
        else {
            return Err(AgentError::DrillObjectMissing {
                object: format!("table {}.{}", quote_ident(&table.database), quote_ident(&table.table)),
            });
        };
        pairs.push((table, copy.swap_remove(at).1));
    }
    if let Some((database, info)) = copy.first() {
        return Err(AgentError::VerifyMismatch(format!(
            "the prepared copy holds table {}.{}, which the run did not record at its snapshot",
            quote_ident(database),
            quote_ident(&info.name)
        )));
    }
    Ok(pairs)
}

async fn compare_table(connector: &Connector, recorded: &TableContent, info: TableInfo) -> Result<u64> {
    let name = format!("{}.{}", quote_ident(&recorded.database), quote_ident(&recorded.table));
    if info.columns != recorded.columns {
        return Err(AgentError::VerifyMismatch(format!(
            "table {name} has the columns {:?}, the run recorded {:?}",
            info.columns, recorded.columns
        )));
    }
    let (rows, digest) = read_table(connector, &recorded.database, &info).await?;
    if rows != recorded.rows {
        return Err(AgentError::VerifyMismatch(format!(
            "table {name} has {rows} rows, the run recorded {}",
            recorded.rows
        )));
    }
    if digest.to_text() != recorded.content_digest {
        return Err(AgentError::ContentDiffers {
            table: name,
            expected: recorded.content_digest.clone(),
            actual: digest.to_text(),
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: &str, text: &str) -> (String, String, String, String) {
        ("shop.orders".into(), "check".into(), kind.into(), text.into())
    }

    #[test]
    fn check_table_passes_on_a_final_ok_and_nothing_else() {
        let cases = [
            (vec![row("status", "OK")], None),
            (vec![row("note", "The storage engine for the table doesn't support check"), row("status", "OK")], None),
            (vec![row("error", "Corrupt"), row("status", "Operation failed")], Some("Corrupt")),
            (
                vec![row("warning", "1 client is using the table"), row("status", "Table is marked as crashed")],
                Some("Table is marked as crashed"),
            ),
            (vec![], Some("no status")),
        ];
        for (results, expected) in cases {
            assert_eq!(check_problem(&results).as_deref(), expected, "{results:?}");
        }
    }

    fn info(name: &str) -> TableInfo {
        TableInfo {
            name: name.into(),
            data_length: 0,
            columns: vec!["id".into()],
            column_types: vec!["int".into()],
            column_definitions: vec!["int(11)".into()],
            integer_key: Some("id".into()),
            history: false,
        }
    }

    fn recorded(table: &str) -> TableContent {
        TableContent {
            database: "shop".into(),
            table: table.into(),
            columns: vec!["id".into()],
            rows: 1,
            content_digest: "xxh3-128-sum:0".into(),
        }
    }

    #[test]
    fn the_copy_must_hold_exactly_the_recorded_tables() {
        let copy = |names: &[&str]| names.iter().map(|n| ("shop".to_string(), info(n))).collect::<Vec<_>>();
        let both = [recorded("a"), recorded("b")];
        assert_eq!(pair_tables(&both, copy(&["b", "a"])).unwrap().len(), 2);
        let missing = pair_tables(&both, copy(&["a"])).unwrap_err();
        assert_eq!(missing.kind(), "objectMissing", "{missing}");
        let extra = pair_tables(&both[..1], copy(&["a", "b"])).unwrap_err();
        assert!(extra.to_string().contains("`shop`.`b`"), "{extra}");
        assert_eq!(extra.kind(), "verifyMismatch");
    }
}
