//! Client-side encryption of backups with age (docs/backup-format.md, docs/decisions.md).
//!
//! A backup encrypts every file but its manifest envelope to one X25519 recipient: a
//! [`SealKey`], read from `--encrypt-key-file` (an identity or only its recipient: a backup
//! needs only the public half). A restore finds the identity that opens a backup, an
//! [`OpenKey`], in `--decrypt-keys-dir` by the key id the manifest names. Every file is a plain
//! age file (`age -d -i key.txt file`); chunks are compressed first, then encrypted.
//!
//! Errors name key ids and paths, never key material.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite};
use tokio_util::compat::{FuturesAsyncReadCompatExt, TokioAsyncReadCompatExt};

use crate::error::{AgentError, Result};

/// The `scheme` of an encrypted backup's manifest envelope.
pub const SCHEME: &str = "age-x25519";
/// Appended to the name of every encrypted file of a backup.
pub const SUFFIX: &str = ".age";

/// Whether `id` can name a key: `[A-Za-z0-9._-]{1,63}`, not starting with a dot (a file of
/// that name in a mounted Secret would be hidden, and `..data` is the Secret's own).
pub fn is_key_id(id: &str) -> bool {
    (1..=63).contains(&id.len())
        && !id.starts_with('.')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// What a key file holds, read line by line (`#` comments and blank lines skipped).
enum KeyLine {
    Identity(age::x25519::Identity),
    Recipient(age::x25519::Recipient),
}

/// The keys of a file, or why it holds none; never echoes a line (it may be a secret).
fn read_keys(path: &Path) -> std::result::Result<Vec<KeyLine>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let mut keys = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key = if line.starts_with("AGE-SECRET-KEY-1") {
            line.parse().map(KeyLine::Identity).ok()
        } else if line.starts_with("age1") {
            line.parse().map(KeyLine::Recipient).ok()
        } else {
            None
        };
        keys.push(key.ok_or_else(|| {
            format!(
                "line {} is neither an age X25519 identity (AGE-SECRET-KEY-1...) nor a recipient (age1...)",
                number + 1
            )
        })?);
    }
    Ok(keys)
}

/// The recipient a backup encrypts to, with the name the manifest records for it.
#[derive(Clone)]
pub struct SealKey {
    key_id: String,
    recipient: age::x25519::Recipient,
}

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealKey").field("key_id", &self.key_id).field("recipient", &self.recipient()).finish()
    }
}

impl SealKey {
    /// Reads `--encrypt-key-file`: one identity or one recipient.
    pub fn load(path: &Path, key_id: &str) -> Result<Self> {
        if !is_key_id(key_id) {
            return Err(AgentError::Usage(format!(
                "--encrypt-key-id must be 1 to 63 letters, digits, '.', '_' or '-', not starting with '.' (got '{}')",
                visitors_agent_contract::text::truncate_on_char_boundary(key_id.to_string(), 80)
            )));
        }
        let refuse = |reason: String| AgentError::EncryptionKeyFile { path: path.display().to_string(), reason };
        let mut keys = read_keys(path).map_err(refuse)?;
        if keys.len() != 1 {
            return Err(refuse(format!(
                "it holds {} keys; a backup is encrypted to one (an AGE-SECRET-KEY-1... identity or an age1... recipient)",
                keys.len()
            )));
        }
        let recipient = match keys.remove(0) {
            KeyLine::Identity(identity) => identity.to_public(),
            KeyLine::Recipient(recipient) => recipient,
        };
        Ok(Self { key_id: key_id.to_string(), recipient })
    }

    #[cfg(test)]
    pub fn new(key_id: &str, recipient: age::x25519::Recipient) -> Self {
        Self { key_id: key_id.into(), recipient }
    }

    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The recipient, `age1...`: public.
    pub fn recipient(&self) -> String {
        self.recipient.to_string()
    }

    /// A small file, encrypted whole.
    /// What a manifest says of this key: the scheme, the key's name and its recipient.
    pub fn manifest_entry(&self) -> crate::format::Encryption {
        crate::format::Encryption { scheme: SCHEME.into(), key_id: self.key_id().into(), recipient: self.recipient() }
    }

    pub fn seal(&self, plain: &[u8]) -> Result<Vec<u8>> {
        age::encrypt(&self.recipient, plain).map_err(|e| AgentError::Internal(format!("age encryption: {e}")))
    }

