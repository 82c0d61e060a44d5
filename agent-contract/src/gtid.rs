//! Global transaction identifiers of both server families, parsed once for everyone who compares
//! them: the agent (where a replay starts and stops), the archiver (what it stored) and the
//! restore controller (which base backup a GTID target needs).
//!
//! - MariaDB: `domain-server-sequence`; a position is one GTID per replication domain, for
//!   example `0-1-1042,1-2-7`. A transaction is at or before a position when its domain is in
//!   it with a sequence number no higher (sequence numbers grow within a domain).
//! - MySQL: `source_uuid[:tag]:number`; a set lists intervals per source, for example
//!   `3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:11-18`.

use std::collections::BTreeMap;
use std::fmt;

/// One transaction's identifier.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Gtid {
    MariaDb { domain: u32, server: u32, sequence: u64 },
    MySql { source: String, number: u64 },
}

/// A set of transactions: what a server had executed at a moment, or a restore's target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GtidSet {
    /// The last sequence number (and the server that wrote it) of each domain.
    MariaDb(BTreeMap<u32, (u32, u64)>),
    /// Inclusive intervals of transaction numbers per source (`uuid` or `uuid:tag`), sorted and
    /// merged.
    MySql(BTreeMap<String, Vec<(u64, u64)>>),
}

impl fmt::Display for Gtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Gtid::MariaDb { domain, server, sequence } => write!(f, "{domain}-{server}-{sequence}"),
            Gtid::MySql { source, number } => write!(f, "{source}:{number}"),
        }
    }
}

impl fmt::Display for GtidSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = match self {
            GtidSet::MariaDb(domains) => {
                domains.iter().map(|(domain, (server, sequence))| format!("{domain}-{server}-{sequence}")).collect()
            }
            GtidSet::MySql(sources) => sources
                .iter()
                .map(|(source, intervals)| {
                    let ranges: Vec<String> = intervals
                        .iter()
                        .map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") })
                        .collect();
                    format!("{source}:{}", ranges.join(":"))
                })
                .collect(),
        };
        f.write_str(&parts.join(","))
    }
}

impl Gtid {
    /// Parses `0-1-42` (MariaDB) or `uuid[:tag]:42` (MySQL).
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Some(gtid) = parse_mariadb_gtid(text) {
            return Ok(gtid);
        }
        let (source, number) =
            text.rsplit_once(':').ok_or_else(|| format!("{text:?} is not a GTID (examples: 0-1-42, <uuid>:42)"))?;
        let number = number.parse().map_err(|_| format!("{text:?} is not a GTID: {number:?} is not a number"))?;
        Ok(Gtid::MySql { source: parse_source(source, text)?, number })
    }

    /// The set that holds exactly this transaction and, for MariaDB, those before it in its
    /// domain.
    pub fn as_set(&self) -> GtidSet {
        match self {
            Gtid::MariaDb { domain, server, sequence } => {
                GtidSet::MariaDb(BTreeMap::from([(*domain, (*server, *sequence))]))
            }
            Gtid::MySql { source, number } => {
                GtidSet::MySql(BTreeMap::from([(source.clone(), vec![(*number, *number)])]))
            }
        }
    }
}

fn parse_mariadb_gtid(text: &str) -> Option<Gtid> {
    let mut parts = text.split('-');
    let domain = parts.next()?.parse().ok()?;
    let server = parts.next()?.parse().ok()?;
    let sequence = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some(Gtid::MariaDb { domain, server, sequence })
}

