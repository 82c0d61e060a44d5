//! Physical backups: the stream of the server's own backup tool (`mariadb-backup --backup
//! --stream=mbstream`) stored as a logical backup's files are: cut into chunks, each compressed,
//! encrypted when asked and listed with its SHA-256 in the manifest, which is written last. The
//! agent never reads the server's files itself: the tool must be the server's own version, so
//! it runs from the server's image and writes into a pipe the agent reads
//! (docs/backup-restore.md, "Physical backups").

pub mod drill;
pub mod extract;
pub mod hold;
pub mod mbstream;

use std::path::{Path, PathBuf};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use std::sync::{Arc, Mutex};

use visitors_agent_contract::gtid::GtidSet;

use crate::encryption::SealKey;
use crate::error::{AgentError, Result};
use crate::format::Compression;
use crate::format::{
    ENCRYPTED_FORMAT_VERSION, FORMAT_VERSION, FileEntry, Manifest, PHYSICAL_DATA_FORMAT, PHYSICAL_FORMAT_NAME,
    PhysicalEntry, Position, ServerInfo, TableContent,
};
use crate::mysql::ConnectionSettings;
use crate::mysql::connection::describe_server;
use crate::mysql::{Connector, snapshot};

/// What a physical backup takes from the backup's options.
#[derive(Clone, Debug)]
pub struct PhysicalOptions {
    /// The server the tool reads, for its identity, version and clock.
    pub connection: ConnectionSettings,
    pub compression: Compression,
    pub level: i32,
    /// Uncompressed bytes of the stream per chunk.
    pub chunk_bytes: u64,
    pub encrypt: Option<SealKey>,
}

/// The paths written so far, which a failed backup removes.
type Written = Arc<Mutex<Vec<String>>>;
use crate::storage::Storage;
use mbstream::{Described, Scanner};

/// Where the chunks of the stream go, under the backup's root.
const CHUNKS_DIR: &str = "physical";
/// Sessions reading the held replica's tables while the tool streams.
const CONTENT_SESSIONS: usize = 2;
/// How much of the stream is read at a time.
const READ_BYTES: usize = 1024 * 1024;
/// Pieces of a chunk waiting for its compressor: with two chunks in flight, what the agent
/// holds of the stream stays within a few MiB, whatever the database's size.
const PIECES_IN_FLIGHT: usize = 4;
/// How long the tool has to open the pipe: past it, its container did not start (no shell or
/// no tool in the image, a claim it could not mount).
const TOOL_START: Duration = Duration::from_secs(120);
/// How long the tool has, once the stream ended, to record its exit status.
const TOOL_STATUS: Duration = Duration::from_secs(30);
/// The last lines of the tool's messages quoted when it failed.
const TOOL_LOG_LINES: usize = 5;

/// Where a physical backup's stream comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamSource {
    /// Standard input: `mariadb-backup --backup --stream=mbstream | visitors-agent backup
    /// --physical-stream - ...`; only the stream tells whether the tool finished.
    Stdin,
    /// A named pipe, made if missing, that the tool's container writes into; the tool's exit
    /// status is then read from `<pipe>.status` and its messages from `<pipe>.log`.
    Pipe(PathBuf),
}

impl StreamSource {
    pub fn parse(text: &str) -> Self {
        match text {
            "-" => Self::Stdin,
            path => Self::Pipe(PathBuf::from(path)),
        }
    }

    fn sibling(&self, extension: &str) -> Option<PathBuf> {
        match self {
            Self::Stdin => None,
            Self::Pipe(path) => Some(PathBuf::from(format!("{}.{extension}", path.display()))),
        }
    }

    async fn open(&self) -> Result<Box<dyn AsyncRead + Unpin + Send>> {
        match self {
            Self::Stdin => Ok(Box::new(tokio::io::stdin())),
            Self::Pipe(path) => Ok(Box::new(open_pipe(path).await?)),
        }
    }

