//! What a look at a replicated app's servers observes ([`Observed`]), what the controller
//! remembers between looks ([`Memory`]), and what a decision says ([`Decision`], its [`Act`]s):
//! the types [`super::decide`] reads and writes, [`super::observe`] fills and [`super::act`]
//! carries out. No I/O.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use visitors_api::visitors_app::{Durability, MemberRole, RoleChange};

use super::following::{Following, Sample};
use super::server::{Position, Server};

/// One look at the servers of a replicated app: everything a decision reads besides the memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The members, by ordinal.
    pub members: Vec<Member>,
    /// The primary the app's status records: what the controller decided last, before a restart
    /// of it (the memory, when it has one, is newer).
    pub recorded_primary: Option<String>,
    pub durability: Durability,
    /// The switchover the app's annotations ask for: the request and the pod asked for.
    pub annotated_switchover: Option<(String, Option<String>)>,
    /// The switchover request the status says was answered last.
    pub answered_request: Option<String>,
    /// The servers the status already shows diverged (told by an Event when they were found).
    pub shown_diverged: BTreeSet<String>,
    /// The run an empty server is loaded from when replication cannot seed it; `None`: the app
    /// has no verified run (or none was looked for: no server needs one).
    pub seed_backup: Option<SeedBackup>,
    /// When the look was made: on a clock that only moves forward, and on the wall clock.
    pub at: Instant,
    pub time: jiff::Timestamp,
}

/// What the controller remembers of a replicated app between looks. Lost on a restart of the
/// controller, which costs a look: a switchover under way is then decided again (an election
/// that keeps the old primary), a silent primary counted again, the servers' rates measured
/// again.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Memory {
    /// The primary decided last.
    pub primary: Option<String>,
    /// Looks in a row in which the primary's pod was ready but its server silent.
    pub primary_silent: u32,
    /// A switchover whose primary is fenced, since when.
    pub switching: Option<(Switchover, Instant)>,
    /// When the primary was last seen accepting writes, and which it was.
    pub writable: Option<(String, jiff::Timestamp)>,
    /// The member restarted on the new pod template, since when: no other is restarted until
    /// its new pod is seen (the cache may still hold the old one at the next look).
    pub updating: Option<(String, Instant)>,
    /// Each server's recent positions against the primary's: how it follows the primary.
    pub samples: BTreeMap<String, VecDeque<Sample>>,
    /// A promotion waiting for its server to apply what it received: the change as it was
    /// decided at its first look (what each candidate had left), and since when.
    pub applying: Option<(Change, Instant)>,
    /// The server that stopped being the primary last, and when.
    pub demoted: Option<(String, Instant)>,
    /// The servers told diverged by an Event, while they are.
    pub told_diverged: BTreeSet<String>,
}

/// The request a rolling update's switchover answers.
pub const UPDATE_REQUEST: &str = "rolling update";

/// The pod of a member, as the API reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodState {
    Missing,
    Deleting,
    NotReady,
    Ready,
}

/// One MySQL server of the app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its pod's name.
    pub name: String,
    /// The name replicas reach it by (which its certificate names).
    pub host: String,
    pub pod: PodState,
    /// The server, as it answered; `None` when it did not.
    pub server: Option<Server>,
    /// The id its data directory replicates under.
    pub server_id: u32,
    /// Where the extraction of the transactions it holds and the primary lacks stands.
    pub extraction: Extraction,
    /// It is to start again empty, to be seeded (a token waits for it).
    pub reseeding: bool,
    /// Where loading a backup run into it (empty, to seed it) stands.
    pub backup_seed: BackupSeed,
    /// Its pod runs an older template than the StatefulSet's.
    pub outdated: bool,
}

/// The server of member `name` of `members`, as it answered.
pub fn server_of<'a>(members: &'a [Member], name: &str) -> Option<&'a Server> {
    members.iter().find(|m| m.name == name)?.server.as_ref()
}

/// The extraction of a diverged server's transactions to a file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Extraction {
    #[default]
    NotStarted,
    Running,
    /// Done: the file that holds them.
    Done(String),
    Failed(String),
}

/// Loading a backup run into an empty member: how it is seeded when the binary logs of the
/// server it would replicate from no longer reach back to the beginning.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum BackupSeed {
    #[default]
    NotStarted,
    /// Its Job loads run `run`.
    Loading { run: String },
    /// Run `run` is loaded: the member goes on from the run's GTID `position`.
    Loaded { run: String, position: String },
    /// The Job failed: why, and how to try again.
    Failed(String),
}

/// The app's newest verified backup run (succeeded, and a drill restored it), which an empty
/// server is loaded from when no server's binary logs reach back to the beginning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedBackup {
    /// The MySQLBackup run.
    pub run: String,
    /// The GTID position it was taken at.
    pub position: Position,
}

