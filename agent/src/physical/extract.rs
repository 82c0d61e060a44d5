//! mariadb-backup's mbstream extracted into a directory, as `mbstream -x` extracts it, with every
//! record checked on the way: its path must be relative and plain (a crafted stream must not
//! write outside the directory), its payload must carry the CRC-32 the tool wrote beside it and
//! come at the offset where the file's bytes so far end, and every file must be ended. The
//! [`Scanner`] reads the same bytes first, so a stream it refuses (not mbstream, cut short,
//! without the files that describe the backup) is refused with its message, and the stream's
//! [`Described`] comes with the files.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::mbstream::{Described, FIXED_HEADER, PAYLOAD_HEADER, Scanner};

/// Files written at once: mariadb-backup interleaves the records of the files its threads copy
/// (`--parallel`) with those of its redo log; each open file holds a write buffer.
pub const MAX_OPEN_FILES: usize = 64;
const WRITE_BUFFER_BYTES: usize = 64 * 1024;
/// Modes of what is written: group-writable, as the tool's pipe is, because
/// `mariadb-backup --prepare` and the server may run as another user of the pod's group.
const FILE_MODE: u32 = 0o660;
const FOLDER_MODE: u32 = 0o770;

/// Why an extraction stopped.
#[derive(Debug)]
pub enum ExtractError {
    /// The stream is not whole, or not one mariadb-backup writes: what, and where in it.
    Stream(String),
    /// Writing into the directory failed.
    Write { path: PathBuf, error: std::io::Error },
}

/// A whole stream extracted.
#[derive(Debug)]
pub struct Extracted {
    pub described: Described,
    /// The bytes written into the files (the stream less its record headers).
    pub bytes: u64,
}

/// Extracts a stream fed in pieces of any size into a directory that was empty.
pub struct Extractor {
    root: PathBuf,
    scanner: Scanner,
    /// The header being read (empty between records).
    header: Vec<u8>,
    payload: Option<Payload>,
    open: HashMap<Vec<u8>, OpenFile>,
    consumed: u64,
    bytes: u64,
}

/// The payload being written.
struct Payload {
    path: Vec<u8>,
    /// Where its record begins in the stream.
    record: u64,
    length: u64,
    remaining: u64,
    crc: crc32fast::Hasher,
    expected_crc: u32,
}

struct OpenFile {
    path: PathBuf,
    writer: BufWriter<File>,
    /// The file's bytes so far: where its next payload begins.
    offset: u64,
}