/// A MySQL source: a UUID, optionally followed by `:tag` (MySQL 8.4), lowercase.
fn parse_source(source: &str, whole: &str) -> Result<String, String> {
    let (uuid, tag) = match source.split_once(':') {
        Some((uuid, tag)) => (uuid, Some(tag)),
        None => (source, None),
    };
    let hex: String = uuid.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("{whole:?} is not a GTID: {uuid:?} is not a server UUID"));
    }
    if let Some(tag) = tag
        && (tag.is_empty() || !tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        return Err(format!("{whole:?} is not a GTID: {tag:?} is not a tag"));
    }
    let uuid = uuid.to_ascii_lowercase();
    Ok(match tag {
        Some(tag) => format!("{uuid}:{}", tag.to_ascii_lowercase()),
        None => uuid,
    })
}

/// How many numbers of the inclusive `interval` none of the sorted, merged `known` intervals
/// holds.
fn uncovered((first, last): (u64, u64), known: &[(u64, u64)]) -> u64 {
    let covered: u64 = known
        .iter()
        .map(|(a, b)| {
            let (from, to) = ((*a).max(first), (*b).min(last));
            if from <= to { to - from + 1 } else { 0 }
        })
        .sum();
    (last - first + 1).saturating_sub(covered)
}

impl GtidSet {
    /// Parses a MariaDB position (`0-1-42,1-2-7`) or a MySQL set (`uuid:1-5:7,uuid2:1-3`); an
    /// empty text is refused (a server that has logged nothing has no position yet).
    pub fn parse(text: &str) -> Result<Self, String> {
        let text: String = text.split_whitespace().collect();
        if text.is_empty() {
            return Err("an empty GTID set".into());
        }
        let items: Vec<&str> = text.split(',').filter(|item| !item.is_empty()).collect();
        if items.iter().all(|item| parse_mariadb_gtid(item).is_some()) {
            let mut domains = BTreeMap::new();
            for item in items {
                let Some(Gtid::MariaDb { domain, server, sequence }) = parse_mariadb_gtid(item) else { unreachable!() };
                if domains.insert(domain, (server, sequence)).is_some() {
                    return Err(format!("{text:?} names domain {domain} twice"));
                }
            }
            return Ok(GtidSet::MariaDb(domains));
        }
        let mut sources: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
        for item in items {
            let mut fields: Vec<&str> = item.split(':').collect();
            // uuid, optional tag, then one or more intervals.
            if fields.len() < 2 {
                return Err(format!("{item:?} is not a GTID set item (examples: 0-1-42, <uuid>:1-100)"));
            }
            let intervals_start =
                if fields.len() > 2 && fields[1].parse::<u64>().is_err() && !fields[1].contains('-') { 2 } else { 1 };
            let source = parse_source(&fields[..intervals_start].join(":"), item)?;
            let intervals = sources.entry(source).or_default();
            for interval in fields.drain(intervals_start..) {
                intervals.push(parse_interval(interval, item)?);
            }
        }
        for intervals in sources.values_mut() {
            *intervals = merged(std::mem::take(intervals));
        }
        Ok(GtidSet::MySql(sources))
    }

    /// Whether transaction `gtid` is in this set.
    pub fn contains(&self, gtid: &Gtid) -> bool {
        match (self, gtid) {
            (GtidSet::MariaDb(domains), Gtid::MariaDb { domain, sequence, .. }) => {
                domains.get(domain).is_some_and(|(_, last)| sequence <= last)
            }
            (GtidSet::MySql(sources), Gtid::MySql { source, number }) => {
                sources.get(source).is_some_and(|intervals| intervals.iter().any(|(a, b)| a <= number && number <= b))
            }
            _ => false,
        }
    }

    /// Whether every transaction of `other` is in this set (for MariaDB: every domain of
    /// `other` is here, at least as far).
    pub fn includes(&self, other: &GtidSet) -> bool {
        match (self, other) {
            (GtidSet::MariaDb(mine), GtidSet::MariaDb(theirs)) => {
                theirs.iter().all(|(domain, (_, sequence))| mine.get(domain).is_some_and(|(_, last)| sequence <= last))
            }
            (GtidSet::MySql(mine), GtidSet::MySql(theirs)) => theirs.iter().all(|(source, intervals)| {
                intervals
                    .iter()
                    .all(|(a, b)| mine.get(source).is_some_and(|own| own.iter().any(|(x, y)| x <= a && b <= y)))
            }),
            _ => false,
        }
    }

