//! Where backups live: a directory (`file:///abs/path`, for volumes) or an S3-compatible
//! bucket (`s3://bucket/prefix`), both through `object_store`. Files are written through a
//! compressor and a SHA-256 of exactly the stored bytes.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_compression::Level;
use async_compression::tokio::bufread::{GzipDecoder, ZstdDecoder};
use async_compression::tokio::write::GzipEncoder;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::buffered::BufWriter;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    GetResult, GetResultPayload, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio_util::io::{ReaderStream, StreamReader};

use crate::encryption::{OpenKey, SealKey, SealingWriter};
use crate::error::{AgentError, Result};
use crate::format::{Compression, FileEntry};

/// S3 settings; every one comes from the environment or a flag (see the CLI).
/// `Debug` is implemented by hand below: it never prints the secret key or the session token.
#[derive(Clone, Default)]
pub struct S3Settings {
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    pub region: String,
    pub endpoint: Option<String>,
    pub force_path_style: bool,
}

impl std::fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Settings")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &self.secret_access_key.as_ref().map(|_| "<hidden>"))
            .field("session_token", &self.session_token.as_ref().map(|_| "<hidden>"))
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("force_path_style", &self.force_path_style)
            .finish()
    }
}

/// A parsed `--to` / `--from` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    S3 { bucket: String, prefix: String },
    Directory(std::path::PathBuf),
}

impl Location {
    pub fn parse(text: &str) -> Result<Self> {
        let invalid = |reason: &str| AgentError::InvalidLocation { location: text.into(), reason: reason.into() };
        if let Some(rest) = text.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(invalid("no bucket name after s3://"));
            }
            return Ok(Self::S3 { bucket: bucket.into(), prefix: prefix.trim_matches('/').into() });
        }
        if let Some(path) = text.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(invalid("a file location needs an absolute path: file:///abs/path"));
            }
            return Ok(Self::Directory(path.into()));
        }
        Err(invalid("use s3://bucket/prefix or file:///abs/path"))
    }
}

mod sync;
pub use sync::Syncer;

/// A backup's root in a store.
#[derive(Clone)]
pub struct Storage {
    store: Arc<dyn ObjectStore>,
    /// Where `put`s with `create_only` and `create`s go: on a volume they are fsynced before
    /// they return. On S3 the same store.
    durable: Arc<dyn ObjectStore>,
    /// On a volume: the store without fsync and the root folder, for a [`Syncer`].
    local: Option<(Arc<LocalFileSystem>, std::path::PathBuf)>,
    root: Path,
    location: String,
    bucket: Option<String>,
    /// The key of an encrypted backup, once its manifest was opened with it: every file read
    /// through [`Storage::read_entry`] and [`Storage::decompressed`] is then decrypted.
    open_key: Arc<std::sync::OnceLock<OpenKey>>,
}

/// Part size of multipart uploads, and the most parts in flight per file: bounds memory.
const UPLOAD_PART_BYTES: usize = 8 * 1024 * 1024;
const UPLOAD_PARTS_IN_FLIGHT: usize = 2;

impl Storage {
    /// Opens a location. `create` makes a missing directory (for a backup's target).
    pub fn open(text: &str, s3: &S3Settings, create: bool) -> Result<Self> {
        match Location::parse(text)? {
            Location::S3 { bucket, prefix } => {
                let store = build_s3(&bucket, s3)
                    .map_err(|e| AgentError::InvalidLocation { location: text.into(), reason: e.to_string() })?;
                let store: Arc<dyn ObjectStore> = Arc::new(store);
                Ok(Self {
                    durable: store.clone(),
                    store,
                    local: None,
                    root: Path::from(prefix),
                    location: text.into(),
                    bucket: Some(bucket),
                    open_key: Arc::default(),
                })
            }
            Location::Directory(dir) => {
                if create && let Err(error) = std::fs::create_dir_all(&dir) {
                    return Err(io_error(text, error));
                }
                if !dir.is_dir() {
                    return Err(AgentError::ManifestMissing { location: text.into() });
                }
                // Durability: data and schema files are fsynced by a `Syncer` in the background
                // while a backup goes on; the manifest (`put` with `create_only`), written after
                // the syncer finished, is fsynced with its folder before `put` returns. So the
                // manifest never names a file a crash could lose.
                let local_store = || {
                    LocalFileSystem::new_with_prefix(&dir)
                        .map_err(|e| AgentError::InvalidLocation { location: text.into(), reason: e.to_string() })
                };
                let store = Arc::new(local_store()?);
                let root = std::fs::canonicalize(&dir).map_err(|error| io_error(text, error))?;
                Ok(Self {
                    durable: Arc::new(local_store()?.with_fsync(true)),
                    local: Some((store.clone(), root)),
                    store,
                    root: Path::default(),
                    location: text.into(),
                    bucket: None,
                    open_key: Arc::default(),
                })
            }
        }
    }

