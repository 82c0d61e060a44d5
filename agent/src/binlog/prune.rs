//! Retention of an archive: the segments wholly before the oldest base backup still kept are
//! no restore's any more. The segment that holds the backup's position, and every one after
//! it, stay; so do the segments of any epoch newer than the backup's.
//!
//! [`find_start`] is where a base backup's snapshot is in the archive, for retention and for a
//! replay alike: by its binary log position on the server it was taken on, or, for a backup of
//! another server (a replica, or the primary before a failover), by its GTIDs.

use visitors_agent_contract::archive::{PruneBefore, ServerIdentity};
use visitors_agent_contract::gtid::GtidSet;

use super::layout::{
    ARCHIVE_FILE, ArchiveMeta, BinlogPos, Epoch, SEGMENTS_DIR, SegmentEntry, all_entries, continues, index_path,
    read_epochs, read_json, seq_of_segment_path,
};
use crate::error::{AgentError, Result};
use crate::format::Position;
use crate::storage::Storage;

/// The snapshot of a base backup: where a replay from it starts, and what retention keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneTarget {
    /// Its position in the binary log of the server it was taken on, when that server logs.
    pub position: Option<BinlogPos>,
    /// The server time of the snapshot (Unix seconds).
    pub time: Option<i64>,
    /// The server's GTIDs at the snapshot: they tell apart epochs that reuse file names (a new
    /// data directory numbers its binary logs from 1 again), and find the snapshot in the
    /// archive of another server.
    pub gtids: Option<GtidSet>,
    /// The server it was taken on, when the backup says.
    pub server: Option<ServerIdentity>,
}

impl PruneTarget {
    pub fn from_request(request: &PruneBefore) -> std::result::Result<Self, String> {
        let time = request.time.parse::<jiff::Timestamp>().map_err(|e| format!("time {:?}: {e}", request.time))?;
        let position = (!request.binlog_file.is_empty())
            .then(|| BinlogPos { file: request.binlog_file.clone(), position: request.binlog_position });
        let gtids = request.gtid.as_deref().and_then(|g| GtidSet::parse(g).ok());
        if position.is_none() && gtids.is_none() {
            return Err("it names neither a binary log position nor GTIDs".into());
        }
        Ok(PruneTarget { position, time: Some(time.as_second()), gtids, server: None })
    }

    /// The snapshot position a backup's manifest records.
    pub fn from_manifest(position: Option<&Position>, location: &str) -> Result<Self> {
        let refuse = |why: &str| AgentError::Usage(format!("the backup at {location} {why}"));
        let position = position.ok_or_else(|| refuse("records no binary log position"))?;
        let time = position.time.as_deref().and_then(|t| t.parse::<jiff::Timestamp>().ok()).map(|t| t.as_second());
        let gtids = position.gtid.as_deref().and_then(|g| GtidSet::parse(g).ok());
        let at = match (&position.binlog_file, position.binlog_position) {
            (Some(file), Some(offset)) => Some(BinlogPos { file: file.clone(), position: offset }),
            _ => None,
        };
        if at.is_none() && gtids.is_none() {
            return Err(refuse("records neither a binary log file and position nor GTIDs"));
        }
        Ok(PruneTarget { position: at, time, gtids, server: position.server.clone() })
    }

    /// Whether the snapshot comes right after `entry`, nothing committed between them: at its
    /// end, or early in the file it leads to with the same GTIDs (only a new file's bookkeeping
    /// events came first).
    pub fn follows(&self, entry: &SegmentEntry) -> bool {
        let Some(position) = &self.position else { return false };
        let next = entry.next_start();
        if next == *position {
            return true;
        }
        let same_gtids =
            matches!((&self.gtids, entry.gtids_after()), (Some(snapshot), Some(after)) if snapshot.same_as(&after));
        next.file == position.file && next.position <= position.position && same_gtids
    }

    /// Whether the server's history at segment `index` of `entries` can be the snapshot's: the
    /// snapshot's GTIDs hold what the server had before the segment, and are held by what it
    /// had after it (unknown GTIDs do not tell).
    fn same_history(&self, entries: &[SegmentEntry], index: usize) -> bool {
        let Some(snapshot) = &self.gtids else { return true };
        let entry = &entries[index];
        let previous = index.checked_sub(1).map(|i| &entries[i]).filter(|p| p.epoch == entry.epoch);
        let before = entry.gtids_before().or_else(|| previous.and_then(SegmentEntry::gtids_after));
        entry.gtids_after().is_none_or(|after| after.includes(snapshot)) && before.is_none_or(|b| snapshot.includes(&b))
    }
}