    /// Adds transaction `gtid` (for MariaDB: moves its domain to it).
    pub fn add(&mut self, gtid: &Gtid) {
        match (self, gtid) {
            (GtidSet::MariaDb(domains), Gtid::MariaDb { domain, server, sequence }) => {
                let entry = domains.entry(*domain).or_insert((*server, *sequence));
                if *sequence >= entry.1 {
                    *entry = (*server, *sequence);
                }
            }
            (GtidSet::MySql(sources), Gtid::MySql { source, number }) => {
                let intervals = sources.entry(source.clone()).or_default();
                intervals.push((*number, *number));
                *intervals = merged(std::mem::take(intervals));
            }
            _ => {}
        }
    }

    /// Adds MySQL transactions `first..=last` of `source` (a `uuid[:tag]`).
    pub fn add_interval(&mut self, source: &str, first: u64, last: u64) {
        if let GtidSet::MySql(sources) = self
            && first <= last
        {
            let intervals = sources.entry(source.to_string()).or_default();
            intervals.push((first, last));
            *intervals = merged(std::mem::take(intervals));
        }
    }

    /// Adds every transaction of `other` (for MariaDB: each domain moves to the later of the
    /// two); a set of the other family is ignored.
    pub fn union_with(&mut self, other: &GtidSet) {
        match (self, other) {
            (mine @ GtidSet::MariaDb(_), GtidSet::MariaDb(theirs)) => {
                for (domain, (server, sequence)) in theirs {
                    mine.add(&Gtid::MariaDb { domain: *domain, server: *server, sequence: *sequence });
                }
            }
            (mine @ GtidSet::MySql(_), GtidSet::MySql(theirs)) => {
                for (source, intervals) in theirs {
                    for (first, last) in intervals {
                        mine.add_interval(source, *first, *last);
                    }
                }
            }
            _ => {}
        }
    }

    /// How many transactions it holds: a counter that grows by one with each commit (MariaDB:
    /// the sum of each domain's sequence number; MySQL: the size of the set).
    pub fn transactions(&self) -> u64 {
        match self {
            GtidSet::MariaDb(domains) => domains.values().map(|(_, sequence)| sequence).sum(),
            GtidSet::MySql(sources) => {
                sources.values().flatten().map(|(first, last)| last.saturating_sub(*first) + 1).sum()
            }
        }
    }

    /// How many of its transactions `other` lacks (for MariaDB, per domain, by sequence number);
    /// 0 against a set of the other family.
    pub fn count_beyond(&self, other: &GtidSet) -> u64 {
        match (self, other) {
            (GtidSet::MariaDb(mine), GtidSet::MariaDb(theirs)) => mine
                .iter()
                .map(|(domain, (_, sequence))| {
                    sequence.saturating_sub(theirs.get(domain).map_or(0, |(_, known)| *known))
                })
                .sum(),
            (GtidSet::MySql(mine), GtidSet::MySql(theirs)) => mine
                .iter()
                .map(|(source, intervals)| {
                    let known = theirs.get(source).map_or(&[][..], Vec::as_slice);
                    intervals.iter().map(|interval| uncovered(*interval, known)).sum::<u64>()
                })
                .sum(),
            _ => 0,
        }
    }

    /// Whether both sets hold the same transactions (for MariaDB: the same sequence number in
    /// the same domains).
    pub fn same_as(&self, other: &GtidSet) -> bool {
        self.includes(other) && other.includes(self)
    }

