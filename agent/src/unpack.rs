//! `unpack`: a physical backup's files extracted into a directory, every byte checked, for
//! `mariadb-backup --prepare` to make a data directory of. The manifest is checked first (as a
//! restore checks it), then the chunks are read in order, each decrypted and decompressed, and
//! their stream is extracted ([`crate::physical::extract`]) while it goes by: each chunk's
//! SHA-256 is checked at its end, each record's path and CRC-32 as it comes, and the whole
//! stream must be the one the manifest describes (its size, files and snapshot position). On
//! any failure what was written under the directory is removed.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::error::{AgentError, Result};
use crate::format::{Compression, FileEntry, Manifest, PhysicalEntry};
use crate::physical::extract::{ExtractError, Extracted, Extractor};
use crate::physical::mbstream::{BinlogInfo, Described};
use crate::storage::{S3Settings, Storage, is_disk_full};
use crate::verify::{load_manifest_and_sha256, physical_only, verify_file};

/// Decompressed pieces waiting for the extractor: with the storage's pieces of 256 KiB, what
/// the agent holds of the stream stays within a few MiB, whatever the backup's size.
const PIECES_IN_FLIGHT: usize = 4;
/// What a file system makes at a volume's root: an unpack may go beside it, and keeps it.
const LOST_AND_FOUND: &str = "lost+found";

#[derive(Clone, Debug)]
pub struct UnpackOptions {
    pub from: String,
    pub s3: S3Settings,
    /// The directory the files go into: made if missing, refused unless empty.
    pub into: PathBuf,
    /// The manifest's SHA-256 as the backup run reported it; a different manifest is refused.
    pub expect_manifest_sha256: Option<String>,
    /// Where the keys of encrypted backups are, one file per key id.
    pub decrypt_keys_dir: Option<PathBuf>,
}

impl UnpackOptions {
    pub fn new(from: impl Into<String>, into: impl Into<PathBuf>) -> Self {
        Self {
            from: from.into(),
            s3: S3Settings::default(),
            into: into.into(),
            expect_manifest_sha256: None,
            decrypt_keys_dir: None,
        }
    }
}

#[derive(Debug)]
pub struct UnpackReport {
    pub manifest: Manifest,
    pub manifest_sha256: String,
    /// Files written into the directory.
    pub files: u64,
    /// Bytes written into them.
    pub bytes: u64,
}

pub async fn unpack(options: &UnpackOptions) -> Result<UnpackReport> {
    let storage = Storage::open(&options.from, &options.s3, false)?;
    let (manifest, manifest_sha256) = load_manifest_and_sha256(
        &storage,
        options.expect_manifest_sha256.as_deref(),
        options.decrypt_keys_dir.as_deref(),
    )
    .await?;
    let physical = physical_only(&manifest, &options.from)?;
    let target = Target::claim(&options.into)?;
    tracing::info!(
        "unpacking {} files, {} bytes of stream in {} chunks, into {}",
        physical.files,
        physical.stream_bytes,
        physical.chunks.len(),
        target.shown()
    );
    let unpacked = extract_and_check(&storage, &manifest, physical, &options.into).await;
    let extracted = match unpacked {
        Ok(extracted) => extracted,
        Err(error) => {
            target.clear().await;
            return Err(error);
        }
    };
    tracing::info!(
        "unpacked {} files, {} bytes, into {dir}: next, mariadb-backup --prepare --target-dir={dir}",
        extracted.described.files,
        extracted.bytes,
        dir = target.shown()
    );
    Ok(UnpackReport { files: extracted.described.files, bytes: extracted.bytes, manifest, manifest_sha256 })
}

async fn extract_and_check(
    storage: &Storage,
    manifest: &Manifest,
    physical: &PhysicalEntry,
    into: &Path,
) -> Result<Extracted> {
    let extracted = extract_chunks(storage, &physical.chunks, manifest.compression, into).await?;
    let expected = StreamFacts::of_manifest(manifest, physical);
    let actual = StreamFacts::of_stream(&extracted.described);
    match expected.difference(&actual) {
        Some(difference) => {
            Err(AgentError::StreamDiffersFromManifest { location: storage.location().to_string(), difference })
        }
        None => Ok(extracted),
    }
}

