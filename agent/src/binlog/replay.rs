//! Replaying the archive after a base backup, up to a target, into the restore's staging
//! schemas.
//!
//! - [`plan`] picks the segments from the one holding the base backup's snapshot position to
//!   the one where the target is reached, and refuses, before anything is touched, a base the
//!   archive does not hold, a gap on the way, and a target the archive has not reached.
//! - [`Replayer`] reads them in order, each checked against its recorded SHA-256 before any of
//!   its events is used, and turns their events into what a [`Sink`] does: a dry run first
//!   (which refuses what cannot be replayed: statements that would reach outside the restored
//!   databases, view or routine changes, incidents), then the replay itself. Row events are
//!   executed by the server with the `BINLOG` statement, as `mysqlbinlog | mysql` does, their
//!   table maps renamed to the staging schemas; table DDL runs in the staging schema with the
//!   session settings the event recorded. Each transaction is applied whole, and the replay
//!   stops before the first transaction after the target.

use std::collections::{BTreeSet, HashMap};

use base64::Engine;
use visitors_agent_contract::gtid::{Gtid, GtidSet};
use visitors_agent_contract::summary::{Replay, bounded_gtid};

use super::event::{
    Boundaries, Format, RawEvent, STMT_END_FLAG, Step, Transaction, first_word, kind, rows_flags, table_map,
};
use super::layout::{
    ARCHIVE_FILE, ArchiveMeta, BinlogPos, CHECKPOINT_FILE, Checkpoint, Epoch, SegmentEntry, all_entries, continues,
    covered_through, read_epochs, read_json,
};
use super::prune::{PruneTarget, Start, find_start};
use super::segment::read_segment;
use crate::encryption::Keyring;
use crate::error::{AgentError, Result};
use crate::format::Position;
use crate::storage::Storage;

/// Where a replay stops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every transaction committed at or before this time (Unix seconds), none after.
    Time(i64),
    /// Up to and including these transactions.
    Gtids(GtidSet),
}

impl Target {
    /// `--until-time` or `--until-gtid`, as the command line gives them.
    pub fn parse(until_time: Option<&str>, until_gtid: Option<&str>) -> Result<Self> {
        match (until_time, until_gtid) {
            (Some(time), None) => {
                let time: jiff::Timestamp = time.parse().map_err(|e| {
                    AgentError::Usage(format!(
                        "--until-time {time:?} is not an RFC 3339 time (2026-11-25T17:59:00Z): {e}"
                    ))
                })?;
                if time.subsec_nanosecond() != 0 {
                    return Err(AgentError::Usage(format!(
                        "--until-time {time} has a fraction of a second: a target is to the second"
                    )));
                }
                Ok(Target::Time(time.as_second()))
            }
            (None, Some(gtid)) => {
                GtidSet::parse(gtid).map(Target::Gtids).map_err(|e| AgentError::Usage(format!("--until-gtid: {e}")))
            }
            _ => Err(AgentError::Usage("give exactly one of --until-time and --until-gtid".into())),
        }
    }

    fn includes(&self, transaction: &Transaction) -> bool {
        match (self, &transaction.gtid) {
            (Target::Time(time), _) => transaction.commit_time <= *time,
            (Target::Gtids(set), Some(gtid)) => set.contains(gtid),
            (Target::Gtids(_), None) => false,
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Time(time) => write!(f, "{}", jiff::Timestamp::from_second(*time).map_err(|_| std::fmt::Error)?),
            Target::Gtids(set) => write!(f, "gtid {set}"),
        }
    }
}

/// What to replay: the segments, from where, to what.
#[derive(Debug, Clone)]
pub struct ReplayPlan {
    pub location: String,
    pub segments: Vec<SegmentEntry>,
    /// Where, in the first segment, the base backup ends.
    pub start: ReplayStart,
    pub base_gtids: Option<GtidSet>,
    pub target: Target,
}

/// Where the base backup ends in the first segment of a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayStart {
    /// At this position of the first segment's file (the backup was taken on the archived
    /// server): events ending at or before it are in the backup.
    Within(BinlogPos),
    /// Right before the first segment, by position.
    Before,
    /// The first segment holds the first transaction the backup's GTIDs do not (a backup of
    /// another server, or one from before a failover): every transaction they hold, wherever
    /// it comes, is in the backup and skipped.
    ByGtids,
}

/// Chooses the segments a replay from the snapshot `position` of a base backup to `target`
/// reads, or refuses.
pub async fn plan(archive: &Storage, position: Option<&Position>, target: Target) -> Result<ReplayPlan> {
    let location = archive.location().to_string();
    let base = PruneTarget::from_manifest(position, "being restored")
        .map_err(|e| AgentError::BaseNotInArchive { location: location.clone(), reason: e.one_line() })?;
    check_target_after_base(&target, base.time, base.gtids.as_ref())?;
    let archived = Archived {
        entries: all_entries(archive).await?,
        epochs: read_epochs(archive).await?,
        meta: read_json(archive, ARCHIVE_FILE).await?,
        checkpoint: read_json(archive, CHECKPOINT_FILE).await?,
    };
    let (segments, start) = archived.choose(&base, &target, &location)?;
    Ok(ReplayPlan { location, segments, start, base_gtids: base.gtids, target })
}

/// What an archive holds, as a plan reads it.
#[derive(Debug, Clone, Default)]
pub struct Archived {
    pub entries: Vec<SegmentEntry>,
    pub epochs: Vec<Epoch>,
    pub meta: Option<ArchiveMeta>,
    pub checkpoint: Option<Checkpoint>,
}

impl Archived {
    /// The segments from the one where `base` ends to the one where `target` is reached, and
    /// where in the first the base ends; refuses a base the archive does not hold, a gap on
    /// the way, and a target the archive has not reached.
    pub fn choose(
        &self,
        base: &PruneTarget,
        target: &Target,
        location: &str,
    ) -> Result<(Vec<SegmentEntry>, ReplayStart)> {
        let entries = &self.entries;
        let Some(start) = find_start(entries, &self.epochs, self.meta.as_ref(), base) else {
            return Err(AgentError::BaseNotInArchive { location: location.into(), reason: self.not_held(base) });
        };
        let replay_start = match start {
            Start::Within(_) => ReplayStart::Within(base.position.clone().expect("found by its position")),
            Start::Before(_) => ReplayStart::Before,
            Start::ByGtids(_) => ReplayStart::ByGtids,
        };
        let first = start.index();
        if first == entries.len() {
            // The base is right at the end of what is stored: nothing to replay, but the target
            // must still be covered.
            let newest = entries.last();
            let archived = covered_until(entries, &self.epochs, entries.len() - 1, self.checkpoint.as_ref());
            check_covered(target, archived, location, newest.and_then(|e| e.gtid_after.as_deref()))?;
            return Ok((Vec::new(), replay_start));
        }
        let mut chosen = vec![entries[first].clone()];
        let mut index = first;
        while !reached(target, &entries[index]) {
            let Some(next) = entries.get(index + 1) else {
                let archived = covered_until(entries, &self.epochs, index, self.checkpoint.as_ref());
                check_covered(target, archived, location, entries[index].gtid_after.as_deref())?;
                break;
            };
            if !continues(&entries[index], next, &self.epochs) {
                let before = covered_until(entries, &self.epochs, index, None);
                if matches!(target, Target::Time(t) if before.is_some_and(|b| *t <= b)) {
                    break;
                }
                let (reason, message) = self.gap_between(&entries[index], next);
                return Err(AgentError::ArchiveGap { location: location.into(), reason, message });
            }
            index += 1;
            chosen.push(next.clone());
        }
        Ok((chosen, replay_start))
    }