impl Extractor {
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            scanner: Scanner::default(),
            header: Vec::new(),
            payload: None,
            open: HashMap::new(),
            consumed: 0,
            bytes: 0,
        }
    }

    /// Extracts the next piece of the stream.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<(), ExtractError> {
        // What the scanner refuses (no record magic, an unknown record type) is never written.
        self.scanner.feed(data).map_err(ExtractError::Stream)?;
        while !data.is_empty() {
            let taken = match self.payload {
                Some(_) => self.write_payload(data)?,
                None => self.read_header(data)?,
            };
            data = &data[taken..];
        }
        Ok(())
    }

    /// The stream ended: what it says, once every file is durable, or why it is not whole.
    pub fn finish(mut self) -> Result<Extracted, ExtractError> {
        let described = std::mem::take(&mut self.scanner).finish().map_err(ExtractError::Stream)?;
        if let Some(path) = self.open.keys().next() {
            return Err(ExtractError::Stream(format!(
                "the stream ends with {} never ended (no end record): the backup tool stopped before it finished",
                shown(path)
            )));
        }
        sync_tree(&self.root)?;
        Ok(Extracted { described, bytes: self.bytes })
    }

    fn read_header(&mut self, data: &[u8]) -> Result<usize, ExtractError> {
        let needed = self.header_length()?;
        let take = (needed - self.header.len()).min(data.len());
        self.header.extend_from_slice(&data[..take]);
        self.consumed += take as u64;
        if self.header.len() == needed && self.header_length()? == needed {
            self.begin_record()?;
        }
        Ok(take)
    }

    /// How long the header being read is, as far as its bytes so far tell.
    fn header_length(&self) -> Result<usize, ExtractError> {
        if self.header.len() < FIXED_HEADER {
            return Ok(FIXED_HEADER);
        }
        let path_end = FIXED_HEADER + path_length(&self.header);
        match self.header[9] {
            b'E' => Ok(path_end),
            b'P' => Ok(path_end + PAYLOAD_HEADER),
            // The scanner refused it already: never reached.
            other => Err(self.refused(self.consumed, &format!("is of record type {:?}", other as char))),
        }
    }

    fn begin_record(&mut self) -> Result<(), ExtractError> {
        let header = std::mem::take(&mut self.header);
        let record = self.consumed - header.len() as u64;
        let path_end = FIXED_HEADER + path_length(&header);
        let path = header[FIXED_HEADER..path_end].to_vec();
        if header[9] == b'E' {
            return self.end_file(&path, record);
        }
        let field =
            |at: usize| u64::from_le_bytes(header[path_end + at..path_end + at + 8].try_into().expect("8 bytes"));
        let (length, offset) = (field(0), field(8));
        let expected_crc = u32::from_le_bytes(header[path_end + 16..path_end + 20].try_into().expect("4 bytes"));
        let written = self.file(&path, record)?.offset;
        if offset != written {
            return Err(self.refused(
                record,
                &format!(
                    "writes {} at offset {offset}, where its {written} bytes so far end: mariadb-backup writes each file in order",
                    shown(&path)
                ),
            ));
        }
        let crc = crc32fast::Hasher::new();
        self.payload = Some(Payload { path, record, length, remaining: length, crc, expected_crc });
        if length == 0 {
            self.end_payload()?;
        }
        Ok(())
    }

    fn write_payload(&mut self, data: &[u8]) -> Result<usize, ExtractError> {
        let payload = self.payload.as_mut().expect("a payload is being read");
        let take = data.len().min(usize::try_from(payload.remaining).unwrap_or(usize::MAX));
        let piece = &data[..take];
        let file = self.open.get_mut(&payload.path).expect("the payload's file is open");
        file.writer.write_all(piece).map_err(|error| ExtractError::Write { path: file.path.clone(), error })?;
        file.offset += take as u64;
        payload.crc.update(piece);
        payload.remaining -= take as u64;
        self.consumed += take as u64;
        self.bytes += take as u64;
        if payload.remaining == 0 {
            self.end_payload()?;
        }
        Ok(take)
    }

    fn end_payload(&mut self) -> Result<(), ExtractError> {
        let payload = self.payload.take().expect("a payload is being read");
        let actual = payload.crc.finalize();
        if actual == payload.expected_crc {
            return Ok(());
        }
        Err(self.refused(
            payload.record,
            &format!(
                "holds {} bytes of {} with CRC-32 {actual:08x}, where its record says {:08x}",
                payload.length,
                shown(&payload.path),
                payload.expected_crc
            ),
        ))
    }

    /// The file's end record: its bytes written out and the file closed (an empty file has no
    /// payload, only its end). Files are made durable together at the end of the stream.
    fn end_file(&mut self, path: &[u8], record: u64) -> Result<(), ExtractError> {
        let file = match self.open.remove(path) {
            Some(file) => file,
            None => self.create(path, record)?,
        };
        let OpenFile { path, writer, .. } = file;
        writer.into_inner().map_err(|error| ExtractError::Write { path, error: error.into_error() })?;
        Ok(())
    }

    /// The open file of `path`, created on its first record.
    fn file(&mut self, path: &[u8], record: u64) -> Result<&mut OpenFile, ExtractError> {
        if !self.open.contains_key(path) {
            if self.open.len() >= MAX_OPEN_FILES {
                return Err(self.refused(
                    record,
                    &format!("begins {} while {MAX_OPEN_FILES} other files are not ended", shown(path)),
                ));
            }
            let file = self.create(path, record)?;
            self.open.insert(path.to_vec(), file);
        }
        Ok(self.open.get_mut(path).expect("the file is open"))
    }

    fn create(&self, path: &[u8], record: u64) -> Result<OpenFile, ExtractError> {
        let relative = relative_path(path).map_err(|why| {
            self.refused(
                record,
                &format!("names the path {}, {why}: unpack writes only below its directory", shown(path)),
            )
        })?;
        let full = self.root.join(relative);
        create_folders(&self.root, relative)?;
        let file = OpenOptions::new().write(true).create_new(true).open(&full).map_err(|error| {
            if error.kind() == std::io::ErrorKind::AlreadyExists {
                self.refused(record, &format!("begins {} again, after its end", shown(path)))
            } else {
                ExtractError::Write { path: full.clone(), error }
            }
        })?;
        set_mode(&full, FILE_MODE)?;
        Ok(OpenFile { path: full, writer: BufWriter::with_capacity(WRITE_BUFFER_BYTES, file), offset: 0 })
    }

    fn refused(&self, record: u64, what: &str) -> ExtractError {
        ExtractError::Stream(format!("the record at byte {record} of the stream {what}"))
    }
}

