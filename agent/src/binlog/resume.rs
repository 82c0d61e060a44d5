//! Where the archiver goes on when it (re)connects: one pure function of what it observed, the
//! end of the archive and the server it reached, so that every case is a line of a table test.
//!
//! The client Service of a replicated app leads to whichever server is primary: after a failover
//! or a switchover the archiver reaches another server, whose binary log file names and
//! positions mean nothing for the archive's (a file of the same name may even be larger than the
//! stored position). A position is therefore only resumed on the server it belongs to, and only
//! when that server confirms it (MariaDB tells the GTID state at a position); another server
//! whose history holds the archive's continues it by GTID, without a gap. Gaps stay what they
//! were: binary logs purged before they were stored, or a server whose history is not the
//! archive's.

use visitors_agent_contract::archive::ServerIdentity;
use visitors_agent_contract::gtid::{Gtid, GtidSet};

use super::layout::BinlogPos;

/// Where the archive ends, as a resume needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchiveEnd {
    /// Where its newest epoch goes on in its server's binary log; none when that epoch
    /// continues another server's by GTID and holds no segment yet.
    pub position: Option<BinlogPos>,
    /// The server `position` belongs to; none for an archive of an older agent that did not
    /// record it.
    pub server: Option<ServerIdentity>,
    /// The archive's GTID state after its newest record, when known.
    pub gtids: Option<GtidSet>,
    /// Its newest transaction.
    pub last_gtid: Option<Gtid>,
    /// `mariadb` or `mysql`: the family of the server the archive was created on.
    pub flavor: Option<String>,
}

impl ArchiveEnd {
    /// The transactions the archive holds, as far as it knows them: its GTID state, else its
    /// newest transaction.
    fn held(&self) -> Option<GtidSet> {
        self.gtids.clone().or_else(|| self.last_gtid.as_ref().map(Gtid::as_set))
    }
}

/// What the server reached says of itself.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerView {
    pub identity: ServerIdentity,
    /// MariaDB's `gtid_binlog_pos` or MySQL's `gtid_executed`.
    pub gtids: Option<GtidSet>,
    /// Its binary logs, oldest first: name and size.
    pub logs: Vec<(String, u64)>,
    /// What its binary logs no longer hold: MariaDB's state at the start of its oldest binary
    /// log, MySQL's `gtid_purged`; none when not known.
    pub purged: Option<GtidSet>,
    /// MariaDB's GTID state at the archive's position in this server's binary log
    /// (`BINLOG_GTID_POS`), when it was asked: `Some(None)` when the server has none there
    /// (not an event boundary, no such file).
    pub state_at_position: Option<Option<GtidSet>>,
    /// The server refused, on an earlier attempt, to stream after the archive's GTIDs: what it
    /// said.
    pub refused_gtids: Option<String>,
}

/// How archiving goes on.
#[derive(Debug, Clone, PartialEq)]
pub enum Resume {
    /// Nothing is archived yet: the first epoch, from the oldest binary log.
    Begin(BinlogPos),
    /// On the archive's own server, right where it ends.
    AtPosition(BinlogPos),
    /// A new epoch without a gap, streamed from the first transaction after these GTIDs.
    AfterGtids(GtidSet),
    /// Continuity is lost: a new epoch from the oldest binary log, with the gap recorded.
    Gap { reason: GapReason, message: String, start: BinlogPos },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GapReason {
    /// The server purged binary logs before they were stored.
    BinlogPurged,
    /// The server's history is not the archive's (a new data directory, another server).
    ServerChanged,
}

impl GapReason {
    pub fn as_str(self) -> &'static str {
        match self {
            GapReason::BinlogPurged => "binlogPurged",
            GapReason::ServerChanged => "serverChanged",
        }
    }
}

/// Where to go on from `end` (none: an empty archive) on `server`.
pub fn decide(end: Option<&ArchiveEnd>, server: &ServerView) -> Resume {
    let oldest = BinlogPos { file: server.logs.first().map(|(name, _)| name.clone()).unwrap_or_default(), position: 4 };
    let Some(end) = end else { return Resume::Begin(oldest) };
    let gap = |reason, message: String| Resume::Gap { reason, message, start: oldest.clone() };
    if let Some(flavor) = end.flavor.as_ref().filter(|f| **f != server.identity.flavor) {
        return gap(
            GapReason::ServerChanged,
            format!("the archive follows a {flavor} server, and the server is {}", server.identity.flavor),
        );
    }
    if !history_holds(end, server) {
        return gap(
            GapReason::ServerChanged,
            format!(
                "the server's history does not hold the archive's newest transaction {}{}: it has a new data directory or is another server",
                end.last_gtid.as_ref().map_or_else(|| "(none)".to_string(), ToString::to_string),
                end.position.as_ref().map(|p| format!(" at {p}")).unwrap_or_default()
            ),
        );
    }
    if let Some(said) = &server.refused_gtids {
        let reason = if said.contains("purged") { GapReason::BinlogPurged } else { GapReason::ServerChanged };
        return gap(
            reason,
            format!(
                "{} refused to stream after the archive's GTIDs {}: {said}",
                server.identity,
                end.held().map_or_else(String::new, |g| g.to_string())
            ),
        );
    }
    if let Some(position) = end.position.as_ref().filter(|p| position_is_ours(end, server, p)) {
        return Resume::AtPosition(position.clone());
    }
    if let (Some(ours), Some(_)) = (&end.gtids, &server.gtids) {
        return match &server.purged {
            Some(purged) if !ours.includes(purged) => gap(
                GapReason::BinlogPurged,
                format!(
                    "{}'s binary logs no longer hold the transactions after the archive's GTIDs {ours} (they begin after {purged}): they were purged before they were archived",
                    server.identity
                ),
            ),
            _ => Resume::AfterGtids(ours.clone()),
        };
    }
    position_gap(end, server, oldest)
}