    /// Why `next` does not continue `previous`: the gap its epoch recorded, or a missing record.
    fn gap_between(&self, previous: &SegmentEntry, next: &SegmentEntry) -> (String, String) {
        let epoch = self.epochs.iter().find(|e| e.epoch == next.epoch && next.epoch != previous.epoch);
        match epoch.and_then(|e| e.gap_before.as_ref()) {
            Some(gap) => (gap.reason.clone(), gap.message.clone()),
            None if epoch.is_some() => (
                "gap".into(),
                format!(
                    "epoch {} does not continue segment {} (its first record is {}, or its GTIDs are not where segment {} ends)",
                    next.epoch, previous.seq, next.seq, previous.seq
                ),
            ),
            None => (
                "missingSegment".into(),
                format!(
                    "segment {} ends at {} but the next record, {}, begins at {}",
                    previous.seq,
                    previous.next_start(),
                    next.seq,
                    next.start_pos()
                ),
            ),
        }
    }

    /// Why the archive does not hold `base`, in words a user can act on.
    fn not_held(&self, base: &PruneTarget) -> String {
        let (Some(first), Some(last)) = (self.entries.first(), self.entries.last()) else {
            return "the archive holds no segment yet: wait until the archiver has stored the transactions after the backup".into();
        };
        let at = match (&base.position, &base.gtids) {
            (Some(position), Some(gtids)) => format!("{position} (GTIDs {gtids})"),
            (Some(position), None) => position.to_string(),
            (None, Some(gtids)) => format!("GTIDs {gtids}"),
            (None, None) => "an unknown position".into(),
        };
        let taken_on = base.server.as_ref().map(|s| format!(" on {s}")).unwrap_or_default();
        let Some(gtids) = &base.gtids else {
            return format!(
                "the backup's snapshot is at {at}{taken_on}, and the archive holds {} to {}",
                first.start_pos(),
                last.end_pos()
            );
        };
        let newest = last.gtids_after();
        if newest.as_ref().is_some_and(|newest| gtids.includes(newest)) {
            return format!(
                "the backup's snapshot at {at}{taken_on} holds transactions the archive has not stored (its newest GTIDs are {}): wait until the archiver has caught up, or the backup is of another history",
                newest.map_or_else(String::new, |n| n.to_string())
            );
        }
        match first.gtids_before() {
            Some(oldest) if !gtids.includes(&oldest) => format!(
                "the archive begins after the backup's snapshot at {at}{taken_on}: its first segment follows GTIDs {oldest}, so the transactions between them are in neither (pruned, or archived only since); restore from a newer backup"
            ),
            _ => format!(
                "no segment of the archive ({} to {}) follows the backup's snapshot at {at}{taken_on}: its GTIDs are not in the archive's history",
                first.start_pos(),
                last.end_pos()
            ),
        }
    }
}

fn check_target_after_base(target: &Target, base_time: Option<i64>, base_gtids: Option<&GtidSet>) -> Result<()> {
    match target {
        Target::Time(time) if base_time.is_some_and(|base| *time < base) => Err(AgentError::Usage(format!(
            "the target {target} is before the base backup's snapshot ({}): restore from an older backup",
            Target::Time(base_time.unwrap_or_default())
        ))),
        Target::Gtids(set) => match base_gtids {
            Some(base) if base.is_mariadb() != set.is_mariadb() => Err(AgentError::Usage(format!(
                "the target {target} is not of the server family of the base backup ({base})"
            ))),
            Some(base) if !set.includes(base) => Err(AgentError::Usage(format!(
                "the base backup's GTIDs ({base}) hold transactions the target {target} excludes: restore from an older backup, or name every domain of the base in the target"
            ))),
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

/// Whether a replay through `entry` has reached `target`: it holds a transaction after it.
fn reached(target: &Target, entry: &SegmentEntry) -> bool {
    match target {
        Target::Time(time) => entry.last_time.is_some_and(|last| last > *time),
        Target::Gtids(set) => {
            entry.gtid_after.as_deref().and_then(|g| GtidSet::parse(g).ok()).is_some_and(|after| after.includes(set))
        }
    }
}

/// Until when the archive holds everything up to segment `index` since its last gap, by its
/// newest transaction and, for the newest segment, the checkpoint's caught-up time.
fn covered_until(
    entries: &[SegmentEntry],
    epochs: &[Epoch],
    index: usize,
    checkpoint: Option<&Checkpoint>,
) -> Option<i64> {
    let without_gap = |epoch: u64| {
        epoch == entries[index].epoch
            || epochs
                .iter()
                .filter(|e| e.epoch > epoch && e.epoch <= entries[index].epoch)
                .all(|e| e.continues.is_some())
    };
    let newest_time = entries[..=index].iter().rev().take_while(|e| without_gap(e.epoch)).find_map(|e| e.last_time);
    let caught_up =
        checkpoint.filter(|c| index + 1 == entries.len() && c.seq == entries[index].seq).and_then(|c| c.caught_up_time);
    covered_through(newest_time, caught_up)
}

fn check_covered(target: &Target, archived: Option<i64>, location: &str, gtid_after: Option<&str>) -> Result<()> {
    let not_archived = |archived: String| AgentError::TargetNotArchived {
        target: target.to_string(),
        location: location.to_string(),
        archived,
    };
    match target {
        Target::Time(time) => match archived {
            Some(archived) if archived >= *time => Ok(()),
            Some(archived) => Err(not_archived(Target::Time(archived).to_string())),
            None => Err(not_archived("no time yet".into())),
        },
        Target::Gtids(set) => {
            let after = gtid_after.and_then(|g| GtidSet::parse(g).ok());
            match after {
                Some(after) if after.includes(set) => Ok(()),
                Some(after) => Err(not_archived(format!("gtid {after}"))),
                None => Err(not_archived("no GTID yet".into())),
            }
        }
    }
}

/// What a replay does, in order.
pub trait Sink {
    /// The format of the events that follow (each segment's).
    fn format(&mut self, format: &Format) -> impl Future<Output = Result<()>> + Send;
    fn begin(&mut self, transaction: &Transaction) -> impl Future<Output = Result<()>> + Send;
    /// A table map of the statement being replayed, renamed to its staging schema.
    fn table_map(&mut self, event: &[u8]) -> impl Future<Output = Result<()>> + Send;
    /// A rows event of a table mapped before it.
    fn rows(&mut self, event: &[u8]) -> impl Future<Output = Result<()>> + Send;
    /// The statement's last rows event was seen (restored or not).
    fn statement_end(&mut self) -> impl Future<Output = Result<()>> + Send;
    /// A statement to run in the staging schema `schema` with the session settings of its
    /// event; without one, where no table is (every name it uses is qualified).
    fn statement(&mut self, schema: Option<&str>, statement: &Statement) -> impl Future<Output = Result<()>> + Send;
    fn commit(&mut self) -> impl Future<Output = Result<()>> + Send;
}

/// A statement from a query event, with what the replay sets before it.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    pub sql: String,
    /// `SET ...` statements: the event's timestamp, sql_mode, character sets, time zone, and
    /// for a statement-logged change the `INSERT_ID`, `LAST_INSERT_ID` and `RAND()` seeds the
    /// server logged before it.
    pub settings: Vec<String>,
    /// The user variables a statement-logged change reads, as the server logged them.
    pub user_variables: Vec<UserVariable>,
}

/// A user variable a statement-logged change reads (`SET @name := value` before it).
#[derive(Debug, Clone, PartialEq)]
pub struct UserVariable {
    pub name: String,
    pub value: UserValue,
}

#[derive(Debug, Clone, PartialEq)]
pub enum UserValue {
    Null,
    /// Text in the character set and collation of the server's collation `collation_id`.
    Text {
        bytes: Vec<u8>,
        collation_id: u32,
    },
    Integer(String),
    Real(f64),
}

/// What the server logs before a statement-logged change, for it alone.
#[derive(Debug, Clone, PartialEq, Default)]
struct StatementContext {
    settings: Vec<String>,
    user_variables: Vec<UserVariable>,
}

/// The replay's account.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ReplayReport {
    pub transactions: u64,
    pub events: u64,
    pub segments: u64,
    pub last_applied: Option<Transaction>,
}

impl ReplayReport {
    pub fn summary(&self) -> Replay {
        Replay {
            last_applied_time: self
                .last_applied
                .as_ref()
                .and_then(|t| jiff::Timestamp::from_second(t.commit_time).ok())
                .map(|t| t.to_string()),
            last_applied_gtid: bounded_gtid(
                self.last_applied.as_ref().and_then(|t| t.gtid.as_ref()).map(ToString::to_string),
            ),
            transactions: self.transactions,
            events: self.events,
            segments: self.segments,
        }
    }
}

/// Turns a plan's segments into a [`Sink`]'s steps.
pub struct Replayer<'a> {
    archive: &'a Storage,
    plan: &'a ReplayPlan,
    /// Restored database → its staging schema.
    schemas: &'a HashMap<String, String>,
    /// Every database on the target server: a statement naming one outside the restore is
    /// refused, whatever its default database.
    known_databases: BTreeSet<String>,
    /// Opens encrypted segments.
    keys: &'a Keyring,
}

