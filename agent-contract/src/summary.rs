//! The summary the agent prints as its last line of output and writes to the Job's
//! termination message: the contract between the agent and the controllers that read it.
//! It must stay under 4 KiB when serialised (a Kubernetes termination message limit).

use crate::archive::ServerIdentity;
use serde::{Deserialize, Serialize};

/// Where a Job's agent writes its summary; the pod's `terminationMessagePath`.
pub const TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// The largest serialised summary the controllers accept.
pub const MAX_SUMMARY_BYTES: usize = 4096;

/// What the agent did.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Backup,
    Restore,
    Verify,
    Inspect,
    /// One stored backup deleted (`stored_bytes` then counts the bytes deleted).
    Delete,
    /// Binary log archiving, until stopped.
    Archive,
    /// Segments of an archive deleted (`stored_bytes` counts the bytes deleted).
    #[serde(rename = "prune-archive")]
    PruneArchive,
    /// A physical backup's files extracted into a directory (`filesWritten`, `bytesWritten`).
    Unpack,
}

/// The outcome of one agent invocation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AgentSummary {
    pub operation: Option<Operation>,
    /// True only when the whole operation succeeded (for a backup: the manifest is written).
    pub ok: bool,
    /// One line a user can act on, when `ok` is false. Never holds credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A stable camelCase name of the error, for example `wrongCredentials`, `missingBucket`,
    /// `checksumMismatch`, `connectionLost`, `diskFull`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
    /// The backup's location, for example `s3://bucket/prefix/run` (no credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// RFC 3339 start and end times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<f64>,
    /// MySQL server version, for example `11.8.3-MariaDB`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tables: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
    /// Bytes of table data before compression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_bytes: Option<u64>,
    /// Bytes stored (compressed), all files included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_bytes: Option<u64>,
    /// The binary log position of the snapshot (`gtid:<set>` or `<file>:<position>`), at most
    /// 1 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistent_position: Option<String>,
    /// SHA-256 of `manifest.json`, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_sha256: Option<String>,
    /// Backup: the server time and binary log position of the snapshot, where a restore to a
    /// point in time starts replaying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<Snapshot>,
    /// Backup: the server the snapshot was taken on (in a replicated app, which one: a
    /// replica's `binlogFile`/`binlogPosition` are positions in its own binary log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_server: Option<ServerIdentity>,
    /// Restore to a point in time: what was replayed after the base backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<Replay>,
    /// `verify --deep` (a restore drill): wall time of the restore alone, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_seconds: Option<f64>,
    /// `verify --deep`: whether every table's rows and content digest were compared with what
    /// the backup read (false: a physical run of a primary, whose tables were checked only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_compared: Option<bool>,
    /// The id of the key an encrypted backup was encrypted with (its name, never the key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_key_id: Option<String>,
    /// Unpack: the files written into the directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_written: Option<u64>,
    /// Unpack: the bytes written into those files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_written: Option<u64>,
}

/// The longest GTID text a summary carries; a longer set is left out rather than cut.
pub const MAX_GTID_CHARS: usize = 512;

/// Where a backup's snapshot is in the server's history.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// The server's clock at the snapshot (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog_position: Option<u64>,
    /// The GTID position (MariaDB) or executed set (MySQL), when short enough.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid: Option<String>,
}

/// What a restore to a point in time replayed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Replay {
    /// The newest replayed transaction: its commit time (RFC 3339) and GTID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_gtid: Option<String>,
    pub transactions: u64,
    pub events: u64,
    pub segments: u64,
}

/// `gtid` when it fits in a summary.
pub fn bounded_gtid(gtid: Option<String>) -> Option<String> {
    gtid.filter(|g| !g.is_empty() && g.len() <= MAX_GTID_CHARS)
}