    /// Whether the tool says it succeeded: its exit status, once it wrote one (a pipe only).
    async fn tool_outcome(&self) -> Result<()> {
        let Some(status_file) = self.sibling("status") else { return Ok(()) };
        let deadline = tokio::time::Instant::now() + TOOL_STATUS;
        let status = loop {
            let text = tokio::fs::read_to_string(&status_file).await.unwrap_or_default();
            if let Ok(status) = text.trim().parse::<i32>() {
                break Some(status);
            }
            if tokio::time::Instant::now() >= deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        match status {
            Some(0) => Ok(()),
            Some(code) => Err(AgentError::BackupToolFailed {
                status: format!("exit status {code}"),
                message: self.tool_messages().await,
            }),
            None => Err(AgentError::BackupToolFailed {
                status: format!(
                    "no exit status in {} within {}s of the stream's end",
                    status_file.display(),
                    TOOL_STATUS.as_secs()
                ),
                message: self.tool_messages().await,
            }),
        }
    }

    /// The last lines the tool wrote to its log, or what is known without them.
    async fn tool_messages(&self) -> String {
        let Some(log) = self.sibling("log") else { return "see its messages".into() };
        let text = tokio::fs::read_to_string(&log).await.unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        if lines.is_empty() {
            return format!("it wrote nothing to {}", log.display());
        }
        tracing::warn!("the backup tool's messages:\n{text}");
        lines[lines.len().saturating_sub(TOOL_LOG_LINES)..].join(" | ")
    }
}

/// Opens the pipe for reading once the tool opens it for writing; a tool that never does
/// fails the backup after [`TOOL_START`] (the reader is then let go by opening the pipe for
/// writing here).
async fn open_pipe(path: &Path) -> Result<tokio::fs::File> {
    for stale in ["status", "log"] {
        let _ = std::fs::remove_file(format!("{}.{stale}", path.display()));
    }
    if !path.exists() {
        make_pipe(path).map_err(|e| {
            AgentError::Usage(format!("cannot make the pipe {} for the backup tool's stream: {e}", path.display()))
        })?;
    }
    let reading = path.to_path_buf();
    let opened = tokio::task::spawn_blocking(move || std::fs::File::open(reading));
    tokio::pin!(opened);
    let file = tokio::select! {
        file = &mut opened => file,
        _ = tokio::time::sleep(TOOL_START) => {
            let _ = std::fs::OpenOptions::new().write(true).open(path);
            let _ = opened.await;
            return Err(AgentError::BackupToolFailed {
                status: format!("it did not open {} within {}s", path.display(), TOOL_START.as_secs()),
                message: "its container did not start the tool: check that the server's image holds mariadb-backup and a shell, and the container's events".into(),
            });
        }
    };
    let file = file.map_err(|e| AgentError::Internal(format!("opening the pipe: {e}")))?;
    file.map(tokio::fs::File::from_std)
        .map_err(|e| AgentError::Usage(format!("cannot open the pipe {}: {e}", path.display())))
}

fn make_pipe(path: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: `name` is a NUL-terminated path that lives across the call.
    if unsafe { libc::mkfifo(name.as_ptr(), 0o660) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // The tool runs as the server's user; it writes through the pod's group (its fsGroup), which
    // the umask would take write access from.
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o660))
}

/// Stores a physical backup in `storage` from the stream of `source` and returns its manifest,
/// which the caller writes last; `written` lists what a failed backup must remove.
pub async fn store_backup(
    options: &PhysicalOptions,
    source: &StreamSource,
    storage: &Storage,
    written: &Written,
) -> Result<Manifest> {
    let started_at = jiff::Timestamp::now();
    let connector = Connector::new(options.connection.clone());
    let mut conn = connector.connect().await?;
    let (flavour, version) = describe_server(&connector, &mut conn).await?;
    let identity = snapshot::server_identity(&mut conn, flavour == "mariadb").await;
    let _ = conn.disconnect().await;

    let held = hold::hold_replica(&connector, flavour == "mariadb", CONTENT_SESSIONS).await?;
    let streamed = stream_backup(options, source, storage, written).await;
    let content_read = match held {
        Some((hold, read)) => {
            let position = hold.position.clone();
            let held_to_the_end = hold.release(&connector).await;
            if streamed.is_err() || !held_to_the_end {
                read.abort();
            }
            held_to_the_end.then_some((position, read))
        }
        None => None,
    };
    let (chunks, described) = streamed?;
    let tool = tool_name(&described);
    check_tool_version(&described, &version)?;
    let content = match content_read {
        Some((position, read)) => held_content(position, &described, read).await,
        None => None,
    };

    let mut conn = connector.connect().await?;
    let now: i64 = conn
        .query_first("SELECT UNIX_TIMESTAMP()")
        .await
        .map_err(|e| connector.error("reading the server's clock", e))?
        .unwrap_or_default();
    let _ = conn.disconnect().await;
    let binlog = described.binlog.as_ref();
    let position = Position {
        gtid: binlog.and_then(|b| b.gtid.clone()),
        binlog_file: binlog.map(|b| b.file.clone()),
        binlog_position: binlog.map(|b| b.position),
        // The server's clock once the stream ended: at or after the tool's snapshot, so a
        // restore to a time before it starts from an older run.
        time: jiff::Timestamp::from_second(now).ok().map(|t| t.to_string()),
        server: identity,
    };
    tracing::info!(
        "the physical backup's stream: {} bytes, {} files, in {} chunks; its snapshot is at {}",
        described.bytes,
        described.files,
        chunks.len(),
        position.describe().unwrap_or_default()
    );
    let encryption = options.encrypt.as_ref().map(SealKey::manifest_entry);
    Ok(Manifest {
        format: PHYSICAL_FORMAT_NAME.into(),
        format_version: if encryption.is_some() { ENCRYPTED_FORMAT_VERSION } else { FORMAT_VERSION },
        tool: format!("visitors-agent {}", env!("CARGO_PKG_VERSION")),
        server: ServerInfo { version, flavour },
        started_at: started_at.to_string(),
        finished_at: jiff::Timestamp::now().to_string(),
        consistency: described.info.get("tool_name").cloned().unwrap_or_else(|| "mariadb-backup".into()),
        position: Some(position),
        compression: options.compression,
        data_format: PHYSICAL_DATA_FORMAT.into(),
        databases: Vec::new(),
        users: None,
        user_names: Vec::new(),
        encryption,
        physical: Some(PhysicalEntry { tool, stream_bytes: described.bytes, files: described.files, chunks, content }),
    })
}

