//! Binary log events as bytes, the form in which they are archived and replayed: the common
//! header, where a transaction begins and ends (for MariaDB and MySQL), the transaction's GTID
//! and commit time, and the one change the replay makes to an event (the database name of a
//! table map). Anything deeper is parsed by `mysql_common`.

use std::io;

use mysql_common::binlog::consts::BinlogVersion;
use mysql_common::binlog::events::{
    Event, FormatDescriptionEvent, GtidEvent, PreviousGtidsEvent, QueryEvent, TableMapEvent,
};
use visitors_agent_contract::gtid::{Gtid, GtidSet};

/// Event type codes this module tells apart.
pub mod kind {
    pub const QUERY: u8 = 0x02;
    pub const INTVAR: u8 = 0x05;
    pub const APPEND_BLOCK: u8 = 0x09;
    pub const RAND: u8 = 0x0d;
    pub const USER_VAR: u8 = 0x0e;
    pub const STOP: u8 = 0x03;
    pub const ROTATE: u8 = 0x04;
    pub const FORMAT_DESCRIPTION: u8 = 0x0f;
    pub const XID: u8 = 0x10;
    pub const BEGIN_LOAD_QUERY: u8 = 0x11;
    pub const EXECUTE_LOAD_QUERY: u8 = 0x12;
    pub const TABLE_MAP: u8 = 0x13;
    pub const INCIDENT: u8 = 0x1a;
    pub const HEARTBEAT: u8 = 0x1b;
    pub const ROWS_QUERY: u8 = 0x1d;
    pub const GTID: u8 = 0x21;
    pub const ANONYMOUS_GTID: u8 = 0x22;
    pub const PREVIOUS_GTIDS: u8 = 0x23;
    pub const XA_PREPARE: u8 = 0x26;
    pub const TRANSACTION_PAYLOAD: u8 = 0x28;
    pub const GTID_TAGGED: u8 = 0x2a;
    pub const MARIADB_ANNOTATE_ROWS: u8 = 0xa0;
    pub const MARIADB_BINLOG_CHECKPOINT: u8 = 0xa1;
    pub const MARIADB_GTID: u8 = 0xa2;
    pub const MARIADB_GTID_LIST: u8 = 0xa3;
    pub const MARIADB_START_ENCRYPTION: u8 = 0xa4;
    pub const MARIADB_QUERY_COMPRESSED: u8 = 0xa5;

    /// Row events: v1 (0x17-0x19), v2 (0x1e-0x20), MySQL's partial update (0x27), MariaDB's
    /// compressed ones (0xa6-0xab).
    pub fn is_rows(kind: u8) -> bool {
        matches!(kind, 0x17..=0x19 | 0x1e..=0x20 | 0x27 | 0xa6..=0xab)
    }
}

/// The length of the common event header.
pub const HEADER_LEN: usize = 19;
/// The four bytes every binary log file starts with.
pub const BINLOG_MAGIC: [u8; 4] = [0xfe, b'b', b'i', b'n'];
/// The header flag of events a server makes up for a replica (never in a file).
const ARTIFICIAL_FLAG: u16 = 0x20;
/// MariaDB's GTID event flag: the group is one statement, with no BEGIN/COMMIT.
const MARIADB_FL_STANDALONE: u8 = 0x01;
/// MariaDB's GTID event flags of XA transactions.
const MARIADB_FL_PREPARED_XA: u8 = 0x40;
const MARIADB_FL_COMPLETED_XA: u8 = 0x80;

/// One event, with its header and, when the stream has them, its checksum.
#[derive(Debug, Clone, Copy)]
pub struct RawEvent<'a>(pub &'a [u8]);

impl<'a> RawEvent<'a> {
    /// The first event in `bytes` and what follows it, or `None` when `bytes` does not start
    /// with a whole event.
    pub fn split(bytes: &'a [u8]) -> Option<(RawEvent<'a>, &'a [u8])> {
        if bytes.len() < HEADER_LEN {
            return None;
        }
        let size = u32::from_le_bytes(bytes[9..13].try_into().ok()?) as usize;
        if size < HEADER_LEN || size > bytes.len() {
            return None;
        }
        Some((RawEvent(&bytes[..size]), &bytes[size..]))
    }