/// A switchover asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switchover {
    /// The request (the annotation's value) it answers.
    pub request: String,
    /// The pod asked for; `None`: the best replica.
    pub to: Option<String>,
    /// Who asked: `Requested` (the annotation) or `RollingUpdate`.
    pub reason: &'static str,
}

impl Switchover {
    /// A switchover asked for by the app's annotations.
    pub fn requested(request: String, to: Option<String>) -> Self {
        Switchover { request, to, reason: reason::REQUESTED }
    }

    /// This switchover will not happen, for `reason`.
    pub fn refused(&self, reason: &'static str, message: String) -> Refusal {
        Refusal { request: self.request.clone(), asked_by: self.reason, to: self.to.clone(), reason, message }
    }
}

/// What the server rules ([`super::rules`]) read: the servers as observed, with what the memory
/// adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// The members, by ordinal.
    pub members: Vec<Member>,
    /// The primary the app's status records.
    pub primary: Option<String>,
    pub durability: Durability,
    /// Looks in a row in which the recorded primary's pod was ready but its server silent.
    pub primary_silent: u32,
    /// A switchover asked for and not answered yet.
    pub requested: Option<Switchover>,
    /// A switchover under way: its primary was fenced at an earlier look, towards this target.
    pub switching: Option<Switchover>,
    /// The member restarted on the new pod template, until its new pod is seen.
    pub updating: Option<String>,
    /// The run an empty server is loaded from when replication cannot seed it; `None`: the app
    /// has no verified run (or none was looked for: no server needs one).
    pub seed_backup: Option<SeedBackup>,
    /// A server that stopped being the primary moments ago: its client sessions are closed at
    /// each look for a while, so that a client that reconnected to it through a name not yet
    /// moved on is moved on too.
    pub demoted: Option<String>,
}

/// One step, on one member (the `String` of a one-field act names it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    SetServerId {
        member: String,
        id: u32,
    },
    EnsureReplicationUser(String),
    /// No writes from clients.
    Fence(String),
    /// Stops receiving from its source, keeping what it received to apply.
    StopReceiving(String),
    /// Waits (briefly) until it has applied `position`; the rest of the decision waits for it.
    WaitApplied {
        member: String,
        position: String,
    },
    /// Forgets its source: it may become the primary.
    Promote(String),
    /// Replicates from `upstream` (the primary, or a replica an empty server is seeded from).
    Replicate {
        member: String,
        upstream: String,
    },
    ArmSemiSync(String),
    DisarmSemiSync(String),
    OpenWrites(String),
    /// Restarts its pod: releases commits that wait for an acknowledgement nobody will send.
    Restart(String),
    /// Restarts its pod on the StatefulSet's new template.
    Update(String),
    /// Copies the transactions it holds and the primary lacks to a file: those after `after`
    /// (MariaDB: the last GTID it shares with the primary, per domain) or outside `primary_set`
    /// (MySQL), read from its binary log from `first_log` on.
    Extract {
        member: String,
        after: String,
        primary_set: String,
        first_log: String,
        errant: Vec<String>,
    },
    /// Starts it again empty, to be seeded from the others.
    Reseed {
        member: String,
        cause: ReseedCause,
    },
    /// Loads backup run `run` into it (empty), out of its binary log.
    SeedFromBackup {
        member: String,
        run: String,
    },
    /// Its binary log (empty: it was loaded from a backup) starts at `position`, the loaded
    /// run's, so that it replicates what came after the run.
    AdoptPosition {
        member: String,
        position: String,
    },
    /// It started empty: its seeding token is spent.
    ClearSeed(String),
    /// Closes the client sessions on it (every account's but the operator's own), so that
    /// connection pools holding connections to a server that no longer takes writes connect
    /// again, through the client Service, to the primary. Done once the pods' role labels
    /// moved.
    DisconnectClients(String),
}

/// Why a server starts again empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReseedCause {
    /// It held transactions the primary lacks; they were copied to a file first.
    Diverged,
    /// The primary's binary logs it needs next were purged: it can no longer catch up.
    SourcePurged,
}

/// What changed the primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Failover,
    Switchover,
}

/// A change of primary the acts make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub kind: ChangeKind,
    pub from: Option<String>,
    pub to: String,
    /// `PodDeleted`, `PodNotReady`, `NotAnswering`, `PrimaryRestarted` or `Requested`.
    pub reason: &'static str,
    /// The switchover request it answers.
    pub request: Option<String>,
    /// Why this server: what it held and had left to apply against the other candidates.
    pub election: String,
    /// Transactions it had received and not applied when it was chosen: what the promotion
    /// waits for.
    pub backlog: u64,
}