impl AgentSummary {
    /// Serialises to one JSON line, cutting the error message if needed to stay under
    /// [`MAX_SUMMARY_BYTES`].
    pub fn to_line(&self) -> String {
        let line = serde_json::to_string(self).unwrap_or_else(|_| "{\"ok\":false}".into());
        if line.len() <= MAX_SUMMARY_BYTES {
            return line;
        }
        let mut shorter = self.clone();
        if let Some(error) = shorter.error.take() {
            let keep = error.len().saturating_sub(line.len() - MAX_SUMMARY_BYTES + 16);
            let mut cut = crate::text::truncate_on_char_boundary(error, keep);
            cut.push_str(" [cut]");
            shorter.error = Some(cut);
        }
        serde_json::to_string(&shorter).unwrap_or_else(|_| "{\"ok\":false}".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_named_as_their_commands() {
        let names: Vec<String> = [Operation::Backup, Operation::PruneArchive, Operation::Unpack]
            .iter()
            .map(|operation| serde_json::to_string(operation).unwrap())
            .collect();
        assert_eq!(names, ["\"backup\"", "\"prune-archive\"", "\"unpack\""]);
    }

    #[test]
    fn long_errors_are_cut_to_fit() {
        let summary = AgentSummary {
            operation: Some(Operation::Backup),
            ok: false,
            error: Some("é".repeat(5000)),
            ..Default::default()
        };
        let line = summary.to_line();
        assert!(line.len() <= MAX_SUMMARY_BYTES, "{}", line.len());
        let back: AgentSummary = serde_json::from_str(&line).unwrap();
        assert!(back.error.unwrap().ends_with("[cut]"));
    }

    #[test]
    fn a_summary_with_every_field_at_its_largest_fits() {
        let summary = AgentSummary {
            operation: Some(Operation::Restore),
            ok: false,
            error: Some("x".repeat(4000)),
            error_kind: Some("storageCredentialsRejected".into()),
            location: Some(format!("s3://bucket/{}", "p".repeat(200))),
            started_at: Some("2026-11-21T13:45:00.123456789Z".into()),
            finished_at: Some("2026-11-21T13:45:00.123456789Z".into()),
            duration_seconds: Some(123456.789),
            server_version: Some("10.11.19-MariaDB-0+deb12u1-log".into()),
            tables: Some(u64::MAX),
            rows: Some(u64::MAX),
            data_bytes: Some(u64::MAX),
            stored_bytes: Some(u64::MAX),
            consistent_position: Some("g".repeat(1024)),
            manifest_sha256: Some("f".repeat(64)),
            restore_seconds: Some(123456.789),
            content_compared: Some(false),
            encryption_key_id: Some("k".repeat(63)),
            files_written: Some(u64::MAX),
            bytes_written: Some(u64::MAX),
            snapshot: Some(Snapshot {
                time: Some("2026-11-21T13:45:00Z".into()),
                binlog_file: Some("b".repeat(255)),
                binlog_position: Some(u64::MAX),
                gtid: Some("g".repeat(MAX_GTID_CHARS)),
            }),
            snapshot_server: Some(ServerIdentity {
                flavor: "mariadb".into(),
                version: "v".repeat(80),
                server_id: u32::MAX,
                server_uuid: Some("3e11fa47-71ca-11e1-9e33-c80aa9429562".into()),
                hostname: Some("h".repeat(64)),
            }),
            replay: Some(Replay {
                last_applied_time: Some("2026-11-21T13:45:00Z".into()),
                last_applied_gtid: Some("g".repeat(MAX_GTID_CHARS)),
                transactions: u64::MAX,
                events: u64::MAX,
                segments: u64::MAX,
            }),
        };
        let line = summary.to_line();
        assert!(line.len() <= MAX_SUMMARY_BYTES, "{}", line.len());
        let back: AgentSummary = serde_json::from_str(&line).unwrap();
        assert_eq!(back.consistent_position, summary.consistent_position);
        assert_eq!(back.error_kind, summary.error_kind);
    }
}
