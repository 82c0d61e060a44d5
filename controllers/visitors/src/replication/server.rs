//! What the controller reads of one MySQL server, and how the transactions of two servers
//! compare. Pure: [`super::observe`] fills these from SQL.

use std::collections::BTreeMap;
use std::fmt;

use visitors_agent_contract::gtid::{Gtid, GtidSet};

use super::sql::Flavor;

/// One server, as it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub flavor: Flavor,
    pub server_id: u32,
    pub read_only: bool,
    /// What it wrote to its binary log, its own transactions and those it replicated.
    pub position: Position,
    /// The same by origin, to find transactions another server lacks.
    pub history: History,
    /// It would wait for a replica's acknowledgement of each commit.
    pub semi_sync_armed: bool,
    /// Replicas acknowledging its commits now.
    pub semi_sync_clients: u32,
    /// Commits waiting for an acknowledgement now.
    pub semi_sync_waiting: u32,
    /// The CA file it serves TLS with (its replicas verify their source with it); `None`: plain
    /// text.
    pub ssl_ca: Option<String>,
    /// The replication account exists on it.
    pub has_replication_user: bool,
    /// Its replication from a source; `None` when it has none configured.
    pub replica: Option<Replication>,
    /// Its oldest binary log file (read only while no commit waits: the listing would wait too).
    pub first_binlog: Option<String>,
}

/// A server's replication from its source.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Replication {
    /// The host it replicates from: its upstream.
    pub upstream_host: String,
    /// Its receiver runs (connected, or trying to connect).
    pub receiving: bool,
    /// Its receiver is connected to the source.
    pub connected: bool,
    /// Its applier runs.
    pub applying: bool,
    /// What it received from the source, applied or not.
    pub received: Position,
    /// How far its applier is behind the source, when it knows.
    pub lag_seconds: Option<i64>,
    /// The receiver's or the applier's last error: `(number, text)`.
    pub error: Option<(u32, String)>,
}

impl Replication {
    /// Whether its source no longer has the binary logs it needs next (MariaDB's and MySQL's
    /// error 1236, the logs purged): it cannot catch up from that source.
    pub fn upstream_purged(&self) -> bool {
        self.error.as_ref().is_some_and(|(number, text)| *number == 1236 && text.contains("purged"))
    }
}

impl Server {
    /// Everything it holds or has received: what a promotion would give the new primary.
    pub fn received(&self) -> Position {
        match &self.replica {
            Some(replica) => self.position.union(&replica.received),
            None => self.position.clone(),
        }
    }

    /// Whether it replicates from `host`, receiving and applying without an error.
    pub fn replicates_from(&self, host: &str) -> bool {
        self.replica.as_ref().is_some_and(|r| r.upstream_host == host && r.receiving && r.applying && r.error.is_none())
    }
}

/// A GTID position or set; empty for a server that has logged nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Position(Option<GtidSet>);

