//! mariadb-backup's `--stream=mbstream` format, as far as the agent reads it while it stores the
//! stream: where each record begins and ends, a copy of the few small files that describe the
//! backup (its binary log position, its LSNs, the tool and the server), and whether the stream
//! ended whole. A record is the magic `XBSTCK01`, a flags byte, a type byte (`P` a payload, `E`
//! the end of a file), the path's length (u32, little-endian) and the path, then for a payload
//! its length and offset in the file (u64 each), a CRC-32 of it (u32) and the payload.

use std::collections::BTreeMap;

pub(super) const MAGIC: &[u8; 8] = b"XBSTCK01";
/// Magic, flags, type and the path's length.
pub(super) const FIXED_HEADER: usize = 14;
/// A payload's length, offset and checksum, after the path.
pub(super) const PAYLOAD_HEADER: usize = 20;
/// mariadb-backup writes it last, once every data file and the redo log are in the stream.
pub const LAST_FILE: &str = "xtrabackup_info";
pub const BINLOG_INFO: &str = "xtrabackup_binlog_info";
pub const CHECKPOINTS: &str = "xtrabackup_checkpoints";
/// The files the agent keeps a copy of: small, and written once.
const DESCRIBING: [&str; 3] = [BINLOG_INFO, CHECKPOINTS, LAST_FILE];
const MAX_DESCRIBING_BYTES: usize = 64 * 1024;
const MAX_PATH_BYTES: usize = 4096;

/// Reads a stream as it goes by, in pieces of any size.
#[derive(Debug, Default)]
pub struct Scanner {
    /// The header being read (empty between records).
    header: Vec<u8>,
    /// Payload bytes of the current record still to come.
    remaining: u64,
    path: String,
    consumed: u64,
    described: BTreeMap<String, Vec<u8>>,
    files: u64,
    last_ended: Option<String>,
}

/// What a whole stream says of the backup in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    /// Files the stream holds (each ended by an `E` record).
    pub files: u64,
    pub bytes: u64,
    /// None when the server writes no binary log.
    pub binlog: Option<BinlogInfo>,
    /// `xtrabackup_info`'s `key = value` lines.
    pub info: BTreeMap<String, String>,
}

/// `xtrabackup_binlog_info`: where the backup's snapshot is in the server's binary log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinlogInfo {
    pub file: String,
    pub position: u64,
    /// MariaDB's GTID position (`domain-server-sequence`, one per domain) or MySQL's GTID set;
    /// none when the server logs no GTIDs.
    pub gtid: Option<String>,
}

impl Scanner {
    /// Reads the next piece of the stream.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<(), String> {
        while !data.is_empty() {
            if self.remaining > 0 {
                let take = data.len().min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
                self.keep(&data[..take]);
                self.remaining -= take as u64;
                self.consumed += take as u64;
                data = &data[take..];
                continue;
            }
            let needed = self.header_length()?;
            let take = (needed - self.header.len()).min(data.len());
            self.header.extend_from_slice(&data[..take]);
            self.consumed += take as u64;
            data = &data[take..];
            if self.header.len() == needed && self.header_length()? == needed {
                self.begin_record();
            }
        }
        Ok(())
    }

    /// The stream ended: what it says, or why it is not a whole backup.
    pub fn finish(self) -> Result<Described, String> {
        if self.remaining > 0 || !self.header.is_empty() {
            return Err(format!(
                "the stream ends inside a record of {} after {} bytes: the backup tool stopped before it finished",
                if self.path.is_empty() { "(a header)" } else { &self.path },
                self.consumed
            ));
        }
        if self.last_ended.as_deref() != Some(LAST_FILE) {
            return Err(format!(
                "the stream ends after {} bytes without {LAST_FILE}, which mariadb-backup writes last: the backup tool stopped before it finished",
                self.consumed
            ));
        }
        let text = |name: &str| {
            self.described
                .get(name)
                .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
                .ok_or_else(|| format!("the stream holds no {name}: it is not a whole backup of mariadb-backup"))
        };
        let binlog = text(BINLOG_INFO).ok().map(|info| parse_binlog_info(&info)).transpose()?;
        text(CHECKPOINTS)?;
        let info = parse_info(&text(LAST_FILE)?);
        Ok(Described { files: self.files, bytes: self.consumed, binlog, info })
    }

    /// How long the header being read is, as far as its bytes so far tell.
    fn header_length(&self) -> Result<usize, String> {
        let header = &self.header;
        if header.len() < FIXED_HEADER {
            if !MAGIC.starts_with(&header[..header.len().min(MAGIC.len())]) {
                return Err(self.not_mbstream("no record magic"));
            }
            return Ok(FIXED_HEADER);
        }
        if &header[..MAGIC.len()] != MAGIC {
            return Err(self.not_mbstream("no record magic"));
        }
        let path_length = u32::from_le_bytes(header[10..14].try_into().expect("4 bytes")) as usize;
        if path_length == 0 || path_length > MAX_PATH_BYTES {
            return Err(self.not_mbstream(&format!("a path of {path_length} bytes")));
        }
        match header[9] {
            b'E' => Ok(FIXED_HEADER + path_length),
            b'P' => Ok(FIXED_HEADER + path_length + PAYLOAD_HEADER),
            other => Err(self.not_mbstream(&format!("record type {:?}", other as char))),
        }
    }

    fn begin_record(&mut self) {
        let header = std::mem::take(&mut self.header);
        let path_end = FIXED_HEADER + u32::from_le_bytes(header[10..14].try_into().expect("4 bytes")) as usize;
        self.path = String::from_utf8_lossy(&header[FIXED_HEADER..path_end]).into_owned();
        if header[9] == b'E' {
            self.files += 1;
            self.last_ended = Some(std::mem::take(&mut self.path));
            return;
        }
        self.remaining = u64::from_le_bytes(header[path_end..path_end + 8].try_into().expect("8 bytes"));
        self.last_ended = None;
    }

    fn keep(&mut self, payload: &[u8]) {
        if !DESCRIBING.contains(&self.path.as_str()) {
            return;
        }
        let kept = self.described.entry(self.path.clone()).or_default();
        let room = MAX_DESCRIBING_BYTES.saturating_sub(kept.len());
        kept.extend_from_slice(&payload[..payload.len().min(room)]);
    }

    fn not_mbstream(&self, what: &str) -> String {
        format!(
            "byte {} of the stream is not an mbstream record ({what}): the backup tool wrote something else (run mariadb-backup with --stream=mbstream)",
            self.consumed - self.header.len() as u64
        )
    }
}

