//! `archive`: streams the server's binary log as a replication client and stores it in
//! segments (see [`super::layout`]), until stopped.
//!
//! - A segment holds whole transactions of one file, and is stored at the first transaction
//!   boundary after it has held a transaction for `flush` (5 s by default), or once it reaches
//!   its size, or when the file ends. Its record in the index is written after it, create-only:
//!   a second archiver writing the same archive is refused there.
//! - Where to go on is always the end of the newest stored record: after a restart of the
//!   archiver or of the server, or a lost connection, streaming resumes exactly there, so no
//!   event is lost and none is stored twice. Events received but not yet stored are simply read
//!   again.
//! - A position is only resumed on the server it belongs to ([`super::resume`]): after a
//!   failover or a switchover the client Service leads to another server, whose files and
//!   positions are not the archive's. When that server's history holds the archive's, a new
//!   epoch continues the archive without a gap, streamed by GTID from the first transaction
//!   after the archive's GTID state.
//! - When the server no longer has what follows (its binary logs were purged), or its history
//!   is not the archived one (a new data directory, a diverged server), the gap is recorded, a
//!   new epoch begins at the oldest binary log the server has, and archiving goes on.

use std::time::{Duration, Instant};

use futures::StreamExt;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStreamRequest, Conn};
use mysql_common::binlog::consts::BinlogVersion;
use mysql_common::packets::Sid;
use tokio_util::sync::CancellationToken;
use visitors_agent_contract::archive::{ArchiveStatus, ArchiverState, EpochStatus, Gap, PruneBefore, ServerIdentity};
use visitors_agent_contract::gtid::{Gtid, GtidSet};

use super::event::{Boundaries, Format, RawEvent, Step, Transaction, file_start_state, kind, rotate_target};
use super::layout::{
    ARCHIVE_FILE, ArchiveMeta, BinlogPos, CHECKPOINT_FILE, Checkpoint, Continuation, EPOCHS_FILE, Epoch, FORMAT_NAME,
    FORMAT_VERSION, GapRecord, SEGMENTS_DIR, SegmentEntry, covered_through, index_path, read_epochs, read_json,
    stored_seqs, to_json,
};
use super::prune::{self, PruneTarget};
use super::resume::{self, ArchiveEnd, Resume, ServerView};
use super::segment::SegmentWriter;
use crate::encryption::SealKey;
use crate::error::{AgentError, Result};
use crate::mysql::{ConnectionSettings, Connector};
use crate::storage::{S3Settings, Storage};

/// A transaction larger than this is written into its segment as it arrives instead of being
/// held in memory until it ends.
const TRANSACTION_BUFFER_BYTES: usize = 16 << 20;
/// How often the server sends a heartbeat while it has nothing to send.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// A stream that stays silent this long (no event, no heartbeat) is taken for dead.
const SILENCE: Duration = Duration::from_secs(30);
/// How often the status is reported (and the checkpoint moved while caught up).
const REPORT_EVERY: Duration = Duration::from_secs(5);
/// Backoff between attempts after a failure, and the wait after one that needs a fix.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);
const FIX_WAIT: Duration = Duration::from_secs(60);
/// The wait before a failed prune is tried again.
const PRUNE_RETRY: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
pub struct ArchiveOptions {
    pub connection: ConnectionSettings,
    pub to: String,
    pub s3: S3Settings,
    /// Store a segment holding a transaction at least this often.
    pub flush: Duration,
    pub segment_bytes: u64,
    pub replica_server_id: u32,
    /// Encrypt segments to this key.
    pub seal: Option<SealKey>,
}

/// Where an archiver reports, and what it learns of retention.
pub trait Observer: Send {
    /// Called every few seconds and when the state changes. An error stops archiving: the
    /// archiver may no longer write (it lost its Lease).
    fn report(&mut self, status: &ArchiveStatus) -> impl Future<Output = Result<()>> + Send;
    /// The oldest position retention still needs, when known: what is wholly before it goes.
    fn prune_before(&self) -> Option<PruneBefore>;
}

