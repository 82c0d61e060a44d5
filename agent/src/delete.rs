//! `delete`: removes one stored backup, in an order that never leaves a backup that looks
//! complete: `.backup.lock` is taken first (no backup starts there meanwhile, and a delete cut
//! short is recognised and finished by the next one), then `manifest.json` goes (the backup is
//! no longer restorable), then the schema files, then the data chunks, then the lock, and for
//! a directory the emptied folders.
//!
//! Only a location that looks like a backup is touched: every file under it must have a name of
//! the backup layout (docs/backup-format.md), and at least one must show that the agent wrote
//! it (a `visitors-backup` manifest, a data chunk, or the lock). Otherwise nothing is deleted.
//! A location with no files at all is already deleted: that succeeds.

use std::io;
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};

use crate::error::{AgentError, Result};
use crate::format::{LOCK_FILE, MANIFEST_FILE, is_format_name};
use crate::storage::{Location, S3Settings, Storage};

/// Deletions in flight at once.
const DELETES_IN_FLIGHT: usize = 16;
/// Marks the lock of a delete, so that a delete cut short is finished without `--break-lock`.
const DELETE_MARK: &str = "operation=delete";

#[derive(Debug, Clone)]
pub struct DeleteOptions {
    /// `s3://bucket/prefix` or `file:///abs/path`.
    pub location: String,
    pub s3: S3Settings,
    /// Delete even if a backup's `.backup.lock` is there (the caller knows no backup runs).
    pub break_lock: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteReport {
    pub deleted_files: u64,
    pub deleted_bytes: u64,
    /// SHA-256 of the manifest that was deleted, if there was one.
    pub manifest_sha256: Option<String>,
}

/// What a file under the location is, by its path relative to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Manifest,
    Lock,
    Chunk,
    /// A schema file, `users.sql`, or (in a directory) an unfinished upload of a backup file.
    Other,
    Foreign,
}

/// Where the files are: a directory is walked and deleted with the file system itself (links
/// are never followed, unfinished uploads are seen, emptied folders are removed).
enum Target {
    Directory(PathBuf),
    Bucket(Storage),
}

struct Inventory {
    files: Vec<(String, u64)>,
    /// Folders of a directory target, deepest last.
    folders: Vec<PathBuf>,
    /// Entries that are no part of a backup (their relative paths).
    foreign: Vec<String>,
}

pub async fn delete(options: &DeleteOptions) -> Result<DeleteReport> {
    let text = options.location.as_str();
    let target = match Location::parse(text)? {
        Location::S3 { prefix, .. } if prefix.is_empty() => {
            return Err(invalid(text, "a bucket root is never deleted: name the prefix of one backup"));
        }
        Location::S3 { .. } => Target::Bucket(Storage::open(text, &options.s3, false)?),
        Location::Directory(path) => Target::Directory(checked_directory(text, path)?),
    };
    let Some(inventory) = target.inventory(text).await? else {
        tracing::info!("nothing to delete: {text} does not exist (already deleted)");
        return Ok(DeleteReport::default());
    };
    if !inventory.foreign.is_empty() {
        let mut named = inventory.foreign.clone();
        named.sort();
        let more = named.len().saturating_sub(3);
        named.truncate(3);
        let suffix = if more > 0 { format!(" and {more} more") } else { String::new() };
        return Err(not_a_backup(text, &format!("it holds {}{suffix}, which no backup has", named.join(", "))));
    }
    if inventory.files.is_empty() {
        target.remove_folders(&inventory.folders).await;
        tracing::info!("nothing to delete: {text} holds no files (already deleted)");
        return Ok(DeleteReport::default());
    }
    let manifest_sha256 = check_evidence(&target, text, &inventory.files).await?;
    take_lock(&target, text, &inventory.files, options.break_lock).await?;

    let of_kind = |kind: Kind| -> Vec<&(String, u64)> {
        inventory.files.iter().filter(|(path, _)| target.kind(path) == kind).collect()
    };
    let mut report = DeleteReport { manifest_sha256, ..DeleteReport::default() };
    for kind in [Kind::Manifest, Kind::Other, Kind::Chunk] {
        let files = of_kind(kind);
        remove_all(&target, &files).await?;
        report.deleted_files += files.len() as u64;
        report.deleted_bytes += files.iter().map(|(_, bytes)| bytes).sum::<u64>();
    }
    // The lock goes last: until then a delete cut short is recognised and finished by the next.
    target.remove(LOCK_FILE).await?;
    report.deleted_files += of_kind(Kind::Lock).len() as u64;
    target.remove_folders(&inventory.folders).await;
    tracing::info!("deleted the backup at {text}: {} files, {} bytes", report.deleted_files, report.deleted_bytes);
    Ok(report)
}