    pub fn timestamp(&self) -> u32 {
        u32::from_le_bytes(self.0[0..4].try_into().unwrap())
    }

    pub fn kind(&self) -> u8 {
        self.0[4]
    }

    pub fn server_id(&self) -> u32 {
        u32::from_le_bytes(self.0[5..9].try_into().unwrap())
    }

    /// The position just after this event in its binary log file.
    pub fn log_pos(&self) -> u32 {
        u32::from_le_bytes(self.0[13..17].try_into().unwrap())
    }

    pub fn flags(&self) -> u16 {
        u16::from_le_bytes(self.0[17..19].try_into().unwrap())
    }

    /// Made up by the server for the replica (the first rotate of a dump, a fake format
    /// description): not part of any file.
    pub fn is_artificial(&self) -> bool {
        self.flags() & ARTIFICIAL_FLAG != 0 || self.log_pos() == 0
    }

    /// The event's body: after the header, without the checksum.
    pub fn body(&self, checksums: bool) -> &'a [u8] {
        let end = if checksums && self.kind() != kind::FORMAT_DESCRIPTION { self.0.len() - 4 } else { self.0.len() };
        &self.0[HEADER_LEN..end.max(HEADER_LEN)]
    }
}

/// The format of a stream or file: how its events are parsed (`mysql_common`'s description)
/// and whether they carry a CRC32 checksum.
#[derive(Clone)]
pub struct Format {
    pub description: FormatDescriptionEvent<'static>,
    /// The format description event's own bytes, as the stream or file had it.
    pub event_bytes: Vec<u8>,
    pub checksums: bool,
}

impl Format {
    /// The format a format description event sets.
    pub fn from_event(bytes: &[u8]) -> io::Result<Self> {
        let any = FormatDescriptionEvent::new(BinlogVersion::Version4);
        let event = Event::read(&any, bytes)?;
        let description = event.read_event::<FormatDescriptionEvent<'_>>()?.into_owned().with_footer(event.footer());
        let checksums = matches!(event.footer().get_checksum_alg(), Ok(Some(alg)) if alg as u8 == 1);
        Ok(Format { description, event_bytes: bytes.to_vec(), checksums })
    }

    /// `mysql_common`'s view of `raw`, for the parsers of particular event types.
    pub fn parse(&self, raw: RawEvent<'_>) -> io::Result<Event> {
        Event::read(&self.description, raw.0)
    }
}

/// What an event means for the transaction it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Outside any transaction (format, checkpoints, GTID lists, a STOP event).
    Outside,
    /// Starts a transaction: its GTID (none for MySQL's anonymous transactions) and commit time.
    Begins(Transaction),
    /// Inside the current transaction.
    Inside,
    /// Ends the current transaction (it is whole after this event).
    Ends,
}

/// A transaction as its first event describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    pub gtid: Option<Gtid>,
    /// The commit time, in seconds since the epoch (MariaDB: the GTID event's timestamp, the
    /// start of the statement that committed; MySQL: the immediate commit timestamp).
    pub commit_time: i64,
    /// An XA transaction (not replayed).
    pub xa: bool,
}

/// Follows transaction boundaries through a stream of events.
#[derive(Debug, Default, Clone)]
pub struct Boundaries {
    state: State,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    #[default]
    Outside,
    /// After a MariaDB standalone GTID: the next statement is the whole group.
    Standalone,
    /// After a MySQL GTID: `BEGIN` opens a transaction, any other statement is one on its own.
    AfterMySqlGtid,
    Inside,
}

impl Boundaries {
    pub fn in_transaction(&self) -> bool {
        self.state != State::Outside
    }

