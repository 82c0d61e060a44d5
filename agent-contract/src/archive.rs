//! What the binary-log archiver and the backup controller tell each other through the
//! archiver's Lease: the archiver's status (an annotation it writes with every renewal), and the
//! oldest position retention still needs (an annotation the controller writes). Both are JSON,
//! so either side can be read with `kubectl get lease -o yaml`.

use serde::{Deserialize, Serialize};

/// The Lease annotation that holds the archiver's [`ArchiveStatus`].
pub const STATUS_ANNOTATION: &str = "example.com/binlog-archive-status";
/// The Lease annotation that holds the controller's [`PruneBefore`].
pub const PRUNE_ANNOTATION: &str = "example.com/binlog-prune-before";
/// The Lease annotation's largest accepted size: a status that grows past it drops old epochs.
pub const MAX_STATUS_BYTES: usize = 16 * 1024;
/// How many epochs a status lists at most (the newest).
pub const MAX_STATUS_EPOCHS: usize = 20;

/// Where the archiver is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ArchiverState {
    /// Opening the archive and connecting; nothing archived by this process yet.
    #[default]
    Starting,
    /// Streaming and storing the binary log.
    Archiving,
    /// Lost the server or the storage; retrying with backoff from the last stored position.
    Retrying,
    /// Cannot archive until something is fixed (the reason says what); retried every minute.
    Failed,
}

/// The archiver's account of the archive, written with every Lease renewal.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveStatus {
    pub state: ArchiverState,
    /// A stable camelCase word for what is wrong, when something is (for example
    /// `connectionLost`, `binlogFormatNotRow`, `storage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// One line a user can act on. Never holds credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Where the archive is, for example `s3://bucket/prefix/ns/app/_binlog/nightly`.
    pub location: String,
    /// Every transaction committed up to this time (RFC 3339, seconds) is stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_recoverable_time: Option<String>,
    /// The GTID of the newest stored transaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_gtid: Option<String>,
    /// How far the stored archive is behind what the server committed, in seconds.
    pub lag_seconds: f64,
    /// Segments and bytes stored in the archive.
    pub segments: u64,
    pub stored_bytes: u64,
    /// The archive's epochs, oldest first (at most [`MAX_STATUS_EPOCHS`]): each one begins
    /// where continuity was lost (or at the start), so a restore can only replay within one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub epochs: Vec<EpochStatus>,
    /// The server archived: `mariadb` or `mysql`, its version and server id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerIdentity>,
    /// The key id new segments are encrypted with; none: they are stored unencrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_key_id: Option<String>,
    /// When this status was written (RFC 3339).
    pub updated_time: String,
}

/// A stretch of the archive without a gap.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct EpochStatus {
    pub epoch: u64,
    /// The time of the first stored event (RFC 3339): no restore in this epoch can start
    /// from a base backup taken before it.
    pub start_time: String,
    /// The time of the newest stored transaction of the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transaction_time: Option<String>,
    /// Why the epoch began: the gap before it, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap_before: Option<Gap>,
}

/// Continuity lost between two epochs: what was committed between them is not in the archive.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Gap {
    /// `binlogPurged` (the server purged binary logs before they were stored) or
    /// `serverChanged` (the server's history is not the archived one: a new data directory, a
    /// restore from elsewhere, another server).
    pub reason: String,
    pub message: String,
    /// When the archiver found it (RFC 3339).
    pub detected_time: String,
    /// The commit time of the newest transaction archived before it (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_time: Option<String>,
}

/// Which server an archive follows.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServerIdentity {
    /// `mariadb` or `mysql`.
    pub flavor: String,
    pub version: String,
    pub server_id: u32,
    /// MySQL's `server_uuid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_uuid: Option<String>,
    /// The server's `hostname` (in Kubernetes its pod's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
}

impl ServerIdentity {
    /// Whether `other` is the same server, whose binary log file names and positions mean
    /// what they mean on this one: the same family, server id and (MySQL) UUID, and the same
    /// host name when both are known. The version may differ (an upgrade).
    pub fn same_server(&self, other: &ServerIdentity) -> bool {
        let same_host = match (&self.hostname, &other.hostname) {
            (Some(mine), Some(theirs)) => mine == theirs,
            _ => true,
        };
        self.flavor == other.flavor
            && self.server_id == other.server_id
            && self.server_uuid == other.server_uuid
            && same_host
    }
}

impl std::fmt::Display for ServerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} server id {}", self.flavor, self.server_id)?;
        if let Some(uuid) = &self.server_uuid {
            write!(f, " ({uuid})")?;
        }
        if let Some(hostname) = &self.hostname {
            write!(f, " on {hostname}")?;
        }
        Ok(())
    }
}

/// The position of the oldest base backup retention keeps: segments wholly before it are no
/// longer needed by any restore and may be deleted.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PruneBefore {
    /// The base backup run (for the archiver's log).
    pub run: String,
    /// The server time of its snapshot (RFC 3339).
    pub time: String,
    pub binlog_file: String,
    pub binlog_position: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid: Option<String>,
}

impl ArchiveStatus {
    /// The status as annotation text, dropping the oldest epochs if it would be too large.
    pub fn to_annotation(&self) -> String {
        let mut status = self.clone();
        if status.epochs.len() > MAX_STATUS_EPOCHS {
            status.epochs.drain(..status.epochs.len() - MAX_STATUS_EPOCHS);
        }
        loop {
            let text = serde_json::to_string(&status).unwrap_or_default();
            if text.len() <= MAX_STATUS_BYTES || status.epochs.len() <= 1 {
                return text;
            }
            status.epochs.remove(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_are_the_same_by_family_id_uuid_and_host_whatever_their_version() {
        let server = |id: u32, host: Option<&str>| ServerIdentity {
            flavor: "mariadb".into(),
            version: "10.11.19".into(),
            server_id: id,
            server_uuid: None,
            hostname: host.map(Into::into),
        };
        let upgraded = ServerIdentity { version: "11.4.2".into(), ..server(1, Some("db-0")) };
        assert!(server(1, Some("db-0")).same_server(&upgraded));
        assert!(!server(1, Some("db-0")).same_server(&server(2, Some("db-0"))));
        assert!(!server(1, Some("db-0")).same_server(&server(1, Some("db-1"))));
        assert!(server(1, None).same_server(&server(1, Some("db-1"))), "an archive of an older agent has no host");
        let mysql = ServerIdentity { flavor: "mysql".into(), ..server(1, None) };
        assert!(!mysql.same_server(&server(1, None)));
        let uuid = |u: &str| ServerIdentity { server_uuid: Some(u.into()), ..mysql.clone() };
        assert!(!uuid("a").same_server(&uuid("b")));
        assert_eq!(uuid("a").to_string(), "mysql server id 1 (a)");
    }

    #[test]
    fn a_status_keeps_its_newest_epochs_under_the_limit() {
        let epoch = |n: u64| EpochStatus {
            epoch: n,
            start_time: "2026-11-25T10:00:00Z".into(),
            last_transaction_time: None,
            gap_before: Some(Gap {
                reason: "binlogPurged".into(),
                message: "m".repeat(2000),
                detected_time: String::new(),
                after_time: None,
            }),
        };
        let status = ArchiveStatus { epochs: (0..40).map(epoch).collect(), ..ArchiveStatus::default() };
        let text = status.to_annotation();
        assert!(text.len() <= MAX_STATUS_BYTES);
        let back: ArchiveStatus = serde_json::from_str(&text).unwrap();
        assert_eq!(back.epochs.last().unwrap().epoch, 39, "the newest epoch stays");
        assert!(back.epochs.len() < 20);
    }
}