    pub fn location(&self) -> &str {
        &self.location
    }

    /// From now on, files of the backup are decrypted with `key` (its manifest opened with it).
    pub fn set_open_key(&self, key: OpenKey) {
        let _ = self.open_key.set(key);
    }

    /// A file the manifest lists, whole, decrypted if the backup is encrypted.
    pub async fn read_entry(&self, file: &FileEntry) -> Result<Bytes> {
        let stored = self.read(&file.path).await?;
        match self.open_key.get() {
            Some(key) => key.open(&file.path, &stored).map(Bytes::from),
            None => Ok(stored),
        }
    }

    /// Makes the files given to it durable in the background (see [`Syncer`]).
    pub fn syncer(&self) -> Syncer {
        Syncer::new(&self.location, self.local.clone())
    }

    fn path(&self, relative: &str) -> Path {
        relative.split('/').fold(self.root.clone(), |path, part| path.clone().join(part))
    }

    pub async fn exists(&self, relative: &str) -> Result<bool> {
        match self.store.head(&self.path(relative)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { source, .. }) if !is_missing_bucket(&source.to_string()) => Ok(false),
            Err(error) => Err(self.error(error)),
        }
    }

    /// Every stored object under the root, as its path relative to the root and its size.
    /// Only `prefix/...` is listed, never a sibling such as `prefix-2/...`.
    pub async fn list(&self) -> Result<Vec<(String, u64)>> {
        let root = Some(self.root.clone()).filter(|root| !root.as_ref().is_empty());
        self.list_below(root).await
    }

    /// The stored objects below folder `relative` of the root, as [`Storage::list`] gives them.
    pub async fn list_under(&self, relative: &str) -> Result<Vec<(String, u64)>> {
        self.list_below(Some(self.path(relative))).await
    }

    async fn list_below(&self, folder: Option<Path>) -> Result<Vec<(String, u64)>> {
        let mut listing = self.store.list(folder.as_ref());
        let mut objects = Vec::new();
        while let Some(object) = listing.next().await {
            let object = object.map_err(|e| self.error(e))?;
            if let Some(parts) = object.location.prefix_match(&self.root) {
                let relative: Vec<String> = parts.map(|part| part.as_ref().to_string()).collect();
                objects.push((relative.join("/"), object.size));
            }
        }
        Ok(objects)
    }

    /// Stores a small file whole; give it to a [`Syncer`] to make it durable.
    pub async fn put(&self, relative: &str, data: Bytes) -> Result<FileEntry> {
        let entry =
            FileEntry { path: relative.into(), bytes: data.len() as u64, sha256: hex::encode(Sha256::digest(&data)) };
        self.store.put(&self.path(relative), PutPayload::from(data)).await.map_err(|e| self.error(e))?;
        Ok(entry)
    }

    /// Stores a small file only if none exists: `Ok(false)` when one does. The file is
    /// durable when this returns `Ok(true)`.
    pub async fn create(&self, relative: &str, data: Bytes) -> Result<bool> {
        let options = PutOptions { mode: PutMode::Create, ..Default::default() };
        match self.durable.put_opts(&self.path(relative), PutPayload::from(data), options).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => Ok(false),
            Err(error) => Err(self.error(error)),
        }
    }

    pub async fn read(&self, relative: &str) -> Result<Bytes> {
        let result = self.store.get(&self.path(relative)).await.map_err(|e| self.read_error(relative, e))?;
        result.bytes().await.map_err(|e| self.read_error(relative, e))
    }

    /// Size and SHA-256 of a stored file, read as a stream.
    pub async fn digest(&self, relative: &str) -> Result<(u64, String)> {
        let result = self.store.get(&self.path(relative)).await.map_err(|e| self.read_error(relative, e))?;
        let mut stream = stored_bytes(result);
        let mut hasher = Sha256::new();
        let mut bytes = 0u64;
        while let Some(piece) = stream.next().await {
            let piece = piece.map_err(|e| self.read_error(relative, e))?;
            bytes += piece.len() as u64;
            hasher.update(&piece);
        }
        Ok((bytes, hex::encode(hasher.finalize())))
    }

    /// The decompressed content of a chunk as a stream of bytes. The stored bytes are counted
    /// and hashed on the way: at their end the stream fails with an `io::Error` if they differ
    /// from `file` (the file changed since it was checked), so a load that used them fails.
    pub async fn decompressed(
        &self,
        file: &FileEntry,
        compression: Compression,
    ) -> Result<BoxStream<'static, io::Result<Bytes>>> {
        let relative = file.path.as_str();
        let result = self.store.get(&self.path(relative)).await.map_err(|e| self.read_error(relative, e))?;
        let expected = file.clone();
        let mut seen = Some((Sha256::new(), 0u64));
        let raw = stored_bytes(result)
            .map_err(io::Error::other)
            .map(Some)
            .chain(futures::stream::once(async { None }))
            .filter_map(move |item| {
                let out = match item {
                    Some(Ok(piece)) => {
                        if let Some((hasher, bytes)) = seen.as_mut() {
                            hasher.update(&piece);
                            *bytes += piece.len() as u64;
                        }
                        Some(Ok(piece))
                    }
                    Some(Err(error)) => Some(Err(error)),
                    None => seen.take().and_then(|(hasher, bytes)| {
                        let sha256 = hex::encode(hasher.finalize());
                        (bytes != expected.bytes || sha256 != expected.sha256).then(|| {
                            Err(io::Error::other(format!(
                                "{} changed while it was loaded: {bytes} bytes with SHA-256 {sha256}, \
                                 manifest.json says {} bytes with SHA-256 {}",
                                expected.path, expected.bytes, expected.sha256
                            )))
                        })
                    }),
                };
                futures::future::ready(out)
            });
        let reader = BufReader::with_capacity(256 * 1024, StreamReader::new(raw));
        // An encrypted chunk is decrypted before it is decompressed; age reads to the end of
        // the file (its last STREAM chunk is marked), so the check above still runs.
        let reader: Pin<Box<dyn AsyncBufRead + Send>> = match self.open_key.get() {
            Some(key) => {
                let decrypted = key.reader(relative, Box::pin(reader)).await?;
                Box::pin(BufReader::with_capacity(256 * 1024, decrypted))
            }
            None => Box::pin(reader),
        };
        // Decoders read every member to the end of the file, so the check above always runs.
        let decoded: Pin<Box<dyn AsyncRead + Send>> = match compression {
            Compression::Zstd => {
                let mut decoder = ZstdDecoder::new(reader);
                decoder.multiple_members(true);
                Box::pin(decoder)
            }
            Compression::Gzip => {
                let mut decoder = GzipDecoder::new(reader);
                decoder.multiple_members(true);
                Box::pin(decoder)
            }
            Compression::None => Box::pin(reader),
        };
        Ok(ReaderStream::with_capacity(decoded, 256 * 1024).boxed())
    }

    pub async fn delete(&self, relative: &str) -> Result<()> {
        match self.store.delete(&self.path(relative)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(error) => Err(self.error(error)),
        }
    }

    /// Starts writing a file through `compression`.
    pub fn writer(&self, relative: &str, compression: Compression, level: i32) -> FileWriter {
        self.sealed_writer(relative, compression, level, None).expect("a plain writer cannot fail")
    }

    /// Starts writing a file through `compression`, then age encryption to `seal` if given:
    /// compressor, encryption, hashing and upload, all streaming.
    pub fn sealed_writer(
        &self,
        relative: &str,
        compression: Compression,
        level: i32,
        seal: Option<&SealKey>,
    ) -> Result<FileWriter> {
        let upload = BufWriter::with_capacity(self.store.clone(), self.path(relative), UPLOAD_PART_BYTES)
            .with_max_concurrency(UPLOAD_PARTS_IN_FLIGHT);
        let hashing = HashingWriter { inner: upload, hasher: Sha256::new(), bytes: 0 };
        let sink = match seal {
            Some(key) => Sink::Sealed(key.writer(hashing)?),
            None => Sink::Plain(hashing),
        };
        let encoder = match compression {
            Compression::Zstd => Encoder::Zstd(ZstdFrames::new(sink, level)),
            Compression::Gzip => Encoder::Gzip(GzipEncoder::with_quality(sink, Level::Precise(level))),
            Compression::None => Encoder::Plain(sink),
        };
        Ok(FileWriter { storage: self.clone(), relative: relative.into(), encoder })
    }

    fn read_error(&self, relative: &str, error: object_store::Error) -> AgentError {
        match error {
            object_store::Error::NotFound { source, .. } if !is_missing_bucket(&source.to_string()) => {
                AgentError::FileMissing { file: relative.into() }
            }
            other => self.error(other),
        }
    }

    /// Turns a storage error into one a user can act on.
    pub fn error(&self, error: object_store::Error) -> AgentError {
        let location = self.location.clone();
        let text = error_chain_text(&error);
        if let Some(io) = find_io_error(&error)
            && is_disk_full(io)
        {
            return AgentError::DiskFull { location };
        }
        if is_missing_bucket(&text) {
            return AgentError::MissingBucket { bucket: self.bucket.clone().unwrap_or_default(), location };
        }
        match error {
            object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
                AgentError::StorageCredentialsRejected { location, reason: short_reason(&text) }
            }
            _ if ["SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied"].iter().any(|c| text.contains(c)) => {
                AgentError::StorageCredentialsRejected { location, reason: short_reason(&text) }
            }
            _ => AgentError::Storage { location, reason: short_reason(&text) },
        }
    }
}