fn invalid(location: &str, reason: &str) -> AgentError {
    AgentError::InvalidLocation { location: location.into(), reason: reason.into() }
}

fn not_a_backup(location: &str, reason: &str) -> AgentError {
    AgentError::NotABackup { location: location.into(), reason: reason.into() }
}

/// An absolute path below the root, with no `.` or `..`: `/` and relative tricks are refused.
fn checked_directory(text: &str, path: PathBuf) -> Result<PathBuf> {
    let mut below_root = 0;
    for component in path.components() {
        match component {
            Component::RootDir => {}
            Component::Normal(_) => below_root += 1,
            _ => return Err(invalid(text, "the path must not hold '.' or '..'")),
        }
    }
    if below_root == 0 {
        return Err(invalid(text, "the root folder is never deleted: name the folder of one backup"));
    }
    Ok(path)
}

/// Whether the files show that the agent wrote them; returns the manifest's SHA-256.
async fn check_evidence(target: &Target, text: &str, files: &[(String, u64)]) -> Result<Option<String>> {
    let has = |kind: Kind| files.iter().any(|(path, _)| target.kind(path) == kind);
    let manifest = match has(Kind::Manifest) {
        true => target.read(MANIFEST_FILE).await?,
        false => None,
    };
    let ours = manifest.as_ref().is_some_and(|content| is_backup_manifest(content));
    if manifest.is_some() && !ours && !has(Kind::Chunk) {
        return Err(not_a_backup(text, "its manifest.json is not a visitors-backup manifest"));
    }
    if !ours && !has(Kind::Chunk) && !has(Kind::Lock) {
        return Err(not_a_backup(text, "it holds no manifest.json, data chunk or .backup.lock"));
    }
    Ok(manifest.map(|content| hex::encode(Sha256::digest(&content))))
}

/// Reads `"format"` only: a manifest too damaged to restore is still deleted.
fn is_backup_manifest(content: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(content)
        .ok()
        .and_then(|value| value.get("format").and_then(|f| f.as_str()).map(is_format_name))
        .unwrap_or(false)
}

/// Takes `.backup.lock`, or checks that the one there may be broken.
async fn take_lock(target: &Target, text: &str, files: &[(String, u64)], break_lock: bool) -> Result<()> {
    let present = files.iter().any(|(path, _)| target.kind(path) == Kind::Lock);
    if !present && target.create(LOCK_FILE, Bytes::from(delete_id())).await? {
        return Ok(());
    }
    let held = target.read(LOCK_FILE).await?.unwrap_or_default();
    let holder = String::from_utf8_lossy(&held).trim().to_string();
    if holder.contains(DELETE_MARK) || break_lock {
        return Ok(());
    }
    Err(AgentError::LocationLocked {
        location: text.trim_end_matches('/').into(),
        holder: visitors_agent_contract::text::truncate_on_char_boundary(holder, 200),
    })
}

fn delete_id() -> String {
    let host = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()).unwrap_or_else(|| "unknown-host".into());
    format!("host={host} pid={} started={} {DELETE_MARK}\n", std::process::id(), jiff::Timestamp::now())
}

async fn remove_all(target: &Target, files: &[&(String, u64)]) -> Result<()> {
    stream::iter(files.iter().map(|(path, _)| target.remove(path)))
        .buffer_unordered(DELETES_IN_FLIGHT)
        .try_collect::<Vec<()>>()
        .await
        .map(|_| ())
}

impl Target {
    /// The files and folders under the location; `None` when the location does not exist.
    async fn inventory(&self, text: &str) -> Result<Option<Inventory>> {
        match self {
            Self::Bucket(storage) => {
                let files = storage.list().await?;
                let foreign = files.iter().filter(|(p, _)| self.kind(p) == Kind::Foreign).map(|(p, _)| p.clone());
                Ok(Some(Inventory { foreign: foreign.collect(), files, folders: Vec::new() }))
            }
            Self::Directory(root) => {
                let root = root.clone();
                let walked = tokio::task::spawn_blocking(move || walk(&root)).await?;
                let Some(mut inventory) = walked.map_err(|error| io_error(text, error))? else { return Ok(None) };
                let foreign =
                    inventory.files.iter().filter(|(p, _)| self.kind(p) == Kind::Foreign).map(|(p, _)| p.clone());
                inventory.foreign.extend(foreign.collect::<Vec<_>>());
                Ok(Some(inventory))
            }
        }
    }

    fn kind(&self, relative: &str) -> Kind {
        match self {
            Self::Bucket(_) => classify(relative),
            Self::Directory(_) => match unfinished_upload(relative) {
                Some(finished) if classify(finished) != Kind::Foreign => Kind::Other,
                Some(_) => Kind::Foreign,
                None => classify(relative),
            },
        }
    }