impl<'a> Replayer<'a> {
    pub fn new(
        archive: &'a Storage,
        plan: &'a ReplayPlan,
        schemas: &'a HashMap<String, String>,
        known_databases: impl IntoIterator<Item = String>,
        keys: &'a Keyring,
    ) -> Self {
        let mut known_databases: BTreeSet<String> =
            known_databases.into_iter().map(|d| d.to_ascii_lowercase()).collect();
        known_databases.extend(schemas.keys().map(|d| d.to_ascii_lowercase()));
        Replayer { archive, plan, schemas, known_databases, keys }
    }

    /// Replays the plan's transactions into `sink`; returns what it replayed.
    pub async fn replay_into(&self, sink: &mut impl Sink) -> Result<ReplayReport> {
        let mut report = ReplayReport::default();
        let mut state = ReplayState { reached: self.plan.base_gtids.clone(), ..ReplayState::default() };
        'segments: for (index, entry) in self.plan.segments.iter().enumerate() {
            let Some(data) = read_segment(self.archive, entry, self.keys).await? else { continue };
            report.segments += 1;
            sink.format(&data.format).await?;
            state.boundaries = Boundaries::default();
            state.tables.clear();
            let in_backup = match (&self.plan.start, index) {
                (ReplayStart::Within(end), 0) => Some(end),
                _ => None,
            };
            for event in data.events() {
                let event = event?;
                if in_backup.is_some_and(|end| u64::from(event.log_pos()) <= end.position) {
                    continue;
                }
                if self.apply(event, &data.format, &mut state, &mut report, sink).await? == Flow::Stop {
                    break 'segments;
                }
            }
            if state.boundaries.in_transaction() {
                return Err(self.refuse(&format!("segment {} ends inside a transaction", entry.seq)));
            }
        }
        self.check_gtid_target_reached(state.reached.as_ref())?;
        Ok(report)
    }

    /// A GTID target is reached only when the base and the replayed transactions hold all of
    /// it: the replay stops at the first transaction outside it, and the binary log may have
    /// one before some of the target's (another domain's, or an interleaved source's).
    fn check_gtid_target_reached(&self, reached: Option<&GtidSet>) -> Result<()> {
        let Target::Gtids(target) = &self.plan.target else { return Ok(()) };
        if reached.is_some_and(|reached| reached.includes(target)) {
            return Ok(());
        }
        let reached = reached.map_or_else(|| "no GTID".to_string(), ToString::to_string);
        Err(self.refuse(&format!(
            "the replay stops at the first transaction outside the target gtid {target}, where the base and the replayed transactions hold {reached}, not all of the target: the binary log has a transaction the target excludes before some it includes; name a target that holds every transaction logged before its last one"
        )))
    }

    async fn apply(
        &self,
        event: RawEvent<'_>,
        format: &Format,
        state: &mut ReplayState,
        report: &mut ReplayReport,
        sink: &mut impl Sink,
    ) -> Result<Flow> {
        let step = state.boundaries.step(event, format).map_err(|e| self.refuse(&e.to_string()))?;
        match &step {
            Step::Begins(transaction) => {
                if self.in_base(transaction)? {
                    state.skipping = true;
                    return Ok(Flow::Go);
                }
                if let (Some(gtid), Some(reached)) = (&transaction.gtid, &state.reached)
                    && reached.contains(gtid)
                {
                    return Err(self.refuse(&format!(
                        "transaction {gtid} comes a second time, after {reached} (the archive's segments overlap, as an archive written across a failover by an older agent can); choose a target before it"
                    )));
                }
                if !self.plan.target.includes(transaction) {
                    return Ok(Flow::Stop);
                }
                if transaction.xa {
                    return Err(self.refuse(&format!("XA transaction {}", describe(transaction))));
                }
                state.current = Some(transaction.clone());
                sink.begin(transaction).await?;
                report.events += 1;
                return Ok(Flow::Go);
            }
            Step::Outside => return self.outside(event, format, sink).await.map(|()| Flow::Go),
            Step::Inside if state.skipping => return Ok(Flow::Go),
            Step::Ends if state.skipping => {
                state.skipping = false;
                return Ok(Flow::Go);
            }
            Step::Inside | Step::Ends => {}
        }
        report.events += 1;
        match event.kind() {
            kind::TABLE_MAP => {
                let (database, table, id) = table_map(event, format).map_err(|e| self.refuse(&e.to_string()))?;
                match self.schemas.get(&database) {
                    Some(schema) => {
                        let renamed = super::event::rename_table_map_database(event, format, &database, schema)
                            .map_err(|e| self.refuse(&e.to_string()))?;
                        state.tables.insert(id, true);
                        sink.table_map(&renamed).await?;
                    }
                    None => {
                        tracing::debug!("skipping rows of `{database}`.`{table}`: not restored");
                        state.tables.insert(id, false);
                    }
                }
            }
            code if kind::is_rows(code) => {
                let body = event.body(format.checksums);
                let id = body.get(0..6).map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], 0, 0]));
                match id.and_then(|id| state.tables.get(&id)) {
                    Some(true) => sink.rows(event.0).await?,
                    Some(false) => {}
                    None => return Err(self.refuse("a rows event with no table map before it")),
                }
                if rows_flags(event) & STMT_END_FLAG != 0 {
                    sink.statement_end().await?;
                }
            }
            kind::QUERY => {
                let context = std::mem::take(&mut state.context);
                self.query(event, format, sink, state.current.as_ref(), context).await?
            }
            kind::XID | kind::XA_PREPARE => {}
            kind::INTVAR | kind::RAND | kind::USER_VAR => self.statement_context(event, format, &mut state.context)?,
            kind::MARIADB_ANNOTATE_ROWS | kind::ROWS_QUERY => {}
            kind::MARIADB_QUERY_COMPRESSED => {
                return Err(self.refuse("a compressed query event (log_bin_compress=ON is not supported)"));
            }
            kind::INCIDENT => {
                return Err(self.refuse(INCIDENT));
            }
            kind::APPEND_BLOCK | kind::BEGIN_LOAD_QUERY | kind::EXECUTE_LOAD_QUERY => {
                return Err(
                    self.refuse("a LOAD DATA logged as a statement (its file is in the log as separate events)")
                );
            }
            other => return Err(self.refuse(&format!("an event of type {other:#x} inside a transaction"))),
        }
        if step == Step::Ends {
            state.context = StatementContext::default();
            sink.commit().await?;
            report.transactions += 1;
            report.last_applied = state.current.take();
            if let Some(gtid) = report.last_applied.as_ref().and_then(|t| t.gtid.as_ref()) {
                state.reached.get_or_insert_with(|| gtid.as_set()).add(gtid);
            }
        }
        Ok(Flow::Go)
    }

    /// Whether `transaction` is already in the base backup. After a start by position, none
    /// may be: the backup and the archive would disagree. After a start by GTID, those the
    /// backup holds are skipped wherever they come (a replica applies domains in its own
    /// order), but a MariaDB GTID at a sequence number the backup has from another server
    /// means another history.
    fn in_base(&self, transaction: &Transaction) -> Result<bool> {
        let (Some(base), Some(gtid)) = (&self.plan.base_gtids, &transaction.gtid) else { return Ok(false) };
        if self.plan.start != ReplayStart::ByGtids {
            return match base.contains(gtid) {
                true => Err(self.refuse(&format!(
                    "transaction {gtid} after the base backup's position is already in its GTIDs ({base}): the backup and the archive disagree"
                ))),
                false => Ok(false),
            };
        }
        if let Some(ours) = base.other_writer_of(gtid) {
            return Err(AgentError::BaseNotInArchive {
                location: self.plan.location.clone(),
                reason: format!(
                    "the backup holds {ours} where the archive has {gtid}: the backup is of another history (a diverged server); restore from a backup of the archived servers"
                ),
            });
        }
        Ok(base.contains(gtid))
    }

    /// Events between transactions: file bookkeeping is skipped, an incident refused, a
    /// statement treated as one inside a transaction.
    async fn outside(&self, event: RawEvent<'_>, format: &Format, sink: &mut impl Sink) -> Result<()> {
        match event.kind() {
            kind::INCIDENT => Err(self.refuse(INCIDENT)),
            kind::QUERY => self.query(event, format, sink, None, StatementContext::default()).await,
            kind::APPEND_BLOCK | kind::BEGIN_LOAD_QUERY | kind::EXECUTE_LOAD_QUERY => {
                Err(self.refuse("a LOAD DATA logged as a statement (its file is in the log as separate events)"))
            }
            _ => Ok(()),
        }
    }

    async fn query(
        &self,
        event: RawEvent<'_>,
        format: &Format,
        sink: &mut impl Sink,
        transaction: Option<&Transaction>,
        context: StatementContext,
    ) -> Result<()> {
        let parsed = format.parse(event).map_err(|e| self.refuse(&e.to_string()))?;
        let query = parsed
            .read_event::<mysql_common::binlog::events::QueryEvent<'_>>()
            .map_err(|e| self.refuse(&e.to_string()))?;
        let text = query.query().into_owned();
        let word = first_word(&text);
        if matches!(word.as_str(), "BEGIN" | "COMMIT" | "ROLLBACK") || word == "XA" {
            return Ok(());
        }
        if changes_no_table_data(&text) {
            tracing::debug!("skipping a {} statement: it changes no table's data", statement_kind(&text));
            return Ok(());
        }
        let schema = query.schema().into_owned();
        let restored_default = self.schemas.contains_key(&schema);
        let mentioned = self.mentioned_databases(&text);
        let (restored, foreign): (Vec<&String>, Vec<&String>) = mentioned.iter().partition(|d| self.is_restored(d));
        if !restored_default && restored.is_empty() {
            tracing::debug!("skipping a statement of database `{schema}`: not restored");
            return Ok(());
        }
        if !restored.is_empty() && is_a_restores_swap(&text) {
            let when = transaction.map_or_else(|| "here".to_string(), |t| format!("at {}", describe_with_time(t)));
            return Err(self.refuse(&format!(
                "an in-place restore of {} happened {when}: a replay cannot cross it; choose a target before it, or after the first backup run taken since",
                restored.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", ")
            )));
        }
        if !is_replayable(&text) {
            return Err(self.refuse(&format!(
                "a {} statement cannot be replayed into a staging schema (only changes to the restored databases' \
                 tables, sequences, views, routines, triggers and events, and their rows, can)",
                statement_kind(&text)
            )));
        }
        if !foreign.is_empty() {
            return Err(self.refuse(&format!(
                "a {} statement (run in database `{schema}`) names database {}, which is not restored; only \
                 statements on the restored databases can be replayed",
                statement_kind(&text),
                foreign.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", ")
            )));
        }
        // Names qualified with a restored database (`app.t`) point at its staging schema.
        let staging_of = |database: &str| {
            self.schemas.iter().find(|(d, _)| d.eq_ignore_ascii_case(database)).map(|(_, s)| s.clone())
        };
        let text = restored.iter().fold(text, |text, database| match staging_of(database) {
            Some(staging) => requalify(&text, database, &staging),
            None => text,
        });
        // Run from a database that is not restored, the statement names the restored ones by
        // name: it runs where no table is, so that a name it leaves unqualified (one of its own
        // database) fails the replay instead of reaching a staged table of that name.
        let run_in = restored_default.then(|| self.schemas[&schema].clone());
        let text = with_invoker_as_definer(&text, invoker(&query).as_deref());
        let mut settings = session_settings(event, &query);
        settings.extend(context.settings);
        let statement = Statement { sql: text, settings, user_variables: context.user_variables };
        sink.statement(run_in.as_deref(), &statement).await
    }

    /// Reads what an intvar, rand or user variable event sets for the statement after it.
    fn statement_context(&self, event: RawEvent<'_>, format: &Format, context: &mut StatementContext) -> Result<()> {
        use mysql_common::binlog::consts::IntvarEventType;
        use mysql_common::binlog::events::{IntvarEvent, RandEvent, UserVarEvent};
        use mysql_common::constants::ItemResult;
        let parsed = format.parse(event).map_err(|e| self.refuse(&e.to_string()))?;
        let unreadable = |e: std::io::Error| self.refuse(&format!("an unreadable event before a statement: {e}"));
        match event.kind() {
            kind::INTVAR => {
                let intvar = parsed.read_event::<IntvarEvent>().map_err(unreadable)?;
                let variable = match intvar.subtype() {
                    IntvarEventType::LAST_INSERT_ID_EVENT => "LAST_INSERT_ID",
                    IntvarEventType::INSERT_ID_EVENT => "INSERT_ID",
                    IntvarEventType::INVALID_INT_EVENT => return Err(self.refuse("an invalid intvar event")),
                };
                context.settings.push(format!("SET {variable} = {}", intvar.value()));
            }
            kind::RAND => {
                let rand = parsed.read_event::<RandEvent>().map_err(unreadable)?;
                context.settings.push(format!("SET @@RAND_SEED1 = {}, @@RAND_SEED2 = {}", rand.seed1.0, rand.seed2.0));
            }
            _ => {
                let variable = parsed.read_event::<UserVarEvent<'_>>().map_err(unreadable)?;
                let name = variable.name().into_owned();
                let bytes = variable.value();
                let value = match variable.value_type() {
                    _ if variable.is_null() => UserValue::Null,
                    Ok(ItemResult::STRING_RESULT) => {
                        UserValue::Text { bytes: bytes.to_vec(), collation_id: variable.charset() }
                    }
                    Ok(ItemResult::INT_RESULT) if bytes.len() >= 8 => {
                        let raw = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
                        let unsigned = variable.flags_raw() & 1 != 0;
                        UserValue::Integer(if unsigned { raw.to_string() } else { (raw as i64).to_string() })
                    }
                    Ok(ItemResult::REAL_RESULT) if bytes.len() >= 8 => {
                        UserValue::Real(f64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")))
                    }
                    _ => {
                        return Err(self.refuse(&format!(
                            "a statement-logged change reads the user variable @{name}, of a type (DECIMAL) the replay \
                             cannot set"
                        )));
                    }
                };
                context.user_variables.push(UserVariable { name, value });
            }
        }
        Ok(())
    }

    fn is_restored(&self, database: &str) -> bool {
        self.schemas.keys().any(|d| d.eq_ignore_ascii_case(database))
    }

    /// The databases a statement names as qualifiers (`db.table`, `` `db`.`table` ``), among
    /// those the target server has or the restore restores.
    fn mentioned_databases(&self, text: &str) -> BTreeSet<String> {
        let lower = text.to_ascii_lowercase();
        self.known_databases
            .iter()
            .filter(|database| {
                let quoted = format!("`{}`", database.replace('`', "``"));
                [quoted, (*database).clone()].iter().any(|name| qualifies(&lower, name))
            })
            .cloned()
            .collect()
    }

    fn refuse(&self, what: &str) -> AgentError {
        AgentError::ReplayUnsupported(format!("{what} (archive {})", self.plan.location))
    }
}

