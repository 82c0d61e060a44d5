//! Reading a backup's manifest, checking every file against it, and `verify`: comparing a
//! database with the manifest (row counts, optionally `CHECKSUM TABLE`).

use std::path::{Path, PathBuf};

use base64::Engine;
use futures::stream::{self, StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};

use crate::encryption::{self, OpenKey};
use crate::error::{AgentError, Result};
use crate::format::{
    ENCRYPTED_FORMAT_VERSION, Envelope, FORMAT_NAME, FileEntry, MANIFEST_FILE, Manifest, PHYSICAL_FORMAT_NAME,
    PhysicalEntry, Position, is_format_name,
};
use crate::mysql::{ConnectionSettings, Connector, catalog};
use crate::storage::{S3Settings, Storage};

/// Reads `manifest.json` (a missing one means an incomplete backup) and checks it before
/// anything else: its SHA-256 against `expected_sha256` when given (the value the backup run
/// reported), its format, and its own consistency ([`Manifest::inconsistency`]). The manifest
/// of an encrypted backup is opened with its key from `keys_dir`, which `storage` then keeps
/// to decrypt the backup's files; without the right key it is refused here, before anything
/// else is done.
pub async fn load_manifest(
    storage: &Storage,
    expected_sha256: Option<&str>,
    keys_dir: Option<&Path>,
) -> Result<Manifest> {
    load_manifest_and_sha256(storage, expected_sha256, keys_dir).await.map(|(manifest, _)| manifest)
}

/// [`load_manifest`], with the SHA-256 of the manifest read (in lowercase hexadecimal).
pub async fn load_manifest_and_sha256(
    storage: &Storage,
    expected_sha256: Option<&str>,
    keys_dir: Option<&Path>,
) -> Result<(Manifest, String)> {
    let location = storage.location().to_string();
    let bytes = read_manifest_file(storage).await?;
    let actual = hex::encode(Sha256::digest(&bytes));
    if let Some(expected) = expected_sha256
        && !actual.eq_ignore_ascii_case(expected)
    {
        return Err(AgentError::ManifestChanged { location, expected: expected.to_ascii_lowercase(), actual });
    }
    let invalid = |reason: String| AgentError::ManifestInvalid { location: location.clone(), reason };
    let manifest = match parse_envelope(&bytes, &location)? {
        Some(envelope) => {
            let key = OpenKey::find(keys_dir, &envelope.encryption.key_id)?;
            let sealed = base64::engine::general_purpose::STANDARD
                .decode(envelope.sealed_manifest.as_bytes())
                .map_err(|e| invalid(format!("sealedManifest is not base64: {e}")))?;
            let plain = key.open(MANIFEST_FILE, &sealed)?;
            let manifest: Manifest = serde_json::from_slice(&plain).map_err(|e| invalid(e.to_string()))?;
            // The clear part is what commands without the key act on: it must be the manifest's.
            if manifest.encryption.as_ref() != Some(&envelope.encryption) || manifest.position != envelope.position {
                return Err(invalid(
                    "the clear part of the envelope differs from the sealed manifest: the manifest was edited; use another backup"
                        .into(),
                ));
            }
            storage.set_open_key(key);
            manifest
        }
        None => serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?,
    };
    if !is_format_name(&manifest.format) || manifest.format_version > ENCRYPTED_FORMAT_VERSION {
        return Err(invalid(format!(
            "format {} version {} is not one this agent reads ({FORMAT_NAME} or {PHYSICAL_FORMAT_NAME}, up to version {ENCRYPTED_FORMAT_VERSION})",
            manifest.format, manifest.format_version
        )));
    }
    if manifest.encryption.is_some() != (manifest.format_version == ENCRYPTED_FORMAT_VERSION) {
        return Err(invalid(format!(
            "a manifest of version {} is encrypted only in an envelope",
            manifest.format_version
        )));
    }
    if let Some(problem) = manifest.inconsistency() {
        return Err(invalid(format!("{problem}: the manifest was edited or is corrupt; use another backup")));
    }
    Ok((manifest, actual))
}