fn path_length(header: &[u8]) -> usize {
    u32::from_le_bytes(header[10..14].try_into().expect("4 bytes")) as usize
}

/// `path` as a path below the directory, or why it is not one: mariadb-backup names files by
/// relative paths of plain names (`ibdata1`, `shop/orders.ibd`).
fn relative_path(path: &[u8]) -> Result<&Path, &'static str> {
    if path.starts_with(b"/") {
        return Err("which is absolute");
    }
    if path.contains(&0) {
        return Err("which holds a NUL byte");
    }
    for component in path.split(|byte| *byte == b'/') {
        match component {
            b"" => return Err("which has an empty component"),
            b"." | b".." => return Err("which has a `.` or `..` component"),
            _ => {}
        }
    }
    Ok(Path::new(std::ffi::OsStr::from_bytes(path)))
}

/// Makes the folders of `relative` under `root` that are missing.
fn create_folders(root: &Path, relative: &Path) -> Result<(), ExtractError> {
    let Some(parent) = relative.parent() else { return Ok(()) };
    let mut folder = root.to_path_buf();
    for component in parent.components() {
        folder.push(component);
        match std::fs::create_dir(&folder) {
            Ok(()) => set_mode(&folder, FOLDER_MODE)?,
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists && folder.is_dir() => {}
            Err(error) => return Err(ExtractError::Write { path: folder, error }),
        }
    }
    Ok(())
}

/// Sets a mode the process's umask would narrow.
fn set_mode(path: &Path, mode: u32) -> Result<(), ExtractError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|error| ExtractError::Write { path: path.to_path_buf(), error })
}

/// Makes every file and folder under `root`, and `root`, durable. Files were closed at their
/// end without waiting for the disk, which writes them back meanwhile.
fn sync_tree(root: &Path) -> Result<(), ExtractError> {
    let failed = |path: &Path| {
        let path = path.to_path_buf();
        move |error| ExtractError::Write { path, error }
    };
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).map_err(failed(&folder))? {
            let entry = entry.map_err(failed(&folder))?;
            let path = entry.path();
            if entry.file_type().map_err(failed(&path))?.is_dir() {
                folders.push(path);
            } else {
                File::open(&path).and_then(|file| file.sync_all()).map_err(failed(&path))?;
            }
        }
        File::open(&folder).and_then(|file| file.sync_all()).map_err(failed(&folder))?;
    }
    Ok(())
}

fn shown(path: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(path))
}

/// Streams as mariadb-backup writes them, record by record, for tests.
#[cfg(test)]
pub(crate) mod records {
    use super::super::mbstream::{BINLOG_INFO, CHECKPOINTS, LAST_FILE, MAGIC};