impl Change {
    /// A failover from `from` to `to` (what it waits for and why `to` is filled in later).
    pub fn failover(from: Option<&str>, to: &str, reason: &'static str) -> Self {
        let (from, to) = (from.map(Into::into), to.into());
        Change { kind: ChangeKind::Failover, from, to, reason, request: None, election: String::new(), backlog: 0 }
    }
}

/// A switchover that will not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub request: String,
    /// Who asked: `Requested` (the annotation) or `RollingUpdate`.
    pub asked_by: &'static str,
    pub to: Option<String>,
    pub reason: &'static str,
    pub message: String,
}

/// How one member stands after the acts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    pub member: String,
    pub role: MemberRole,
    pub message: Option<String>,
}

impl Standing {
    pub fn new(member: &str, role: MemberRole, message: impl Into<Option<String>>) -> Self {
        Standing { member: member.into(), role, message: message.into() }
    }
}

/// What to do, and what it means.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decision {
    pub acts: Vec<Act>,
    /// Look again at once when the acts are done: they changed what the next decision needs
    /// to read (a fence, a receiver stopped, a promotion waiting for its server to apply).
    pub look_again: bool,
    /// The primary to record.
    pub primary: Option<String>,
    pub change: Option<Change>,
    /// A change of primary that waits for its new primary to apply what it received (the
    /// [`Act::WaitApplied`] of the acts): it is made at a later look.
    pub pending: Option<Change>,
    pub refusal: Option<Refusal>,
    /// A switchover whose primary these acts fence.
    pub switching: Option<Switchover>,
    pub standings: Vec<Standing>,
    /// Why the servers are not all as they should be: a condition reason and message.
    pub problem: Option<(&'static str, String)>,
    /// The failover this decision made, for the status.
    pub failover: Option<RoleChange>,
    /// The switchover this decision made or refused, for the status, and who asked for it.
    pub switchover: Option<(RoleChange, &'static str)>,
    /// What to tell by an Event.
    pub notes: Vec<Note>,
    /// Something is under way: the next look comes soon.
    pub busy: bool,
    /// How each server follows the primary, as the looks so far measured it.
    pub followings: BTreeMap<String, Following>,
}

/// An Event a decision tells: a change of primary, a refusal, a server found diverged or seeded
/// from a replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub action: &'static str,
    pub message: String,
}

impl Note {
    /// A normal Event of replication.
    pub fn replication(reason: &'static str, message: String) -> Self {
        Note { warning: false, reason, action: "Replication", message }
    }
}

/// Reasons of the `Replicating` condition and of the decision's problems.
pub mod reason {
    pub const REPLICATING: &str = "Replicating";
    pub const SEEDING: &str = "Seeding";
    pub const CANNOT_SEED: &str = "CannotSeed";
    pub const REPLICA_NOT_REPLICATING: &str = "ReplicaNotReplicating";
    pub const DIVERGED: &str = "Diverged";
    pub const ELECTION_WAITS: &str = "ElectionWaits";
    pub const FAILOVER_WAITS: &str = "FailoverWaits";
    pub const PRIMARY_SILENT: &str = "PrimarySilent";
    pub const NO_ACKNOWLEDGING_REPLICA: &str = "NoAcknowledgingReplica";
    pub const PROMOTING: &str = "Promoting";
    pub const UPDATING: &str = "Updating";
    // Why a primary changed.
    pub const POD_DELETED: &str = "PodDeleted";
    pub const POD_NOT_READY: &str = "PodNotReady";
    pub const NOT_ANSWERING: &str = "NotAnswering";
    pub const PRIMARY_RESTARTED: &str = "PrimaryRestarted";
    pub const REQUESTED: &str = "Requested";
    pub const ROLLING_UPDATE: &str = "RollingUpdate";
    // Why a switchover was refused.
    pub const TARGET_NOT_A_HEALTHY_REPLICA: &str = "TargetNotAHealthyReplica";
    pub const NO_HEALTHY_REPLICA: &str = "NoHealthyReplica";
    pub const PRIMARY_NOT_HEALTHY: &str = "PrimaryNotHealthy";
}

impl Act {
    /// Whether it waits until the pods' role labels moved: closing a demoted server's client
    /// sessions before the client Service leads elsewhere would only bring them back to it.
    pub fn after_labels(&self) -> bool {
        matches!(self, Act::DisconnectClients(_))
    }

    /// Whether it runs SQL on its server (the others act on its pod or a Job).
    pub fn is_sql(&self) -> bool {
        !matches!(
            self,
            Act::Restart(_)
                | Act::Update(_)
                | Act::Extract { .. }
                | Act::Reseed { .. }
                | Act::SeedFromBackup { .. }
                | Act::ClearSeed(_)
        )
    }
}