/// Bytes read at once from a file on a volume.
const READ_BLOCK_BYTES: u64 = 1024 * 1024;

/// The bytes of a stored file as a stream. A file on a volume is read in blocks of
/// [`READ_BLOCK_BYTES`] (`object_store` reads 8 KiB at a time, each on a blocking thread of
/// its own: measured, that costs more than the reading).
fn stored_bytes(result: GetResult) -> BoxStream<'static, object_store::Result<Bytes>> {
    let file = match result.payload {
        GetResultPayload::File(file, _) => Arc::new(file),
        GetResultPayload::Stream(stream) => return stream,
    };
    futures::stream::try_unfold(result.range, move |range| {
        let file = file.clone();
        async move {
            if range.start >= range.end {
                return Ok(None);
            }
            let length = (range.end - range.start).min(READ_BLOCK_BYTES);
            let block = tokio::task::spawn_blocking(move || {
                let mut block = vec![0; length as usize];
                std::os::unix::fs::FileExt::read_exact_at(&*file, &mut block, range.start).map(|()| block)
            })
            .await
            .map_err(|e| io::Error::other(e.to_string()))
            .and_then(|read| read)
            .map_err(|source| object_store::Error::Generic { store: "LocalFileSystem", source: Box::new(source) })?;
            Ok(Some((Bytes::from(block), range.start + length..range.end)))
        }
    })
    .boxed()
}