/// Why an incident event is refused wherever it is.
const INCIDENT: &str = "an incident event: the server recorded that events may be missing here";

#[derive(Default)]
struct ReplayState {
    boundaries: Boundaries,
    /// Table id → whether its database is restored.
    tables: HashMap<u64, bool>,
    current: Option<Transaction>,
    /// The base's GTIDs and those of the transactions replayed.
    reached: Option<GtidSet>,
    /// Inside a transaction the base backup already holds.
    skipping: bool,
    /// What the server logged for the next statement (intvar, rand and user variable events).
    context: StatementContext,
}

#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Go,
    Stop,
}

/// Whether `name` (ASCII lowercase) stands in `text` (ASCII lowercase) as a qualifier: right
/// before a `.`, and not the end of a longer name.
fn qualifies(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(at, _)| qualifier_at(text, at, name))
}

/// Whether `name` begins at `at` in `text` as a qualifier.
fn qualifier_at(text: &str, at: usize, name: &str) -> bool {
    if !text[at..].starts_with(name) {
        return false;
    }
    let before = text[..at].chars().next_back();
    let after = text[at + name.len()..].trim_start().chars().next();
    let starts_word = before.is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '$' || c == '`'));
    starts_word && after == Some('.')
}

/// `text` with every `database.` qualifier (bare or backquoted, any ASCII case) naming
/// `staging` instead.
pub(crate) fn requalify(text: &str, database: &str, staging: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let bare = database.to_ascii_lowercase();
    let quoted = format!("`{}`", bare.replace('`', "``"));
    let staging_quoted = format!("`{}`", staging.replace('`', "``"));
    // A bare qualifier stays bare when the new name may be (so that a name moved there and back
    // reads as it was written).
    let staging_bare = if is_plain_identifier(staging) { staging.to_string() } else { staging_quoted.clone() };
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while at < text.len() {
        if qualifier_at(&lower, at, &quoted) {
            out.push_str(&staging_quoted);
            at += quoted.len();
        } else if qualifier_at(&lower, at, &bare) {
            out.push_str(&staging_bare);
            at += bare.len();
        } else {
            let next = text[at..].chars().next().expect("inside the text");
            out.push(next);
            at += next.len_utf8();
        }
    }
    out
}