/// Reads the chunks in order into the extractor, which writes on a thread of its own so that
/// reading, decompressing and writing overlap.
async fn extract_chunks(
    storage: &Storage,
    chunks: &[FileEntry],
    compression: Compression,
    into: &Path,
) -> Result<Extracted> {
    let (pieces, received) = mpsc::channel(PIECES_IN_FLIGHT);
    let root = into.to_path_buf();
    let extracting = tokio::task::spawn_blocking(move || extract_pieces(&root, received));
    let sent = send_chunks(storage, chunks, compression, pieces).await;
    let extracted = extracting.await?;
    match (sent, extracted) {
        // A chunk that could not be read cut the stream short: the chunk says why.
        (Err(error), _) => Err(error),
        (Ok(()), Ok(extracted)) => Ok(extracted),
        (Ok(()), Err(failure)) => Err(extract_failure(storage, chunks, into, failure).await),
    }
}

/// Where the extractor stopped: in a piece of the chunk of this index, or at the stream's end.
struct ExtractFailure {
    chunk: Option<usize>,
    error: ExtractError,
}

fn extract_pieces(root: &Path, mut pieces: mpsc::Receiver<(usize, Bytes)>) -> Result<Extracted, ExtractFailure> {
    let mut extractor = Extractor::new(root);
    while let Some((chunk, piece)) = pieces.blocking_recv() {
        extractor.feed(&piece).map_err(|error| ExtractFailure { chunk: Some(chunk), error })?;
    }
    extractor.finish().map_err(|error| ExtractFailure { chunk: None, error })
}