    /// What `raw` does to the transaction being followed.
    pub fn step(&mut self, raw: RawEvent<'_>, format: &Format) -> io::Result<Step> {
        let kind = raw.kind();
        match kind {
            kind::MARIADB_GTID => {
                let (gtid, flags) = mariadb_gtid(raw, format.checksums)?;
                self.state = if flags & MARIADB_FL_STANDALONE != 0 { State::Standalone } else { State::Inside };
                let xa = flags & (MARIADB_FL_PREPARED_XA | MARIADB_FL_COMPLETED_XA) != 0;
                Ok(Step::Begins(Transaction { gtid: Some(gtid), commit_time: i64::from(raw.timestamp()), xa }))
            }
            kind::GTID | kind::ANONYMOUS_GTID | kind::GTID_TAGGED => {
                self.state = State::AfterMySqlGtid;
                Ok(Step::Begins(mysql_transaction(raw, format)?))
            }
            kind::QUERY | kind::MARIADB_QUERY_COMPRESSED => {
                let text = query_text(raw, format).unwrap_or_default();
                let word = first_word(&text);
                match self.state {
                    State::Outside => Ok(Step::Outside),
                    State::Standalone => {
                        self.state = State::Outside;
                        Ok(Step::Ends)
                    }
                    State::AfterMySqlGtid if word == "BEGIN" => {
                        self.state = State::Inside;
                        Ok(Step::Inside)
                    }
                    State::AfterMySqlGtid => {
                        self.state = State::Outside;
                        Ok(Step::Ends)
                    }
                    State::Inside if matches!(word.as_str(), "COMMIT" | "ROLLBACK") || is_xa_end(&text) => {
                        self.state = State::Outside;
                        Ok(Step::Ends)
                    }
                    State::Inside => Ok(Step::Inside),
                }
            }
            kind::XID | kind::XA_PREPARE if self.state != State::Outside => {
                self.state = State::Outside;
                Ok(Step::Ends)
            }
            _ if self.state == State::Outside => Ok(Step::Outside),
            _ => Ok(Step::Inside),
        }
    }
}

fn is_xa_end(text: &str) -> bool {
    let upper: String = text.split_whitespace().take(2).collect::<Vec<_>>().join(" ").to_ascii_uppercase();
    matches!(upper.as_str(), "XA PREPARE" | "XA COMMIT" | "XA ROLLBACK")
}

/// The first word of a statement, upper-cased.
pub fn first_word(text: &str) -> String {
    text.trim_start().split(|c: char| c.is_whitespace() || c == ';').next().unwrap_or_default().to_ascii_uppercase()
}

/// A MariaDB GTID event's GTID and flags.
fn mariadb_gtid(raw: RawEvent<'_>, checksums: bool) -> io::Result<(Gtid, u8)> {
    let body = raw.body(checksums);
    if body.len() < 13 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "a MariaDB GTID event shorter than 13 bytes"));
    }
    let sequence = u64::from_le_bytes(body[0..8].try_into().unwrap());
    let domain = u32::from_le_bytes(body[8..12].try_into().unwrap());
    Ok((Gtid::MariaDb { domain, server: raw.server_id(), sequence }, body[12]))
}

fn mysql_transaction(raw: RawEvent<'_>, format: &Format) -> io::Result<Transaction> {
    let event = format.parse(raw)?;
    let gtid = event.read_event::<GtidEvent>()?;
    let micros = gtid.immediate_commit_timestamp();
    let commit_time = if micros > 0 { (micros / 1_000_000) as i64 } else { i64::from(raw.timestamp()) };
    let source = uuid_text(gtid.sid());
    let source = match gtid.tag() {
        Some(tag) => format!("{source}:{}", tag.as_str()),
        None => source,
    };
    let gtid =
        (raw.kind() != kind::ANONYMOUS_GTID && gtid.gno() > 0).then(|| Gtid::MySql { source, number: gtid.gno() });
    Ok(Transaction { gtid, commit_time, xa: false })
}