fn build_s3(bucket: &str, s3: &S3Settings) -> object_store::Result<impl ObjectStore> {
    let retry = RetryConfig { max_retries: 4, retry_timeout: std::time::Duration::from_secs(60), ..Default::default() };
    let mut builder = AmazonS3Builder::new().with_bucket_name(bucket).with_region(&s3.region).with_retry(retry);
    if let Some(key) = &s3.access_key_id {
        builder = builder.with_access_key_id(key);
    }
    if let Some(secret) = &s3.secret_access_key {
        builder = builder.with_secret_access_key(secret);
    }
    if let Some(token) = &s3.session_token {
        builder = builder.with_token(token);
    }
    if let Some(endpoint) = &s3.endpoint {
        builder = builder.with_endpoint(endpoint).with_allow_http(endpoint.starts_with("http://"));
    }
    // object_store treats a custom endpoint as already naming the bucket when virtual-hosted
    // style is on, so path style is used with any custom endpoint.
    let virtual_hosted = !s3.force_path_style && s3.endpoint.is_none();
    builder.with_virtual_hosted_style_request(virtual_hosted).build()
}

/// A missing bucket, told apart from a missing key by the S3 error code.
fn is_missing_bucket(text: &str) -> bool {
    text.contains("NoSuchBucket")
}