    /// Encrypts a stream: what is written to the returned writer reaches `inner` encrypted.
    pub fn writer<W: AsyncWrite + Unpin>(&self, inner: W) -> Result<SealingWriter<W>> {
        let encryptor = age::Encryptor::with_recipients(std::iter::once(&self.recipient as &dyn age::Recipient))
            .map_err(|e| AgentError::Internal(format!("age encryption: {e}")))?;
        let sealed = SharedBuffer::default();
        // The header goes to the buffer, and out with the first write.
        let stream = encryptor.wrap_output(sealed.clone()).map_err(|e| AgentError::Internal(e.to_string()))?;
        Ok(SealingWriter { stream: Some(stream), sealed, out: Vec::new(), sent: 0, inner })
    }
}

/// What errors name as encrypted: a backup's files, or the segments of a binary log archive.
pub const BACKUP: &str = "the backup";
pub const ARCHIVE_SEGMENT: &str = "a segment of the binary log archive";

/// The identities that open the backups encrypted with one key id.
#[derive(Clone)]
pub struct OpenKey {
    key_id: String,
    identities: Arc<Vec<age::x25519::Identity>>,
    /// What it opens, for errors.
    subject: &'static str,
}

impl std::fmt::Debug for OpenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenKey").field("key_id", &self.key_id).finish_non_exhaustive()
    }
}

impl OpenKey {
    /// The identity of `key_id` in `keys_dir` (the file named by the key id), to open a backup.
    pub fn find(keys_dir: Option<&Path>, key_id: &str) -> Result<Self> {
        Self::find_for(BACKUP, keys_dir, key_id)
    }

    /// The identity of `key_id` in `keys_dir`, to open `subject` ([`BACKUP`], [`ARCHIVE_SEGMENT`]).
    pub fn find_for(subject: &'static str, keys_dir: Option<&Path>, key_id: &str) -> Result<Self> {
        let missing =
            |why: &str| AgentError::EncryptionKeyMissing { subject, key_id: key_id.to_string(), why: why.to_string() };
        let Some(dir) = keys_dir else {
            return Err(missing(
                "and no keys directory was given: mount the Secret holding it and pass its folder as --decrypt-keys-dir",
            ));
        };
        // The manifest names the key id: one that is no plain file name is never looked up.
        let path: PathBuf = dir.join(key_id);
        if !is_key_id(key_id) || !path.is_file() {
            return Err(missing("which the keys directory does not hold: add it to the Secret"));
        }
        let unusable = |reason: String| AgentError::EncryptionKeyUnusable { key_id: key_id.to_string(), reason };
        let keys = read_keys(&path).map_err(unusable)?;
        let identities: Vec<_> = keys
            .into_iter()
            .filter_map(|key| match key {
                KeyLine::Identity(identity) => Some(identity),
                KeyLine::Recipient(_) => None,
            })
            .collect();
        if identities.is_empty() {
            return Err(unusable(
                "it holds no age identity (AGE-SECRET-KEY-1...); a recipient (age1...) alone cannot decrypt".into(),
            ));
        }
        Ok(Self { key_id: key_id.to_string(), identities: Arc::new(identities), subject })
    }

    #[cfg(test)]
    pub fn new(key_id: &str, identity: age::x25519::Identity) -> Self {
        Self { key_id: key_id.into(), identities: Arc::new(vec![identity]), subject: BACKUP }
    }

    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    fn identities(&self) -> impl Iterator<Item = &dyn age::Identity> {
        self.identities.iter().map(|identity| identity as &dyn age::Identity)
    }

    /// A small file of the backup (`file`, for errors), decrypted whole.
    pub fn open(&self, file: &str, sealed: &[u8]) -> Result<Vec<u8>> {
        let decryptor = age::Decryptor::new_buffered(sealed).map_err(|e| self.error(file, e))?;
        let mut reader = decryptor.decrypt(self.identities()).map_err(|e| self.error(file, e))?;
        let mut plain = Vec::with_capacity(sealed.len());
        io::Read::read_to_end(&mut reader, &mut plain).map_err(|e| self.error(file, age::DecryptError::Io(e)))?;
        Ok(plain)
    }