/// The tool's whole stream stored: its chunks and what it says, or why it is not a backup.
async fn stream_backup(
    options: &PhysicalOptions,
    source: &StreamSource,
    storage: &Storage,
    written: &Written,
) -> Result<(Vec<FileEntry>, Described)> {
    let reader = source.open().await?;
    let stored = store_stream(options, storage, written, reader).await;
    // The tool's own word first: its failure says more than the stream it left.
    source.tool_outcome().await?;
    let (chunks, described) = stored?;
    Ok((chunks, described.map_err(AgentError::BackupStreamInvalid)?))
}

/// The tables read while the replica was held, once the tool's snapshot is known to be the
/// held position (it cannot be another while the lock holds; a difference is never trusted).
async fn held_content(
    held_at: Option<String>,
    described: &Described,
    read: hold::ContentRead,
) -> Option<Vec<TableContent>> {
    // The copy is whole without it: a table the agent cannot read costs the drill its content
    // check, not the backup.
    let content = match read.await.map_err(AgentError::from).and_then(|read| read) {
        Ok(content) => content,
        Err(error) => {
            tracing::warn!("the held replica's tables could not be read ({error}): the run records no content");
            return None;
        }
    };
    let snapshot = described.binlog.as_ref().and_then(|b| b.gtid.clone());
    if !same_position(held_at.as_deref(), snapshot.as_deref()) {
        tracing::warn!(
            "the tool's snapshot ({}) is not the position the replica was held at ({}): the run records no content",
            snapshot.as_deref().unwrap_or("no GTID"),
            held_at.as_deref().unwrap_or("no GTID")
        );
        return None;
    }
    tracing::info!("read the {} tables of the snapshot", content.len());
    Some(content)
}

fn same_position(held_at: Option<&str>, snapshot: Option<&str>) -> bool {
    match (held_at, snapshot) {
        (None, None) => true,
        (Some(a), Some(b)) => match (GtidSet::parse(a), GtidSet::parse(b)) {
            (Ok(a), Ok(b)) => a.same_as(&b),
            _ => a == b,
        },
        _ => false,
    }
}

fn tool_name(described: &Described) -> String {
    let name = described.info.get("tool_name").map_or("mariadb-backup", String::as_str);
    match described.info.get("tool_version") {
        Some(version) => format!("{name} {version}"),
        None => name.to_string(),
    }
}

/// The tool and the server must be one release: a tool of another one may copy files whose
/// format it does not know (MariaDB changes its redo log between releases).
fn check_tool_version(described: &Described, server_version: &str) -> Result<()> {
    let Some(tool_version) = described.info.get("tool_version") else { return Ok(()) };
    let release = |version: &str| version.split(['-', '+']).next().unwrap_or_default().to_string();
    if release(tool_version) == release(server_version) {
        return Ok(());
    }
    Err(AgentError::BackupToolMismatch { tool: tool_name(described), server: server_version.to_string() })
}

/// One chunk being compressed, encrypted and uploaded while the stream goes on.
struct ChunkTask {
    pieces: mpsc::Sender<bytes::Bytes>,
    done: JoinHandle<Result<FileEntry>>,
    bytes: u64,
}

