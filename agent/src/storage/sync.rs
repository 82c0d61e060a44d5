//! Durability of a backup on a volume without making its workers wait for the disk: each
//! finished file is fsynced by a background task while the backup goes on, then the folders
//! that hold them; `manifest.json` is written (and fsynced) only after [`Syncer::finish`].
//! One fsync per file as before, but none on a worker's path (measured: on a busy disk the
//! workers' own fsyncs made the backup wait, see docs/benchmarks.md).

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use object_store::local::LocalFileSystem;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::task::JoinHandle;

use super::io_error;
use crate::error::{AgentError, Result};

/// Makes the files added to it durable: on a volume, an fsync of each file and of every folder
/// from the file's up to the backup's root; on S3 an upload is durable when it returns, and
/// this does nothing.
pub struct Syncer {
    location: String,
    store: Option<Arc<LocalFileSystem>>,
    sender: Mutex<Option<UnboundedSender<PathBuf>>>,
    task: Mutex<Option<JoinHandle<io::Result<()>>>>,
    /// A file that could not be queued: `finish` fails rather than call it durable.
    unqueued: Mutex<Option<String>>,
}

impl Syncer {
    /// `local`: the volume's store and the backup's root folder as the store sees it.
    pub(super) fn new(location: &str, local: Option<(Arc<LocalFileSystem>, PathBuf)>) -> Self {
        let (store, sender, task) = match local {
            Some((store, root)) => {
                let (sender, files) = unbounded_channel();
                (Some(store), Some(sender), Some(tokio::spawn(sync_files(root, files))))
            }
            None => (None, None, None),
        };
        Self {
            location: location.into(),
            store,
            sender: Mutex::new(sender),
            task: Mutex::new(task),
            unqueued: Mutex::default(),
        }
    }

    /// Queues a finished file (its path relative to the backup's root) for its fsync.
    pub fn add(&self, relative: &str) {
        let Some(store) = &self.store else { return };
        let path = relative.split('/').fold(object_store::path::Path::default(), |path, part| path.join(part));
        match store.path_to_filesystem(&path) {
            Ok(file) => {
                if let Some(sender) = self.sender.lock().unwrap().as_ref() {
                    // A closed channel means the task died; `finish` reports it.
                    let _ = sender.send(file);
                }
            }
            Err(error) => {
                self.unqueued.lock().unwrap().get_or_insert_with(|| format!("cannot fsync {relative}: {error}"));
            }
        }
    }

    /// Waits until every file added before it and their folders are durable.
    pub async fn finish(&self) -> Result<()> {
        self.sender.lock().unwrap().take();
        let task = self.task.lock().unwrap().take();
        let Some(task) = task else { return Ok(()) };
        if let Some(reason) = self.unqueued.lock().unwrap().take() {
            return Err(AgentError::Storage { location: self.location.clone(), reason });
        }
        let synced = task.await.map_err(|e| AgentError::Internal(format!("the fsync task failed: {e}")))?;
        synced.map_err(|error| io_error(&self.location, error))
    }
}

async fn sync_files(root: PathBuf, mut files: UnboundedReceiver<PathBuf>) -> io::Result<()> {
    let mut folders = BTreeSet::new();
    let mut first_error = None;
    while let Some(file) = files.recv().await {
        folders.extend(file.ancestors().skip(1).take_while(|folder| folder.starts_with(&root)).map(Path::to_path_buf));
        if first_error.is_none()
            && let Err(error) = fsync(file).await
        {
            first_error = Some(error);
        }
    }
    if let Some(error) = first_error {
        return Err(error);
    }
    for folder in folders {
        fsync(folder).await?;
    }
    Ok(())
}

/// `fsync` of a file or folder, on a blocking thread.
async fn fsync(path: PathBuf) -> io::Result<()> {
    tokio::task::spawn_blocking(move || std::fs::File::open(&path)?.sync_all()).await.map_err(io::Error::other)?
}

#[cfg(test)]
mod tests {
    use super::super::{S3Settings, Storage};
    use crate::error::AgentError;

    #[tokio::test]
    async fn finish_succeeds_once_every_added_file_and_folder_is_synced() {
        let dir = tempfile::tempdir().unwrap();
        let storage =
            Storage::open(&format!("file://{}", dir.path().display()), &S3Settings::default(), false).unwrap();
        let syncer = storage.syncer();
        for path in ["db/data/t/00000-00000.tsv.zst", "db/tables/t.sql"] {
            storage.put(path, bytes::Bytes::from_static(b"rows")).await.unwrap();
            syncer.add(path);
        }
        syncer.finish().await.unwrap();
    }

    #[tokio::test]
    async fn a_file_that_cannot_be_synced_fails_the_finish() {
        let dir = tempfile::tempdir().unwrap();
        let storage =
            Storage::open(&format!("file://{}", dir.path().display()), &S3Settings::default(), false).unwrap();
        let syncer = storage.syncer();
        storage.put("db/present.sql", bytes::Bytes::from_static(b"x")).await.unwrap();
        syncer.add("db/present.sql");
        syncer.add("db/gone.sql");
        assert!(matches!(syncer.finish().await, Err(AgentError::Storage { .. })));
    }

    #[tokio::test]
    async fn without_a_volume_there_is_nothing_to_sync() {
        let syncer = super::Syncer::new("s3://bucket/prefix", None);
        syncer.add("db/database.sql");
        syncer.finish().await.unwrap();
    }
}