/// Archives until `stop` is cancelled; returns once what was whole is stored.
pub async fn archive(options: &ArchiveOptions, observer: &mut impl Observer, stop: CancellationToken) -> Result<()> {
    let storage = Storage::open(&options.to, &options.s3, true)?;
    let mut archive = Archive::open(storage).await?;
    let connector = Connector::new(options.connection.clone());
    let mut backoff = RETRY_FIRST;
    loop {
        // Before anything is written: whether this archiver may still write.
        observer.report(&archive.status(options, 0.0)).await?;
        let outcome = Session::new(&mut archive, options).connect_and_archive(&connector, observer, &stop).await;
        match outcome {
            Ok(()) => return Ok(()),
            Err(error @ (AgentError::ArchiveConflict { .. } | AgentError::Usage(_) | AgentError::NotHolder(_))) => {
                return Err(error);
            }
            Err(error) => {
                let needs_fix = needs_a_fix(&error);
                let state = if needs_fix { ArchiverState::Failed } else { ArchiverState::Retrying };
                let wait = if needs_fix { FIX_WAIT } else { backoff };
                tracing::warn!(reason = error.kind(), "archiving interrupted: {}; again in {wait:?}", error.one_line());
                archive.problem = Some((state, error.kind().to_string(), error.one_line()));
                observer.report(&archive.status(options, 0.0)).await?;
                backoff = (backoff * 2).min(RETRY_MAX);
                tokio::select! {
                    () = stop.cancelled() => return Ok(()),
                    () = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

/// MariaDB's and MySQL's "fatal error reading the binary log" of a dump request: for a dump
/// by GTID, the server does not have (or no longer has) what follows the archive's GTIDs.
const DUMP_REFUSED: u16 = 1236;

/// Errors no retry soon will mend: the server's configuration, credentials, a corrupt archive.
fn needs_a_fix(error: &AgentError) -> bool {
    matches!(
        error,
        AgentError::BinlogUnsuitable(_)
            | AgentError::WrongCredentials { .. }
            | AgentError::MissingPrivilege { .. }
            | AgentError::ArchiveInvalid { .. }
            | AgentError::StorageCredentialsRejected { .. }
            | AgentError::MissingBucket { .. }
    )
}

/// What is stored, as the archiver knows it.
struct Archive {
    storage: Storage,
    meta: Option<ArchiveMeta>,
    epochs: Vec<Epoch>,
    /// The newest stored record.
    last: Option<SegmentEntry>,
    /// The newest stored transaction: its commit time and GTID.
    last_time: Option<i64>,
    last_gtid: Option<String>,
    segments: u64,
    stored_bytes: u64,
    /// When the archive last held everything the server had committed (Unix seconds), as
    /// heard from the server, and as the checkpoint says it: only the stored one is reported,
    /// so that a restore never finds the archive short of what its status promised.
    caught_up: Option<i64>,
    caught_up_stored: Option<i64>,
    /// What went wrong last, until a session stores again.
    problem: Option<(ArchiverState, String, String)>,
    server: Option<ServerIdentity>,
    /// A server that refused to stream after the archive's GTIDs, and what it said: a fact for
    /// the next attempt's decision.
    refused: Option<(ServerIdentity, String)>,
    pruned_for: Option<PruneBefore>,
    prune_retry_at: Option<Instant>,
}

impl Archive {
    async fn open(storage: Storage) -> Result<Self> {
        let meta: Option<ArchiveMeta> = read_json(&storage, ARCHIVE_FILE).await?;
        if let Some(meta) = &meta
            && (meta.format != FORMAT_NAME || meta.format_version > FORMAT_VERSION)
        {
            return Err(AgentError::ArchiveInvalid {
                location: storage.location().into(),
                reason: format!(
                    "{ARCHIVE_FILE} is of format {} {}, not this agent's",
                    meta.format, meta.format_version
                ),
            });
        }
        let epochs = read_epochs(&storage).await?;
        let seqs = stored_seqs(&storage).await?;
        let last = match seqs.last() {
            Some(&seq) => read_json::<SegmentEntry>(&storage, &index_path(seq)).await?,
            None => None,
        };
        let stored: Vec<(String, u64)> = storage.list_under(SEGMENTS_DIR).await?;
        let checkpoint: Option<Checkpoint> = read_json(&storage, CHECKPOINT_FILE).await?;
        let since = first_epoch_without_gap(&epochs);
        let (last_time, last_gtid) = newest_transaction(&storage, &seqs, checkpoint.as_ref(), since).await?;
        let caught_up = checkpoint.as_ref().and_then(|c| c.caught_up_time);
        tracing::info!(
            "archive {}: {} segments stored{}",
            storage.location(),
            seqs.len(),
            last.as_ref().map(|l| format!(", resuming after {}", l.end_pos())).unwrap_or_default()
        );
        Ok(Archive {
            storage,
            meta,
            epochs,
            last,
            last_time,
            last_gtid,
            segments: seqs.len() as u64,
            stored_bytes: stored.iter().map(|(_, size)| size).sum(),
            caught_up,
            caught_up_stored: caught_up,
            problem: None,
            server: None,
            refused: None,
            pruned_for: None,
            prune_retry_at: None,
        })
    }

    fn next_seq(&self) -> u64 {
        self.last.as_ref().map_or(1, |last| last.seq + 1)
    }

    fn current_epoch(&self) -> u64 {
        self.epochs.last().map_or(0, |e| e.epoch)
    }

    /// Where the archive ends, for [`resume::decide`]; none when it holds nothing yet.
    fn end(&self) -> Option<ArchiveEnd> {
        let meta = self.meta.as_ref();
        let last_gtid = self.last_gtid.as_deref().and_then(|g| Gtid::parse(g).ok());
        let flavor = meta.map(|m| m.server.flavor.clone());
        let end = match (&self.last, self.epochs.last()) {
            (None, None) => return None,
            (Some(last), Some(epoch)) if last.epoch == epoch.epoch => ArchiveEnd {
                position: Some(last.next_start()),
                server: epoch.server_or(meta).cloned(),
                gtids: last.gtids_after(),
                last_gtid,
                flavor,
            },
            // A continuation that stored nothing yet: its start is a GTID state.
            (_, Some(epoch)) if epoch.continues.is_some() => ArchiveEnd {
                position: None,
                server: epoch.server.clone(),
                gtids: epoch.continues.as_ref().and_then(|c| GtidSet::parse(&c.after_gtids).ok()),
                last_gtid,
                flavor,
            },
            // An epoch after a gap that stored nothing yet: nothing of its server is held.
            (_, Some(epoch)) => ArchiveEnd {
                position: Some(epoch.start.clone()),
                server: epoch.server_or(meta).cloned(),
                gtids: None,
                last_gtid: None,
                flavor,
            },
            (Some(last), None) => ArchiveEnd {
                position: Some(last.next_start()),
                server: meta.map(|m| m.server.clone()),
                gtids: last.gtids_after(),
                last_gtid,
                flavor,
            },
        };
        Some(end)
    }

    /// Whether the newest epoch holds no record yet.
    fn newest_epoch_is_empty(&self) -> bool {
        self.epochs.last().is_some_and(|epoch| epoch.first_seq >= self.next_seq())
    }

    /// Until when every committed transaction is stored (Unix seconds).
    fn recoverable_until(&self) -> Option<i64> {
        covered_through(self.last_time, self.caught_up_stored)
    }

    fn status(&self, options: &ArchiveOptions, lag: f64) -> ArchiveStatus {
        let (state, reason, message) = match &self.problem {
            Some((state, reason, message)) => (*state, Some(reason.clone()), Some(message.clone())),
            None if self.last.is_none() && self.caught_up.is_none() => (ArchiverState::Starting, None, None),
            None => (ArchiverState::Archiving, None, None),
        };
        let epochs = self
            .epochs
            .iter()
            .map(|epoch| EpochStatus {
                epoch: epoch.epoch,
                start_time: epoch.first_time.map_or_else(|| epoch.started_time.clone(), rfc3339),
                last_transaction_time: (epoch.epoch == self.current_epoch())
                    .then(|| self.last_time.map(rfc3339))
                    .flatten(),
                gap_before: epoch.gap_before.as_ref().map(|gap| Gap {
                    reason: gap.reason.clone(),
                    message: gap.message.clone(),
                    detected_time: epoch.started_time.clone(),
                    after_time: gap.previous_time.map(rfc3339),
                }),
            })
            .collect();
        ArchiveStatus {
            state,
            reason,
            message,
            location: options.to.clone(),
            last_recoverable_time: self.recoverable_until().map(rfc3339),
            last_gtid: self.last_gtid.clone(),
            lag_seconds: lag,
            segments: self.segments,
            stored_bytes: self.stored_bytes,
            epochs,
            server: self.server.clone(),
            encryption_key_id: options.seal.as_ref().map(|key| key.key_id().to_string()),
            updated_time: jiff::Timestamp::now().to_string(),
        }
    }

    async fn write_checkpoint(&mut self) -> Result<()> {
        let checkpoint = Checkpoint {
            seq: self.last.as_ref().map_or(0, |l| l.seq),
            last_time: self.last_time,
            last_gtid: self.last_gtid.clone(),
            caught_up_time: self.caught_up,
            updated_time: jiff::Timestamp::now().to_string(),
        };
        self.storage.put(CHECKPOINT_FILE, to_json(&checkpoint)).await?;
        self.caught_up_stored = self.caught_up;
        Ok(())
    }

    /// Deletes what the oldest kept base backup no longer needs, once per request (a failed
    /// prune is tried again a minute later).
    async fn prune_if_asked(&mut self, asked: Option<PruneBefore>) {
        let Some(asked) = asked.filter(|asked| self.pruned_for.as_ref() != Some(asked)) else { return };
        if self.prune_retry_at.is_some_and(|at| Instant::now() < at) {
            return;
        }
        self.prune_retry_at = None;
        match PruneTarget::from_request(&asked) {
            Ok(target) => match prune::prune(&self.storage, &target).await {
                Ok(report) => {
                    tracing::info!(run = %asked.run, "retention: {report}");
                    self.segments = self.segments.saturating_sub(report.segments);
                    self.stored_bytes = self.stored_bytes.saturating_sub(report.stored_bytes);
                    self.pruned_for = Some(asked);
                }
                Err(error) => {
                    tracing::warn!(
                        "retention could not prune the archive: {}; again in {PRUNE_RETRY:?}",
                        error.one_line()
                    );
                    self.prune_retry_at = Some(Instant::now() + PRUNE_RETRY);
                }
            },
            Err(error) => {
                tracing::warn!("retention's request is unusable: {error}");
                self.pruned_for = Some(asked);
            }
        }
    }
}

/// The first epoch of the newest stretch without a gap: the newest epoch, and those before it
/// that it continues by GTID.
fn first_epoch_without_gap(epochs: &[Epoch]) -> u64 {
    let continued = epochs.iter().rev().take_while(|e| e.continues.is_some()).count();
    epochs.iter().rev().nth(continued).or(epochs.first()).map_or(0, |e| e.epoch)
}

/// The commit time and GTID of the newest stored transaction since epoch `since`: the
/// checkpoint's when it is not behind the index, else the newest record's that has one.
async fn newest_transaction(
    storage: &Storage,
    seqs: &[u64],
    checkpoint: Option<&Checkpoint>,
    since: u64,
) -> Result<(Option<i64>, Option<String>)> {
    let newest = seqs.last().copied().unwrap_or(0);
    if let Some(checkpoint) = checkpoint.filter(|c| c.seq == newest) {
        return Ok((checkpoint.last_time, checkpoint.last_gtid.clone()));
    }
    for &seq in seqs.iter().rev() {
        let Some(entry) = read_json::<SegmentEntry>(storage, &index_path(seq)).await? else { continue };
        if entry.epoch < since {
            break;
        }
        if entry.last_time.is_some() {
            return Ok((entry.last_time, entry.last_gtid));
        }
    }
    Ok((None, None))
}

fn rfc3339(unix_seconds: i64) -> String {
    jiff::Timestamp::from_second(unix_seconds).map(|t| t.to_string()).unwrap_or_default()
}

fn now_seconds() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// What the server says of itself.
struct ServerFacts {
    identity: ServerIdentity,
    mariadb: bool,
    /// MariaDB's GTID position or MySQL's executed set.
    gtids: Option<GtidSet>,
    /// What its binary logs no longer hold: MySQL's `gtid_purged`; MariaDB's is read with
    /// [`purged_on_mariadb`].
    purged: Option<GtidSet>,
    /// `SHOW BINARY LOGS`: name and size.
    logs: Vec<(String, u64)>,
    /// `binlog_checksum` is CRC32.
    checksums: bool,
}

async fn server_facts(connector: &Connector, conn: &mut Conn) -> Result<ServerFacts> {
    let during = "reading the server's binary log settings";
    let variables: Vec<(String, String)> = conn
        .query(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('version', 'server_id', 'server_uuid', 'hostname', \
             'log_bin', 'binlog_format', 'binlog_checksum', 'gtid_mode', 'gtid_binlog_pos', 'gtid_executed', \
             'gtid_purged', 'binlog_transaction_compression')",
        )
        .await
        .map_err(|e| connector.error(during, e))?;
    let get = |name: &str| variables.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim());
    let version = get("version").unwrap_or_default().to_string();
    let mariadb = version.to_ascii_lowercase().contains("mariadb");
    if !get("log_bin").is_some_and(|v| v.eq_ignore_ascii_case("ON") || v == "1") {
        return Err(AgentError::BinlogUnsuitable(
            "binary logging is off (log_bin=OFF): start the server with --log-bin".into(),
        ));
    }
    let format = get("binlog_format").unwrap_or_default();
    if !format.eq_ignore_ascii_case("ROW") {
        return Err(AgentError::BinlogUnsuitable(format!(
            "binlog_format is {format}: replaying to a point in time needs ROW (start the server with --binlog-format=ROW)"
        )));
    }
    if get("binlog_transaction_compression").is_some_and(|v| v.eq_ignore_ascii_case("ON")) {
        return Err(AgentError::BinlogUnsuitable(
            "binlog_transaction_compression is ON, which the archive does not support: turn it off".into(),
        ));
    }
    let gtid_text = if mariadb { get("gtid_binlog_pos") } else { get("gtid_executed") };
    let gtids = gtid_text.filter(|t| !t.is_empty()).and_then(|t| GtidSet::parse(t).ok());
    let logs: Vec<(String, u64)> = conn
        .query_map("SHOW BINARY LOGS", |row: mysql_async::Row| {
            (row.get::<String, _>(0).unwrap_or_default(), row.get::<u64, _>(1).unwrap_or_default())
        })
        .await
        .map_err(|e| connector.error("listing the binary logs", e))?;
    if logs.is_empty() {
        return Err(AgentError::BinlogUnsuitable("the server lists no binary logs".into()));
    }
    let identity = ServerIdentity {
        flavor: if mariadb { "mariadb" } else { "mysql" }.into(),
        version,
        server_id: get("server_id").and_then(|v| v.parse().ok()).unwrap_or_default(),
        server_uuid: get("server_uuid").filter(|v| !v.is_empty()).map(Into::into),
        hostname: get("hostname").filter(|v| !v.is_empty()).map(Into::into),
    };
    let checksums = get("binlog_checksum").is_some_and(|v| v.eq_ignore_ascii_case("CRC32"));
    let purged = if mariadb {
        purged_on_mariadb(conn, &logs[0].0).await
    } else {
        get("gtid_purged").filter(|t| !t.is_empty()).and_then(|t| GtidSet::parse(t).ok())
    };
    Ok(ServerFacts { identity, mariadb, gtids, purged, logs, checksums })
}

/// MariaDB's GTID state at `position` of its binary log `file` (`BINLOG_GTID_POS`): `None`
/// when it has none there (no such file, not an event boundary) or could not say.
async fn gtid_state_at(conn: &mut Conn, file: &str, position: u64) -> Option<GtidSet> {
    let state: Option<Option<String>> =
        conn.exec_first("SELECT BINLOG_GTID_POS(?, ?)", (file, position)).await.ok().flatten();
    state.flatten().filter(|s| !s.is_empty()).and_then(|s| GtidSet::parse(&s).ok())
}

/// What a MariaDB server's binary logs no longer hold: the state at the start of its oldest.
async fn purged_on_mariadb(conn: &mut Conn, oldest: &str) -> Option<GtidSet> {
    gtid_state_at(conn, oldest, 4).await
}

/// The server as [`resume::decide`] sees it. Asks MariaDB for its state at the archive's
/// position only on the server the position belongs to (reading a binary log up to it takes
/// a moment).
async fn server_view(conn: &mut Conn, facts: &ServerFacts, end: Option<&ArchiveEnd>, archive: &Archive) -> ServerView {
    let position_to_confirm = end.filter(|end| end.gtids.is_some()).and_then(|end| {
        let own = end.server.as_ref().is_none_or(|s| s.same_server(&facts.identity));
        end.position
            .as_ref()
            .filter(|p| own && facts.logs.iter().any(|(name, size)| *name == p.file && *size >= p.position))
    });
    let state_at_position = match position_to_confirm {
        Some(position) if facts.mariadb => Some(gtid_state_at(conn, &position.file, position.position).await),
        _ => None,
    };
    let refused_gtids = archive
        .refused
        .as_ref()
        .filter(|(server, _)| server.same_server(&facts.identity))
        .map(|(_, said)| said.clone());
    ServerView {
        identity: facts.identity.clone(),
        gtids: facts.gtids.clone(),
        logs: facts.logs.clone(),
        purged: facts.purged.clone(),
        state_at_position,
        refused_gtids,
    }
}

/// The segment being filled.
struct OpenSegment {
    writer: SegmentWriter,
    seq: u64,
    start: BinlogPos,
    end: u64,
    /// The server's GTID state before it.
    gtid_before: Option<String>,
    events: u64,
    transactions: u64,
    first_gtid: Option<String>,
    last_gtid: Option<String>,
    first_time: Option<i64>,
    last_time: Option<i64>,
    /// When it received its first transaction.
    first_transaction_at: Option<Instant>,
    /// It holds the start of a transaction that has not ended (too large to hold in memory).
    dirty: bool,
}

/// One connection's worth of archiving.
struct Session<'a> {
    archive: &'a mut Archive,
    options: &'a ArchiveOptions,
    format: Option<Format>,
    /// The file the stream is in, and the position after the last event received.
    file: String,
    position: u64,
    /// Where the next segment begins (the end of the last stored one).
    next_start: BinlogPos,
    boundaries: Boundaries,
    /// The transaction being received: its events and what its first event said.
    transaction: Vec<u8>,
    transaction_info: Option<Transaction>,
    /// The server's GTID state after the last event received, as far as known.
    gtids: Option<GtidSet>,
    segment: Option<OpenSegment>,
    last_report: Instant,
    lag: f64,
    /// Whether the server checksums its events (`binlog_checksum`), for the events it sends
    /// before a format description.
    stream_checksums: bool,
    /// The server streamed from, which a new epoch records.
    server: Option<ServerIdentity>,
    /// Streaming by GTID, until the stream reaches the first place after what the archive
    /// holds: the epoch that continues the archive, written then.
    continuation: Option<Continuation>,
}

/// Where a session's stream starts.
#[derive(Debug, Clone, PartialEq)]
enum StreamStart {
    At(BinlogPos),
    AfterGtids(GtidSet),
}

impl<'a> Session<'a> {
    fn new(archive: &'a mut Archive, options: &'a ArchiveOptions) -> Self {
        let next_start = archive
            .last
            .as_ref()
            .map(SegmentEntry::next_start)
            .unwrap_or(BinlogPos { file: String::new(), position: 4 });
        // The state of the newest epoch's server: not an older epoch's, before a gap.
        let gtids = archive.end().and_then(|end| end.gtids);
        Session {
            archive,
            options,
            format: None,
            file: next_start.file.clone(),
            position: next_start.position,
            next_start,
            boundaries: Boundaries::default(),
            transaction: Vec::new(),
            transaction_info: None,
            gtids,
            segment: None,
            last_report: Instant::now() - REPORT_EVERY,
            lag: 0.0,
            stream_checksums: true,
            server: None,
            continuation: None,
        }
    }

    /// Archives over one connection until `stop` or an error ends its stream, then stores what
    /// is whole (nothing more once another archiver may write).
    async fn connect_and_archive(
        mut self,
        connector: &Connector,
        observer: &mut impl Observer,
        stop: &CancellationToken,
    ) -> Result<()> {
        let mut conn = connector.connect().await?;
        let facts = server_facts(connector, &mut conn).await?;
        self.archive.server = Some(facts.identity.clone());
        self.server = Some(facts.identity.clone());
        self.stream_checksums = facts.checksums;
        self.ensure_meta(&facts).await?;
        let end = self.archive.end();
        let view = server_view(&mut conn, &facts, end.as_ref(), self.archive).await;
        let start = self.choose_start(resume::decide(end.as_ref(), &view), &facts).await?;
        let stream_result = self.stream(conn, &start, &facts, connector, observer, stop).await;
        self.note_refusal(&start, &stream_result, &facts);
        let kept = match &stream_result {
            // Another archiver may write now: nothing more is stored.
            Err(AgentError::NotHolder(_)) => {
                if let Some(segment) = self.segment.take() {
                    segment.writer.abort().await;
                }
                Ok(())
            }
            // Whatever else ended the stream, what is whole is kept.
            _ => self.close_segment(false).await,
        };
        stream_result.and(kept)
    }

    /// `archive.json`, written once by the first archiver of the archive.
    async fn ensure_meta(&mut self, facts: &ServerFacts) -> Result<()> {
        if self.archive.meta.is_some() {
            return Ok(());
        }
        let meta = ArchiveMeta {
            format: FORMAT_NAME.into(),
            format_version: FORMAT_VERSION,
            tool: format!("visitors-agent {}", env!("CARGO_PKG_VERSION")),
            created_time: jiff::Timestamp::now().to_string(),
            server: facts.identity.clone(),
        };
        self.archive.storage.create(ARCHIVE_FILE, to_json(&meta)).await?;
        self.archive.meta = Some(meta);
        Ok(())
    }

    /// Carries out [`resume::decide`]'s decision: the epoch it begins, if any, and where the
    /// stream starts.
    async fn choose_start(&mut self, decision: Resume, facts: &ServerFacts) -> Result<StreamStart> {
        match decision {
            Resume::Begin(oldest) => {
                self.begin_epoch(oldest.clone(), None, None).await?;
                Ok(self.start_at(oldest))
            }
            Resume::AtPosition(position) => Ok(self.start_at(position)),
            Resume::AfterGtids(gtids) => {
                tracing::info!(
                    "the archive goes on by GTID after {gtids}, on {} (another server than its position's, or one \
                     that does not confirm it): a new epoch without a gap",
                    facts.identity
                );
                Ok(self.start_after(gtids))
            }
            Resume::Gap { reason, message, start } => {
                tracing::warn!(reason = reason.as_str(), "{message}; a new epoch begins at {start}");
                let record = GapRecord {
                    reason: reason.as_str().into(),
                    message,
                    previous_end: self.previous_end().unwrap_or_else(|| start.clone()),
                    previous_gtid: self.archive.last_gtid.clone(),
                    previous_time: self.archive.last_time,
                };
                self.begin_epoch(start.clone(), Some(record), None).await?;
                self.gtids = None;
                Ok(self.start_at(start))
            }
        }
    }

    /// Where the archive's newest epoch ended: its newest record's end, or where an epoch that
    /// stored nothing yet said the one before it ended.
    fn previous_end(&self) -> Option<BinlogPos> {
        let waiting = self.archive.epochs.last().filter(|_| self.archive.newest_epoch_is_empty());
        match waiting.and_then(|e| e.continues.as_ref()) {
            Some(continuation) => Some(continuation.previous_end.clone()),
            None => self.archive.last.as_ref().map(SegmentEntry::end_pos),
        }
    }

    /// `continues`: the epoch goes on from the one before it by GTID (no gap, no reset of what
    /// the archive holds). An epoch that continues by GTID and stored nothing is replaced.
    async fn begin_epoch(
        &mut self,
        start: BinlogPos,
        gap_before: Option<GapRecord>,
        continues: Option<Continuation>,
    ) -> Result<()> {
        let replaces_waiting = continues.is_some()
            && self.archive.newest_epoch_is_empty()
            && self.archive.epochs.last().is_some_and(|e| e.continues.is_some());
        if replaces_waiting {
            self.archive.epochs.pop();
        }
        let epoch = Epoch {
            epoch: self.archive.epochs.last().map_or(0, |e| e.epoch + 1),
            first_seq: self.archive.next_seq(),
            start,
            started_time: jiff::Timestamp::now().to_string(),
            first_time: None,
            gap_before,
            server: self.server.clone(),
            continues: continues.clone(),
        };
        self.archive.epochs.push(epoch);
        self.archive.storage.put(EPOCHS_FILE, to_json(&self.archive.epochs)).await?;
        if continues.is_none() {
            // What the archive holds of this server begins with the epoch.
            self.archive.last_time = None;
            self.archive.last_gtid = None;
            self.archive.caught_up = None;
            self.archive.caught_up_stored = None;
        }
        self.archive.write_checkpoint().await
    }

    fn start_at(&mut self, start: BinlogPos) -> StreamStart {
        self.file = start.file.clone();
        self.position = start.position;
        self.next_start = start.clone();
        StreamStart::At(start)
    }

    /// Streams from the first transaction after `gtids`: the server names the file in its
    /// first rotate, and skips what the archive holds; the epoch that continues the archive is
    /// written where the stream is past it ([`Self::positioned_at`]).
    fn start_after(&mut self, gtids: GtidSet) -> StreamStart {
        let previous_end = self.previous_end().unwrap_or(BinlogPos { file: String::new(), position: 4 });
        self.continuation = Some(Continuation { after_gtids: gtids.to_string(), previous_end });
        self.file = String::new();
        self.position = 4;
        self.next_start = BinlogPos { file: String::new(), position: 4 };
        self.gtids = Some(gtids.clone());
        StreamStart::AfterGtids(gtids)
    }

    /// A server that refuses to stream after the archive's GTIDs before sending anything does
    /// not have what follows them: the next attempt records the gap.
    fn note_refusal(&mut self, start: &StreamStart, result: &Result<()>, facts: &ServerFacts) {
        if let (StreamStart::AfterGtids(gtids), Err(AgentError::Server { code: DUMP_REFUSED, message, .. })) =
            (start, result)
            && self.file.is_empty()
        {
            tracing::warn!("{} refused to stream after {gtids}: {message}", facts.identity);
            self.archive.refused = Some((facts.identity.clone(), message.clone()));
        }
    }

    async fn stream(
        &mut self,
        mut conn: Conn,
        start: &StreamStart,
        facts: &ServerFacts,
        connector: &Connector,
        observer: &mut impl Observer,
        stop: &CancellationToken,
    ) -> Result<()> {
        let during = "requesting the binary log";
        let mut settings = Vec::new();
        if facts.mariadb {
            // Without it MariaDB hides GTID events from a client it takes for an old replica.
            settings.push("SET @mariadb_slave_capability = 4".to_string());
        }
        settings.push(format!("SET @master_heartbeat_period = {}", HEARTBEAT.as_nanos()));
        if let (StreamStart::AfterGtids(gtids), true) = (start, facts.mariadb) {
            // The server starts after this state, and refuses one its binary log does not hold.
            settings.push(format!("SET @slave_connect_state = '{gtids}'"));
            settings.push("SET @slave_gtid_strict_mode = 1".into());
        }
        for sql in settings {
            conn.query_drop(sql).await.map_err(|e| connector.error(during, e))?;
        }
        let request = match start {
            StreamStart::At(position) => {
                tracing::info!("streaming the binary log from {position}");
                BinlogStreamRequest::new(self.options.replica_server_id)
                    .with_filename(position.file.as_bytes())
                    .with_pos(position.position)
            }
            StreamStart::AfterGtids(gtids) => {
                tracing::info!("streaming the binary log after GTIDs {gtids}");
                gtid_request(self.options.replica_server_id, gtids, facts.mariadb)?
            }
        };
        let mut stream = conn.get_binlog_stream(request).await.map_err(|e| connector.error(during, e))?;
        self.archive.problem = None;
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tokio::select! {
                () = stop.cancelled() => {
                    // Ends the server's dump at once, which keeps the files it reads from purges.
                    let _ = stream.close().await;
                    self.report(observer, true).await?;
                    return Ok(());
                }
                _ = tick.tick() => {
                    self.flush_if_due().await?;
                    self.archive.prune_if_asked(observer.prune_before()).await;
                    self.report(observer, false).await?;
                }
                next = tokio::time::timeout(SILENCE, stream.next()) => {
                    let event = match next {
                        Err(_) => return Err(AgentError::ConnectionLost {
                            during: "streaming the binary log".into(),
                            reason: format!("nothing received for {SILENCE:?}, not even a heartbeat"),
                        }),
                        Ok(None) => return Err(AgentError::ConnectionLost {
                            during: "streaming the binary log".into(),
                            reason: "the server ended the stream".into(),
                        }),
                        Ok(Some(event)) => event.map_err(|e| connector.error("streaming the binary log", e))?,
                    };
                    let mut bytes = Vec::with_capacity(event.header().event_size() as usize);
                    event.write(BinlogVersion::Version4, &mut bytes).map_err(|e| AgentError::Internal(e.to_string()))?;
                    self.receive(&bytes).await?;
                }
            }
        }
    }

    async fn receive(&mut self, bytes: &[u8]) -> Result<()> {
        let raw = RawEvent(bytes);
        match raw.kind() {
            kind::HEARTBEAT => {
                self.heartbeat(raw);
                Ok(())
            }
            kind::ROTATE => self.rotate(raw).await,
            kind::FORMAT_DESCRIPTION => {
                let format = Format::from_event(bytes).map_err(|e| self.invalid_event("format description", &e))?;
                self.format = Some(format);
                Ok(())
            }
            _ if raw.is_artificial() => self.artificial(raw).await,
            kind::TRANSACTION_PAYLOAD => Err(AgentError::BinlogUnsuitable(
                "the server sends compressed transactions (binlog_transaction_compression=ON): turn it off".into(),
            )),
            _ => self.store(raw).await,
        }
    }

    fn invalid_event(&self, what: &str, error: &std::io::Error) -> AgentError {
        AgentError::ArchiveInvalid {
            location: self.archive.storage.location().into(),
            reason: format!(
                "the server sent a {what} event at {}:{} that cannot be read: {error}",
                self.file, self.position
            ),
        }
    }

    /// The server has nothing after its position: when that is the archive's, it is caught up.
    fn heartbeat(&mut self, raw: RawEvent<'_>) {
        let nothing_pending = self.transaction.is_empty()
            && !self.boundaries.in_transaction()
            && self.segment.as_ref().is_none_or(|s| s.transactions == 0);
        if nothing_pending && u64::from(raw.log_pos()) == self.position {
            self.archive.caught_up = Some(now_seconds());
        }
    }

    async fn rotate(&mut self, raw: RawEvent<'_>) -> Result<()> {
        let checksums = self.format.as_ref().map_or(self.stream_checksums, |f| f.checksums);
        let Some((file, position)) = rotate_target(raw, checksums) else {
            return Err(self.invalid_event("rotate", &std::io::Error::other("no file name")));
        };
        if file == self.file {
            return Ok(());
        }
        if self.continuation.is_some() {
            // Still skipping what the archive holds: nothing of this file is stored.
            self.file = file.clone();
            self.position = position.max(4);
            self.next_start = BinlogPos { file, position: self.position };
            self.format = None;
            return Ok(());
        }
        if self.boundaries.in_transaction() {
            return Err(AgentError::ArchiveInvalid {
                location: self.archive.storage.location().into(),
                reason: format!("the binary log moved to {file} inside a transaction of {}", self.file),
            });
        }
        self.end_file().await?;
        self.file = file.clone();
        self.position = position.max(4);
        self.next_start = BinlogPos { file, position: self.position };
        self.format = None;
        Ok(())
    }

    /// An event the server made up for this client. MariaDB's fake GTID list of a stream by
    /// GTID says where in the file the stream goes on, past what the archive holds.
    async fn artificial(&mut self, raw: RawEvent<'_>) -> Result<()> {
        if self.continuation.is_some() && raw.kind() == kind::MARIADB_GTID_LIST && raw.log_pos() > 0 {
            self.positioned_at(u64::from(raw.log_pos())).await?;
        }
        Ok(())
    }

    /// A stream by GTID reached the first place after what the archive holds: the epoch that
    /// continues the archive begins there, and so does its first segment, so that its span
    /// holds no event the server skipped (a position resumed later is exact).
    async fn positioned_at(&mut self, position: u64) -> Result<()> {
        let Some(continuation) = self.continuation.take() else { return Ok(()) };
        if self.file.is_empty() {
            return Err(self.invalid_event("binary log", &std::io::Error::other("no rotate event before it")));
        }
        let start = BinlogPos { file: self.file.clone(), position };
        self.begin_epoch(start.clone(), None, Some(continuation)).await?;
        self.position = position;
        self.next_start = start;
        Ok(())
    }

    /// The current file ended at the current position: its last segment says so, or a record
    /// without events marks it.
    async fn end_file(&mut self) -> Result<()> {
        if self.segment.is_some() {
            return self.close_segment(true).await;
        }
        if self.next_start.file != self.file {
            return Ok(());
        }
        let seq = self.archive.next_seq();
        let entry = SegmentEntry {
            gtid_before: self.gtids.as_ref().map(ToString::to_string),
            gtid_after: self.gtids.as_ref().map(ToString::to_string),
            stored_time: jiff::Timestamp::now().to_string(),
            ..SegmentEntry::without_events(
                seq,
                self.archive.current_epoch(),
                &self.file,
                self.next_start.position,
                self.position,
                true,
            )
        };
        self.record(entry).await
    }

    /// A real event: into the transaction being received, and into the segment once whole.
    async fn store(&mut self, raw: RawEvent<'_>) -> Result<()> {
        let Some(format) = self.format.clone() else {
            return Err(self.invalid_event("binary log", &std::io::Error::other("no format description before it")));
        };
        if let Some(state) = file_start_state(raw, &format).map_err(|e| self.invalid_event("GTID list", &e))? {
            // The state a file starts with; a stream by GTID is already past it.
            match self.gtids.as_mut() {
                Some(gtids) => gtids.union_with(&state),
                None => self.gtids = Some(state),
            }
        }
        let step = self.boundaries.step(raw, &format).map_err(|e| self.invalid_event("transaction", &e))?;
        if self.continuation.is_some() {
            // A stream by GTID stores from its first transaction, where it is positioned.
            let Step::Begins(_) = step else { return Ok(()) };
            self.positioned_at(u64::from(raw.log_pos()).saturating_sub(raw.0.len() as u64)).await?;
        }
        if let Step::Begins(transaction) = &step {
            self.transaction_info = Some(transaction.clone());
        }
        self.transaction.extend_from_slice(raw.0);
        self.position = u64::from(raw.log_pos());
        match step {
            Step::Ends | Step::Outside => self.transaction_done(&format, matches!(step, Step::Ends)).await?,
            Step::Begins(_) | Step::Inside if self.transaction.len() > TRANSACTION_BUFFER_BYTES => {
                self.spill(&format).await?;
            }
            _ => {}
        }
        Ok(())
    }

    /// The events held since the last boundary go into the segment; `ended` when they close a
    /// transaction.
    async fn transaction_done(&mut self, format: &Format, ended: bool) -> Result<()> {
        self.spill(format).await?;
        let info = self.transaction_info.take();
        let segment = self.segment.as_mut().expect("spill opened the segment");
        segment.dirty = false;
        if ended {
            let gtid = info.as_ref().and_then(|t| t.gtid.clone());
            if let (Some(gtid), Some(state)) = (&gtid, self.gtids.as_mut()) {
                state.add(gtid);
            } else if let Some(gtid) = &gtid {
                self.gtids = Some(gtid.as_set());
            }
            let gtid = gtid.map(|g| g.to_string());
            let time = info.as_ref().map(|t| t.commit_time);
            segment.transactions += 1;
            segment.first_gtid = segment.first_gtid.take().or(gtid.clone());
            segment.last_gtid = gtid.or(segment.last_gtid.take());
            segment.first_time = segment.first_time.or(time);
            segment.last_time = time.or(segment.last_time);
            segment.first_transaction_at.get_or_insert_with(Instant::now);
        }
        if segment.writer.bytes >= self.options.segment_bytes {
            self.close_segment(false).await?;
        }
        Ok(())
    }

    /// Writes the events held into the segment (opening it if needed).
    async fn spill(&mut self, format: &Format) -> Result<()> {
        if self.segment.is_none() {
            let seq = self.archive.next_seq();
            let writer = SegmentWriter::start(&self.archive.storage, seq, format, self.options.seal.as_ref()).await?;
            self.segment = Some(OpenSegment {
                writer,
                seq,
                start: self.next_start.clone(),
                end: self.next_start.position,
                gtid_before: self.gtids.as_ref().map(ToString::to_string),
                events: 0,
                transactions: 0,
                first_gtid: None,
                last_gtid: None,
                first_time: None,
                last_time: None,
                first_transaction_at: None,
                dirty: false,
            });
        }
        let segment = self.segment.as_mut().expect("opened above");
        let events = count_events(&self.transaction);
        // Until the write is done the segment may hold part of it: a failed write leaves it
        // dirty, so it is dropped rather than stored.
        segment.dirty = true;
        segment.writer.write(&self.transaction).await?;
        segment.events += events;
        segment.end = self.position;
        segment.dirty = self.boundaries.in_transaction();
        self.transaction.clear();
        Ok(())
    }

    /// Stores the segment once its oldest transaction has waited long enough that, with a
    /// second for the upload, it is stored within `flush` of its commit.
    async fn flush_if_due(&mut self) -> Result<()> {
        let flush = self.options.flush;
        let deadline = flush.saturating_sub(Duration::from_secs(1)).max(flush / 2);
        let due = self
            .segment
            .as_ref()
            .is_some_and(|s| !s.dirty && s.first_transaction_at.is_some_and(|at| at.elapsed() >= deadline));
        if due { self.close_segment(false).await } else { Ok(()) }
    }

    /// Stores the open segment when it holds only whole transactions (else drops it: its
    /// events are read again from the server), and records it.
    async fn close_segment(&mut self, ends_file: bool) -> Result<()> {
        let Some(segment) = self.segment.take() else { return Ok(()) };
        if segment.dirty {
            segment.writer.abort().await;
            return Ok(());
        }
        let (bytes, object, key_id) =
            (segment.writer.bytes, segment.writer.object.clone(), segment.writer.key_id.clone());
        let (stored_bytes, sha256) = segment.writer.finish().await?;
        let entry = SegmentEntry {
            seq: segment.seq,
            epoch: self.archive.current_epoch(),
            file: segment.start.file.clone(),
            start: segment.start.position,
            end: segment.end,
            ends_file,
            object: Some(object),
            stored_bytes,
            sha256: Some(sha256),
            bytes,
            events: segment.events,
            transactions: segment.transactions,
            first_gtid: segment.first_gtid,
            last_gtid: segment.last_gtid.clone(),
            gtid_before: segment.gtid_before,
            gtid_after: self.gtids.as_ref().map(ToString::to_string),
            first_time: segment.first_time,
            last_time: segment.last_time,
            stored_time: jiff::Timestamp::now().to_string(),
            key_id,
        };
        if let Some(at) = segment.first_transaction_at {
            self.lag = at.elapsed().as_secs_f64();
        }
        if segment.last_time.is_some() {
            self.archive.last_time = segment.last_time;
            self.archive.last_gtid = segment.last_gtid.or(self.archive.last_gtid.take());
        }
        self.archive.stored_bytes += stored_bytes;
        let first_time = entry.first_time;
        self.record(entry).await?;
        self.date_epoch(first_time).await
    }

    /// Dates the newest epoch by its first stored transaction, once.
    async fn date_epoch(&mut self, first_time: Option<i64>) -> Result<()> {
        let Some(epoch) = self.archive.epochs.last_mut().filter(|e| e.first_time.is_none()) else { return Ok(()) };
        if first_time.is_none() {
            return Ok(());
        }
        epoch.first_time = first_time;
        self.archive.storage.put(EPOCHS_FILE, to_json(&self.archive.epochs)).await.map(drop)
    }

    /// Writes a segment's record (create-only) and moves the checkpoint.
    async fn record(&mut self, entry: SegmentEntry) -> Result<()> {
        let storage = &self.archive.storage;
        let path = index_path(entry.seq);
        // A record already there is another archiver's, unless it is this one (an upload
        // retried after its answer was lost).
        if !storage.create(&path, to_json(&entry)).await?
            && read_json::<SegmentEntry>(storage, &path).await?.as_ref() != Some(&entry)
        {
            return Err(AgentError::ArchiveConflict { location: storage.location().into(), seq: entry.seq });
        }
        tracing::debug!(
            seq = entry.seq,
            transactions = entry.transactions,
            "stored {}:{}-{}",
            entry.file,
            entry.start,
            entry.end
        );
        self.next_start = entry.next_start();
        self.archive.segments += 1;
        self.archive.last = Some(entry);
        self.archive.write_checkpoint().await
    }

    /// Reports every [`REPORT_EVERY`] (or now, when `now`), with the lag of what is not stored
    /// yet; moves the checkpoint first when the archive was caught up since.
    async fn report(&mut self, observer: &mut impl Observer, now: bool) -> Result<()> {
        if !now && self.last_report.elapsed() < REPORT_EVERY {
            return Ok(());
        }
        self.last_report = Instant::now();
        let pending = self.segment.as_ref().and_then(|s| s.first_transaction_at).map(|at| at.elapsed().as_secs_f64());
        let caught_up_recently = self.archive.caught_up.is_some_and(|t| now_seconds() - t <= 3);
        let lag = match pending {
            Some(pending) => pending,
            None if caught_up_recently => 0.0,
            None => self.archive.recoverable_until().map_or(0.0, |t| (now_seconds() - t).max(0) as f64).max(self.lag),
        };
        if self.archive.caught_up > self.archive.caught_up_stored {
            self.archive.write_checkpoint().await?;
        }
        observer.report(&self.archive.status(self.options, lag)).await
    }
}

/// A dump request from the first transaction after `gtids`: MariaDB takes them from
/// `@slave_connect_state` (set before) and an empty file name; MySQL from the request itself
/// (`COM_BINLOG_DUMP_GTID`).
fn gtid_request(replica_server_id: u32, gtids: &GtidSet, mariadb: bool) -> Result<BinlogStreamRequest<'static>> {
    let request = BinlogStreamRequest::new(replica_server_id).with_filename(&b""[..]).with_pos(4u64);
    if mariadb {
        return Ok(request);
    }
    Ok(request.with_gtid().with_gtid_set(mysql_sids(gtids)?))
}

/// A MySQL GTID set as the source blocks of `COM_BINLOG_DUMP_GTID` (tagged ones included).
fn mysql_sids(gtids: &GtidSet) -> Result<Vec<Sid<'static>>> {
    gtids
        .to_string()
        .split(',')
        .map(|item| item.parse::<Sid<'static>>())
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| AgentError::Internal(format!("the GTID set {gtids} cannot be requested: {e}")))
}