    async fn read(&self, relative: &str) -> Result<Option<Bytes>> {
        match self {
            Self::Bucket(storage) => match storage.read(relative).await {
                Ok(content) => Ok(Some(content)),
                Err(AgentError::FileMissing { .. }) => Ok(None),
                Err(error) => Err(error),
            },
            Self::Directory(root) => match tokio::fs::read(root.join(relative)).await {
                Ok(content) => Ok(Some(Bytes::from(content))),
                Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(error) => Err(io_error(&root.display().to_string(), error)),
            },
        }
    }

    /// Creates a file only if none exists: `Ok(false)` when one does.
    async fn create(&self, relative: &str, content: Bytes) -> Result<bool> {
        match self {
            Self::Bucket(storage) => storage.create(relative, content).await,
            Self::Directory(root) => {
                use tokio::io::AsyncWriteExt;
                let opened = tokio::fs::OpenOptions::new().write(true).create_new(true).open(root.join(relative)).await;
                let written = match opened {
                    Ok(mut file) => file.write_all(&content).await.and(file.sync_all().await),
                    Err(error) if error.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
                    Err(error) => Err(error),
                };
                written.map(|_| true).map_err(|error| io_error(&root.display().to_string(), error))
            }
        }
    }

    /// Removes one file; one already gone is fine.
    async fn remove(&self, relative: &str) -> Result<()> {
        match self {
            Self::Bucket(storage) => storage.delete(relative).await,
            Self::Directory(root) => match tokio::fs::remove_file(root.join(relative)).await {
                Ok(()) => Ok(()),
                Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(error) => Err(io_error(&root.display().to_string(), error)),
            },
        }
    }

    /// Removes the emptied folders, deepest first, then the location's own folder. A folder
    /// that cannot go (a volume's mount point, a file written meanwhile) stays, with a warning.
    async fn remove_folders(&self, folders: &[PathBuf]) {
        let Self::Directory(root) = self else { return };
        for folder in folders.iter().rev().chain(std::iter::once(root)) {
            match tokio::fs::remove_dir(folder).await {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => tracing::warn!("the folder {} stays: {error}", folder.display()),
            }
        }
    }
}

fn io_error(location: &str, error: io::Error) -> AgentError {
    AgentError::Storage { location: location.into(), reason: error.to_string() }
}

/// Walks a directory without following links. Folders outside the layout are not entered but
/// named as foreign, so an arbitrary tree is refused without being read whole.
fn walk(root: &Path) -> io::Result<Option<Inventory>> {
    match std::fs::symlink_metadata(root) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
        Ok(meta) if !meta.is_dir() => {
            let inventory = Inventory { files: Vec::new(), folders: Vec::new(), foreign: vec![".".into()] };
            return Ok(Some(inventory));
        }
        Ok(_) => {}
    }
    let mut inventory = Inventory { files: Vec::new(), folders: Vec::new(), foreign: Vec::new() };
    let mut pending = vec![(root.to_path_buf(), Vec::<String>::new())];
    while let Some((folder, parts)) = pending.pop() {
        for entry in std::fs::read_dir(&folder)? {
            let entry = entry?;
            let mut entry_parts = parts.clone();
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                inventory.foreign.push(format!("{}/{}", parts.join("/"), entry.file_name().to_string_lossy()));
                continue;
            };
            entry_parts.push(name);
            let relative = entry_parts.join("/");
            let file_type = entry.file_type()?;
            if file_type.is_dir() && is_layout_folder(&entry_parts) {
                inventory.folders.push(entry.path());
                pending.push((entry.path(), entry_parts));
            } else if file_type.is_file() {
                inventory.files.push((relative, entry.metadata()?.len()));
            } else {
                inventory.foreign.push(relative);
            }
        }
    }
    inventory.folders.sort_by_key(|folder| folder.components().count());
    Ok(Some(inventory))
}

/// Folders a backup has: `<db>`, `<db>/tables`, `<db>/data`, `<db>/data/<table>`.
fn is_layout_folder(parts: &[String]) -> bool {
    match parts {
        [db] => is_segment(db),
        [db, sub] => is_segment(db) && (sub == "tables" || sub == "data"),
        [db, data, table] => is_segment(db) && data == "data" && is_segment(table),
        _ => false,
    }
}

/// The kind of a file by its path relative to the backup's root (docs/backup-format.md). The
/// files of an encrypted backup have the names of a plain one's, with `.age` appended.
fn classify(relative: &str) -> Kind {
    match relative.strip_suffix(crate::encryption::SUFFIX) {
        Some(plain) => match classify_plain(plain) {
            kind @ (Kind::Chunk | Kind::Other) => kind,
            _ => Kind::Foreign,
        },
        None => classify_plain(relative),
    }
}