/// Sends every chunk's decompressed bytes, tagged with the chunk's index; stops early, without
/// an error of its own, when the extractor stopped (its error says why).
async fn send_chunks(
    storage: &Storage,
    chunks: &[FileEntry],
    compression: Compression,
    pieces: mpsc::Sender<(usize, Bytes)>,
) -> Result<()> {
    for (index, chunk) in chunks.iter().enumerate() {
        let mut stream = storage.decompressed(chunk, compression).await?;
        while let Some(piece) = stream.next().await {
            let piece = match piece {
                Ok(piece) => piece,
                Err(error) => return Err(chunk_failure(storage, chunk, &error).await),
            };
            if pieces.send((index, piece)).await.is_err() {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Why a chunk could not be read: its stored bytes are not those of the manifest (named as
/// `verify` names a corrupt file), or, when they are, what the reading said.
async fn chunk_failure(storage: &Storage, chunk: &FileEntry, error: &std::io::Error) -> AgentError {
    match verify_file(storage, chunk).await {
        Err(corrupt) => corrupt,
        Ok(()) => AgentError::BadChunk { file: chunk.path.clone(), reason: error.to_string() },
    }
}

async fn extract_failure(storage: &Storage, chunks: &[FileEntry], into: &Path, failure: ExtractFailure) -> AgentError {
    let chunk = failure.chunk.and_then(|index| chunks.get(index));
    match failure.error {
        ExtractError::Write { path, error } => write_error(into, &path, &error),
        ExtractError::Stream(reason) => {
            // The extractor refused bytes of a chunk before its end, where its SHA-256 is
            // checked: a chunk that is not the one stored is said first.
            if let Some(chunk) = chunk
                && let Err(corrupt) = verify_file(storage, chunk).await
            {
                return corrupt;
            }
            let place = chunk.map_or("at the end of the stream".to_string(), |chunk| format!("in {}", chunk.path));
            AgentError::PhysicalStreamInvalid { place, reason }
        }
    }
}

fn write_error(into: &Path, path: &Path, error: &std::io::Error) -> AgentError {
    let dir = into.display().to_string();
    if is_disk_full(error) {
        return AgentError::DiskFull { location: dir };
    }
    AgentError::UnpackWrite { dir, path: path.display().to_string(), reason: error.to_string() }
}

/// What a stream says of itself, as the manifest records it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StreamFacts {
    bytes: u64,
    files: u64,
    /// None when the server wrote no binary log.
    snapshot: Option<BinlogInfo>,
}

impl StreamFacts {
    fn of_manifest(manifest: &Manifest, physical: &PhysicalEntry) -> Self {
        let position = manifest.position.as_ref();
        let snapshot = position.and_then(|position| {
            Some(BinlogInfo {
                file: position.binlog_file.clone()?,
                position: position.binlog_position?,
                gtid: position.gtid.clone(),
            })
        });
        Self { bytes: physical.stream_bytes, files: physical.files, snapshot }
    }

    fn of_stream(described: &Described) -> Self {
        Self { bytes: described.bytes, files: described.files, snapshot: described.binlog.clone() }
    }

    /// How the stream (`actual`) differs from what the manifest says of it (`self`).
    fn difference(&self, actual: &StreamFacts) -> Option<String> {
        if actual.snapshot != self.snapshot {
            return Some(format!(
                "its snapshot is at {}, the manifest's at {}",
                describe_snapshot(actual.snapshot.as_ref()),
                describe_snapshot(self.snapshot.as_ref())
            ));
        }
        if actual.files != self.files {
            return Some(format!("it holds {} files, the manifest says {}", actual.files, self.files));
        }
        if actual.bytes != self.bytes {
            return Some(format!("it has {} bytes, the manifest says {}", actual.bytes, self.bytes));
        }
        None
    }
}

fn describe_snapshot(snapshot: Option<&BinlogInfo>) -> String {
    match snapshot {
        Some(BinlogInfo { file, position, gtid: Some(gtid) }) => format!("GTID {gtid} ({file}:{position})"),
        Some(BinlogInfo { file, position, gtid: None }) => format!("{file}:{position}"),
        None => "no binary log position".into(),
    }
}

/// The directory a backup is unpacked into: new or empty, and emptied again when the unpack
/// fails (the directory stays: it may be a volume's mount point).
struct Target {
    dir: PathBuf,
}

impl Target {
    fn claim(dir: &Path) -> Result<Self> {
        match std::fs::read_dir(dir) {
            Ok(entries) => {
                // The root of an ext4 volume holds lost+found, which the server ignores too.
                let mut entries =
                    entries.filter(|entry| entry.as_ref().map_or(true, |entry| entry.file_name() != LOST_AND_FOUND));
                if let Some(entry) = entries.next() {
                    let entry = entry.map_err(|error| write_error(dir, dir, &error))?;
                    return Err(AgentError::UnpackTargetNotEmpty {
                        dir: dir.display().to_string(),
                        entry: entry.file_name().to_string_lossy().into_owned(),
                    });
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir).map_err(|error| write_error(dir, dir, &error))?;
            }
            Err(error) => return Err(write_error(dir, dir, &error)),
        }
        Ok(Self { dir: dir.to_path_buf() })
    }

    fn shown(&self) -> String {
        self.dir.display().to_string()
    }

    /// Removes everything under the directory; what cannot go is logged, and the error that
    /// ended the unpack stays the one reported.
    async fn clear(&self) {
        let dir = self.dir.clone();
        let cleared = tokio::task::spawn_blocking(move || remove_everything_under(&dir)).await;
        match cleared {
            Ok(Ok(())) => tracing::info!("removed what was written under {}", self.shown()),
            Ok(Err(error)) => tracing::warn!("could not remove what was written under {}: {error}", self.shown()),
            Err(error) => tracing::warn!("could not remove what was written under {}: {error}", self.shown()),
        }
    }
}

fn remove_everything_under(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name() == LOST_AND_FOUND {
            continue;
        }
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;
    use crate::format::PHYSICAL_FORMAT_NAME;
    use crate::physical::extract::records::{data, describing, end, payload, whole};

    const CHUNK_BYTES: usize = 4000;

    /// A physical backup of `stream` in `dir`, in plain chunks of [`CHUNK_BYTES`], whose
    /// manifest says it holds `files` files and its snapshot is at GTID `gtid`.
    fn store(dir: &Path, stream: &[u8], files: u64, gtid: &str) -> String {
        std::fs::create_dir_all(dir.join("physical")).unwrap();
        let chunks: Vec<FileEntry> = stream
            .chunks(CHUNK_BYTES)
            .enumerate()
            .map(|(index, bytes)| {
                let path = format!("physical/{:06}.mbstream", index + 1);
                std::fs::write(dir.join(&path), bytes).unwrap();
                FileEntry { path, bytes: bytes.len() as u64, sha256: hex::encode(Sha256::digest(bytes)) }
            })
            .collect();
        let manifest = serde_json::json!({
            "format": PHYSICAL_FORMAT_NAME, "formatVersion": 1, "tool": "visitors-agent",
            "server": { "version": "10.11.19-MariaDB-log", "flavour": "mariadb" },
            "startedAt": "2026-12-01T00:00:00Z", "finishedAt": "2026-12-01T00:01:00Z",
            "consistency": "mariadb-backup", "compression": "none", "dataFormat": "mbstream", "databases": [],
            "position": { "gtid": gtid, "binlogFile": "bin.000002", "binlogPosition": 817 },
            "physical": { "tool": "mariadb-backup 10.11.19-MariaDB", "streamBytes": stream.len(), "files": files, "chunks": chunks },
        });
        std::fs::write(dir.join("manifest.json"), serde_json::to_vec(&manifest).unwrap()).unwrap();
        format!("file://{}", dir.display())
    }

    fn flip_byte(dir: &Path, chunk: &str, at: usize) {
        let path = dir.join("physical").join(chunk);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[at] ^= 0x01;
        std::fs::write(path, bytes).unwrap();
    }

    #[tokio::test]
    async fn a_backup_is_unpacked_whole_or_refused_with_its_directory_left_empty() {
        let escaping = [payload("../escaped", b"x"), end("../escaped"), describing()].concat();
        let cut_short = [payload("ibdata1", &data(10, 1)), end("ibdata1")].concat();
        let whole = |name, edit, refused| Case { name, stream: whole(), files: 7, gtid: "0-7-3", edit, refused };
        let cases = [
            whole("whole", |_| {}, None),
            // Past the chunk's first payload header: the payload's CRC-32 fails before the
            // chunk's SHA-256 is checked at its end; the chunk is named all the same.
            whole(
                "a chunk edited",
                |dir| flip_byte(dir, "000002.mbstream", 2000),
                Some(("checksumMismatch", "file physical/000002.mbstream has SHA-256")),
            ),
            whole(
                "a chunk missing",
                |dir| std::fs::remove_file(dir.join("physical").join("000002.mbstream")).unwrap(),
                Some(("fileMissing", "file physical/000002.mbstream listed in manifest.json is missing")),
            ),
            Case {
                gtid: "0-7-4",
                refused: Some((
                    "streamDiffersFromManifest",
                    "its snapshot is at GTID 0-7-3 (bin.000002:817), the manifest's at GTID 0-7-4",
                )),
                ..whole("another snapshot", |_| {}, None)
            },
            Case {
                name: "a path out of the directory",
                stream: escaping,
                files: 4,
                gtid: "0-7-3",
                edit: |_| {},
                refused: Some((
                    "physicalStreamInvalid",
                    "(in physical/000001.mbstream): the record at byte 0 of the stream names the path \"../escaped\"",
                )),
            },
            Case {
                name: "cut short",
                stream: cut_short,
                files: 1,
                gtid: "0-7-3",
                edit: |_| {},
                refused: Some((
                    "physicalStreamInvalid",
                    "(at the end of the stream): the stream ends after 72 bytes without xtrabackup_info",
                )),
            },
        ];
        for Case { name, stream, files, gtid, edit, refused } in cases {
            let dir = tempfile::tempdir().unwrap();
            let from = store(&dir.path().join("backup"), &stream, files, gtid);
            edit(&dir.path().join("backup"));
            let into = dir.path().join("into");
            let unpacked = unpack(&UnpackOptions::new(from, &into)).await;
            match (unpacked, refused) {
                (Ok(report), None) => {
                    assert_eq!((report.files, report.manifest.physical.unwrap().files), (7, 7), "{name}");
                    assert_eq!(std::fs::read(into.join("shop/orders.ibd")).unwrap(), data(1234, 3), "{name}");
                }
                (Err(error), Some((kind, message))) => {
                    assert_eq!(error.kind(), kind, "{name}: {error}");
                    assert!(error.to_string().contains(message), "{name}: {error}");
                    assert_eq!(std::fs::read_dir(&into).unwrap().count(), 0, "{name}: the directory is left empty");
                    assert!(!dir.path().join("escaped").exists(), "{name}");
                }
                (outcome, expected) => panic!("{name}: {outcome:?}, expected {expected:?}"),
            }
        }
    }

    /// A backup of `stream` whose manifest says `files` and `gtid`, stored then changed by
    /// `edit`; `refused`: the error's kind and part of its message, none for a whole unpack.
    struct Case {
        name: &'static str,
        stream: Vec<u8>,
        files: u64,
        gtid: &'static str,
        edit: fn(&Path),
        refused: Option<(&'static str, &'static str)>,
    }

    fn facts(gtid: Option<&str>, files: u64, bytes: u64) -> StreamFacts {
        let snapshot =
            gtid.map(|gtid| BinlogInfo { file: "bin.000002".into(), position: 817, gtid: Some(gtid.into()) });
        StreamFacts { bytes, files, snapshot }
    }

    /// Bytes refused inside a chunk, before its SHA-256 is checked at its end: a chunk that is
    /// not the one stored is named as such, an intact one is where the stream is refused.
    #[tokio::test]
    async fn a_stream_refused_inside_a_chunk_names_the_chunk_and_whether_it_was_edited() {
        let dir = tempfile::tempdir().unwrap();
        let from = store(dir.path(), &whole(), 7, "0-7-3");
        flip_byte(dir.path(), "000002.mbstream", 10);
        let storage = Storage::open(&from, &S3Settings::default(), false).unwrap();
        let manifest = crate::verify::load_manifest(&storage, None, None).await.unwrap();
        let chunks = &manifest.physical.as_ref().unwrap().chunks;
        let refused =
            |chunk| ExtractFailure { chunk: Some(chunk), error: ExtractError::Stream("a record refused".into()) };

        let edited = extract_failure(&storage, chunks, dir.path(), refused(1)).await;
        assert_eq!(edited.kind(), "checksumMismatch", "{edited}");
        assert!(edited.to_string().contains("physical/000002.mbstream"), "{edited}");
        let intact = extract_failure(&storage, chunks, dir.path(), refused(0)).await;
        assert_eq!(intact.kind(), "physicalStreamInvalid", "{intact}");
        assert!(intact.to_string().contains("(in physical/000001.mbstream): a record refused"), "{intact}");
    }

    #[test]
    fn a_stream_must_be_the_one_its_manifest_describes() {
        let manifest = facts(Some("0-1-5"), 120, 9000);
        let cases = [
            (facts(Some("0-1-5"), 120, 9000), None),
            (
                facts(Some("0-1-6"), 120, 9000),
                Some("its snapshot is at GTID 0-1-6 (bin.000002:817), the manifest's at GTID 0-1-5 (bin.000002:817)"),
            ),
            (facts(None, 120, 9000), Some("its snapshot is at no binary log position")),
            (facts(Some("0-1-5"), 119, 9000), Some("it holds 119 files, the manifest says 120")),
            (facts(Some("0-1-5"), 120, 9001), Some("it has 9001 bytes, the manifest says 9000")),
        ];
        for (stream, expected) in cases {
            let difference = manifest.difference(&stream);
            match expected {
                None => assert_eq!(difference, None),
                Some(expected) => {
                    let difference = difference.unwrap_or_else(|| panic!("{stream:?} differs"));
                    assert!(difference.starts_with(expected), "{difference}");
                }
            }
        }
        let moved = StreamFacts {
            snapshot: Some(BinlogInfo { file: "bin.000003".into(), position: 4, gtid: Some("0-1-5".into()) }),
            ..manifest.clone()
        };
        assert!(manifest.difference(&moved).is_some(), "the same GTID at another binary log position");
    }

    #[test]
    fn the_directory_must_be_new_or_empty_and_is_emptied_but_kept() {
        let parent = tempfile::tempdir().unwrap();
        let new = parent.path().join("new").join("data");
        Target::claim(&new).unwrap();
        assert!(new.is_dir(), "made with its parents");
        Target::claim(&new).expect("an empty directory is fine");

        std::fs::create_dir(new.join("shop")).unwrap();
        std::fs::write(new.join("shop").join("orders.ibd"), b"x").unwrap();
        std::fs::write(new.join("ibdata1"), b"x").unwrap();
        let refused = Target::claim(&new).map(|_| ()).unwrap_err();
        assert_eq!(refused.kind(), "directoryNotEmpty");
        assert!(refused.to_string().contains(&new.display().to_string()), "{refused}");

        let file = parent.path().join("a-file");
        std::fs::write(&file, b"x").unwrap();
        assert_eq!(Target::claim(&file).map(|_| ()).unwrap_err().kind(), "unpackWrite");

        remove_everything_under(&new).unwrap();
        std::fs::create_dir(new.join(LOST_AND_FOUND)).unwrap();
        Target::claim(&new).expect("a volume's lost+found is not the directory's content");
        remove_everything_under(&new).unwrap();
        assert!(new.join(LOST_AND_FOUND).is_dir(), "a volume's lost+found is kept");
        std::fs::remove_dir(new.join(LOST_AND_FOUND)).unwrap();
        assert!(new.is_dir());
        assert_eq!(std::fs::read_dir(&new).unwrap().count(), 0);
    }
}
