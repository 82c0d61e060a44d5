//! The layout of an archive (docs/backup-format.md, "Binary log archive"): what is stored
//! where, and the records that describe the segments.
//!
//! ```text
//! archive.json                  what the archive follows (written once)
//! epochs.json                   where each stretch without a gap begins, and why
//! checkpoint.json               the newest stored position (rewritten; a hint, the index rules)
//! segments/<seq>.binlog.zst     a segment: a binary log file (magic, format event, events)
//! index/<seq>.json              a segment's record, written after it (create-only)
//! ```
//! A segment is only part of the archive once its record exists: a segment without one is
//! the leftover of an archiver that died before finishing it, and the next one overwrites it.

use futures::stream::{self, StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use visitors_agent_contract::archive::ServerIdentity;
use visitors_agent_contract::gtid::GtidSet;

use crate::error::{AgentError, Result};
use crate::storage::Storage;

pub const FORMAT_NAME: &str = "visitors-binlog-archive";
pub const FORMAT_VERSION: u32 = 1;
pub const ARCHIVE_FILE: &str = "archive.json";
pub const EPOCHS_FILE: &str = "epochs.json";
pub const CHECKPOINT_FILE: &str = "checkpoint.json";
pub const INDEX_DIR: &str = "index";
pub const SEGMENTS_DIR: &str = "segments";
/// Index records read at once.
const READS_IN_FLIGHT: usize = 32;

/// `archive.json`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveMeta {
    pub format: String,
    pub format_version: u32,
    pub tool: String,
    pub created_time: String,
    /// The server archived when the archive was created.
    pub server: ServerIdentity,
}

/// A position in the server's binary log.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BinlogPos {
    pub file: String,
    pub position: u64,
}

impl std::fmt::Display for BinlogPos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.position)
    }
}

/// The sequence number of a binary log file name (`binlog.000042` is 42).
pub fn file_number(file: &str) -> Option<u64> {
    file.rsplit_once('.').and_then(|(_, number)| number.parse().ok())
}

/// The file the server writes after `file`, by its naming rule.
pub fn next_file(file: &str) -> Option<String> {
    let (base, number) = file.rsplit_once('.')?;
    let next = number.parse::<u64>().ok()? + 1;
    Some(format!("{base}.{next:0width$}", width = number.len()))
}

impl BinlogPos {
    /// Whether `self` comes before `other` in the history of one server (file, then offset).
    pub fn is_before(&self, other: &BinlogPos) -> bool {
        match (file_number(&self.file), file_number(&other.file)) {
            (Some(a), Some(b)) if a != b => a < b,
            _ => self.file == other.file && self.position < other.position,
        }
    }
}

/// One stretch of the archive without a gap (`epochs.json` lists them).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Epoch {
    pub epoch: u64,
    /// The sequence number of its first segment.
    pub first_seq: u64,
    /// Where it begins in the server's binary log.
    pub start: BinlogPos,
    /// When the archiver began it (RFC 3339).
    pub started_time: String,
    /// The commit time (Unix seconds, server clock) of its first stored transaction, written
    /// with its first record: an epoch begun from a server's oldest binary log may hold
    /// transactions from long before it was begun. Absent in archives of older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_time: Option<i64>,
    /// Why the one before it ended, when there is one before it and a gap between them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap_before: Option<GapRecord>,
    /// The server whose binary log it follows: its file names and positions are that
    /// server's. Absent in archives of older agents (the first epoch's is then `archive.json`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerIdentity>,
    /// It goes on from the epoch before it without a gap, on another server (a failover or a
    /// switchover): where the two meet is a GTID state, not a file position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<Continuation>,
}

impl Epoch {
    /// The server of the epoch, falling back for an archive of an older agent to the one the
    /// archive was created with for its first epoch.
    pub fn server_or<'a>(&'a self, meta: Option<&'a ArchiveMeta>) -> Option<&'a ServerIdentity> {
        self.server.as_ref().or(meta.filter(|_| self.epoch == 0).map(|m| &m.server))
    }
}

/// Where an epoch that continues the one before it by GTID meets it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Continuation {
    /// The archive's GTID state when the epoch began (the `gtidAfter` of the previous epoch's
    /// last record): the epoch's first transaction is the first one its server had after it.
    pub after_gtids: String,
    /// Where the previous epoch ended, in its own server's binary log.
    pub previous_end: BinlogPos,
}