    /// Decrypts a stream: the header is read (and the key checked) before this returns; a
    /// ciphertext changed later fails the stream with an `io::Error`.
    pub async fn reader<R: AsyncBufRead + Unpin + Send + 'static>(
        &self,
        file: &str,
        input: R,
    ) -> Result<Pin<Box<dyn AsyncRead + Send>>> {
        let decryptor = age::Decryptor::new_async_buffered(input.compat()).await.map_err(|e| self.error(file, e))?;
        let reader = decryptor.decrypt_async(self.identities()).map_err(|e| self.error(file, e))?;
        Ok(Box::pin(reader.compat()))
    }

    /// An age error on `file`: no identity matched is the wrong key; anything else a corrupt
    /// file (the manifest's SHA-256s are the first line against that).
    fn error(&self, file: &str, error: age::DecryptError) -> AgentError {
        match error {
            age::DecryptError::NoMatchingKeys => {
                AgentError::EncryptionKeyWrong { subject: self.subject, key_id: self.key_id.clone() }
            }
            age::DecryptError::Io(error) if error.kind() != io::ErrorKind::InvalidData => {
                AgentError::Storage { location: file.to_string(), reason: error.to_string() }
            }
            other => AgentError::Undecryptable { file: file.to_string(), reason: other.to_string() },
        }
    }
}

/// The keys of a `--decrypt-keys-dir` that open the segments of a binary log archive, each found
/// when first needed: segments name their own key ids, and a rotation leaves several.
pub struct Keyring {
    dir: Option<PathBuf>,
    found: Mutex<std::collections::HashMap<String, OpenKey>>,
}

impl Keyring {
    pub fn new(dir: Option<&Path>) -> Self {
        Self { dir: dir.map(Path::to_path_buf), found: Mutex::default() }
    }

    /// The identities of `key_id`, as [`OpenKey::find`] finds them.
    pub fn key(&self, key_id: &str) -> Result<OpenKey> {
        if let Some(key) = self.found.lock().unwrap().get(key_id) {
            return Ok(key.clone());
        }
        let key = OpenKey::find_for(ARCHIVE_SEGMENT, self.dir.as_deref(), key_id)?;
        self.found.lock().unwrap().insert(key_id.to_string(), key.clone());
        Ok(key)
    }
}

