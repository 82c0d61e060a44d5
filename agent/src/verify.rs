//! Reading a backup's manifest, checking every file against it, and `verify`: comparing a
//! database with the manifest (row counts, optionally `CHECKSUM TABLE`).

use futures::stream::{self, StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};

use crate::error::{AgentError, Result};
use crate::format::{FORMAT_NAME, FORMAT_VERSION, FileEntry, MANIFEST_FILE, Manifest};
use crate::mysql::{ConnectionSettings, Connector, catalog};
use crate::storage::{S3Settings, Storage};

/// Reads `manifest.json` (a missing one means an incomplete backup) and checks it before
/// anything else: its SHA-256 against `expected_sha256` when given (the value the backup run
/// reported), its format, and its own consistency ([`Manifest::inconsistency`]).
pub async fn load_manifest(storage: &Storage, expected_sha256: Option<&str>) -> Result<Manifest> {
    load_manifest_and_sha256(storage, expected_sha256).await.map(|(manifest, _)| manifest)
}

/// [`load_manifest`], with the SHA-256 of the manifest read (in lowercase hexadecimal).
pub async fn load_manifest_and_sha256(storage: &Storage, expected_sha256: Option<&str>) -> Result<(Manifest, String)> {
    let location = storage.location().to_string();
    let bytes = match storage.read(MANIFEST_FILE).await {
        Ok(bytes) => bytes,
        Err(AgentError::FileMissing { .. }) => return Err(AgentError::ManifestMissing { location }),
        Err(error) => return Err(error),
    };
    let actual = hex::encode(Sha256::digest(&bytes));
    if let Some(expected) = expected_sha256
        && !actual.eq_ignore_ascii_case(expected)
    {
        return Err(AgentError::ManifestChanged { location, expected: expected.to_ascii_lowercase(), actual });
    }
    let manifest: Manifest = serde_json::from_slice(&bytes)
        .map_err(|e| AgentError::ManifestInvalid { location: location.clone(), reason: e.to_string() })?;
    if manifest.format != FORMAT_NAME || manifest.format_version > FORMAT_VERSION {
        return Err(AgentError::ManifestInvalid {
            location,
            reason: format!(
                "format {} version {} is not one this agent reads ({FORMAT_NAME} up to version {FORMAT_VERSION})",
                manifest.format, manifest.format_version
            ),
        });
    }
    if let Some(problem) = manifest.inconsistency() {
        return Err(AgentError::ManifestInvalid {
            location,
            reason: format!("{problem}: the manifest was edited or is corrupt; use another backup"),
        });
    }
    Ok((manifest, actual))
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

async fn verify_file(storage: &Storage, file: &FileEntry) -> Result<()> {
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
}

pub struct VerifyReport {
    pub manifest: Manifest,
    pub tables_checked: u64,
}

pub async fn run(options: &VerifyOptions) -> Result<VerifyReport> {
    let storage = Storage::open(&options.from, &options.s3, false)?;
    let manifest = load_manifest(&storage, options.expect_manifest_sha256.as_deref()).await?;
    verify_files(&storage, &manifest, options.parallelism).await?;
    let Some(settings) = &options.connection else {
        return Ok(VerifyReport { manifest, tables_checked: 0 });
    };
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
            let rows = catalog::count_rows(&connector, &mut conn, &database.name, &table.name).await?;
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
