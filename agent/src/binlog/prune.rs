//! Retention of an archive: the segments wholly before the oldest base backup still kept are
//! no restore's any more. The segment that holds the backup's position, and every one after
//! it, stay; so do the segments of any epoch newer than the backup's.

use visitors_agent_contract::archive::PruneBefore;
use visitors_agent_contract::gtid::GtidSet;

use super::layout::{BinlogPos, SEGMENTS_DIR, SegmentEntry, all_entries, index_path, seq_of_segment_path};
use crate::error::{AgentError, Result};
use crate::format::Position;
use crate::storage::Storage;

/// The snapshot of a base backup: where a replay from it starts, and what retention keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneTarget {
    pub position: BinlogPos,
    /// The server time of the snapshot (Unix seconds).
    pub time: Option<i64>,
    /// The server's GTIDs at the snapshot: they tell apart epochs that reuse file names (a new
    /// data directory numbers its binary logs from 1 again).
    pub gtids: Option<GtidSet>,
}

impl PruneTarget {
    pub fn from_request(request: &PruneBefore) -> std::result::Result<Self, String> {
        let time = request.time.parse::<jiff::Timestamp>().map_err(|e| format!("time {:?}: {e}", request.time))?;
        Ok(PruneTarget {
            position: BinlogPos { file: request.binlog_file.clone(), position: request.binlog_position },
            time: Some(time.as_second()),
            gtids: request.gtid.as_deref().and_then(|g| GtidSet::parse(g).ok()),
        })
    }

    /// The snapshot position a backup's manifest records.
    pub fn from_manifest(position: Option<&Position>, location: &str) -> Result<Self> {
        let refuse = |why: &str| AgentError::Usage(format!("the backup at {location} {why}"));
        let position = position.ok_or_else(|| refuse("records no binary log position"))?;
        let (Some(file), Some(offset)) = (&position.binlog_file, position.binlog_position) else {
            return Err(refuse("records no binary log file and position"));
        };
        let time = position.time.as_deref().and_then(|t| t.parse::<jiff::Timestamp>().ok()).map(|t| t.as_second());
        let gtids = position.gtid.as_deref().and_then(|g| GtidSet::parse(g).ok());
        Ok(PruneTarget { position: BinlogPos { file: file.clone(), position: offset }, time, gtids })
    }

    /// Whether the snapshot comes right after `entry`, nothing committed between them: at its
    /// end, or early in the file it leads to with the same GTIDs (only a new file's bookkeeping
    /// events came first).
    pub fn follows(&self, entry: &SegmentEntry) -> bool {
        let next = entry.next_start();
        if next == self.position {
            return true;
        }
        let after = entry.gtid_after.as_deref().and_then(|g| GtidSet::parse(g).ok());
        let same_gtids = matches!((&self.gtids, after), (Some(snapshot), Some(after)) if snapshot.includes(&after) && after.includes(snapshot));
        next.file == self.position.file && next.position <= self.position.position && same_gtids
    }

    /// Whether the server's history at segment `index` of `entries` can be the snapshot's: the
    /// snapshot's GTIDs hold what the server had before the segment, and are held by what it
    /// had after it (unknown GTIDs do not tell).
    fn same_history(&self, entries: &[SegmentEntry], index: usize) -> bool {
        let Some(snapshot) = &self.gtids else { return true };
        let gtids = |entry: &SegmentEntry| entry.gtid_after.as_deref().and_then(|g| GtidSet::parse(g).ok());
        let entry = &entries[index];
        let before = index.checked_sub(1).map(|i| &entries[i]).filter(|p| p.epoch == entry.epoch).and_then(gtids);
        gtids(entry).is_none_or(|after| after.includes(snapshot)) && before.is_none_or(|b| snapshot.includes(&b))
    }
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

/// The first segment a restore from `target` still needs: the one holding its position in the
/// history of the snapshot's server (the newest such, when epochs reuse a file name and their
/// GTIDs do not tell them apart), or none when the archive does not hold it.
pub fn first_needed(entries: &[SegmentEntry], target: &PruneTarget) -> Option<usize> {
    let holds = |index: usize| {
        let entry = &entries[index];
        entry.file == target.position.file
            && entry.start <= target.position.position
            && target.position.position < entry.end.max(entry.start + 1)
            // A record stored before the snapshot was taken cannot hold it.
            && target.time.is_none_or(|time| stored_after(entry, time))
            && target.same_history(entries, index)
    };
    let at_end = |index: usize| {
        let entry = &entries[index];
        entry.end_pos() == target.position && !entry.ends_file && target.same_history(entries, index)
    };
    let index = (0..entries.len())
        .rev()
        .find(|&i| holds(i))
        .or_else(|| (0..entries.len()).rev().find(|&i| at_end(i)).map(|i| i + 1))?;
    (index < entries.len()).then_some(index)
}

fn stored_after(entry: &SegmentEntry, time: i64) -> bool {
    entry.stored_time.parse::<jiff::Timestamp>().map_or(true, |stored| stored.as_second() + 60 >= time)
}

/// Deletes every segment before the first one `target` needs: its record first, then its
/// object, so a record never names a deleted object. Never the newest segment.
pub async fn prune(storage: &Storage, target: &PruneTarget) -> Result<PruneReport> {
    let entries = all_entries(storage).await?;
    let Some(first) = first_needed(&entries, target) else { return Ok(PruneReport::default()) };
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
        PruneTarget { position: BinlogPos { file: file.into(), position }, time: None, gtids: None }
    }

    #[test]
    fn the_segment_holding_the_backup_and_all_after_it_are_needed() {
        let entries =
            [entry(1, "b.1", 4, 100), entry(2, "b.1", 100, 200), entry(3, "b.1", 200, 300), entry(4, "b.2", 4, 50)];
        assert_eq!(first_needed(&entries, &target("b.1", 150)), Some(1));
        assert_eq!(first_needed(&entries, &target("b.1", 100)), Some(1), "a backup at a segment's start needs it");
        assert_eq!(first_needed(&entries, &target("b.2", 10)), Some(3));
        assert_eq!(first_needed(&entries, &target("b.0", 10)), None, "not in the archive: nothing is pruned");
        assert_eq!(first_needed(&entries, &target("b.2", 50)), None, "after the newest segment: none yet");
    }

    #[test]
    fn a_reused_file_name_picks_the_newest_epoch() {
        let mut second = entry(3, "b.1", 4, 500);
        second.epoch = 1;
        let entries = [entry(1, "b.1", 4, 500), entry(2, "b.1", 500, 900), second];
        assert_eq!(first_needed(&entries, &target("b.1", 200)), Some(2));
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
        assert_eq!(first_needed(&entries, &at(600, "0-1-450")), Some(1), "a snapshot of the old server");
        assert_eq!(first_needed(&entries, &at(600, "0-1-30")), Some(3), "a snapshot of the new one");
        assert_eq!(first_needed(&entries, &at(200, "0-1-10")), Some(2));
        assert_eq!(first_needed(&entries, &at(600, "0-1-600")), None, "a history the archive does not hold");
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