fn error_chain_text(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn find_io_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a io::Error> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = current {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            return Some(io);
        }
        current = cause.source();
    }
    None
}

pub fn is_disk_full(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::StorageFull || error.raw_os_error() == Some(28)
}

fn io_error(location: &str, error: io::Error) -> AgentError {
    if is_disk_full(&error) {
        AgentError::DiskFull { location: location.into() }
    } else {
        AgentError::Storage { location: location.into(), reason: error.to_string() }
    }
}

/// The first 300 characters of a storage error, on one line.
fn short_reason(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(300) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line,
    }
}

#[cfg(test)]
impl Storage {
    /// The same storage with its durable writes going to `store` (tests inject faults there).
    pub(crate) fn with_durable_store(mut self, store: Arc<dyn ObjectStore>) -> Self {
        self.durable = store;
        self
    }
}

/// A file being written: compressor, then hashing, then upload.
pub struct FileWriter {
    storage: Storage,
    relative: String,
    encoder: Encoder,
}

enum Encoder {
    Zstd(ZstdFrames),
    Gzip(GzipEncoder<Sink>),
    Plain(Sink),
}

/// Where compressed bytes go: straight to hashing and upload, or through age first.
enum Sink {
    Plain(HashingWriter),
    Sealed(SealingWriter<HashingWriter>),
}

impl Sink {
    fn into_hashing(self) -> HashingWriter {
        match self {
            Self::Plain(hashing) => hashing,
            Self::Sealed(sealing) => sealing.into_inner(),
        }
    }
}