/// Continuity lost: the server no longer has (or never had) what follows the previous epoch.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GapRecord {
    /// `binlogPurged` or `serverChanged`.
    pub reason: String,
    pub message: String,
    /// Where the previous epoch ended.
    pub previous_end: BinlogPos,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_gtid: Option<String>,
    /// The commit time (Unix seconds) of the previous epoch's newest transaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_time: Option<i64>,
}

/// `index/<seq>.json`: one stored segment.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SegmentEntry {
    pub seq: u64,
    pub epoch: u64,
    /// The binary log file the segment's events come from, and their span in it.
    pub file: String,
    pub start: u64,
    pub end: u64,
    /// The file ended at `end`: the next segment begins the next file.
    pub ends_file: bool,
    /// The stored object (none for a record that only marks the end of a file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    pub stored_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Bytes of events (uncompressed), events and whole transactions.
    pub bytes: u64,
    pub events: u64,
    pub transactions: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_gtid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_gtid: Option<String>,
    /// The server's GTID state before and after the segment, as far as the archive knows it
    /// (`gtidBefore` is absent in archives of older agents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid_before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid_after: Option<String>,
    /// Commit times (Unix seconds, server clock) of its first and last transactions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_time: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_time: Option<i64>,
    /// When it was stored (RFC 3339, the archiver's clock).
    pub stored_time: String,
    /// The id of the age key the object is encrypted with; none: it is not encrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
}

impl SegmentEntry {
    /// A record of a span of `file` without events: no object, no transactions, no times.
    pub fn without_events(seq: u64, epoch: u64, file: &str, start: u64, end: u64, ends_file: bool) -> Self {
        Self {
            seq,
            epoch,
            file: file.into(),
            start,
            end,
            ends_file,
            object: None,
            stored_bytes: 0,
            sha256: None,
            bytes: 0,
            events: 0,
            transactions: 0,
            first_gtid: None,
            last_gtid: None,
            gtid_before: None,
            gtid_after: None,
            first_time: None,
            last_time: None,
            stored_time: String::new(),
            key_id: None,
        }
    }

    pub fn start_pos(&self) -> BinlogPos {
        BinlogPos { file: self.file.clone(), position: self.start }
    }

    pub fn end_pos(&self) -> BinlogPos {
        BinlogPos { file: self.file.clone(), position: self.end }
    }

    /// Where the segment after this one begins.
    pub fn next_start(&self) -> BinlogPos {
        match (self.ends_file, next_file(&self.file)) {
            (true, Some(next)) => BinlogPos { file: next, position: 4 },
            _ => self.end_pos(),
        }
    }

    /// Whether `next` takes up exactly where this segment ends, in the same server's binary log.
    pub fn is_followed_by(&self, next: &SegmentEntry) -> bool {
        next.seq == self.seq + 1 && next.epoch == self.epoch && next.start_pos() == self.next_start()
    }

    pub fn gtids_after(&self) -> Option<GtidSet> {
        self.gtid_after.as_deref().and_then(|g| GtidSet::parse(g).ok())
    }

    pub fn gtids_before(&self) -> Option<GtidSet> {
        self.gtid_before.as_deref().and_then(|g| GtidSet::parse(g).ok())
    }
}

/// Whether `next` takes up exactly where `previous` ends: in one epoch by file and position; at
/// the start of an epoch that continues the previous one on another server, by GTID (the
/// epoch began after exactly the state `previous` left, and `previous` is its epoch's last).
pub fn continues(previous: &SegmentEntry, next: &SegmentEntry, epochs: &[Epoch]) -> bool {
    if next.epoch == previous.epoch {
        return previous.is_followed_by(next);
    }
    let Some(epoch) = epochs.iter().find(|e| e.epoch == next.epoch) else { return false };
    let Some(continuation) = &epoch.continues else { return false };
    let met = GtidSet::parse(&continuation.after_gtids).ok();
    next.seq == previous.seq + 1
        && epoch.first_seq == next.seq
        && previous.end_pos() == continuation.previous_end
        && matches!((met, previous.gtids_after()), (Some(met), Some(after)) if met.same_as(&after))
}