    pub fn payload_at(path: &str, offset: u64, data: &[u8]) -> Vec<u8> {
        with_crc(path, offset, data, crc32fast::hash(data))
    }

    pub fn with_crc(path: &str, offset: u64, data: &[u8], crc: u32) -> Vec<u8> {
        let mut record = header(b'P', path);
        record.extend((data.len() as u64).to_le_bytes());
        record.extend(offset.to_le_bytes());
        record.extend(crc.to_le_bytes());
        record.extend(data);
        record
    }

    pub fn payload(path: &str, data: &[u8]) -> Vec<u8> {
        payload_at(path, 0, data)
    }

    pub fn end(path: &str) -> Vec<u8> {
        header(b'E', path)
    }

    pub fn header(kind: u8, path: &str) -> Vec<u8> {
        let mut record = MAGIC.to_vec();
        record.extend([0, kind]);
        record.extend((path.len() as u32).to_le_bytes());
        record.extend(path.as_bytes());
        record
    }

    /// The files that describe a backup, which mariadb-backup writes last; its snapshot is at
    /// `bin.000002:817`, GTID `0-7-3`.
    pub fn describing() -> Vec<u8> {
        [
            payload(BINLOG_INFO, b"bin.000002\t817\t0-7-3\n"),
            end(BINLOG_INFO),
            payload(CHECKPOINTS, b"backup_type = full-backuped\n"),
            end(CHECKPOINTS),
            payload(LAST_FILE, b"tool_name = mariadb-backup\ntool_version = 10.11.19-MariaDB\n"),
            end(LAST_FILE),
        ]
        .concat()
    }

    pub fn data(length: usize, seed: u8) -> Vec<u8> {
        (0..length).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
    }

    /// Two files written in several payloads each, interleaved (as the tool's threads write
    /// them), a file in a folder, an empty file, then the describing files: 7 files.
    pub fn whole() -> Vec<u8> {
        let ibdata = data(5000, 1);
        let log = data(700, 2);
        [
            payload_at("ibdata1", 0, &ibdata[..3000]),
            payload_at("ib_logfile0", 0, &log[..200]),
            payload_at("ibdata1", 3000, &ibdata[3000..]),
            end("ibdata1"),
            payload("shop/orders.ibd", &data(1234, 3)),
            end("shop/orders.ibd"),
            end("shop/empty.frm"),
            payload_at("ib_logfile0", 200, &log[200..]),
            end("ib_logfile0"),
            describing(),
        ]
        .concat()
    }
}

#[cfg(test)]
mod tests {
    use super::super::mbstream::{BINLOG_INFO, CHECKPOINTS, LAST_FILE};
    use super::records::*;
    use super::*;

    fn extract(root: &Path, stream: &[u8], piece: usize) -> Result<Extracted, ExtractError> {
        let mut extractor = Extractor::new(root);
        for part in stream.chunks(piece) {
            extractor.feed(part)?;
        }
        extractor.finish()
    }

    fn stream_error(stream: &[u8]) -> (String, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("into");
        std::fs::create_dir(&root).unwrap();
        match extract(&root, stream, 7) {
            Err(ExtractError::Stream(message)) => (message, dir),
            other => panic!("a stream error, not {other:?}"),
        }
    }