impl AsyncWrite for Sink {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(w) => Pin::new(w).poll_write(cx, buf),
            Self::Sealed(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(w) => Pin::new(w).poll_flush(cx),
            Self::Sealed(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(w) => Pin::new(w).poll_shutdown(cx),
            Self::Sealed(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

impl FileWriter {
    pub async fn write(&mut self, data: &[u8]) -> Result<()> {
        let written = match &mut self.encoder {
            Encoder::Zstd(w) => w.write_all(data).await,
            Encoder::Gzip(w) => w.write_all(data).await,
            Encoder::Plain(w) => w.write_all(data).await,
        };
        written.map_err(|e| self.write_error(e))
    }

    /// Completes the upload and returns the stored file's size and checksum.
    pub async fn finish(mut self) -> Result<FileEntry> {
        let closed = match &mut self.encoder {
            Encoder::Zstd(w) => w.finish().await,
            Encoder::Gzip(w) => w.shutdown().await,
            Encoder::Plain(w) => w.shutdown().await,
        };
        if let Err(error) = closed {
            let error = self.write_error(error);
            // A writer that began shutting down cannot be aborted; remove what it stored.
            let _ = self.storage.delete(&self.relative).await;
            return Err(error);
        }
        let hashing = self.into_hashing();
        Ok(FileEntry { path: hashing.0, bytes: hashing.1.bytes, sha256: hex::encode(hashing.1.hasher.finalize()) })
    }

    /// Drops the upload and removes what was stored of it.
    pub async fn abort(self) {
        let storage = self.storage.clone();
        let (relative, mut hashing) = self.into_hashing();
        let _ = hashing.inner.abort().await;
        let _ = storage.delete(&relative).await;
    }

    fn into_hashing(self) -> (String, HashingWriter) {
        let sink = match self.encoder {
            Encoder::Zstd(w) => w.into_inner(),
            Encoder::Gzip(w) => w.into_inner(),
            Encoder::Plain(w) => w,
        };
        (self.relative, sink.into_hashing())
    }

    fn write_error(&self, error: io::Error) -> AgentError {
        if is_disk_full(&error) {
            return AgentError::DiskFull { location: self.storage.location.clone() };
        }
        // BufWriter wraps object_store errors in io::Error; unwrap them for a better message.
        match error.into_inner() {
            Some(inner) => match inner.downcast::<object_store::Error>() {
                Ok(store_error) => self.storage.error(*store_error),
                Err(other) => AgentError::Storage {
                    location: self.storage.location.clone(),
                    reason: short_reason(&other.to_string()),
                },
            },
            None => AgentError::Storage { location: self.storage.location.clone(), reason: "write failed".into() },
        }
    }
}

/// A zstd file written as a series of frames, each compressing up to [`ZSTD_FRAME_BYTES`] of
/// input in one call. zstd's streaming API keeps its input in a ring buffer and, each time
/// that wraps, takes the slower "external dictionary" path: one call per frame needs about a
/// fifth fewer instructions at level 1 for the same size (docs/benchmarks.md, run 14). Any
/// zstd decoder reads the concatenated frames as one stream (`zstd -dc` included).
struct ZstdFrames {
    compressor: zstd::bulk::Compressor<'static>,
    pending: Vec<u8>,
    frame: Vec<u8>,
    /// Whether a frame was written: a file with none gets an empty one.
    framed: bool,
    writer: Sink,
}

/// Input bytes per frame. With level 1's 512 KiB window, longer frames find no more matches.
const ZSTD_FRAME_BYTES: usize = 512 * 1024;
/// A write that starts a frame and holds up to this much is compressed whole, as one frame: a
/// backup's buffers of rows end a little past a frame's size, and carrying each one's tail into
/// the next frame copied nearly every byte once more.
const ZSTD_FRAME_MAX_BYTES: usize = ZSTD_FRAME_BYTES + ZSTD_FRAME_BYTES / 4;

impl ZstdFrames {
    fn new(writer: Sink, level: i32) -> Self {
        let range = zstd::compression_level_range();
        let level = level.clamp(*range.start(), *range.end());
        let compressor = zstd::bulk::Compressor::new(level).expect("zstd accepts every level of its range");
        Self {
            compressor,
            pending: Vec::new(),
            frame: Vec::with_capacity(zstd::zstd_safe::compress_bound(ZSTD_FRAME_MAX_BYTES)),
            framed: false,
            writer,
        }
    }

    async fn write_all(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            if self.pending.is_empty() && data.len() >= ZSTD_FRAME_BYTES {
                let whole = if data.len() <= ZSTD_FRAME_MAX_BYTES { data.len() } else { ZSTD_FRAME_BYTES };
                let (frame, rest) = data.split_at(whole);
                self.write_frame(frame).await?;
                data = rest;
                continue;
            }
            let take = (ZSTD_FRAME_BYTES - self.pending.len()).min(data.len());
            self.pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.pending.len() == ZSTD_FRAME_BYTES {
                self.flush_pending().await?;
            }
        }
        Ok(())
    }

    async fn finish(&mut self) -> io::Result<()> {
        if !self.pending.is_empty() || !self.framed {
            self.flush_pending().await?;
        }
        self.writer.shutdown().await
    }

    async fn flush_pending(&mut self) -> io::Result<()> {
        let pending = std::mem::take(&mut self.pending);
        self.write_frame(&pending).await?;
        self.pending = pending;
        self.pending.clear();
        Ok(())
    }

    async fn write_frame(&mut self, input: &[u8]) -> io::Result<()> {
        self.frame.clear();
        self.compressor.compress_to_buffer(input, &mut self.frame)?;
        self.framed = true;
        self.writer.write_all(&self.frame).await
    }

    fn into_inner(self) -> Sink {
        self.writer
    }
}

/// Counts and hashes the bytes that reach the store.
struct HashingWriter {
    inner: BufWriter,
    hasher: Sha256,
    bytes: u64,
}

impl AsyncWrite for HashingWriter {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(written)) = &poll {
            this.hasher.update(&buf[..*written]);
            this.bytes += *written as u64;
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse() {
        assert_eq!(Location::parse("s3://b/x/y/").unwrap(), Location::S3 { bucket: "b".into(), prefix: "x/y".into() });
        assert_eq!(Location::parse("s3://b").unwrap(), Location::S3 { bucket: "b".into(), prefix: "".into() });
        assert_eq!(Location::parse("file:///v/b").unwrap(), Location::Directory("/v/b".into()));
        assert!(Location::parse("file://rel").is_err());
        assert!(Location::parse("/v/b").is_err());
        assert!(Location::parse("s3:///x").is_err());
    }

    #[test]
    fn disk_full_is_recognised_through_wrapping_errors() {
        let storage =
            Storage::open(&format!("file://{}", std::env::temp_dir().display()), &S3Settings::default(), false)
                .unwrap();
        let enospc = io::Error::from_raw_os_error(28);
        let wrapped = object_store::Error::Generic { store: "LocalFileSystem", source: Box::new(enospc) };
        assert!(matches!(storage.error(wrapped), AgentError::DiskFull { .. }));
    }

    /// Writes of any size make frames of at most `ZSTD_FRAME_BYTES` of input that decode,
    /// concatenated, to exactly what was written; the entry's size and SHA-256 are the file's.
    #[tokio::test]
    async fn zstd_files_are_frames_that_decode_to_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(&format!("file://{}", dir.path().display()), &S3Settings::default(), true).unwrap();
        let text: Vec<u8> = (0..(ZSTD_FRAME_BYTES * 5 / 2)).map(|i| b"abcdefghij\t\n"[(i * 7 + i / 13) % 12]).collect();
        let mut writer = storage.writer("chunk.tsv.zst", Compression::Zstd, 1);
        for piece in [&text[..10], &text[10..ZSTD_FRAME_BYTES + 20], &text[ZSTD_FRAME_BYTES + 20..]] {
            writer.write(piece).await.unwrap();
        }
        let entry = writer.finish().await.unwrap();
        let stored = std::fs::read(dir.path().join("chunk.tsv.zst")).unwrap();
        assert_eq!(entry.bytes, stored.len() as u64);
        assert_eq!(entry.sha256, hex::encode(Sha256::digest(&stored)));
        assert_eq!(zstd::decode_all(&stored[..]).unwrap(), text);
        assert_eq!(frame_count(&stored), 3, "2.5 frames of input make 3 frames");

        // A write a little longer than a frame, at a frame's start, is one frame; a longer one is cut.
        for (length, frames) in [(ZSTD_FRAME_BYTES + 100, 1), (ZSTD_FRAME_MAX_BYTES + 1, 2), (ZSTD_FRAME_BYTES * 2, 2)]
        {
            let mut writer = storage.writer("one-write.tsv.zst", Compression::Zstd, 1);
            writer.write(&text[..length]).await.unwrap();
            writer.finish().await.unwrap();
            let stored = std::fs::read(dir.path().join("one-write.tsv.zst")).unwrap();
            assert_eq!(zstd::decode_all(&stored[..]).unwrap(), &text[..length]);
            assert_eq!(frame_count(&stored), frames, "a write of {length} bytes");
        }

        let empty = storage.writer("empty.tsv.zst", Compression::Zstd, 1).finish().await.unwrap();
        let stored = std::fs::read(dir.path().join("empty.tsv.zst")).unwrap();
        assert_eq!((empty.bytes, zstd::decode_all(&stored[..]).unwrap()), (stored.len() as u64, Vec::new()));
    }

    fn frame_count(mut stored: &[u8]) -> usize {
        let mut frames = 0;
        while !stored.is_empty() {
            let size = zstd::zstd_safe::find_frame_compressed_size(stored).unwrap();
            stored = &stored[size..];
            frames += 1;
        }
        frames
    }
}