/// A name that needs no backquotes: ASCII letters, digits, `_` and `$`, not only digits.
fn is_plain_identifier(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
        && !name.chars().all(|c| c.is_ascii_digit())
}

/// Whether a statement can be replayed into a staging schema: a change to a table, a
/// sequence, a view, a routine, a trigger or an event (its definition), or a statement-logged
/// change to rows (MariaDB logs some as statements even in row format: changes to tables
/// versioned by transaction ids, for instance). Not a database's creation or removal, nor what
/// reaches outside the server's tables (a `LOAD DATA` file, a server or tablespace definition).
pub(crate) fn is_replayable(text: &str) -> bool {
    const OBJECTS: [&str; 8] = ["TABLE", "INDEX", "VIEW", "TRIGGER", "PROCEDURE", "FUNCTION", "EVENT", "SEQUENCE"];
    const OTHERS: [&str; 7] = ["DATABASE", "SCHEMA", "SERVER", "TABLESPACE", "PACKAGE", "USER", "ROLE"];
    let words: Vec<String> = text.split_whitespace().take(16).map(|w| w.to_ascii_uppercase()).collect();
    let word = |i: usize| words.get(i).map(String::as_str).unwrap_or_default();
    let object = || words.iter().skip(1).find(|w| OBJECTS.contains(&w.as_str()) || OTHERS.contains(&w.as_str()));
    match word(0) {
        "CREATE" | "ALTER" | "DROP" => object().is_some_and(|w| OBJECTS.contains(&w.as_str())),
        "RENAME" => word(1) == "TABLE",
        "TRUNCATE" | "INSERT" | "UPDATE" | "DELETE" | "REPLACE" => true,
        _ => false,
    }
}

