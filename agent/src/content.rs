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

use crate::error::{AgentError, Result};
use crate::format::{encode_field, quote_ident, quote_literal};
use crate::mysql::Connector;
use crate::mysql::catalog::TableInfo;
use crate::mysql::wire::{DataConn, TextRow, WireError};

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

/// A session that reads values as a backup's data sessions do: as stored, with no character
/// set conversion (`SET NAMES binary`), so that its rows encode as the backup's did.
pub async fn reading_session(connector: &Connector) -> Result<DataConn> {
    let mut conn = connector.connect_data().await?;
    connector.execute_data(&mut conn, "SET NAMES binary", "preparing the session").await?;
    Ok(conn)
}

/// A table's rows and content digest, read in a [`reading_session`] of its own: what a drill
/// compares with what the backup recorded.
pub async fn read_table(connector: &Connector, database: &str, info: &TableInfo) -> Result<(u64, ContentDigest)> {
    let mut conn = reading_session(connector).await?;
    let read = read_table_content(connector, &mut conn, database, info).await;
    conn.disconnect().await;
    read
}

/// A table's rows and content digest, read in `conn`, a [`reading_session`] (one holding a
/// snapshot, say).
pub async fn read_table_content(
    connector: &Connector,
    conn: &mut DataConn,
    database: &str,
    info: &TableInfo,
) -> Result<(u64, ContentDigest)> {
    if info.columns.is_empty() {
        return Ok((0, ContentDigest::default()));
    }
    let failed = |e| connector.wire_error("reading a table's rows", e);
    let select = select_sql(database, info, None, None)?;
    let (mut rows, mut digest, mut line) = (0u64, ContentDigest::default(), Vec::with_capacity(4096));
    let mut result = conn.query(&select).await.map_err(failed)?;
    while let Some(row) = result.next().await.map_err(failed)? {
        line.clear();
        encode_row(&mut line, &row).map_err(failed)?;
        digest.add_row(&line);
        rows += 1;
    }
    Ok((rows, digest))
}

/// The `SELECT` that reads a table's rows, or one key range of them (`lower` included,
/// `upper` excluded), in the columns of [`TableInfo::columns`]. Refused for a column whose
/// values the restore could not load back as they are.
pub fn select_sql(database: &str, table: &TableInfo, lower: Option<i128>, upper: Option<i128>) -> Result<String> {
    let columns: Vec<String> = table
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let data_type = table.column_types.get(i).map(String::as_str).unwrap_or_default();
            let definition = table.column_definitions.get(i).map(String::as_str).unwrap_or_default();
            select_expression(c, data_type, definition).map_err(|why| AgentError::UnrestorableColumn {
                table: format!("{database}.{}", table.name),
                column: c.clone(),
                why,
            })
        })
        .collect::<Result<_>>()?;
    let mut sql = format!("SELECT {} FROM {}.{}", columns.join(","), quote_ident(database), quote_ident(&table.name));
    if table.history {
        sql.push_str(" FOR SYSTEM_TIME ALL");
    }
    if let Some(key) = &table.integer_key {
        let key = quote_ident(key);
        match (lower, upper) {
            (Some(lower), Some(upper)) => sql.push_str(&format!(" WHERE {key} >= {lower} AND {key} < {upper}")),
            (Some(lower), None) => sql.push_str(&format!(" WHERE {key} >= {lower}")),
            (None, Some(upper)) => sql.push_str(&format!(" WHERE {key} < {upper}")),
            (None, None) => {}
        }
    }
    Ok(sql)
}

/// How a column is selected, so that `LOAD DATA` reads its text back into the identical value:
/// - FLOAT: the server prints 6 significant digits (16777217 would read back as 16777200); as a
///   DOUBLE (`+ 0e0`) it prints enough digits for the text to read back into the same FLOAT.
/// - ENUM: the error value (index 0, which a non-strict server stores for a value that is not
///   a member) prints as `''`, which `LOAD DATA` refuses (warning 1265) or, in an ENUM with a
///   `''` member, stores as that member. It is written as a short number that is not a member
///   ([`enum_error_text`]), which `LOAD DATA` reads as the index 0, without a warning.
/// - INET4, INET6, UUID (MariaDB): a chunk loads `CHARACTER SET binary`, and these types read
///   a binary string as their binary form, so their text ('1.2.3.4') is refused; they are
///   written in their binary form (4 or 16 bytes), which loads back as the same value.
fn select_expression(column: &str, data_type: &str, definition: &str) -> std::result::Result<String, String> {
    let quoted = quote_ident(column);
    Ok(match data_type {
        "float" => format!("{quoted} + 0e0"),
        "inet4" | "inet6" | "uuid" => format!("CAST({quoted} AS BINARY)"),
        "enum" => {
            let text = enum_error_text(definition).ok_or_else(|| {
                format!(
                    "its type {definition} has members \"0\" to \"00000\" (or characters a collation may take for them), so the text of its error value '' could not be told apart from a member"
                )
            })?;
            format!("IF({quoted} + 0 = 0, {}, {quoted})", quote_literal(text))
        }
        _ => quoted,
    })
}

/// The ENUM columns of `table` whose error value is written as a text of its own (see
/// [`select_expression`]): `(index in the columns, text)`.
pub fn enum_error_texts(table: &TableInfo) -> Vec<(usize, &'static str)> {
    (0..table.columns.len())
        .filter(|&i| table.column_types.get(i).is_some_and(|t| t == "enum"))
        .filter_map(|i| Some((i, enum_error_text(table.column_definitions.get(i)?)?)))
        .collect()
}