fn uuid_text(sid: [u8; 16]) -> String {
    let hex = hex::encode(sid);
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

/// The text of a query event (`None` for MariaDB's compressed ones, which the replay refuses).
pub fn query_text(raw: RawEvent<'_>, format: &Format) -> Option<String> {
    if raw.kind() != kind::QUERY {
        return None;
    }
    let event = format.parse(raw).ok()?;
    let query = event.read_event::<QueryEvent<'_>>().ok()?;
    Some(query.query().into_owned())
}

/// The GTID state a file starts with: MariaDB's GTID list or MySQL's previous GTIDs event.
pub fn file_start_state(raw: RawEvent<'_>, format: &Format) -> io::Result<Option<GtidSet>> {
    match raw.kind() {
        kind::MARIADB_GTID_LIST => {
            let body = raw.body(format.checksums);
            let count = body.get(0..4).map(|b| u32::from_le_bytes(b.try_into().unwrap()) & 0x0fff_ffff).unwrap_or(0);
            let mut set = GtidSet::MariaDb(Default::default());
            for n in 0..count as usize {
                let item = body.get(4 + n * 16..4 + (n + 1) * 16).ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidData, "a MariaDB GTID list event shorter than its count")
                })?;
                let domain = u32::from_le_bytes(item[0..4].try_into().unwrap());
                let server = u32::from_le_bytes(item[4..8].try_into().unwrap());
                let sequence = u64::from_le_bytes(item[8..16].try_into().unwrap());
                set.add(&Gtid::MariaDb { domain, server, sequence });
            }
            Ok(Some(set))
        }
        kind::PREVIOUS_GTIDS => {
            let event = format.parse(raw)?;
            let previous = event.read_event::<PreviousGtidsEvent<'_>>()?;
            let mut set = GtidSet::MySql(Default::default());
            for sid in previous.sids() {
                let source = match sid.tag() {
                    Some(tag) => format!("{}:{}", uuid_text(sid.uuid()), tag.as_str()),
                    None => uuid_text(sid.uuid()),
                };
                for interval in sid.intervals() {
                    // Intervals are half-open on the wire.
                    set.add_interval(&source, interval.start(), interval.end().saturating_sub(1));
                }
            }
            Ok(Some(set))
        }
        _ => Ok(None),
    }
}

/// A rotate event's next file and position; `checksums` says whether the event ends with one.
pub fn rotate_target(raw: RawEvent<'_>, checksums: bool) -> Option<(String, u64)> {
    let body = raw.body(checksums);
    let position = u64::from_le_bytes(body.get(0..8)?.try_into().ok()?);
    let name = std::str::from_utf8(&body[8..]).ok()?.trim_end_matches('\0');
    (!name.is_empty() && name.chars().all(|c| c.is_ascii_graphic())).then(|| (name.to_string(), position))
}

/// The table map event's database and table names, and its table id.
pub fn table_map(raw: RawEvent<'_>, format: &Format) -> io::Result<(String, String, u64)> {
    let event = format.parse(raw)?;
    let map = event.read_event::<TableMapEvent<'_>>()?;
    Ok((map.database_name().into_owned(), map.table_name().into_owned(), map.table_id()))
}

/// The post-header of a table map: a 6-byte table id and 2 bytes of flags.
const TABLE_MAP_POST_HEADER: usize = 8;

/// `raw`, a table map of database `from`, naming database `to` instead, with its size and
/// checksum recomputed.
pub fn rename_table_map_database(raw: RawEvent<'_>, format: &Format, from: &str, to: &str) -> io::Result<Vec<u8>> {
    let bytes = raw.0;
    let at = HEADER_LEN + TABLE_MAP_POST_HEADER;
    let length = *bytes.get(at).ok_or_else(|| bad_table_map("too short"))? as usize;
    let name = bytes.get(at + 1..at + 1 + length).ok_or_else(|| bad_table_map("too short"))?;
    if name != from.as_bytes() || bytes.get(at + 1 + length) != Some(&0) {
        return Err(bad_table_map("its database name is not where the format puts it"));
    }
    let to_length = u8::try_from(to.len()).map_err(|_| bad_table_map("the new database name is too long"))?;
    let mut out = Vec::with_capacity(bytes.len() + to.len());
    out.extend_from_slice(&bytes[..at]);
    out.push(to_length);
    out.extend_from_slice(to.as_bytes());
    let rest_end = if format.checksums { bytes.len() - 4 } else { bytes.len() };
    out.extend_from_slice(&bytes[at + 1 + length..rest_end]);
    let size =
        u32::try_from(out.len() + if format.checksums { 4 } else { 0 }).map_err(|_| bad_table_map("too long"))?;
    out[9..13].copy_from_slice(&size.to_le_bytes());
    if format.checksums {
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
    }
    Ok(out)
}

fn bad_table_map(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("a table map event cannot be renamed: {why}"))
}

/// `STMT_END_F` in a rows event's flags: its statement ends with it.
pub const STMT_END_FLAG: u16 = 0x0001;
/// Where a rows event's flags are: after the header and its 6-byte table id.
const ROWS_FLAGS_AT: usize = HEADER_LEN + 6;