fn count_events(mut bytes: &[u8]) -> u64 {
    let mut count = 0;
    while let Some((_, rest)) = RawEvent::split(bytes) {
        count += 1;
        bytes = rest;
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mysql_gtid_set_is_requested_source_by_source_tags_included() {
        let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let set = GtidSet::parse(&format!("{uuid}:1-5:7,{uuid}:nightly:1-3")).unwrap();
        let sids: Vec<String> = mysql_sids(&set).unwrap().iter().map(ToString::to_string).collect();
        assert_eq!(sids, [format!("{uuid}:1-5:7"), format!("{uuid}:nightly:1-3")]);
    }

    #[test]
    fn the_stretch_without_a_gap_reaches_back_through_continuations() {
        let epoch = |n: u64, continues: bool| Epoch {
            epoch: n,
            first_seq: n + 1,
            start: BinlogPos { file: "b.1".into(), position: 4 },
            started_time: String::new(),
            first_time: None,
            gap_before: None,
            server: None,
            continues: continues.then(|| Continuation {
                after_gtids: "0-1-1".into(),
                previous_end: BinlogPos { file: "b.1".into(), position: 4 },
            }),
        };
        assert_eq!(first_epoch_without_gap(&[]), 0);
        assert_eq!(first_epoch_without_gap(&[epoch(0, false)]), 0);
        assert_eq!(first_epoch_without_gap(&[epoch(0, false), epoch(1, true), epoch(2, true)]), 0);
        assert_eq!(first_epoch_without_gap(&[epoch(0, false), epoch(1, false), epoch(2, true)]), 1);
        assert_eq!(first_epoch_without_gap(&[epoch(0, false), epoch(1, true), epoch(2, false)]), 2);
    }
}