/// `checkpoint.json`: the newest stored position, and until when the archive was known to
/// hold everything the server had committed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    pub seq: u64,
    /// Unix seconds (server clock) of the newest stored transaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_time: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_gtid: Option<String>,
    /// Unix seconds: the archiver had stored everything the server had committed then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caught_up_time: Option<i64>,
    pub updated_time: String,
}

/// Until when (Unix seconds, server clock) an archive holds every committed transaction, from
/// the commit time of its newest stored transaction and a time it was known to be caught up:
/// the second before either. More of the newest transaction's second may not be stored yet,
/// and a caught-up time is the archiver's clock, not the server's.
pub fn covered_through(newest_transaction: Option<i64>, caught_up: Option<i64>) -> Option<i64> {
    [newest_transaction, caught_up].into_iter().flatten().max().map(|t| t - 1)
}

pub fn index_path(seq: u64) -> String {
    format!("{INDEX_DIR}/{seq:012}.json")
}

/// A segment's object: its sequence number, then a random tag, so that an archiver that lost
/// its Lease and still writes can never overwrite a segment another one recorded.
pub fn segment_path(seq: u64, tag: u32) -> String {
    format!("{SEGMENTS_DIR}/{seq:012}-{tag:08x}.binlog.zst")
}

/// The sequence number in a segment object's name.
pub fn seq_of_segment_path(path: &str) -> Option<u64> {
    path.rsplit('/').next()?.split(['-', '.']).next()?.parse().ok()
}

fn seq_of_index_path(path: &str) -> Option<u64> {
    path.strip_prefix(INDEX_DIR)?.strip_prefix('/')?.strip_suffix(".json")?.parse().ok()
}

/// A stored JSON record, or `None` when there is none.
pub async fn read_json<T: for<'de> Deserialize<'de>>(storage: &Storage, path: &str) -> Result<Option<T>> {
    match storage.read(path).await {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| AgentError::ArchiveInvalid {
            location: storage.location().into(),
            reason: format!("{path} is not readable: {e}"),
        }),
        Err(AgentError::FileMissing { .. }) => Ok(None),
        Err(error) => Err(error),
    }
}

pub fn to_json<T: Serialize>(value: &T) -> bytes::Bytes {
    bytes::Bytes::from(serde_json::to_vec_pretty(value).expect("archive records serialise"))
}

/// The sequence numbers of every stored segment record, in order.
pub async fn stored_seqs(storage: &Storage) -> Result<Vec<u64>> {
    let mut seqs: Vec<u64> =
        storage.list_under(INDEX_DIR).await?.iter().filter_map(|(path, _)| seq_of_index_path(path)).collect();
    seqs.sort_unstable();
    Ok(seqs)
}

/// The records of `seqs`, read in parallel, in order.
pub async fn read_entries(storage: &Storage, seqs: &[u64]) -> Result<Vec<SegmentEntry>> {
    let entries: Vec<SegmentEntry> = stream::iter(seqs.iter().copied())
        .map(|seq| async move {
            read_json::<SegmentEntry>(storage, &index_path(seq)).await?.ok_or_else(|| AgentError::ArchiveInvalid {
                location: storage.location().into(),
                reason: format!("{} vanished while the archive was read", index_path(seq)),
            })
        })
        .buffered(READS_IN_FLIGHT)
        .try_collect()
        .await?;
    Ok(entries)
}

/// Every segment record of the archive, in order.
pub async fn all_entries(storage: &Storage) -> Result<Vec<SegmentEntry>> {
    let seqs = stored_seqs(storage).await?;
    read_entries(storage, &seqs).await
}

pub async fn read_epochs(storage: &Storage) -> Result<Vec<Epoch>> {
    Ok(read_json::<Vec<Epoch>>(storage, EPOCHS_FILE).await?.unwrap_or_default())
}