/// Where a base backup's snapshot is in an archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Segment `.0` holds the snapshot's position: its events up to it are in the backup.
    Within(usize),
    /// The snapshot is right before segment `.0` by position (`.0` may be the number of
    /// segments: after the newest).
    Before(usize),
    /// Segment `.0` is the first holding a transaction the snapshot's GTIDs do not (or, equal
    /// to the number of segments, the archive holds nothing more than they do): those they do
    /// hold may come anywhere after it, and are in the backup.
    ByGtids(usize),
}

impl Start {
    pub fn index(self) -> usize {
        match self {
            Start::Within(index) | Start::Before(index) | Start::ByGtids(index) => index,
        }
    }
}

/// Where the snapshot of `target` is in the archive's `entries`: by its position on the server
/// it was taken on (the newest such segment, when epochs reuse a file name and their GTIDs do
/// not tell them apart), or by its GTIDs; none when the archive does not hold it. A snapshot
/// that does not name its server (a retention request, a backup of an older agent) is looked
/// for by its GTIDs first, which mean the same on every server.
pub fn find_start(
    entries: &[SegmentEntry],
    epochs: &[Epoch],
    meta: Option<&ArchiveMeta>,
    target: &PruneTarget,
) -> Option<Start> {
    let by_position = || by_position(entries, epochs, meta, target);
    let by_gtids = || by_gtids(entries, epochs, target);
    if target.server.is_some() || target.gtids.is_none() {
        by_position().or_else(by_gtids)
    } else {
        by_gtids().or_else(by_position)
    }
}

fn by_position(
    entries: &[SegmentEntry],
    epochs: &[Epoch],
    meta: Option<&ArchiveMeta>,
    target: &PruneTarget,
) -> Option<Start> {
    let position = target.position.as_ref()?;
    // A position means something only in the binary log of the server it was taken on.
    let on_its_server = |entry: &SegmentEntry| {
        let archived = epochs.iter().find(|e| e.epoch == entry.epoch).and_then(|e| e.server_or(meta));
        match (archived, &target.server) {
            (Some(archived), Some(snapshot)) => archived.same_server(snapshot),
            _ => true,
        }
    };
    let holds = |index: usize| {
        let entry = &entries[index];
        on_its_server(entry)
            && entry.file == position.file
            && entry.start <= position.position
            && position.position < entry.end.max(entry.start + 1)
            // A record stored before the snapshot was taken cannot hold it.
            && target.time.is_none_or(|time| stored_after(entry, time))
            && target.same_history(entries, index)
    };
    let at_end = |index: usize| {
        let entry = &entries[index];
        on_its_server(entry) && entry.end_pos() == *position && !entry.ends_file && target.same_history(entries, index)
    };
    let newest = entries.len().checked_sub(1);
    (0..entries.len())
        .rev()
        .find(|&i| holds(i))
        .map(Start::Within)
        .or_else(|| (0..entries.len()).rev().find(|&i| at_end(i)).map(|i| Start::Before(i + 1)))
        .or_else(|| {
            newest.filter(|&i| on_its_server(&entries[i]) && target.follows(&entries[i])).map(|i| Start::Before(i + 1))
        })
}

/// The first segment holding a transaction the snapshot does not, when the snapshot holds
/// everything before it (the newest such, when epochs after a gap reuse GTIDs); or, when the
/// snapshot holds exactly what the newest segment leaves, the end of the archive.
fn by_gtids(entries: &[SegmentEntry], epochs: &[Epoch], target: &PruneTarget) -> Option<Start> {
    let snapshot = target.gtids.as_ref()?;
    let before = |index: usize| {
        entries[index].gtids_before().or_else(|| {
            let previous = &entries[index.checked_sub(1)?];
            continues(previous, &entries[index], epochs).then(|| previous.gtids_after()).flatten()
        })
    };
    let first_not_held = |index: usize| {
        let after = entries[index].gtids_after();
        before(index).is_some_and(|b| snapshot.includes(&b) && snapshot.disagreement(&b).is_none())
            && after.is_some_and(|a| !snapshot.includes(&a))
    };
    let newest = entries.len().checked_sub(1);
    (0..entries.len()).rev().find(|&i| first_not_held(i)).map(Start::ByGtids).or_else(|| {
        newest
            .filter(|&i| entries[i].gtids_after().is_some_and(|after| after.same_as(snapshot)))
            .map(|i| Start::ByGtids(i + 1))
    })
}
/// What a prune deleted.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PruneReport {
    pub segments: u64,
    pub stored_bytes: u64,
    /// The first segment kept.
    pub kept_from: Option<u64>,
}