/// Whether the server has committed everything the archive holds (unknown GTIDs do not tell).
fn history_holds(end: &ArchiveEnd, server: &ServerView) -> bool {
    match (end.held(), &server.gtids) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(ours), Some(theirs)) => theirs.includes(&ours),
    }
}

/// Whether the archive may go on at `position` on this server: it is the server the position
/// belongs to, it still has that much of the file, and, where the server can tell, its GTID
/// state there is the archive's. An archive of an older agent names no server: its position is
/// trusted as before only when there is no GTID to go on by instead.
fn position_is_ours(end: &ArchiveEnd, server: &ServerView, position: &BinlogPos) -> bool {
    let file_holds = server.logs.iter().any(|(name, size)| *name == position.file && *size >= position.position);
    let confirmed = match (&server.state_at_position, &end.gtids) {
        (Some(there), Some(ours)) => there.as_ref().is_some_and(|there| there.same_as(ours)),
        _ => match &end.server {
            Some(_) => true,
            None => end.gtids.is_none() || server.gtids.is_none(),
        },
    };
    let same_server = end.server.as_ref().is_none_or(|s| s.same_server(&server.identity));
    same_server && file_holds && confirmed
}

/// Without GTIDs to go on by: the file is gone (purged), or the server is another one.
fn position_gap(end: &ArchiveEnd, server: &ServerView, oldest: BinlogPos) -> Resume {
    let purged = end.position.as_ref().is_some_and(|wanted| {
        !server.logs.iter().any(|(name, _)| *name == wanted.file)
            && matches!(
                (super::layout::file_number(&wanted.file), super::layout::file_number(&oldest.file)),
                (Some(wanted), Some(oldest)) if wanted < oldest
            )
    });
    let wanted = end.position.as_ref().map_or_else(|| "(no position)".to_string(), ToString::to_string);
    let (reason, message) = if purged {
        (
            GapReason::BinlogPurged,
            format!(
                "the server no longer has {wanted}, where the archive goes on: its binary logs were purged before they were archived (the oldest it has is {})",
                oldest.file
            ),
        )
    } else {
        (
            GapReason::ServerChanged,
            format!(
                "{} cannot go on at {wanted}, where the archive ends on {}, and neither has GTIDs to go on by",
                server.identity,
                end.server.as_ref().map_or_else(|| "its server".to_string(), ToString::to_string)
            ),
        )
    };
    Resume::Gap { reason, message, start: oldest }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(id: u32) -> ServerIdentity {
        ServerIdentity {
            flavor: "mariadb".into(),
            version: "10.11.19".into(),
            server_id: id,
            server_uuid: None,
            hostname: Some(format!("db-{id}")),
        }
    }

    fn gtids(text: &str) -> Option<GtidSet> {
        (!text.is_empty()).then(|| GtidSet::parse(text).unwrap())
    }

    fn pos(file: &str, position: u64) -> BinlogPos {
        BinlogPos { file: file.into(), position }
    }

    /// An archive that ends at `binlog.000002:900` of server 1, after `0-1-42`.
    fn end() -> ArchiveEnd {
        ArchiveEnd {
            position: Some(pos("binlog.000002", 900)),
            server: Some(server(1)),
            gtids: gtids("0-1-42"),
            last_gtid: Some(Gtid::parse("0-1-42").unwrap()),
            flavor: Some("mariadb".into()),
        }
    }

    /// Server `id` at `0-1-50`, with `binlog.000001` and `binlog.000002` (1000 bytes each),
    /// whose state at the archive's position is the archive's.
    fn view(id: u32) -> ServerView {
        ServerView {
            identity: server(id),
            gtids: gtids("0-1-50"),
            logs: vec![("binlog.000001".into(), 1000), ("binlog.000002".into(), 1000)],
            purged: gtids(""),
            state_at_position: Some(gtids("0-1-42")),
            refused_gtids: None,
        }
    }

    fn after(text: &str) -> Resume {
        Resume::AfterGtids(GtidSet::parse(text).unwrap())
    }

    /// The gap's reason, after checking that its epoch starts at the server's oldest binary log.
    fn gap_reason(resume: &Resume, server: &ServerView) -> Option<GapReason> {
        match resume {
            Resume::Gap { reason, start, .. } => {
                assert_eq!(start, &pos(&server.logs[0].0, 4), "a gap's epoch starts at the oldest binary log");
                Some(*reason)
            }
            _ => None,
        }
    }

    #[test]
    fn how_archiving_resumes() {
        let legacy = ArchiveEnd { server: None, ..end() };
        let without_gtids = ArchiveEnd { gtids: None, last_gtid: None, ..end() };
        let waiting_continuation = ArchiveEnd { position: None, server: Some(server(2)), ..end() };
        let cases: Vec<(&str, Option<ArchiveEnd>, ServerView, Resume)> = vec![
            ("an empty archive begins at the oldest binary log", None, view(1), Resume::Begin(pos("binlog.000001", 4))),
            (
                "its own server, confirmed: at the position",
                Some(end()),
                view(1),
                Resume::AtPosition(pos("binlog.000002", 900)),
            ),
            (
                "its own server on MySQL, which cannot confirm: at the position",
                Some(end()),
                ServerView { state_at_position: None, ..view(1) },
                Resume::AtPosition(pos("binlog.000002", 900)),
            ),
            (
                "a replica promoted (another server) with a larger file of that name: by GTID, never by position",
                Some(end()),
                view(2),
                after("0-1-42"),
            ),
            (
                "another server with the same server id whose state differs there: by GTID",
                Some(end()),
                ServerView { state_at_position: Some(gtids("0-1-17")), identity: server(1), ..view(1) },
                after("0-1-42"),
            ),
            (
                "its own server, where the position is no event boundary: by GTID",
                Some(end()),
                ServerView { state_at_position: Some(None), ..view(1) },
                after("0-1-42"),
            ),
            (
                "its own server, the file shorter than the position (another data directory's): by GTID",
                Some(end()),
                ServerView { logs: vec![("binlog.000002".into(), 400)], state_at_position: None, ..view(1) },
                after("0-1-42"),
            ),
            (
                "an archive of an older agent (no server recorded), confirmed: at the position",
                Some(legacy.clone()),
                view(1),
                Resume::AtPosition(pos("binlog.000002", 900)),
            ),
            (
                "an archive of an older agent, unconfirmed: by GTID",
                Some(legacy.clone()),
                ServerView { state_at_position: None, ..view(2) },
                after("0-1-42"),
            ),
            (
                "a continuation epoch that stored nothing yet: by GTID again",
                Some(waiting_continuation),
                view(2),
                after("0-1-42"),
            ),
            (
                "its own server without GTIDs: at the position",
                Some(without_gtids.clone()),
                ServerView { gtids: None, state_at_position: None, ..view(1) },
                Resume::AtPosition(pos("binlog.000002", 900)),
            ),
        ];
        for (case, end, server, expected) in cases {
            assert_eq!(decide(end.as_ref(), &server), expected, "{case}");
        }
    }

    #[test]
    fn gaps_stay_gaps() {
        let without_gtids = ArchiveEnd { gtids: None, last_gtid: None, ..end() };
        let cases: Vec<(&str, ArchiveEnd, ServerView, GapReason)> = vec![
            (
                "a server whose history does not hold the archive's newest transaction",
                end(),
                ServerView { gtids: gtids("0-1-17"), ..view(2) },
                GapReason::ServerChanged,
            ),
            (
                "a server without GTIDs after an archive with them",
                end(),
                ServerView { gtids: None, ..view(1) },
                GapReason::ServerChanged,
            ),
            (
                "another family",
                end(),
                ServerView { identity: ServerIdentity { flavor: "mysql".into(), ..server(1) }, ..view(1) },
                GapReason::ServerChanged,
            ),
            (
                "another server whose binary logs begin after the archive's GTIDs",
                end(),
                ServerView { purged: gtids("0-1-45"), ..view(2) },
                GapReason::BinlogPurged,
            ),
            (
                "its own server, the file purged",
                end(),
                ServerView {
                    logs: vec![("binlog.000003".into(), 500)],
                    purged: gtids("0-1-48"),
                    state_at_position: None,
                    ..view(1)
                },
                GapReason::BinlogPurged,
            ),
            (
                "a server that refused the GTIDs (diverged at the same sequence number)",
                end(),
                ServerView { refused_gtids: Some("GTID 0-1-42 is not in the master's binlog".into()), ..view(2) },
                GapReason::ServerChanged,
            ),
            (
                "a server that refused the GTIDs as purged",
                end(),
                ServerView { refused_gtids: Some("required binlog files have been purged".into()), ..view(2) },
                GapReason::BinlogPurged,
            ),
            (
                "without GTIDs, the file purged",
                without_gtids.clone(),
                ServerView {
                    gtids: None,
                    logs: vec![("binlog.000003".into(), 500)],
                    state_at_position: None,
                    ..view(1)
                },
                GapReason::BinlogPurged,
            ),
            (
                "without GTIDs, another server",
                without_gtids,
                ServerView { gtids: None, state_at_position: None, ..view(2) },
                GapReason::ServerChanged,
            ),
        ];
        for (case, end, server, expected) in cases {
            assert_eq!(gap_reason(&decide(Some(&end), &server), &server), Some(expected), "{case}");
        }
    }
}