    /// For MariaDB: the GTID this set holds for `gtid`'s domain when it has `gtid`'s sequence
    /// number there but another server wrote it, i.e. the two histories differ at that point.
    pub fn other_writer_of(&self, gtid: &Gtid) -> Option<Gtid> {
        match (self, gtid) {
            (GtidSet::MariaDb(domains), Gtid::MariaDb { domain, server, sequence }) => domains
                .get(domain)
                .filter(|(own_server, own_sequence)| own_sequence == sequence && own_server != server)
                .map(|(own_server, _)| Gtid::MariaDb { domain: *domain, server: *own_server, sequence: *sequence }),
            _ => None,
        }
    }

    /// For MariaDB: a domain where `other` is at the same sequence number as this set but
    /// another server wrote it there (the two histories differ): this set's GTID and `other`'s.
    /// MySQL GTIDs name their source, so two histories never share one.
    pub fn disagreement(&self, other: &GtidSet) -> Option<(Gtid, Gtid)> {
        let GtidSet::MariaDb(theirs) = other else { return None };
        theirs.iter().find_map(|(domain, (server, sequence))| {
            let gtid = Gtid::MariaDb { domain: *domain, server: *server, sequence: *sequence };
            self.other_writer_of(&gtid).map(|mine| (mine, gtid))
        })
    }

    pub fn is_mariadb(&self) -> bool {
        matches!(self, GtidSet::MariaDb(_))
    }
}

fn parse_interval(text: &str, item: &str) -> Result<(u64, u64), String> {
    let bad = || format!("{item:?} is not a GTID set item: {text:?} is not an interval (examples: 7, 1-100)");
    let (a, b) = match text.split_once('-') {
        Some((a, b)) => (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?),
        None => {
            let n = text.parse().map_err(|_| bad())?;
            (n, n)
        }
    };
    if a == 0 || b < a {
        return Err(bad());
    }
    Ok((a, b))
}