    #[test]
    fn a_whole_stream_in_pieces_of_any_size_is_every_file_at_its_offsets() {
        let stream = whole();
        for piece in [1, 3, 14, 999, stream.len()] {
            let dir = tempfile::tempdir().unwrap();
            let extracted = extract(dir.path(), &stream, piece).unwrap();
            assert_eq!(extracted.described.files, 7, "piece {piece}");
            assert_eq!(extracted.described.bytes, stream.len() as u64);
            assert_eq!(extracted.described.binlog.unwrap().gtid.as_deref(), Some("0-7-3"));
            let read = |path: &str| std::fs::read(dir.path().join(path)).unwrap();
            assert_eq!(read("ibdata1"), data(5000, 1), "piece {piece}");
            assert_eq!(read("ib_logfile0"), data(700, 2), "piece {piece}");
            assert_eq!(read("shop/orders.ibd"), data(1234, 3));
            assert_eq!(read("shop/empty.frm"), b"");
            assert_eq!(read(LAST_FILE), b"tool_name = mariadb-backup\ntool_version = 10.11.19-MariaDB\n");
            let written: u64 = ["ibdata1", "ib_logfile0", "shop/orders.ibd", BINLOG_INFO, CHECKPOINTS, LAST_FILE]
                .iter()
                .map(|path| read(path).len() as u64)
                .sum();
            assert_eq!(extracted.bytes, written);
        }
    }

    #[test]
    fn what_mariadb_backup_does_not_write_is_refused_with_where() {
        let stream = whole();
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "a `..` path",
                payload("../escaped", b"x"),
                "names the path \"../escaped\", which has a `.` or `..` component",
            ),
            ("a `..` inside", payload("shop/../../escaped", b"x"), "`..` component"),
            ("an absolute path", payload("/tmp/escaped", b"x"), "which is absolute"),
            ("an empty component", payload("shop//orders.ibd", b"x"), "empty component"),
            ("a folder for a name", end("shop/"), "empty component"),
            ("a NUL byte", payload("ibdata1\0x", b"x"), "NUL byte"),
            ("cut short", stream[..100].to_vec(), "the stream ends inside a record of ibdata1"),
            ("unknown record type", [header(b'S', "ibdata1"), vec![0; 20]].concat(), "record type 'S'"),
            (
                "a damaged payload",
                with_crc("ibdata1", 0, b"payload", crc32fast::hash(b"payloaD")),
                "the record at byte 0 of the stream holds 7 bytes of \"ibdata1\" with CRC-32",
            ),
            (
                "out of order",
                [payload("ibdata1", b"abc"), payload_at("ibdata1", 10, b"def")].concat(),
                "writes \"ibdata1\" at offset 10, where its 3 bytes so far end",
            ),
            (
                "a file twice",
                [payload("ibdata1", b"abc"), end("ibdata1"), payload("ibdata1", b"abc")].concat(),
                "begins \"ibdata1\" again",
            ),
            ("a file never ended", [payload("ibdata1", b"abc"), describing()].concat(), "\"ibdata1\" never ended"),
            (
                "too many files at once",
                (0..=MAX_OPEN_FILES).flat_map(|n| payload(&format!("t{n}.ibd"), b"x")).collect(),
                "while 64 other files are not ended",
            ),
        ];
        for (case, stream, expected) in cases {
            let (message, dir) = stream_error(&stream);
            assert!(message.contains(expected), "{case}: {message}");
            let outside: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
            assert_eq!(outside, ["into"], "{case}: nothing written beside the directory");
            assert!(!Path::new("/tmp/escaped").exists(), "{case}");
        }
    }

    #[test]
    fn only_plain_relative_paths_are_below_the_directory() {
        for good in ["ibdata1", "shop/orders.ibd", "#innodb_redo/ib_redo1", "a.b/..c"] {
            assert_eq!(relative_path(good.as_bytes()), Ok(Path::new(good)), "{good}");
        }
        for bad in ["", "/", "/etc/passwd", "..", "a/..", "./ibdata1", "a//b", "a/", "a\0b"] {
            assert!(relative_path(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn written_files_and_folders_are_group_writable_whatever_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        extract(dir.path(), &whole(), 4096).unwrap();
        let mode = |path: &str| std::fs::metadata(dir.path().join(path)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("ibdata1"), FILE_MODE);
        assert_eq!(mode("shop/empty.frm"), FILE_MODE);
        assert_eq!(mode("shop"), FOLDER_MODE);
    }
}