/// Stores the stream in chunks of `options.chunk_bytes` while the scanner follows its
/// records; returns the chunks, in order, and what the whole stream says (or why it is not
/// whole). Two chunks are in flight at a time, so compression and upload run beside the read.
async fn store_stream(
    options: &PhysicalOptions,
    storage: &Storage,
    written: &Written,
    mut reader: impl AsyncRead + Unpin,
) -> Result<(Vec<FileEntry>, std::result::Result<Described, String>)> {
    let mut scanner = Scanner::default();
    let mut buffer = vec![0u8; READ_BYTES];
    let mut chunks = Chunks::default();
    let mut current: Option<ChunkTask> = None;
    loop {
        let read = reader
            .read(&mut buffer)
            .await
            .map_err(|e| AgentError::BackupStreamInvalid(format!("reading it failed: {e}")))?;
        if read == 0 {
            break;
        }
        let piece = &buffer[..read];
        if let Err(error) = scanner.feed(piece) {
            // What was sent is stored before the failed backup removes it, not after.
            if let Some(chunk) = current.take() {
                chunks.close(chunk);
            }
            let _ = chunks.all().await;
            return Ok((Vec::new(), Err(error)));
        }
        let mut offset = 0;
        while offset < piece.len() {
            let chunk = match current.as_mut() {
                Some(chunk) => chunk,
                None => {
                    chunks.wait_for_all_but_one().await?;
                    current.insert(start_chunk(options, storage, written, chunks.count() + 1)?)
                }
            };
            let take = (options.chunk_bytes - chunk.bytes).min((piece.len() - offset) as u64) as usize;
            chunk.bytes += take as u64;
            let sent = chunk.pieces.send(bytes::Bytes::copy_from_slice(&piece[offset..offset + take])).await;
            offset += take;
            if sent.is_err() || chunk.bytes >= options.chunk_bytes {
                chunks.close(current.take().expect("a chunk is open"));
            }
        }
    }
    if let Some(chunk) = current.take() {
        chunks.close(chunk);
    }
    Ok((chunks.all().await?, scanner.finish()))
}

/// The chunks stored, and those still being stored, in the stream's order.
#[derive(Default)]
struct Chunks {
    stored: Vec<FileEntry>,
    storing: std::collections::VecDeque<JoinHandle<Result<FileEntry>>>,
}

impl Chunks {
    fn count(&self) -> usize {
        self.stored.len() + self.storing.len()
    }

    fn close(&mut self, chunk: ChunkTask) {
        drop(chunk.pieces);
        self.storing.push_back(chunk.done);
    }

    async fn wait_for_all_but_one(&mut self) -> Result<()> {
        while self.storing.len() > 1 {
            let done = self.storing.pop_front().expect("more than one");
            self.stored.push(done.await.map_err(AgentError::from)??);
        }
        Ok(())
    }

    async fn all(mut self) -> Result<Vec<FileEntry>> {
        while let Some(done) = self.storing.pop_front() {
            self.stored.push(done.await.map_err(AgentError::from)??);
        }
        Ok(self.stored)
    }
}

fn start_chunk(options: &PhysicalOptions, storage: &Storage, written: &Written, number: usize) -> Result<ChunkTask> {
    let path = format!("{CHUNKS_DIR}/{number:06}.mbstream{}", options.compression.extension());
    written.lock().unwrap().push(path.clone());
    let mut writer = storage.sealed_writer(&path, options.compression, options.level, options.encrypt.as_ref())?;
    let (pieces, mut received) = mpsc::channel::<bytes::Bytes>(PIECES_IN_FLIGHT);
    let syncer = storage.syncer();
    let done = tokio::spawn(async move {
        while let Some(piece) = received.recv().await {
            writer.write(&piece).await?;
        }
        let entry = writer.finish().await?;
        syncer.add(&entry.path);
        syncer.finish().await?;
        Ok(entry)
    });
    Ok(ChunkTask { pieces, done, bytes: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(tool_version: Option<&str>) -> Described {
        let info = tool_version.map(|v| ("tool_version".to_string(), v.to_string())).into_iter().collect();
        Described { files: 1, bytes: 1, binlog: None, info }
    }

    #[test]
    fn content_is_kept_only_when_the_snapshot_is_the_held_position() {
        let cases = [
            (Some("0-1-5"), Some("0-1-5"), true),
            (Some("0-1-5,1-2-3"), Some("1-2-3,0-1-5"), true),
            (Some("0-1-5"), Some("0-1-6"), false),
            (None, Some("0-1-5"), false),
            (Some("0-1-5"), None, false),
            (None, None, true),
        ];
        for (held, snapshot, kept) in cases {
            assert_eq!(same_position(held, snapshot), kept, "{held:?} / {snapshot:?}");
        }
    }

    #[test]
    fn the_tool_must_be_the_servers_release() {
        let cases = [
            (Some("10.11.19-MariaDB"), "10.11.19-MariaDB-0+deb12u1-log", true),
            (Some("10.11.19-MariaDB"), "10.11.19-MariaDB", true),
            (Some("10.11.9-MariaDB"), "10.11.19-MariaDB-log", false),
            (Some("11.4.2-MariaDB"), "10.11.19-MariaDB", false),
            (None, "10.11.19-MariaDB", true),
        ];
        for (tool, server, accepted) in cases {
            let checked = check_tool_version(&described(tool), server);
            assert_eq!(checked.is_ok(), accepted, "{tool:?} on {server}: {checked:?}");
            if let Err(error) = checked {
                assert_eq!(error.kind(), "backupToolMismatch");
                assert!(error.to_string().contains(server), "{error}");
            }
        }
    }
}