impl std::fmt::Display for PruneReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kept_from {
            Some(seq) => {
                write!(f, "{} segments ({} bytes) deleted; kept from segment {seq}", self.segments, self.stored_bytes)
            }
            None => write!(f, "nothing deleted: the base backup's position is not in the archive"),
        }
    }
}

/// The first segment a restore from `target` still needs ([`find_start`]), or none when the
/// archive does not hold the snapshot or holds nothing after it yet.
pub fn first_needed(
    entries: &[SegmentEntry],
    epochs: &[Epoch],
    meta: Option<&ArchiveMeta>,
    target: &PruneTarget,
) -> Option<usize> {
    find_start(entries, epochs, meta, target).map(Start::index).filter(|&index| index < entries.len())
}

fn stored_after(entry: &SegmentEntry, time: i64) -> bool {
    entry.stored_time.parse::<jiff::Timestamp>().map_or(true, |stored| stored.as_second() + 60 >= time)
}

/// Deletes every segment before the first one `target` needs: its record first, then its
/// object, so a record never names a deleted object. Never the newest segment.
pub async fn prune(storage: &Storage, target: &PruneTarget) -> Result<PruneReport> {
    let entries = all_entries(storage).await?;
    let epochs = read_epochs(storage).await?;
    let meta: Option<ArchiveMeta> = read_json(storage, ARCHIVE_FILE).await?;
    let Some(first) = first_needed(&entries, &epochs, meta.as_ref(), target) else {
        return Ok(PruneReport::default());
    };
    let first = first.min(entries.len().saturating_sub(1));
    let kept_from = entries[first].seq;
    let mut report = PruneReport { kept_from: Some(kept_from), ..PruneReport::default() };
    for entry in &entries[..first] {
        storage.delete(&index_path(entry.seq)).await?;
        if let Some(object) = &entry.object {
            storage.delete(object).await?;
        }
        report.segments += 1;
        report.stored_bytes += entry.stored_bytes;
    }
    // Objects whose record was never written (an archiver died between the two), before the cut.
    for (path, _) in storage.list_under(SEGMENTS_DIR).await? {
        if seq_of_segment_path(&path).is_some_and(|seq| seq < kept_from) {
            storage.delete(&path).await?;
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, file: &str, start: u64, end: u64) -> SegmentEntry {
        serde_json::from_value(serde_json::json!({
            "seq": seq, "epoch": 0, "file": file, "start": start, "end": end, "endsFile": false,
            "storedBytes": 10, "bytes": 10, "events": 1, "transactions": 1,
            "storedTime": "2026-11-25T10:00:00Z",
        }))
        .unwrap()
    }

    fn target(file: &str, position: u64) -> PruneTarget {
        PruneTarget { position: Some(BinlogPos { file: file.into(), position }), time: None, gtids: None, server: None }
    }

    /// `first_needed` of an archive with one epoch and no recorded servers.
    fn first(entries: &[SegmentEntry], target: &PruneTarget) -> Option<usize> {
        first_needed(entries, &[], None, target)
    }

    #[test]
    fn the_segment_holding_the_backup_and_all_after_it_are_needed() {
        let entries =
            [entry(1, "b.1", 4, 100), entry(2, "b.1", 100, 200), entry(3, "b.1", 200, 300), entry(4, "b.2", 4, 50)];
        assert_eq!(first(&entries, &target("b.1", 150)), Some(1));
        assert_eq!(first(&entries, &target("b.1", 100)), Some(1), "a backup at a segment's start needs it");
        assert_eq!(first(&entries, &target("b.2", 10)), Some(3));
        assert_eq!(first(&entries, &target("b.0", 10)), None, "not in the archive: nothing is pruned");
        assert_eq!(first(&entries, &target("b.2", 50)), None, "after the newest segment: none yet");
    }

    #[test]
    fn a_reused_file_name_picks_the_newest_epoch() {
        let mut second = entry(3, "b.1", 4, 500);
        second.epoch = 1;
        let entries = [entry(1, "b.1", 4, 500), entry(2, "b.1", 500, 900), second];
        assert_eq!(first(&entries, &target("b.1", 200)), Some(2));
    }

    #[test]
    fn a_reused_file_name_is_told_apart_by_the_snapshots_gtids() {
        let with_gtids = |mut entry: SegmentEntry, epoch, after: &str| {
            entry.epoch = epoch;
            entry.gtid_after = Some(after.into());
            entry
        };
        // Epoch 0: the old server, up to 0-1-500; epoch 1: a new data directory, from 0-1-1 again.
        let entries = [
            with_gtids(entry(1, "b.1", 4, 500), 0, "0-1-400"),
            with_gtids(entry(2, "b.1", 500, 900), 0, "0-1-500"),
            with_gtids(entry(3, "b.1", 4, 500), 1, "0-1-20"),
            with_gtids(entry(4, "b.1", 500, 900), 1, "0-1-40"),
        ];
        let at = |position, gtids: &str| PruneTarget { gtids: GtidSet::parse(gtids).ok(), ..target("b.1", position) };
        assert_eq!(first(&entries, &at(600, "0-1-450")), Some(1), "a snapshot of the old server");
        assert_eq!(first(&entries, &at(600, "0-1-30")), Some(3), "a snapshot of the new one");
        assert_eq!(first(&entries, &at(200, "0-1-10")), Some(2));
        assert_eq!(first(&entries, &at(600, "0-1-600")), None, "a history the archive does not hold");
    }

    #[test]
    fn a_snapshot_of_a_replica_is_found_by_its_gtids_whatever_its_position_names() {
        let with_gtids = |mut entry: SegmentEntry, before: &str, after: &str| {
            (entry.gtid_before, entry.gtid_after) = (Some(before.into()), Some(after.into()));
            entry
        };
        let entries = [
            with_gtids(entry(1, "b.1", 4, 500), "", "0-1-10"),
            with_gtids(entry(2, "b.1", 500, 900), "0-1-10", "0-1-20"),
            with_gtids(entry(3, "b.1", 900, 1300), "0-1-20", "0-1-30"),
        ];
        // The replica's b.1:600 is no position of the archived server's b.1.
        let replica = PruneTarget { gtids: GtidSet::parse("0-1-25").ok(), ..target("b.1", 600) };
        assert_eq!(first(&entries, &replica), Some(2), "a retention request names no server: GTIDs first");
        let named = PruneTarget { server: Some(server(2)), ..replica.clone() };
        let epochs = [Epoch {
            epoch: 0,
            first_seq: 1,
            start: BinlogPos { file: "b.1".into(), position: 4 },
            started_time: String::new(),
            first_time: None,
            gap_before: None,
            server: Some(server(1)),
            continues: None,
        }];
        assert_eq!(
            first_needed(&entries, &epochs, None, &named),
            Some(2),
            "another server's position is not looked up"
        );
        let own = PruneTarget { server: Some(server(1)), gtids: GtidSet::parse("0-1-15").ok(), ..target("b.1", 600) };
        assert_eq!(find_start(&entries, &epochs, None, &own), Some(Start::Within(1)));
    }

    fn server(id: u32) -> ServerIdentity {
        ServerIdentity { flavor: "mariadb".into(), server_id: id, ..ServerIdentity::default() }
    }

    #[test]
    fn a_snapshot_early_in_the_next_file_with_the_same_gtids_follows_the_file_that_ended() {
        let mut ended = entry(7, "b.1", 4, 900);
        (ended.ends_file, ended.gtid_after) = (true, Some("0-1-40".into()));
        let snapshot = |file: &str, position, gtids: &str| PruneTarget {
            gtids: GtidSet::parse(gtids).ok(),
            ..target(file, position)
        };
        assert!(snapshot("b.2", 4, "0-1-40").follows(&ended));
        assert!(snapshot("b.2", 385, "0-1-40").follows(&ended), "after the new file's GTID list");
        assert!(!snapshot("b.2", 385, "0-1-41").follows(&ended), "a transaction came between");
        assert!(!snapshot("b.3", 385, "0-1-40").follows(&ended));
        assert!(!target("b.2", 385).follows(&ended), "unknown GTIDs tell nothing");
    }
}