fn classify_plain(relative: &str) -> Kind {
    let parts: Vec<&str> = relative.split('/').collect();
    match parts.as_slice() {
        [name] if *name == MANIFEST_FILE => Kind::Manifest,
        [name] if *name == LOCK_FILE => Kind::Lock,
        ["users.sql"] => Kind::Other,
        [db, "database.sql" | "views.sql" | "routines.sql" | "triggers.sql"] if is_segment(db) => Kind::Other,
        [db, "tables", table] if is_segment(db) && table.strip_suffix(".sql").is_some_and(is_segment) => Kind::Other,
        [db, "data", table, chunk] if is_segment(db) && is_segment(table) && is_chunk_name(chunk) => Kind::Chunk,
        _ => Kind::Foreign,
    }
}

/// A name as `format::layout::segment` writes it.
fn is_segment(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '@'))
}

/// `<range>-<part>.tsv`, `.tsv.zst` or `.tsv.gz`, with at least five digits each.
fn is_chunk_name(name: &str) -> bool {
    let stem = [".tsv.zst", ".tsv.gz", ".tsv"].iter().find_map(|suffix| name.strip_suffix(suffix));
    let digits = |s: &str| s.len() >= 5 && s.chars().all(|c| c.is_ascii_digit());
    stem.and_then(|stem| stem.split_once('-')).is_some_and(|(range, part)| digits(range) && digits(part))
}

/// The file an unfinished upload to a directory was writing (`object_store` writes
/// `<name>#<n>` and renames it when done).
fn unfinished_upload(relative: &str) -> Option<&str> {
    let (finished, suffix) = relative.rsplit_once('#')?;
    (!suffix.is_empty() && suffix.chars().all(|c| c.is_ascii_digit())).then_some(finished)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_classified_by_the_backup_layout() {
        assert_eq!(classify("manifest.json"), Kind::Manifest);
        assert_eq!(classify(".backup.lock"), Kind::Lock);
        assert_eq!(classify("users.sql"), Kind::Other);
        assert_eq!(classify("shop/database.sql"), Kind::Other);
        assert_eq!(classify("a@002eb/tables/t@00e9.sql"), Kind::Other);
        assert_eq!(classify("shop/data/numbers/00000-00001.tsv.zst"), Kind::Chunk);
        assert_eq!(classify("shop/data/numbers/123456-00001.tsv"), Kind::Chunk);
        assert_eq!(classify("shop/data/numbers/00000-00001.tsv.zst.age"), Kind::Chunk);
        assert_eq!(classify("shop/tables/t.sql.age"), Kind::Other);
        assert_eq!(classify("users.sql.age"), Kind::Other);
        for foreign in [
            "notes.txt",
            "run/manifest.json",
            "ns/app/run/shop/data/t/00000-00000.tsv.zst",
            "shop/data/t/0-0.tsv",
            "shop/tables/t.txt",
            "shop/data/t/00000-00000.tsv.zst/x",
            "sh.op/database.sql",
            "shop/database.sql#1",
            "manifest.json.age",
            "shop/data/t/00000-00000.tsv.zst.age.age",
            "notes.txt.age",
        ] {
            assert_eq!(classify(foreign), Kind::Foreign, "{foreign}");
        }
    }

    #[test]
    fn only_paths_below_the_root_are_accepted() {
        for refused in ["/", "/a/../b", "/.."] {
            assert!(checked_directory(refused, PathBuf::from(refused)).is_err(), "{refused}");
        }
        assert!(checked_directory("/backup/ns/app/run", PathBuf::from("/backup/ns/app/run")).is_ok());
    }

    #[test]
    fn unfinished_uploads_name_their_file() {
        assert_eq!(unfinished_upload("shop/data/t/00000-00000.tsv.zst#3"), Some("shop/data/t/00000-00000.tsv.zst"));
        assert_eq!(unfinished_upload("shop/database.sql"), None);
        assert_eq!(unfinished_upload("x#a1"), None);
        let target = Target::Directory("/x".into());
        assert_eq!(target.kind("manifest.json#7"), Kind::Other, "an unfinished manifest is not evidence");
        assert_eq!(target.kind("notes.txt#7"), Kind::Foreign);
    }

    #[test]
    fn only_a_visitors_backup_manifest_counts() {
        assert!(is_backup_manifest(br#"{"format": "visitors-backup", "formatVersion": 1}"#));
        assert!(!is_backup_manifest(br#"{"name": "my web app"}"#));
        assert!(!is_backup_manifest(b"not json"));
    }
}