/// `<file>\t<position>[\t<gtid>]`.
fn parse_binlog_info(text: &str) -> Result<BinlogInfo, String> {
    let mut fields = text.trim().split('\t');
    let bad = || format!("{BINLOG_INFO} is not `<file>\\t<position>[\\t<gtid>]`: {:?}", text.trim());
    let file = fields.next().filter(|f| !f.is_empty()).ok_or_else(bad)?.to_string();
    let position = fields.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    let gtid = fields.next().map(|g| g.trim().replace('\n', "")).filter(|g| !g.is_empty());
    Ok(BinlogInfo { file, position, gtid })
}

/// `key = value` lines.
fn parse_info(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once(" = "))
        .map(|(key, value)| (key.trim().to_string(), value.trim().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(path: &str, data: &[u8]) -> Vec<u8> {
        let mut record = MAGIC.to_vec();
        record.extend([0, b'P']);
        record.extend((path.len() as u32).to_le_bytes());
        record.extend(path.as_bytes());
        record.extend((data.len() as u64).to_le_bytes());
        record.extend(0u64.to_le_bytes());
        record.extend(0u32.to_le_bytes());
        record.extend(data);
        record
    }

    fn end(path: &str) -> Vec<u8> {
        let mut record = MAGIC.to_vec();
        record.extend([0, b'E']);
        record.extend((path.len() as u32).to_le_bytes());
        record.extend(path.as_bytes());
        record
    }

    fn whole() -> Vec<u8> {
        [
            payload("ibdata1", &[7; 5000]),
            end("ibdata1"),
            payload(BINLOG_INFO, b"bin.000002\t817\t0-7-3,1-7-9\n"),
            end(BINLOG_INFO),
            payload(CHECKPOINTS, b"backup_type = full-backuped\n"),
            end(CHECKPOINTS),
            payload(
                LAST_FILE,
                b"tool_name = mariadb-backup\ntool_version = 10.11.19-MariaDB\nserver_version = 10.11.19-MariaDB-log\n",
            ),
            end(LAST_FILE),
        ]
        .concat()
    }

    fn scan(stream: &[u8], piece: usize) -> Result<Described, String> {
        let mut scanner = Scanner::default();
        for part in stream.chunks(piece) {
            scanner.feed(part)?;
        }
        scanner.finish()
    }

    #[test]
    fn a_whole_stream_tells_its_position_and_tool_in_pieces_of_any_size() {
        let stream = whole();
        for piece in [1, 3, 14, 999, stream.len()] {
            let described = scan(&stream, piece).unwrap();
            assert_eq!(described.files, 4);
            assert_eq!(described.bytes, stream.len() as u64);
            assert_eq!(
                described.binlog,
                Some(BinlogInfo { file: "bin.000002".into(), position: 817, gtid: Some("0-7-3,1-7-9".into()) })
            );
            assert_eq!(described.info["tool_version"], "10.11.19-MariaDB");
        }
    }

    #[test]
    fn a_stream_cut_short_or_not_mbstream_is_refused_with_where() {
        let stream = whole();
        let cases: [(&str, Vec<u8>, &str); 5] = [
            ("cut inside the data", stream[..100].to_vec(), "ends inside a record of ibdata1"),
            ("cut inside a header", stream[..5].to_vec(), "ends inside a record of (a header)"),
            (
                "without its last file's end",
                stream[..stream.len() - end(LAST_FILE).len()].to_vec(),
                "without xtrabackup_info",
            ),
            ("not mbstream", b"# a mysqldump file\n".to_vec(), "byte 0 of the stream is not an mbstream record"),
            (
                "no checkpoints",
                [payload(LAST_FILE, b"x = y\n"), end(LAST_FILE)].concat(),
                "holds no xtrabackup_checkpoints",
            ),
        ];
        for (case, stream, expected) in cases {
            let error = scan(&stream, 7).unwrap_err();
            assert!(error.contains(expected), "{case}: {error}");
        }
        let mut ended_early = [payload("ibdata1", &[1; 10]), end("ibdata1")].concat();
        ended_early.extend(payload(LAST_FILE, b"")); // its payload, but not its end
        let error = scan(&ended_early, 64).unwrap_err();
        assert!(error.contains(&format!("without {LAST_FILE}")), "{error}");
    }

    #[test]
    fn a_binlog_info_without_gtids_has_none() {
        assert_eq!(
            parse_binlog_info("mysql-bin.000003\t154\n").unwrap(),
            BinlogInfo { file: "mysql-bin.000003".into(), position: 154, gtid: None }
        );
        assert!(parse_binlog_info("garbage").is_err());
    }
}
