//! A segment: whole transactions of one binary log file, stored as a binary log file of their
//! own (the magic bytes, the file's format description event, then the events exactly as the
//! server sent them), compressed with zstd. `zstd -dc segment | mariadb-binlog -` reads one.
//! An archive of an encrypted schedule then encrypts it with age, as a backup's chunks are
//! (`<name>.binlog.zst.age`; its record names the key id): `age -d -i key | zstd -dc`.

use sha2::{Digest, Sha256};

use super::event::{BINLOG_MAGIC, Format, RawEvent};
use super::layout::{SegmentEntry, segment_path};
use crate::encryption::{Keyring, SUFFIX, SealKey};
use crate::error::{AgentError, Result};
use crate::format::Compression;
use crate::storage::{FileWriter, Storage, Syncer};

/// zstd level of segments: the agent's default for chunks.
const LEVEL: i32 = 1;

/// A segment being written.
pub struct SegmentWriter {
    writer: FileWriter,
    syncer: Syncer,
    /// Where it is stored.
    pub object: String,
    /// Uncompressed bytes written, the header included.
    pub bytes: u64,
    /// The key it is encrypted with, when it is.
    pub key_id: Option<String>,
}

impl SegmentWriter {
    /// Starts segment `seq` with the file's format description event, encrypted to `seal`
    /// when given.
    pub async fn start(storage: &Storage, seq: u64, format: &Format, seal: Option<&SealKey>) -> Result<Self> {
        let mut object = segment_path(seq, rand::random());
        if seal.is_some() {
            object.push_str(SUFFIX);
        }
        let mut writer = storage.sealed_writer(&object, Compression::Zstd, LEVEL, seal)?;
        writer.write(&BINLOG_MAGIC).await?;
        writer.write(&format.event_bytes).await?;
        let bytes = (BINLOG_MAGIC.len() + format.event_bytes.len()) as u64;
        let key_id = seal.map(|key| key.key_id().to_string());
        Ok(SegmentWriter { writer, syncer: storage.syncer(), object, bytes, key_id })
    }

    pub async fn write(&mut self, events: &[u8]) -> Result<()> {
        self.bytes += events.len() as u64;
        self.writer.write(events).await
    }

    /// Completes the upload and, on a volume, makes it durable before any record names it:
    /// the stored size and SHA-256.
    pub async fn finish(self) -> Result<(u64, String)> {
        let entry = self.writer.finish().await?;
        self.syncer.add(&self.object);
        self.syncer.finish().await?;
        Ok((entry.bytes, entry.sha256))
    }

    pub async fn abort(self) {
        self.writer.abort().await;
    }
}

/// The events of a stored segment, checked against its record: its stored bytes must have the
/// recorded SHA-256 before a single event is read. An encrypted one is opened with the key its
/// record names, from `keys`.
pub async fn read_segment(storage: &Storage, entry: &SegmentEntry, keys: &Keyring) -> Result<Option<SegmentData>> {
    let Some(object) = &entry.object else { return Ok(None) };
    let stored = storage.read(object).await?;
    let actual = hex::encode(Sha256::digest(&stored));
    let expected = entry.sha256.clone().unwrap_or_default();
    if actual != expected || stored.len() as u64 != entry.stored_bytes {
        return Err(AgentError::SegmentChecksumMismatch { file: object.clone(), expected, actual });
    }
    let compressed = match &entry.key_id {
        Some(key_id) => bytes::Bytes::from(keys.key(key_id)?.open(object, &stored)?),
        None => stored,
    };
    let bytes = zstd::stream::decode_all(&compressed[..]).map_err(|e| corrupt(object, &format!("not zstd: {e}")))?;
    SegmentData::parse(object, bytes).map(Some)
}

/// A segment's decompressed bytes and the format of its events.
pub struct SegmentData {
    pub format: Format,
    bytes: Vec<u8>,
    /// Where the events begin, after the magic and the format description.
    events_at: usize,
    object: String,
}

impl SegmentData {
    fn parse(object: &str, bytes: Vec<u8>) -> Result<Self> {
        if bytes.get(..4) != Some(&BINLOG_MAGIC[..]) {
            return Err(corrupt(object, "it does not start with the binary log magic bytes"));
        }
        let (description, _) =
            RawEvent::split(&bytes[4..]).ok_or_else(|| corrupt(object, "no whole format description event"))?;
        let format = Format::from_event(description.0).map_err(|e| corrupt(object, &e.to_string()))?;
        let events_at = 4 + description.0.len();
        Ok(SegmentData { format, bytes, events_at, object: object.to_string() })
    }

    /// The events, in order; an error for bytes that do not end on a whole event.
    pub fn events(&self) -> impl Iterator<Item = Result<RawEvent<'_>>> {
        let mut rest = &self.bytes[self.events_at..];
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            match RawEvent::split(rest) {
                Some((event, after)) => {
                    rest = after;
                    Some(Ok(event))
                }
                None => {
                    rest = &[];
                    Some(Err(corrupt(&self.object, "it ends inside an event")))
                }
            }
        })
    }
}

fn corrupt(object: &str, why: &str) -> AgentError {
    AgentError::ArchiveInvalid { location: object.to_string(), reason: format!("segment {object}: {why}") }
}