/// The flags of a rows event.
pub fn rows_flags(raw: RawEvent<'_>) -> u16 {
    raw.0.get(ROWS_FLAGS_AT..ROWS_FLAGS_AT + 2).map_or(0, |b| u16::from_le_bytes([b[0], b[1]]))
}

/// `raw`, a rows event, flagged as the last of its statement, with its checksum recomputed.
pub fn with_statement_end(raw: RawEvent<'_>, checksums: bool) -> io::Result<Vec<u8>> {
    let mut out = raw.0.to_vec();
    let minimum = ROWS_FLAGS_AT + 2 + if checksums { 4 } else { 0 };
    if out.len() < minimum {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "a rows event too short to hold its flags"));
    }
    let flags = rows_flags(raw) | STMT_END_FLAG;
    out[ROWS_FLAGS_AT..ROWS_FLAGS_AT + 2].copy_from_slice(&flags.to_le_bytes());
    if checksums {
        let content = out.len() - 4;
        let crc = crc32fast::hash(&out[..content]);
        out[content..].copy_from_slice(&crc.to_le_bytes());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checksum_matches(raw: RawEvent<'_>) -> bool {
        let (content, stored) = raw.0.split_at(raw.0.len() - 4);
        crc32fast::hash(content) == u32::from_le_bytes(stored.try_into().unwrap())
    }

    fn header(kind: u8, timestamp: u32, server: u32, body: &[u8], log_pos: u32, flags: u16) -> Vec<u8> {
        let size = (HEADER_LEN + body.len() + 4) as u32;
        let mut out = Vec::new();
        out.extend_from_slice(&timestamp.to_le_bytes());
        out.push(kind);
        out.extend_from_slice(&server.to_le_bytes());
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&log_pos.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(body);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    #[test]
    fn the_header_is_read_where_the_format_puts_it() {
        let bytes = header(kind::XID, 1_795_000_000, 7, &[1, 2, 3, 4, 5, 6, 7, 8], 900, 0);
        let (event, rest) = RawEvent::split(&bytes).unwrap();
        assert!(rest.is_empty());
        assert_eq!(
            (event.kind(), event.timestamp(), event.server_id(), event.log_pos(), event.0.len()),
            (kind::XID, 1_795_000_000, 7, 900, 31usize)
        );
        assert_eq!(event.body(true), &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(checksum_matches(event));
        assert!(RawEvent::split(&bytes[..20]).is_none(), "a cut event is not an event");
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert!(!checksum_matches(RawEvent(&flipped)));
    }

    #[test]
    fn a_rows_event_is_flagged_as_its_statements_end_with_a_valid_checksum() {
        let mut body = vec![7, 0, 0, 0, 0, 0];
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&[1, 2, 3]);
        let bytes = header(0x1e, 10, 5, &body, 100, 0);
        assert_eq!(rows_flags(RawEvent(&bytes)), 0);
        let ended = with_statement_end(RawEvent(&bytes), true).unwrap();
        assert_eq!(rows_flags(RawEvent(&ended)), STMT_END_FLAG);
        assert!(checksum_matches(RawEvent(&ended)));
        assert_eq!(ended.len(), bytes.len());
        assert_eq!(&ended[..ROWS_FLAGS_AT], &bytes[..ROWS_FLAGS_AT]);
    }

    #[test]
    fn mariadb_gtids_are_read_from_their_body() {
        let mut body = Vec::new();
        body.extend_from_slice(&42u64.to_le_bytes());
        body.extend_from_slice(&3u32.to_le_bytes());
        body.push(MARIADB_FL_STANDALONE);
        let bytes = header(kind::MARIADB_GTID, 10, 5, &body, 100, 0);
        let (gtid, flags) = mariadb_gtid(RawEvent(&bytes), true).unwrap();
        assert_eq!(gtid, Gtid::MariaDb { domain: 3, server: 5, sequence: 42 });
        assert_eq!(flags, MARIADB_FL_STANDALONE);
    }

    #[test]
    fn statements_are_told_apart_by_their_first_word() {
        assert_eq!(first_word("  begin"), "BEGIN");
        assert_eq!(first_word("COMMIT;"), "COMMIT");
        assert!(is_xa_end("xa  prepare 'x'"));
        assert!(!is_xa_end("XA START 'x'"));
    }
}