/// Where age's writer puts the encrypted bytes, taken from there by [`SealingWriter`].
#[derive(Clone, Default)]
struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuffer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Encrypts with age what is written to it (one 64 KiB STREAM chunk at a time, in the
/// writing task) and passes the ciphertext on to `inner`. Shutting it down writes the last
/// chunk, then shuts `inner` down.
pub struct SealingWriter<W> {
    stream: Option<age::stream::StreamWriter<SharedBuffer>>,
    sealed: SharedBuffer,
    /// Ciphertext not yet taken by `inner`, from `sent`.
    out: Vec<u8>,
    sent: usize,
    inner: W,
}

impl<W: AsyncWrite + Unpin> SealingWriter<W> {
    pub fn into_inner(self) -> W {
        self.inner
    }

    /// Moves what age wrote into `out`, the buffers swapped, not copied.
    fn take_sealed(&mut self) {
        let mut sealed = self.sealed.0.lock().unwrap();
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
            std::mem::swap(&mut self.out, &mut *sealed);
        } else {
            self.out.extend_from_slice(&sealed);
            sealed.clear();
        }
    }

    /// Writes `out` to `inner` until it is empty.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.out.len() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.out[self.sent..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(written)) => self.sent += written,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for SealingWriter<W> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.poll_drain(cx))?;
        let Some(stream) = this.stream.as_mut() else {
            return Poll::Ready(Err(io::Error::other("write after shutdown")));
        };
        stream.write_all(buf)?;
        this.take_sealed();
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        std::task::ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        std::task::ready!(this.poll_drain(cx))?;
        if let Some(stream) = this.stream.take() {
            stream.finish()?;
            this.take_sealed();
            std::task::ready!(this.poll_drain(cx))?;
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};

    use super::*;

    fn key_file(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn key_ids_are_plain_file_names() {
        for id in ["k1", "nightly-2026.01_a", &"a".repeat(63)] {
            assert!(is_key_id(id), "{id}");
        }
        for id in ["", ".hidden", "..data", "a/b", "a b", &"a".repeat(64), "é"] {
            assert!(!is_key_id(id), "{id}");
        }
    }

    #[test]
    fn a_backup_key_is_an_identity_or_a_recipient_and_errors_never_show_it() {
        let dir = tempfile::tempdir().unwrap();
        let identity = age::x25519::Identity::generate();
        let secret = age::secrecy::ExposeSecret::expose_secret(&identity.to_string()).to_string();
        let recipient = identity.to_public().to_string();
        let written = format!("# created: 2026-11-23\n# public key: {recipient}\n{secret}\n");
        let from_identity = SealKey::load(&key_file(dir.path(), "identity", &written), "k1").unwrap();
        let from_recipient =
            SealKey::load(&key_file(dir.path(), "recipient", &format!("{recipient}\n")), "k1").unwrap();
        assert_eq!((from_identity.recipient(), from_recipient.recipient()), (recipient.clone(), recipient));

        // One character of the checksum changed (to another one: 'X' is a bech32 character too).
        let last = if secret.ends_with('X') { 'Q' } else { 'X' };
        let garbled = format!("{}{last}\n", &secret[..secret.len() - 1]);
        let error = SealKey::load(&key_file(dir.path(), "bad", &garbled), "k1").unwrap_err().to_string();
        assert!(error.contains("line 1") && !error.contains("AGE-SECRET-KEY-1Q"), "{error}");
        assert!(matches!(SealKey::load(&dir.path().join("absent"), "k1"), Err(AgentError::EncryptionKeyFile { .. })));
        assert!(matches!(SealKey::load(&dir.path().join("identity"), "../k"), Err(AgentError::Usage(_))));
    }

    #[test]
    fn keys_are_found_by_id_and_a_wrong_or_absent_one_is_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let (right, wrong) = (age::x25519::Identity::generate(), age::x25519::Identity::generate());
        let secret = |identity: &age::x25519::Identity| {
            age::secrecy::ExposeSecret::expose_secret(&identity.to_string()).to_string()
        };
        key_file(dir.path(), "k1", &secret(&right));
        key_file(dir.path(), "k2", &secret(&wrong));
        key_file(dir.path(), "public", &right.to_public().to_string());
        let sealed = SealKey::new("k1", right.to_public()).seal(b"rows").unwrap();

        let open = OpenKey::find(Some(dir.path()), "k1").unwrap();
        assert_eq!(open.open("f", &sealed).unwrap(), b"rows");
        let wrong = OpenKey::find(Some(dir.path()), "k2").unwrap().open("f", &sealed).unwrap_err();
        assert_eq!(wrong.kind(), "encryptionKeyWrong");
        assert_eq!(wrong.to_string(), "key 'k2' in the keys directory is not the key the backup was encrypted with");
        for (dir, id) in [(None, "k1"), (Some(dir.path()), "k3"), (Some(dir.path()), "..data")] {
            let missing = OpenKey::find(dir, id).unwrap_err();
            assert_eq!(missing.kind(), "encryptionKeyMissing", "{missing}");
            assert!(missing.to_string().contains(&format!("key '{id}'")), "{missing}");
        }
        assert_eq!(OpenKey::find(Some(dir.path()), "public").unwrap_err().kind(), "encryptionKeyWrong");

        let mut tampered = sealed.clone();
        *tampered.last_mut().unwrap() ^= 1;
        assert_eq!(open.open("f", &tampered).unwrap_err().kind(), "checksumMismatch");
    }

    /// The streaming writer makes a plain age file, of any number of STREAM chunks, that the
    /// streaming reader decrypts back.
    #[tokio::test]
    async fn streams_round_trip_through_age() {
        let identity = age::x25519::Identity::generate();
        let key = SealKey::new("k1", identity.to_public());
        let text: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let mut writer = key.writer(Vec::new()).unwrap();
        for piece in text.chunks(100_003) {
            writer.write_all(piece).await.unwrap();
        }
        writer.shutdown().await.unwrap();
        let sealed = writer.into_inner();
        assert_eq!(age::decrypt(&identity, &sealed).unwrap(), text);

        let open = OpenKey::new("k1", identity);
        let mut reader = open.reader("f", BufReader::new(std::io::Cursor::new(sealed.clone()))).await.unwrap();
        let mut plain = Vec::new();
        reader.read_to_end(&mut plain).await.unwrap();
        assert_eq!(plain, text);

        let mut cut = sealed;
        cut.truncate(cut.len() - 100);
        let mut reader = open.reader("f", BufReader::new(std::io::Cursor::new(cut))).await.unwrap();
        assert!(reader.read_to_end(&mut Vec::new()).await.is_err(), "a truncated file fails");
    }
}