/// The account that ran a statement, as the server recorded it for statements whose effect
/// depends on it (`'user'@'host'`).
fn invoker(query: &mysql_common::binlog::events::QueryEvent<'_>) -> Option<String> {
    use mysql_common::binlog::events::StatusVarVal;
    for var in query.status_vars().iter() {
        let Ok(value) = var.get_value() else { break };
        if let StatusVarVal::Invoker { username, hostname } = value {
            let (user, host) = (username.as_str(), hostname.as_str());
            return Some(format!("{}@{}", crate::format::quote_ident(&user), crate::format::quote_ident(&host)));
        }
    }
    None
}

/// An `ALTER EVENT` without a `DEFINER` makes whoever runs it the event's definer: replayed as
/// it is, the restore's account. The account that ran it is named instead.
fn with_invoker_as_definer(text: &str, invoker: Option<&str>) -> String {
    let Some(invoker) = invoker else { return text.to_string() };
    let words: Vec<String> = text.split_whitespace().take(3).map(|w| w.to_ascii_uppercase()).collect();
    let alter_event = words.first().is_some_and(|w| w == "ALTER") && words.get(1).is_some_and(|w| w == "EVENT");
    if !alter_event {
        return text.to_string();
    }
    let after_alter = text.to_ascii_uppercase().find("ALTER").map_or(0, |at| at + "ALTER".len());
    format!("{} DEFINER={invoker}{}", &text[..after_alter], &text[after_alter..])
}

/// The session settings a query event recorded, as `SET` statements (the way `mysqlbinlog`
/// prints them).
fn session_settings(event: RawEvent<'_>, query: &mysql_common::binlog::events::QueryEvent<'_>) -> Vec<String> {
    use mysql_common::binlog::events::StatusVarVal;
    let mut settings = vec![format!("SET TIMESTAMP = {}", event.timestamp())];
    for var in query.status_vars().iter() {
        let Ok(value) = var.get_value() else { break };
        match value {
            StatusVarVal::SqlMode(mode) => settings.push(format!("SET SESSION sql_mode = {}", mode.0)),
            StatusVarVal::Charset { charset_client, collation_connection, collation_server } => settings.push(format!(
                "SET SESSION character_set_client = {charset_client}, SESSION collation_connection = {collation_connection}, SESSION collation_server = {collation_server}"
            )),
            StatusVarVal::TimeZone(zone) => {
                let zone = zone.as_str().replace('\'', "''");
                if !zone.is_empty() {
                    settings.push(format!("SET SESSION time_zone = '{zone}'"));
                }
            }
            StatusVarVal::Flags2(flags) => {
                let bits = flags.0;
                let off = |bit: u32| if bits & bit != 0 { 0 } else { 1 };
                settings.push(format!(
                    "SET SESSION foreign_key_checks = {}, SESSION unique_checks = {}",
                    off(1 << 26),
                    off(1 << 27)
                ));
            }
            _ => {}
        }
    }
    settings
}

/// The swap of a restore by this agent: it names the restore's staging or replaced schema.
fn is_a_restores_swap(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("visitors_restore_") || lower.contains("visitors_replaced_")
}

fn describe_with_time(transaction: &Transaction) -> String {
    let time = jiff::Timestamp::from_second(transaction.commit_time).map(|t| t.to_string()).unwrap_or_default();
    match &transaction.gtid {
        Some(gtid) => format!("{time} (GTID {gtid})"),
        None => time,
    }
}

fn describe(transaction: &Transaction) -> String {
    transaction.gtid.as_ref().map_or_else(|| format!("at {}", transaction.commit_time), Gtid::to_string)
}

/// What a statement is, for messages: its verb and, for a definition, the kind of object
/// (`CREATE VIEW`, `DROP TRIGGER`), never its text (which may hold data, or a password).
fn statement_kind(text: &str) -> String {
    const OBJECTS: [&str; 14] = [
        "TABLE",
        "VIEW",
        "TRIGGER",
        "PROCEDURE",
        "FUNCTION",
        "EVENT",
        "INDEX",
        "DATABASE",
        "SCHEMA",
        "USER",
        "ROLE",
        "SEQUENCE",
        "PACKAGE",
        "SERVER",
    ];
    let words: Vec<String> = text.split_whitespace().take(12).map(|w| w.to_ascii_uppercase()).collect();
    let Some(verb) = words.first().filter(|w| w.chars().all(|c| c.is_ascii_alphabetic())) else {
        return "statement".into();
    };
    match words.iter().skip(1).find(|w| OBJECTS.contains(&w.as_str())) {
        Some(object) if matches!(verb.as_str(), "CREATE" | "ALTER" | "DROP" | "RENAME") => format!("{verb} {object}"),
        _ => verb.clone(),
    }
}

/// Account, privilege and maintenance statements: they change no table's rows or definition,
/// and a restore keeps the server's accounts. They are skipped.
fn changes_no_table_data(text: &str) -> bool {
    let words: Vec<String> = text.split_whitespace().take(4).map(|w| w.to_ascii_uppercase()).collect();
    let word = |i: usize| words.get(i).map(String::as_str).unwrap_or_default();
    let object = if word(1) == "OR" && word(2) == "REPLACE" { word(3) } else { word(1) };
    match word(0) {
        "CREATE" | "DROP" | "ALTER" | "RENAME" => matches!(object, "USER" | "ROLE"),
        "GRANT" | "REVOKE" | "FLUSH" => true,
        "SET" => matches!(word(1), "PASSWORD" | "DEFAULT"),
        "ANALYZE" | "OPTIMIZE" | "REPAIR" => matches!(word(1), "TABLE" | "LOCAL" | "NO_WRITE_TO_BINLOG"),
        _ => false,
    }
}

/// A [`Sink`] that only counts: the dry run that refuses before anything is touched.
#[derive(Default)]
pub struct DryRun;

impl Sink for DryRun {
    async fn format(&mut self, _: &Format) -> Result<()> {
        Ok(())
    }
    async fn begin(&mut self, _: &Transaction) -> Result<()> {
        Ok(())
    }
    async fn table_map(&mut self, _: &[u8]) -> Result<()> {
        Ok(())
    }
    async fn rows(&mut self, _: &[u8]) -> Result<()> {
        Ok(())
    }
    async fn statement_end(&mut self) -> Result<()> {
        Ok(())
    }
    async fn statement(&mut self, _: Option<&str>, _: &Statement) -> Result<()> {
        Ok(())
    }
    async fn commit(&mut self) -> Result<()> {
        Ok(())
    }
}