/// Refuses a physical backup where only a logical one can be read (its rows loaded or
/// compared over SQL).
pub fn logical_only(manifest: &Manifest, location: &str) -> Result<()> {
    match &manifest.physical {
        Some(physical) => Err(AgentError::PhysicalBackup { location: location.into(), tool: physical.tool.clone() }),
        None => Ok(()),
    }
}

/// Refuses a logical backup where only a physical one can be read (its stream extracted into
/// files); the physical backup's entry otherwise.
pub fn physical_only<'m>(manifest: &'m Manifest, location: &str) -> Result<&'m PhysicalEntry> {
    manifest.physical.as_ref().ok_or_else(|| AgentError::LogicalBackup { location: location.into() })
}

async fn read_manifest_file(storage: &Storage) -> Result<bytes::Bytes> {
    match storage.read(MANIFEST_FILE).await {
        Ok(bytes) => Ok(bytes),
        Err(AgentError::FileMissing { .. }) => Err(AgentError::ManifestMissing { location: storage.location().into() }),
        Err(error) => Err(error),
    }
}

/// The envelope of an encrypted backup's manifest; `None` for a plain manifest.
fn parse_envelope(bytes: &[u8], location: &str) -> Result<Option<Envelope>> {
    let invalid = |reason: String| AgentError::ManifestInvalid { location: location.into(), reason };
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))?;
    if value.get("encryption").is_none() {
        return Ok(None);
    }
    let envelope: Envelope = serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
    if !is_format_name(&envelope.format) || envelope.format_version != ENCRYPTED_FORMAT_VERSION {
        return Err(invalid(format!(
            "format {} version {} is not one this agent reads ({FORMAT_NAME} or {PHYSICAL_FORMAT_NAME}, up to version {ENCRYPTED_FORMAT_VERSION})",
            envelope.format, envelope.format_version
        )));
    }
    if envelope.encryption.scheme != encryption::SCHEME {
        return Err(invalid(format!(
            "encryption scheme '{}' is not one this agent reads ({})",
            visitors_agent_contract::text::truncate_on_char_boundary(envelope.encryption.scheme, 40),
            encryption::SCHEME
        )));
    }
    Ok(Some(envelope))
}

/// The snapshot position a backup records, read without its key: an encrypted backup's is in
/// the clear part of its envelope (`prune-archive --before-backup`).
pub async fn load_position(storage: &Storage) -> Result<Option<Position>> {
    let bytes = read_manifest_file(storage).await?;
    match parse_envelope(&bytes, storage.location())? {
        Some(envelope) => Ok(envelope.position),
        None => Ok(load_manifest(storage, None, None).await?.position),
    }
}