/// The text an ENUM of type `definition` (`enum('a','b')`) writes for its error value: the first
/// of "0", "00", ... "00000" that no member could be taken for (`LOAD DATA` tries text of fewer
/// than 6 bytes that names no member as an index). A member counts as one when it has the
/// candidate's length and only zeros or characters beyond ASCII, which a collation may equal
/// to a zero (a full-width zero).
pub fn enum_error_text(definition: &str) -> Option<&'static str> {
    const CANDIDATES: [&str; 5] = ["0", "00", "000", "0000", "00000"];
    let members = enum_members(definition);
    let could_be = |member: &str, candidate: &str| {
        member.chars().count() == candidate.len() && member.chars().all(|c| c == '0' || !c.is_ascii())
    };
    CANDIDATES.into_iter().find(|candidate| !members.iter().any(|member| could_be(member, candidate)))
}

/// The members of an ENUM or SET type as `COLUMN_TYPE` spells it: quoted, a quote doubled or
/// escaped with a backslash.
fn enum_members(definition: &str) -> Vec<String> {
    let Some(list) = definition.find('(').map(|open| &definition[open + 1..]) else { return Vec::new() };
    let mut members = Vec::new();
    let mut chars = list.chars().peekable();
    while chars.peek() == Some(&'\'') {
        chars.next();
        let mut member = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\'' if chars.peek() == Some(&'\'') => {
                    chars.next();
                    member.push('\'');
                }
                '\'' => break,
                '\\' => member.extend(chars.next()),
                c => member.push(c),
            }
        }
        members.push(member);
        if chars.next() != Some(',') {
            break;
        }
    }
    members
}

/// Appends one row as a line of the chunk format.
pub fn encode_row(out: &mut Vec<u8>, row: &TextRow<'_>) -> std::result::Result<(), WireError> {
    encode_row_counting(out, row, &[]).map(drop)
}

/// Appends one row as a line of the chunk format, and counts its fields that hold an ENUM's
/// error value, written as `texts` say (see [`enum_error_texts`]): each raises one warning when
/// loaded, which the restore then expects.
pub fn encode_row_counting(
    out: &mut Vec<u8>,
    row: &TextRow<'_>,
    texts: &[(usize, &str)],
) -> std::result::Result<u64, WireError> {
    let mut error_values = 0;
    for (i, field) in row.fields().enumerate() {
        let field = field?;
        if i > 0 {
            out.push(b'\t');
        }
        if !texts.is_empty() && texts.iter().any(|(column, text)| *column == i && field == Some(text.as_bytes())) {
            error_values += 1;
        }
        encode_field(out, field);
    }
    out.push(b'\n');
    Ok(error_values)
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

    /// Each case: an ENUM's type, and the text its error value is written as.
    #[test]
    fn an_enum_error_value_is_written_as_a_number_no_member_can_be_taken_for() {
        let cases = [
            ("enum('a','b')", Some("0")),
            ("enum('','x')", Some("0")),
            ("enum('0','a')", Some("00")),
            ("enum('0','00','a''0')", Some("000")),
            ("enum('０','a')", Some("00")),
            ("enum('0x','0\\'')", Some("0")),
            ("enum('0','00','000','0000','00000')", None),
        ];
        for (definition, expected) in cases {
            assert_eq!(enum_error_text(definition), expected, "{definition}");
        }
        assert_eq!(enum_members("enum('it''s','a\\'b',',')"), ["it's", "a'b", ","]);
    }

    #[test]
    fn columns_are_selected_so_that_their_text_loads_back_the_same() {
        let table = TableInfo {
            name: "t".into(),
            data_length: 0,
            columns: vec!["id".into(), "f".into(), "e".into()],
            column_types: vec!["int".into(), "float".into(), "enum".into()],
            column_definitions: vec!["int(11)".into(), "float".into(), "enum('0','a')".into()],
            integer_key: Some("id".into()),
            history: false,
        };
        assert_eq!(
            select_sql("d", &table, Some(1), None).unwrap(),
            "SELECT `id`,`f` + 0e0,IF(`e` + 0 = 0, '00', `e`) FROM `d`.`t` WHERE `id` >= 1"
        );
        let addresses = TableInfo {
            columns: vec!["ip".into(), "u".into()],
            column_types: vec!["inet6".into(), "uuid".into()],
            column_definitions: vec!["inet6".into(), "uuid".into()],
            integer_key: None,
            ..table.clone()
        };
        assert_eq!(
            select_sql("d", &addresses, None, None).unwrap(),
            "SELECT CAST(`ip` AS BINARY),CAST(`u` AS BINARY) FROM `d`.`t`",
            "addresses and UUIDs in their binary form"
        );
        let versioned = TableInfo { history: true, ..table.clone() };
        assert_eq!(
            select_sql("d", &versioned, None, Some(5)).unwrap(),
            "SELECT `id`,`f` + 0e0,IF(`e` + 0 = 0, '00', `e`) FROM `d`.`t` FOR SYSTEM_TIME ALL WHERE `id` < 5",
            "a system-versioned table is read with its history"
        );
        let mut crowded = table;
        crowded.column_definitions[2] = "enum('0','00','000','0000','00000')".into();
        let refused = select_sql("d", &crowded, None, None).unwrap_err();
        assert_eq!(refused.kind(), "unrestorableColumn");
        assert!(refused.to_string().starts_with("table d.t, column e: "), "{refused}");
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