/// `BINLOG '<base64>'` for `events`.
pub fn binlog_statement(events: &[u8]) -> String {
    format!("BINLOG '{}'", base64::engine::general_purpose::STANDARD.encode(events))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_one_whole_second_or_one_gtid_set() {
        assert_eq!(Target::parse(Some("2026-11-25T17:59:00Z"), None).unwrap(), Target::Time(1_795_629_540));
        assert!(Target::parse(Some("2026-11-25T17:59:00.5Z"), None).is_err());
        assert!(Target::parse(Some("yesterday"), None).is_err());
        assert!(Target::parse(None, None).is_err());
        assert!(matches!(Target::parse(None, Some("0-1-5")), Ok(Target::Gtids(_))));
    }

    #[test]
    fn a_transaction_is_in_a_time_target_up_to_its_second() {
        let at = |commit_time| Transaction { gtid: None, commit_time, xa: false };
        assert!(Target::Time(100).includes(&at(100)));
        assert!(!Target::Time(100).includes(&at(101)));
        let gtids = Target::Gtids(GtidSet::parse("0-1-7").unwrap());
        let with_gtid = |s| Transaction { gtid: Some(Gtid::parse(s).unwrap()), commit_time: 0, xa: false };
        assert!(gtids.includes(&with_gtid("0-1-7")));
        assert!(!gtids.includes(&with_gtid("0-1-8")));
        assert!(!gtids.includes(&with_gtid("1-1-1")), "a domain the target does not name is not replayed");
    }

    #[test]
    fn qualified_names_are_found_but_not_inside_longer_names() {
        assert!(qualifies("alter table visitors.t add c int", "visitors"));
        assert!(qualifies("alter table `visitors` . `t` add c int", "`visitors`"));
        assert!(!qualifies("alter table t add visitors_count int", "visitors"));
        assert!(!qualifies("alter table myvisitors.t add c int", "visitors"));
        assert!(!qualifies("alter table t comment 'visitors'", "visitors"));
    }

    #[test]
    fn a_restored_databases_qualifiers_name_its_staging_schema() {
        let moved = |text| requalify(text, "app", "visitors_restore_1");
        assert_eq!(moved("ALTER TABLE app.t ADD c INT"), "ALTER TABLE visitors_restore_1.t ADD c INT");
        assert_eq!(
            moved("RENAME TABLE `App` . t TO app.u"),
            "RENAME TABLE `visitors_restore_1` . t TO visitors_restore_1.u"
        );
        assert_eq!(
            moved("ALTER TABLE t ADD app_id INT COMMENT 'an app'"),
            "ALTER TABLE t ADD app_id INT COMMENT 'an app'"
        );
        assert_eq!(moved("ALTER TABLE myapp.t ADD c INT"), "ALTER TABLE myapp.t ADD c INT");
        assert_eq!(moved("ALTER TABLE é.t, app.t"), "ALTER TABLE é.t, visitors_restore_1.t");
        // Moved to the staging schema and back, a statement reads as it was written.
        for text in ["INSERT INTO app.log SELECT * FROM `app`.t", "CREATE TRIGGER app.tr AFTER INSERT ON app.t"] {
            assert_eq!(requalify(&moved(text), "visitors_restore_1", "app"), text);
        }
        assert_eq!(requalify("SELECT x.t.a", "x", "my db"), "SELECT `my db`.t.a", "a name that needs quotes gets them");
    }

    #[test]
    fn an_altered_event_keeps_the_definer_who_altered_it() {
        let invoker = Some("`root`@`localhost`");
        assert_eq!(
            with_invoker_as_definer("alter event o.e enable", invoker),
            "alter DEFINER=`root`@`localhost` event o.e enable"
        );
        let named = "ALTER DEFINER=`u`@`%` EVENT e DISABLE";
        assert_eq!(with_invoker_as_definer(named, invoker), named, "a definer named stays");
        assert_eq!(with_invoker_as_definer("ALTER TABLE t ADD c INT", invoker), "ALTER TABLE t ADD c INT");
        assert_eq!(with_invoker_as_definer("ALTER EVENT e ENABLE", None), "ALTER EVENT e ENABLE");
    }

    #[test]
    fn replayable_statements_are_told_from_the_rest() {
        for yes in [
            "CREATE TABLE t (a int)",
            "create or replace table t (a int)",
            "CREATE UNIQUE INDEX i ON t (a)",
            "ALTER TABLE t ADD b int",
            "DROP TABLE IF EXISTS `t` /* generated by server */",
            "RENAME TABLE a TO b",
            "TRUNCATE t",
        ] {
            assert!(is_replayable(yes), "{yes}");
        }
        for yes in [
            "CREATE ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` SQL SECURITY DEFINER VIEW v AS SELECT 1",
            "CREATE DEFINER=`root`@`localhost` TRIGGER x AFTER INSERT ON t FOR EACH ROW SET @a = 1",
            "DROP PROCEDURE p",
            "create or replace function f() returns int return 1",
            "ALTER EVENT e DISABLE",
            "CREATE SEQUENCE s",
            "INSERT INTO t VALUES (1)",
            "update t set a = 1",
            "DELETE FROM t",
            "REPLACE INTO t VALUES (1)",
        ] {
            assert!(is_replayable(yes), "{yes}");
        }
        for no in [
            "CREATE DATABASE d",
            "DROP SCHEMA d",
            "CREATE SERVER s FOREIGN DATA WRAPPER mysql OPTIONS (HOST 'h')",
            "GRANT ALL ON *.* TO x",
            "LOAD DATA INFILE '/tmp/x' INTO TABLE t",
            "SELECT 1",
        ] {
            assert!(!is_replayable(no), "{no}");
        }
    }

    #[test]
    fn account_and_maintenance_statements_are_skipped_and_never_quoted() {
        for skipped in [
            "CREATE USER 'app'@'%' IDENTIFIED BY 's3cret'",
            "create or replace user x",
            "ALTER USER root@localhost IDENTIFIED BY 'x'",
            "GRANT SELECT ON app.* TO x",
            "SET PASSWORD FOR x = PASSWORD('y')",
            "FLUSH PRIVILEGES",
            "OPTIMIZE TABLE t",
            "ANALYZE NO_WRITE_TO_BINLOG TABLE t",
        ] {
            assert!(changes_no_table_data(skipped), "{skipped}");
        }
        for kept in ["CREATE TABLE user (a int)", "ALTER TABLE t ADD b int", "DROP VIEW v", "SET @a = 1"] {
            assert!(!changes_no_table_data(kept), "{kept}");
        }
        assert_eq!(statement_kind("create view v as select 'secret'"), "CREATE VIEW");
        let view =
            "CREATE ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` SQL SECURITY DEFINER VIEW `app`.`v` AS SELECT 1";
        assert_eq!(statement_kind(view), "CREATE VIEW");
        assert_eq!(statement_kind("INSERT INTO `app`.t VALUES ('secret')"), "INSERT");
        assert_eq!(statement_kind("'quoted'"), "statement");
    }

    /// A record of `file`'s span `start`-`end` in `epoch`, with the GTID state before and after
    /// it and the commit time of its last transaction.
    fn segment(
        seq: u64,
        epoch: u64,
        (file, start, end): (&str, u64, u64),
        gtids: (&str, &str),
        time: i64,
    ) -> SegmentEntry {
        serde_json::from_value(serde_json::json!({
            "seq": seq, "epoch": epoch, "file": file, "start": start, "end": end, "endsFile": false,
            "object": format!("segments/{seq}"), "storedBytes": 10, "bytes": 10, "events": 4, "transactions": 1,
            "gtidBefore": gtids.0, "gtidAfter": gtids.1, "firstTime": time, "lastTime": time,
            "storedTime": "2026-11-25T10:00:00Z",
        }))
        .unwrap()
    }

    fn server(id: u32) -> visitors_agent_contract::archive::ServerIdentity {
        visitors_agent_contract::archive::ServerIdentity {
            flavor: "mariadb".into(),
            version: "10.11".into(),
            server_id: id,
            server_uuid: None,
            hostname: Some(format!("db-{id}")),
        }
    }

    fn epoch(epoch: u64, first_seq: u64, server_id: u32, continues: Option<(&str, BinlogPos)>) -> Epoch {
        Epoch {
            epoch,
            first_seq,
            start: BinlogPos { file: "binlog.000001".into(), position: 4 },
            started_time: "2026-11-25T10:00:00Z".into(),
            first_time: None,
            gap_before: None,
            server: Some(server(server_id)),
            continues: continues.map(|(gtids, previous_end)| super::super::layout::Continuation {
                after_gtids: gtids.into(),
                previous_end,
            }),
        }
    }

    /// Server 1 archived up to `0-1-20` (its `binlog.000001` to 900); after a failover, server 2
    /// (whose `binlog.000001` is another file) goes on by GTID.
    fn across_a_failover() -> Archived {
        let end_of_first = BinlogPos { file: "binlog.000001".into(), position: 900 };
        Archived {
            entries: vec![
                segment(1, 0, ("binlog.000001", 4, 500), ("", "0-1-10"), 100),
                segment(2, 0, ("binlog.000001", 500, 900), ("0-1-10", "0-1-20"), 110),
                segment(3, 1, ("binlog.000001", 4, 700), ("0-1-20", "0-2-30"), 120),
                segment(4, 1, ("binlog.000001", 700, 800), ("0-2-30", "0-2-40"), 130),
            ],
            epochs: vec![epoch(0, 1, 1, None), epoch(1, 3, 2, Some(("0-1-20", end_of_first)))],
            meta: None,
            checkpoint: None,
        }
    }

    fn base(position: Option<(&str, u64)>, gtids: &str, server_id: u32) -> PruneTarget {
        PruneTarget {
            position: position.map(|(file, position)| BinlogPos { file: file.into(), position }),
            time: None,
            gtids: GtidSet::parse(gtids).ok(),
            server: Some(server(server_id)),
        }
    }

    fn seqs(chosen: &[SegmentEntry]) -> Vec<u64> {
        chosen.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn a_replay_crosses_a_failover_by_gtid() {
        let archived = across_a_failover();
        let on_the_old_primary = base(Some(("binlog.000001", 600)), "0-1-15", 1);
        let (chosen, start) = archived.choose(&on_the_old_primary, &Target::Time(125), "a").unwrap();
        assert_eq!(seqs(&chosen), [2, 3, 4]);
        assert_eq!(start, ReplayStart::Within(BinlogPos { file: "binlog.000001".into(), position: 600 }));

        // The replica's position names its own binlog.000001, which segment 3 spans too: only
        // its GTIDs say where it is.
        let on_the_replica = base(Some(("binlog.000001", 600)), "0-1-15", 2);
        let (chosen, start) = archived.choose(&on_the_replica, &Target::Time(125), "a").unwrap();
        assert_eq!((seqs(&chosen), start), (vec![2, 3, 4], ReplayStart::ByGtids));
        let on_the_new_primary = base(Some(("binlog.000001", 700)), "0-2-30", 2);
        let (chosen, start) = archived.choose(&on_the_new_primary, &Target::Time(129), "a").unwrap();
        let at_700 = ReplayStart::Within(BinlogPos { file: "binlog.000001".into(), position: 700 });
        assert_eq!((seqs(&chosen), start), (vec![4], at_700), "its own server's position, in the new epoch");
        let without_a_position = base(None, "0-1-20", 3);
        let (chosen, start) = archived.choose(&without_a_position, &Target::Time(125), "a").unwrap();
        assert_eq!((seqs(&chosen), start), (vec![3, 4], ReplayStart::ByGtids));
    }

    #[test]
    fn an_epoch_that_does_not_meet_the_one_before_it_is_a_gap() {
        let mut archived = across_a_failover();
        archived.epochs[1].continues.as_mut().unwrap().after_gtids = "0-1-19".into();
        let refused = archived.choose(&base(None, "0-1-15", 2), &Target::Time(125), "a");
        assert!(matches!(&refused, Err(AgentError::ArchiveGap { reason, .. }) if reason == "gap"), "{refused:?}");
        let before_the_gap = archived.choose(&base(None, "0-1-15", 2), &Target::Time(109), "a").unwrap();
        assert_eq!(seqs(&before_the_gap.0), [2], "a target before the gap is reached");

        let mut purged = across_a_failover();
        (purged.epochs[1].continues, purged.epochs[1].gap_before) = (
            None,
            Some(super::super::layout::GapRecord {
                reason: "binlogPurged".into(),
                message: "purged".into(),
                previous_end: BinlogPos { file: "binlog.000001".into(), position: 900 },
                previous_gtid: None,
                previous_time: None,
            }),
        );
        let refused = purged.choose(&base(None, "0-1-15", 2), &Target::Time(125), "a");
        assert!(
            matches!(&refused, Err(AgentError::ArchiveGap { reason, .. }) if reason == "binlogPurged"),
            "{refused:?}"
        );
    }

    #[test]
    fn a_base_the_archive_cannot_cover_from_is_refused_saying_why() {
        let mut archived = across_a_failover();
        archived.entries.remove(0);
        let refused = archived.choose(&base(None, "0-1-5", 2), &Target::Time(125), "a");
        let Err(AgentError::BaseNotInArchive { reason, .. }) = refused else { panic!("{refused:?}") };
        assert!(reason.contains("the archive begins after the backup's snapshot"), "{reason}");
        let ahead = archived.choose(&base(None, "0-2-45", 2), &Target::Time(125), "a");
        let Err(AgentError::BaseNotInArchive { reason, .. }) = ahead else { panic!("{ahead:?}") };
        assert!(reason.contains("has not stored"), "{reason}");
        let (chosen, _) = archived.choose(&base(None, "0-2-40", 2), &Target::Time(129), "a").unwrap();
        assert!(chosen.is_empty(), "a base at the archive's end replays nothing");
    }

    #[test]
    fn a_time_target_before_the_base_is_refused() {
        assert!(check_target_after_base(&Target::Time(99), Some(100), None).is_err());
        assert!(check_target_after_base(&Target::Time(100), Some(100), None).is_ok());
        let base = GtidSet::parse("0-1-10").unwrap();
        assert!(check_target_after_base(&Target::Gtids(GtidSet::parse("0-1-15").unwrap()), None, Some(&base)).is_ok());
        assert!(check_target_after_base(&Target::Gtids(GtidSet::parse("0-1-10").unwrap()), None, Some(&base)).is_ok());
        let before = Target::Gtids(GtidSet::parse("0-1-5").unwrap());
        assert!(check_target_after_base(&before, None, Some(&base)).is_err(), "the base is past the target");
        let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let mysql = Target::Gtids(GtidSet::parse(&format!("{uuid}:1-5")).unwrap());
        assert!(check_target_after_base(&mysql, None, Some(&base)).is_err(), "families differ");
    }
}
