//! What a table holds, as the backup reads it: the `SELECT` that reads its rows, the encoding of
//! each row into a line of a data chunk, and the table's content digest.
//!
//! The digest is computed from the rows the backup already reads (no second read of the server)
//! and recomputed by a restore drill from the restored server: the same `SELECT`, the same
//! session settings, the same encoding. It is the wrapping sum of the xxh3-128 hash of every
//! encoded row, so it does not depend on the order rows arrive in (a table's key ranges are
//! dumped in parallel, a restored table may return rows in another order), and a row present
//! twice counts twice. It guards against a dump or a load that changes data (a value encoded
//! wrongly, a row lost), not against a forger: the SHA-256 of every file does that.

use twox_hash::XxHash3_128;

use crate::format::{encode_field, quote_ident};
use crate::mysql::catalog::TableInfo;
use crate::mysql::wire::{TextRow, WireError};

/// The name of the digest, the prefix of its text form.
pub const DIGEST_ALGORITHM: &str = "xxh3-128-sum";

/// The content digest of a set of rows; see the module's documentation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContentDigest {
    sum: u128,
}

impl ContentDigest {
    /// Adds one encoded row (its line, newline included).
    pub fn add_row(&mut self, line: &[u8]) {
        self.sum = self.sum.wrapping_add(XxHash3_128::oneshot(line));
    }

    /// Adds the rows of another part of the same table.
    pub fn merge(&mut self, other: ContentDigest) {
        self.sum = self.sum.wrapping_add(other.sum);
    }

    /// `xxh3-128-sum:<32 hexadecimal digits>`, as the manifest records it.
    pub fn to_text(self) -> String {
        format!("{DIGEST_ALGORITHM}:{:032x}", self.sum)
    }
}

/// The `SELECT` that reads a table's rows, or one key range of them (`lower` included,
/// `upper` excluded), in the columns of [`TableInfo::columns`].
pub fn select_sql(database: &str, table: &TableInfo, lower: Option<i128>, upper: Option<i128>) -> String {
    let columns: Vec<String> = table
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| select_expression(c, table.column_types.get(i).map(String::as_str).unwrap_or_default()))
        .collect();
    let mut sql = format!("SELECT {} FROM {}.{}", columns.join(","), quote_ident(database), quote_ident(&table.name));
    if let Some(key) = &table.integer_key {
        let key = quote_ident(key);
        match (lower, upper) {
            (Some(lower), Some(upper)) => sql.push_str(&format!(" WHERE {key} >= {lower} AND {key} < {upper}")),
            (Some(lower), None) => sql.push_str(&format!(" WHERE {key} >= {lower}")),
            (None, Some(upper)) => sql.push_str(&format!(" WHERE {key} < {upper}")),
            (None, None) => {}
        }
    }
    sql
}

/// How a column is selected. The server prints FLOAT with 6 significant digits (16777217
/// would read back as 16777200); as a DOUBLE (`+ 0e0`) it prints enough digits for the text
/// to read back into the identical FLOAT.
fn select_expression(column: &str, data_type: &str) -> String {
    let quoted = quote_ident(column);
    if data_type == "float" { format!("{quoted} + 0e0") } else { quoted }
}

/// Appends one row as a line of the chunk format.
pub fn encode_row(out: &mut Vec<u8>, row: &TextRow<'_>) -> Result<(), WireError> {
    for (i, field) in row.fields().enumerate() {
        if i > 0 {
            out.push(b'\t');
        }
        encode_field(out, field?);
    }
    out.push(b'\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(rows: &[&[u8]]) -> ContentDigest {
        let mut digest = ContentDigest::default();
        rows.iter().for_each(|row| digest.add_row(row));
        digest
    }

    #[test]
    fn the_order_of_rows_does_not_matter_but_every_row_and_byte_does() {
        let rows: [&[u8]; 3] = [b"1\ta\n", b"2\tb\n", b"3\t\\N\n"];
        assert_eq!(digest(&rows), digest(&[rows[2], rows[0], rows[1]]));
        assert_ne!(digest(&rows), digest(&rows[..2]), "a lost row");
        assert_ne!(digest(&rows), digest(&[rows[0], rows[1], rows[2], rows[2]]), "a row twice");
        assert_ne!(digest(&rows), digest(&[rows[0], rows[1], b"3\tN\n"]), "NULL became a string");
        assert_ne!(digest(&[b"1\n", b"1\n"]), ContentDigest::default(), "two equal rows do not cancel out");
    }

    #[test]
    fn parts_add_up_to_the_whole() {
        let rows: [&[u8]; 4] = [b"1\n", b"2\n", b"3\n", b"4\n"];
        let mut parts = digest(&rows[..1]);
        parts.merge(digest(&rows[1..]));
        assert_eq!(parts, digest(&rows));
        let text = parts.to_text();
        assert!(text.starts_with("xxh3-128-sum:") && text.len() == DIGEST_ALGORITHM.len() + 1 + 32, "{text}");
        assert_eq!(ContentDigest::default().to_text(), format!("{DIGEST_ALGORITHM}:{}", "0".repeat(32)));
    }
}