/// Whether `value` can be a SHA-256 in hexadecimal, for `--expect-manifest-sha256`.
pub fn is_sha256_hex(value: &str) -> bool {
    value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Checks the size and SHA-256 of every file the manifest lists; fails naming the first bad one.
pub async fn verify_files(storage: &Storage, manifest: &Manifest, parallelism: usize) -> Result<()> {
    verify_entries(storage, manifest.files().into_iter().cloned().collect(), parallelism).await
}

/// Checks the size and SHA-256 of the files that describe the backup's objects (database and
/// table definitions, views, routines, triggers, users), not the table chunks: what a restore
/// reads again after its data was loaded and checked (`restore --from-stage`).
pub async fn verify_object_files(storage: &Storage, manifest: &Manifest, parallelism: usize) -> Result<()> {
    let chunks: std::collections::HashSet<&str> = manifest
        .databases
        .iter()
        .flat_map(|d| &d.tables)
        .flat_map(|t| &t.chunks)
        .map(|c| c.file.path.as_str())
        .collect();
    let files = manifest.files().into_iter().filter(|f| !chunks.contains(f.path.as_str())).cloned().collect();
    verify_entries(storage, files, parallelism).await
}

async fn verify_entries(storage: &Storage, files: Vec<FileEntry>, parallelism: usize) -> Result<()> {
    // Owned entries keep the future `Send` for any caller (borrowing closures in a stream
    // make the compiler lose the lifetimes).
    stream::iter(files)
        .map(|file| {
            let storage = storage.clone();
            async move { verify_file(&storage, &file).await }
        })
        .buffer_unordered(parallelism.max(1))
        .try_collect::<()>()
        .await
}

/// Checks the size and SHA-256 of one file against its entry.
pub(crate) async fn verify_file(storage: &Storage, file: &FileEntry) -> Result<()> {
    let (bytes, sha256) = storage.digest(&file.path).await?;
    if bytes != file.bytes {
        return Err(AgentError::SizeMismatch { file: file.path.clone(), expected: file.bytes, actual: bytes });
    }
    if sha256 != file.sha256 {
        return Err(AgentError::ChecksumMismatch {
            file: file.path.clone(),
            expected: file.sha256.clone(),
            actual: sha256,
        });
    }
    Ok(())
}

#[derive(Clone, Debug)]
pub struct VerifyOptions {
    pub from: String,
    pub s3: S3Settings,
    /// The manifest's SHA-256 as the backup run reported it; a different manifest is refused.
    pub expect_manifest_sha256: Option<String>,
    /// Compare a database with the manifest; without it only the files are checked.
    pub connection: Option<ConnectionSettings>,
    pub databases: Vec<String>,
    /// Also compare `CHECKSUM TABLE` with the values recorded at backup.
    pub checksum: bool,
    pub parallelism: usize,
    /// Where the keys of encrypted backups are, one file per key id.
    pub decrypt_keys_dir: Option<PathBuf>,
}

pub struct VerifyReport {
    pub manifest: Manifest,
    pub tables_checked: u64,
}

pub async fn verify(options: &VerifyOptions) -> Result<VerifyReport> {
    let storage = Storage::open(&options.from, &options.s3, false)?;
    let manifest =
        load_manifest(&storage, options.expect_manifest_sha256.as_deref(), options.decrypt_keys_dir.as_deref()).await?;
    verify_files(&storage, &manifest, options.parallelism).await?;
    let Some(settings) = &options.connection else {
        return Ok(VerifyReport { manifest, tables_checked: 0 });
    };
    logical_only(&manifest, &options.from)?;
    let connector = Connector::new(settings.clone());
    let mut conn = connector.connect().await?;
    let mut differences = Vec::new();
    let mut tables_checked = 0;
    for database in
        manifest.databases.iter().filter(|d| options.databases.is_empty() || options.databases.contains(&d.name))
    {
        for table in &database.tables {
            tables_checked += 1;
            let name = format!("`{}`.`{}`", database.name, table.name);
            let rows = catalog::count_rows(&connector, &mut conn, &database.name, &table.name, table.history).await?;
            if rows != table.rows {
                differences.push(format!("{name} has {rows} rows, the backup {}", table.rows));
            }
            if !options.checksum {
                continue;
            }
            if !catalog::checksum_is_reproducible(&connector, &mut conn, &database.name, &table.name).await? {
                tracing::info!("{name}: checksum not compared (generated columns make it irreproducible)");
                continue;
            }
            let Some(expected) = table.checksum else {
                return Err(AgentError::Usage(
                    "the backup has no table checksums: take it with --table-checksums to use --checksum".into(),
                ));
            };
            let actual = catalog::checksum_table(&connector, &mut conn, &database.name, &table.name).await?;
            if actual != Some(expected) {
                differences.push(format!("{name} has checksum {}, the backup {expected}", actual.unwrap_or(0)));
            }
        }
    }
    let _ = conn.disconnect().await;
    if differences.is_empty() {
        return Ok(VerifyReport { manifest, tables_checked });
    }
    let count = differences.len();
    differences.truncate(5);
    let more = if count > 5 { format!(" (and {} more)", count - 5) } else { String::new() };
    Err(AgentError::VerifyMismatch(format!("{}{more}", differences.join("; "))))
}