/// A description of an archive, for `inspect`, and the bytes its segments take.
pub async fn describe(storage: &Storage) -> Result<(String, u64)> {
    let meta: Option<ArchiveMeta> = read_json(storage, ARCHIVE_FILE).await?;
    let epochs = read_epochs(storage).await?;
    let entries = all_entries(storage).await?;
    let checkpoint: Option<Checkpoint> = read_json(storage, CHECKPOINT_FILE).await?;
    let mut out = String::new();
    if let Some(meta) = &meta {
        out.push_str(&format!(
            "{} version {}, created {} by {}, following {} {} (server id {})\n",
            meta.format,
            meta.format_version,
            meta.created_time,
            meta.tool,
            meta.server.flavor,
            meta.server.version,
            meta.server.server_id
        ));
    }
    let time = |t: Option<i64>| {
        t.and_then(|t| jiff::Timestamp::from_second(t).ok()).map_or("-".to_string(), |t| t.to_string())
    };
    for epoch in &epochs {
        let own: Vec<&SegmentEntry> = entries.iter().filter(|e| e.epoch == epoch.epoch).collect();
        out.push_str(&format!("epoch {} from {} (begun {})\n", epoch.epoch, epoch.start, epoch.started_time));
        if let Some(server) = epoch.server_or(meta.as_ref()) {
            out.push_str(&format!("  following {server}\n"));
        }
        if let Some(gap) = &epoch.gap_before {
            out.push_str(&format!("  gap before it ({}): {}\n", gap.reason, gap.message));
        }
        if let Some(continuation) = &epoch.continues {
            out.push_str(&format!(
                "  continues the epoch before it without a gap, on another server, after GTIDs {} (it ended at {})\n",
                continuation.after_gtids, continuation.previous_end
            ));
        }
        if let (Some(first), Some(last)) = (own.first(), own.last()) {
            let transactions: u64 = own.iter().map(|e| e.transactions).sum();
            let first_time = own.iter().find_map(|e| e.first_time);
            let last_time = own.iter().rev().find_map(|e| e.last_time);
            out.push_str(&format!(
                "  segments {}..{} ({}): {} to {}, {transactions} transactions committed {} to {}\n",
                first.seq,
                last.seq,
                own.len(),
                first.start_pos(),
                last.end_pos(),
                time(first_time),
                time(last_time)
            ));
        }
    }
    if let Some(checkpoint) = &checkpoint {
        out.push_str(&format!(
            "newest transaction {} ({}), caught up at {}\n",
            checkpoint.last_gtid.as_deref().unwrap_or("-"),
            time(checkpoint.last_time),
            time(checkpoint.caught_up_time)
        ));
    }
    Ok((out, entries.iter().map(|e| e.stored_bytes).sum()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, file: &str, start: u64, end: u64, ends_file: bool) -> SegmentEntry {
        SegmentEntry::without_events(seq, 0, file, start, end, ends_file)
    }

    #[test]
    fn segments_follow_each_other_within_and_across_files() {
        let a = entry(1, "binlog.000009", 4, 900, false);
        assert!(a.is_followed_by(&entry(2, "binlog.000009", 900, 1200, false)));
        assert!(!a.is_followed_by(&entry(2, "binlog.000009", 901, 1200, false)), "a hole");
        assert!(!a.is_followed_by(&entry(3, "binlog.000009", 900, 1200, false)), "a missing record");
        let last_of_file = entry(2, "binlog.000009", 900, 1200, true);
        assert!(last_of_file.is_followed_by(&entry(3, "binlog.000010", 4, 300, false)));
        assert!(!last_of_file.is_followed_by(&entry(3, "binlog.000011", 4, 300, false)));
        assert_eq!(next_file("binlog.999999"), Some("binlog.1000000".into()));
    }

    #[test]
    fn an_archive_covers_up_to_the_second_before_its_newest_transaction_or_catch_up() {
        assert_eq!(covered_through(Some(100), None), Some(99), "more of second 100 may come");
        assert_eq!(covered_through(Some(100), Some(130)), Some(129));
        assert_eq!(covered_through(None, Some(130)), Some(129));
        assert_eq!(covered_through(None, None), None);
    }

    #[test]
    fn positions_order_by_file_number_then_offset() {
        let pos = |file: &str, position| BinlogPos { file: file.into(), position };
        assert!(pos("binlog.000009", 9000).is_before(&pos("binlog.000010", 4)));
        assert!(pos("binlog.000010", 4).is_before(&pos("binlog.000010", 5)));
        assert!(!pos("binlog.000010", 5).is_before(&pos("binlog.000010", 5)));
        assert_eq!(seq_of_index_path("index/000000000042.json"), Some(42));
        assert_eq!(seq_of_segment_path(&segment_path(42, 0xbeef)), Some(42));
        assert_eq!(segment_path(42, 0xbeef), "segments/000000000042-0000beef.binlog.zst");
    }
}