impl Position {
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Ok(Position(None));
        }
        GtidSet::parse(text).map(|set| Position(Some(set)))
    }

    /// Whether every transaction of `other` is in this one.
    pub fn includes(&self, other: &Position) -> bool {
        match (&self.0, &other.0) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some(mine), Some(theirs)) => mine.includes(theirs),
        }
    }

    /// The transactions of both.
    pub fn union(&self, other: &Position) -> Position {
        match (&self.0, &other.0) {
            (None, _) => other.clone(),
            (_, None) => self.clone(),
            // Theirs joined by mine: a MariaDB domain at the same sequence number keeps mine (two
            // families never meet in one app).
            (Some(mine), Some(theirs)) => {
                let mut set = theirs.clone();
                set.union_with(mine);
                Position(Some(set))
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// How many transactions it holds: a counter that grows by one with each commit, whose
    /// difference between two looks is how many were committed or applied meanwhile (see
    /// [`GtidSet::transactions`]).
    pub fn transactions(&self) -> u64 {
        self.0.as_ref().map_or(0, GtidSet::transactions)
    }

    /// How many of its transactions `other` lacks (see [`GtidSet::count_beyond`]).
    pub fn count_beyond(&self, other: &Position) -> u64 {
        match (&self.0, &other.0) {
            (None, _) => 0,
            (Some(_), None) => self.transactions(),
            (Some(mine), Some(theirs)) => mine.count_beyond(theirs),
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(set) => write!(f, "{set}"),
            None => Ok(()),
        }
    }
}

/// A server's transactions by origin: MariaDB's `gtid_binlog_state` (the last sequence number
/// each server wrote, per domain), or MySQL's executed set (its GTIDs name their origin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum History {
    MariaDb(BTreeMap<(u32, u32), u64>),
    MySql(Position),
}

impl History {
    pub fn parse(flavor: Flavor, text: &str) -> Result<Self, String> {
        match flavor {
            Flavor::MySql => Position::parse(text).map(History::MySql),
            Flavor::MariaDb => {
                let mut last = BTreeMap::new();
                for item in text.split(',').map(str::trim).filter(|item| !item.is_empty()) {
                    let Ok(Gtid::MariaDb { domain, server, sequence }) = Gtid::parse(item) else {
                        return Err(format!("{item:?} is not a MariaDB GTID"));
                    };
                    last.insert((domain, server), sequence);
                }
                Ok(History::MariaDb(last))
            }
        }
    }

    /// Where this history and `reference` part, as a position to read this server's binary log
    /// after: per domain, the last transaction both hold (MariaDB; empty for MySQL, whose
    /// transactions are told apart by set).
    pub fn fork(&self, reference: &History) -> String {
        let (History::MariaDb(mine), History::MariaDb(theirs)) = (self, reference) else { return String::new() };
        let mut last: BTreeMap<u32, (u32, u64)> = BTreeMap::new();
        for ((domain, server), sequence) in mine {
            let shared = theirs.get(&(*domain, *server)).map_or(0, |known| (*known).min(*sequence));
            if shared > 0 && last.get(domain).is_none_or(|(_, s)| *s < shared) {
                last.insert(*domain, (*server, shared));
            }
        }
        last.iter()
            .map(|(domain, (server, sequence))| format!("{domain}-{server}-{sequence}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// What this history holds that `reference` lacks, in words (empty when nothing): the
    /// errant transactions of a server measured against the primary. On MariaDB a GTID names the
    /// server that wrote it, and sequence numbers grow: a server holds a transaction the
    /// reference lacks when it has a later sequence number of some writer than the reference, or
    /// a writer the reference never heard of.
    pub fn beyond(&self, reference: &History) -> Vec<String> {
        match (self, reference) {
            (History::MariaDb(mine), History::MariaDb(theirs)) => mine
                .iter()
                .filter(|(origin, sequence)| theirs.get(origin).is_none_or(|known| known < sequence))
                .map(|((domain, server), sequence)| {
                    let from = theirs.get(&(*domain, *server)).map_or(0, |known| known + 1);
                    format!("{domain}-{server}-{from}..{sequence}")
                })
                .collect(),
            (History::MySql(mine), History::MySql(theirs)) if !theirs.includes(mine) => {
                vec![format!("of {mine}, those outside {theirs}")]
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn position(text: &str) -> Position {
        Position::parse(text).unwrap()
    }

    fn mariadb(text: &str) -> History {
        History::parse(Flavor::MariaDb, text).unwrap()
    }

    #[test]
    fn a_server_that_logged_nothing_is_behind_every_other() {
        assert!(position("0-101-5").includes(&position("")));
        assert!(!position("").includes(&position("0-101-5")));
        assert!(position("0-101-5").includes(&position("0-102-4")), "a later sequence number of the domain");
        assert_eq!(position("0-101-5").union(&position("0-102-7")), position("0-102-7"));
        assert_eq!(position("").union(&position("0-102-7")), position("0-102-7"));
        let mysql = position("3e11fa47-71ca-11e1-9e33-c80aa9429561:1-5")
            .union(&position("3e11fa47-71ca-11e1-9e33-c80aa9429561:6-9,3e11fa47-71ca-11e1-9e33-c80aa9429562:1"));
        assert_eq!(mysql, position("3e11fa47-71ca-11e1-9e33-c80aa9429561:1-9,3e11fa47-71ca-11e1-9e33-c80aa9429562:1"));
    }

    /// Each case: the server's history, the primary's, and the errant transactions.
    #[test]
    fn transactions_the_primary_lacks_are_found_by_writer() {
        let cases: [(&str, &str, &[&str]); 5] = [
            ("0-101-13", "0-101-13,0-102-15", &[]),
            ("0-101-13,0-102-15", "0-101-13,0-102-15,0-103-16", &[]),
            ("0-101-14", "0-101-13,0-102-14", &["0-101-14..14"]),
            ("0-101-13,0-104-2", "0-101-13,0-102-14", &["0-104-0..2"]),
            ("", "0-101-1", &[]),
        ];
        for (server, primary, errant) in cases {
            assert_eq!(mariadb(server).beyond(&mariadb(primary)), errant, "{server} against {primary}");
        }
        let mysql = |text: &str| History::parse(Flavor::MySql, text).unwrap();
        assert!(
            mysql("3e11fa47-71ca-11e1-9e33-c80aa9429561:1-5")
                .beyond(&mysql("3e11fa47-71ca-11e1-9e33-c80aa9429561:1-9"))
                .is_empty()
        );
        assert_eq!(
            mysql("3e11fa47-71ca-11e1-9e33-c80aa9429561:1-5,3e11fa47-71ca-11e1-9e33-c80aa9429563:1")
                .beyond(&mysql("3e11fa47-71ca-11e1-9e33-c80aa9429561:1-9"))
                .len(),
            1
        );
        assert!(History::parse(Flavor::MariaDb, "0-1").is_err());
        assert_eq!(mariadb("0-101-14").fork(&mariadb("0-101-13,0-102-20")), "0-101-13");
        assert_eq!(mariadb("0-101-13,0-104-2").fork(&mariadb("0-101-13,0-102-14")), "0-101-13");
    }

    /// Each case: a position, another, the transactions of the first the second lacks, and how
    /// many the first holds.
    #[test]
    fn transactions_are_counted_and_compared_by_position() {
        let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429561";
        let other = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let cases: Vec<(String, String, u64, u64)> = vec![
            ("0-101-10".into(), "0-101-7".into(), 3, 10),
            ("0-101-10".into(), "0-101-10".into(), 0, 10),
            ("0-101-7".into(), "0-101-10".into(), 0, 7),
            ("0-101-10,1-102-5".into(), "0-101-10".into(), 5, 15),
            ("0-102-12".into(), "0-101-10".into(), 2, 12),
            ("0-101-10".into(), "".into(), 10, 10),
            ("".into(), "0-101-10".into(), 0, 0),
            (format!("{uuid}:1-10"), format!("{uuid}:1-4"), 6, 10),
            (format!("{uuid}:1-10"), format!("{uuid}:1-4:8"), 5, 10),
            (format!("{uuid}:1-10,{other}:1-2"), format!("{uuid}:1-10"), 2, 12),
        ];
        for (mine, theirs, beyond, held) in cases {
            assert_eq!(position(&mine).count_beyond(&position(&theirs)), beyond, "{mine} beyond {theirs}");
            assert_eq!(position(&mine).transactions(), held, "{mine}");
        }
    }

    #[test]
    fn a_replica_has_received_what_it_logged_and_what_waits_to_be_applied() {
        let server = Server {
            flavor: Flavor::MariaDb,
            server_id: 102,
            read_only: true,
            position: position("0-101-10"),
            history: mariadb("0-101-10"),
            semi_sync_armed: false,
            semi_sync_clients: 0,
            semi_sync_waiting: 0,
            ssl_ca: None,
            has_replication_user: true,
            first_binlog: None,
            replica: Some(Replication {
                upstream_host: "p".into(),
                receiving: true,
                connected: true,
                applying: true,
                received: position("0-101-12"),
                ..Replication::default()
            }),
        };
        assert_eq!(server.received(), position("0-101-12"));
        assert!(server.replicates_from("p") && !server.replicates_from("q"));
    }
}