fn merged(mut intervals: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    intervals.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(intervals.len());
    for (a, b) in intervals {
        match out.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";

    #[test]
    fn mariadb_positions_compare_per_domain() {
        let target = GtidSet::parse("0-1-100, 1-2-7").unwrap();
        assert_eq!(target.to_string(), "0-1-100,1-2-7");
        assert!(target.contains(&Gtid::parse("0-1-100").unwrap()));
        assert!(target.contains(&Gtid::parse("0-3-99").unwrap()), "a domain's sequence numbers grow whoever writes");
        assert!(!target.contains(&Gtid::parse("0-1-101").unwrap()));
        assert!(!target.contains(&Gtid::parse("2-1-1").unwrap()), "a domain not named is not in the set");
        assert!(target.includes(&GtidSet::parse("0-1-50").unwrap()));
        assert!(!target.includes(&GtidSet::parse("0-1-50,3-1-1").unwrap()));
        assert!(GtidSet::parse("0-1-5,0-1-6").is_err(), "a domain twice");
    }

    #[test]
    fn mysql_sets_merge_intervals_and_tags() {
        let set = GtidSet::parse(&format!("{}:1-5:6-9:20,{UUID}:tag_a:1-3", UUID.to_uppercase())).unwrap();
        assert_eq!(set.to_string(), format!("{UUID}:1-9:20,{UUID}:tag_a:1-3"));
        assert!(set.contains(&Gtid::parse(&format!("{UUID}:9")).unwrap()));
        assert!(!set.contains(&Gtid::parse(&format!("{UUID}:10")).unwrap()));
        assert!(set.contains(&Gtid::parse(&format!("{UUID}:tag_a:2")).unwrap()));
        assert!(set.includes(&GtidSet::parse(&format!("{UUID}:2-4")).unwrap()));
        assert!(!set.includes(&GtidSet::parse(&format!("{UUID}:2-12")).unwrap()));
        let mut grown = set.clone();
        grown.add(&Gtid::parse(&format!("{UUID}:10")).unwrap());
        assert_eq!(grown.to_string(), format!("{UUID}:1-10:20,{UUID}:tag_a:1-3"));
    }

    #[test]
    fn bad_text_is_refused_with_the_reason() {
        for bad in ["", "0-1", "abc:5", &format!("{UUID}:0"), &format!("{UUID}:9-3"), "x-1-2"] {
            assert!(GtidSet::parse(bad).is_err(), "{bad}");
        }
        assert!(Gtid::parse("0-1-x").is_err());
        assert_eq!(Gtid::parse("0-1-7").unwrap().to_string(), "0-1-7");
    }

    #[test]
    fn a_union_holds_both_sets() {
        let mut mariadb = GtidSet::parse("0-1-5,1-1-3").unwrap();
        mariadb.union_with(&GtidSet::parse("0-2-4,2-2-9").unwrap());
        assert_eq!(mariadb.to_string(), "0-1-5,1-1-3,2-2-9", "a domain keeps its later GTID");
        mariadb.union_with(&GtidSet::parse("0-2-6").unwrap());
        assert_eq!(mariadb.to_string(), "0-2-6,1-1-3,2-2-9");
        let mut mysql = GtidSet::parse(&format!("{UUID}:1-5")).unwrap();
        mysql.union_with(&GtidSet::parse(&format!("{UUID}:3-9:12")).unwrap());
        assert_eq!(mysql.to_string(), format!("{UUID}:1-9:12"));
        assert!(mysql.same_as(&GtidSet::parse(&format!("{UUID}:12:1-9")).unwrap()));
        assert!(!mysql.same_as(&GtidSet::parse(&format!("{UUID}:1-9")).unwrap()));
    }

    #[test]
    fn another_writer_of_the_same_mariadb_sequence_number_is_named() {
        let set = GtidSet::parse("0-1-9,1-1-3").unwrap();
        assert_eq!(set.other_writer_of(&Gtid::parse("0-2-9").unwrap()), Some(Gtid::parse("0-1-9").unwrap()));
        assert_eq!(set.other_writer_of(&Gtid::parse("0-1-9").unwrap()), None, "the same transaction");
        assert_eq!(set.other_writer_of(&Gtid::parse("0-2-8").unwrap()), None, "another sequence number");
        assert_eq!(set.other_writer_of(&Gtid::parse("5-2-9").unwrap()), None, "a domain it does not have");
        let diverged = GtidSet::parse("0-2-9,1-1-3").unwrap();
        assert_eq!(set.disagreement(&diverged), Some((Gtid::parse("0-1-9").unwrap(), Gtid::parse("0-2-9").unwrap())));
        assert_eq!(set.disagreement(&GtidSet::parse("0-2-10").unwrap()), None, "another point, not a disagreement");
    }

    #[test]
    fn transactions_are_counted_and_compared() {
        let mariadb = GtidSet::parse("0-1-5,1-2-3").unwrap();
        assert_eq!(mariadb.transactions(), 8);
        assert_eq!(mariadb.count_beyond(&GtidSet::parse("0-2-4").unwrap()), 4, "one of domain 0, three of 1");
        assert_eq!(GtidSet::parse("0-2-4").unwrap().count_beyond(&mariadb), 0);
        let mysql = GtidSet::parse(&format!("{UUID}:1-5:9")).unwrap();
        assert_eq!(mysql.transactions(), 6);
        assert_eq!(mysql.count_beyond(&GtidSet::parse(&format!("{UUID}:2-4")).unwrap()), 3, "1, 5 and 9");
        assert_eq!(mysql.count_beyond(&mariadb), 0, "another family");
    }

    #[test]
    fn families_never_contain_each_other() {
        let mariadb = GtidSet::parse("0-1-5").unwrap();
        let mysql = GtidSet::parse(&format!("{UUID}:1-5")).unwrap();
        assert!(!mariadb.includes(&mysql) && !mysql.includes(&mariadb));
        assert!(!mariadb.contains(&Gtid::parse(&format!("{UUID}:1")).unwrap()));
    }
}
