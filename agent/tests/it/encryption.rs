//! Encrypted backups against a real server: no stored file holds a row or a name in the
//! clear; a restore needs the key its manifest names, refusing a missing or wrong key and a
//! tampered ciphertext before it touches the server; keys rotate (a keys directory holds the
//! old and the new); `verify --deep` and `inspect` read encrypted backups too.

use std::path::{Path, PathBuf};
use std::time::Duration;

use age::secrecy::ExposeSecret;
use visitors_agent::AgentError;
use visitors_agent::drill::{self, DrillOptions};
use visitors_agent::encryption::SealKey;
use visitors_agent::format::MANIFEST_FILE;
use visitors_agent::restore;
use visitors_agent::storage::{S3Settings, Storage};
use visitors_agent::verify;

use crate::support::MariaDb;
use crate::{back_up, file_location, files_under, restore_options, small_backup};

/// A row value and a table name that must not appear in any stored file.
const SECRET_ROW: &str = "zebra-passphrase";
const TABLE: &str = "customer_ledger";

const DATA: &str = "CREATE DATABASE vault;
    CREATE TABLE vault.customer_ledger (id INT PRIMARY KEY, note VARCHAR(100));
    INSERT INTO vault.customer_ledger SELECT seq, CONCAT('zebra-passphrase-', seq) FROM seq_1_to_6000;
    CREATE VIEW vault.ledger_view AS SELECT id FROM vault.customer_ledger;";

/// An identity as `age-keygen` writes it.
pub(crate) fn key_text(identity: &age::x25519::Identity) -> String {
    format!(
        "# created: 2026-11-23T00:00:00Z\n# public key: {}\n{}\n",
        identity.to_public(),
        identity.to_string().expose_secret()
    )
}

/// A keys directory laid out as Kubernetes mounts a Secret: the files in `..data/`, each key id
/// a link to its file, and a dotfile beside them.
pub(crate) fn keys_dir(keys: &[(&str, &age::x25519::Identity)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("..2026_11_23")).unwrap();
    std::os::unix::fs::symlink("..2026_11_23", dir.path().join("..data")).unwrap();
    std::fs::write(dir.path().join(".hidden"), "not a key").unwrap();
    for (id, identity) in keys {
        std::fs::write(dir.path().join("..2026_11_23").join(id), key_text(identity)).unwrap();
        std::os::unix::fs::symlink(format!("..data/{id}"), dir.path().join(id)).unwrap();
    }
    dir
}

pub(crate) fn seal_key(dir: &Path, id: &str, identity: &age::x25519::Identity) -> SealKey {
    let path = dir.join(format!("{id}.txt"));
    std::fs::write(&path, key_text(identity)).unwrap();
    SealKey::load(&path, id).unwrap()
}

fn with_keys(mut options: restore::RestoreOptions, dir: Option<&Path>) -> restore::RestoreOptions {
    options.decrypt_keys_dir = dir.map(Path::to_path_buf);
    options
}

fn vault_exists(server: &MariaDb) -> bool {
    server.sql("SHOW DATABASES LIKE 'vault'").contains("vault")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_backup_hides_its_rows_and_restores_only_with_its_key() {
    let Some(server) = MariaDb::start() else { return };
    server.sql(DATA);
    server.sql(
        "CREATE USER 'vault_reader'@'%' IDENTIFIED BY 'not-shown'; GRANT SELECT ON vault.* TO 'vault_reader'@'%';",
    );
    let (k1, k2, stranger) =
        (age::x25519::Identity::generate(), age::x25519::Identity::generate(), age::x25519::Identity::generate());
    let key_files = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    let mut options = small_backup(&server, &location);
    options.users = true;
    // Only the recipient: a backup needs no secret.
    let recipient_file = key_files.path().join("k1.pub");
    std::fs::write(&recipient_file, format!("{}\n", k1.to_public())).unwrap();
    options.encrypt = Some(SealKey::load(&recipient_file, "k1").unwrap());
    let report = back_up(&options).await;
    let table = &report.manifest.databases[0].tables[0];
    assert!(table.chunks.len() > 1, "several chunks");
    assert_eq!(report.manifest.encryption.as_ref().map(|e| e.key_id.as_str()), Some("k1"));

    // No stored file holds a row, the table's name or the account's in the clear, nor is
    // named after the database or a table.
    for file in files_under(dir.path()) {
        assert!(!file.contains("vault") && !file.contains(TABLE), "{file} is named after what it holds");
        let content = std::fs::read(dir.path().join(&file)).unwrap();
        for secret in [SECRET_ROW, TABLE, "vault_reader", "ledger_view"] {
            assert!(!content.windows(secret.len()).any(|w| w == secret.as_bytes()), "{file} holds {secret}");
        }
        assert!(file == MANIFEST_FILE || file.ends_with(".age"), "{file} is not an age file");
    }
    let envelope: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join(MANIFEST_FILE)).unwrap()).unwrap();
    assert_eq!(envelope["encryption"]["keyId"], "k1");
    assert_eq!(envelope["encryption"]["recipient"], k1.to_public().to_string());
    assert!(envelope.get("databases").is_none());

    server.sql("DROP DATABASE vault; DROP USER 'vault_reader'@'%'");
    let restore_from = |keys: Option<&Path>| with_keys(restore_options(&server, &location), keys);

    // No keys directory, or none holding k1 (k2 is there, k1's identity under another id).
    let others = keys_dir(&[("k2", &k2), ("k1-old", &k1)]);
    for keys in [None, Some(others.path())] {
        match restore::restore(&restore_from(keys)).await {
            Err(error @ AgentError::EncryptionKeyMissing { .. }) => {
                assert_eq!(error.kind(), "encryptionKeyMissing");
                assert!(error.to_string().contains("key 'k1'"), "{error}");
            }
            other => panic!("expected a missing key, got {:?}", other.err()),
        }
    }
    // A file named k1 that is another key.
    let wrong = keys_dir(&[("k1", &stranger)]);
    match restore::restore(&restore_from(Some(wrong.path()))).await {
        Err(error @ AgentError::EncryptionKeyWrong { .. }) => {
            assert_eq!(
                error.to_string(),
                "key 'k1' in the keys directory is not the key the backup was encrypted with"
            );
            assert!(!error.to_string().contains("AGE-SECRET-KEY"));
        }
        other => panic!("expected a wrong key, got {:?}", other.err()),
    }
    assert!(!vault_exists(&server), "a refused restore touched the server");

    // A flipped byte in an encrypted chunk is a corrupt chunk.
    let right = keys_dir(&[("k1", &k1), ("k2", &k2)]);
    let chunk_path = dir.path().join(&table.chunks[0].file.path);
    let original = std::fs::read(&chunk_path).unwrap();
    let mut flipped = original.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x20;
    std::fs::write(&chunk_path, &flipped).unwrap();
    match restore::restore(&restore_from(Some(right.path()))).await {
        Err(error @ AgentError::ChecksumMismatch { .. }) => {
            assert!(error.to_string().contains(&table.chunks[0].file.path), "{error}")
        }
        other => panic!("expected a checksum mismatch, got {:?}", other.err()),
    }
    assert!(!vault_exists(&server), "a refused restore touched the server");
    std::fs::write(&chunk_path, &original).unwrap();

    // Inspect and verify read it with the key, and refuse it without.
    let storage = Storage::open(&location, &S3Settings::default(), false).unwrap();
    let missing = verify::load_manifest(&storage, None, None).await.unwrap_err();
    assert_eq!(missing.kind(), "encryptionKeyMissing");
    let manifest = verify::load_manifest(&storage, Some(&report.manifest_sha256), Some(right.path())).await.unwrap();
    assert_eq!(manifest, report.manifest);
    assert!(visitors_agent::cli::describe(&manifest).contains("key id k1"));

    // Restored with the key: rows, view and account.
    let mut restore = restore_from(Some(right.path()));
    restore.users = true;
    restore.expect_manifest_sha256 = Some(report.manifest_sha256.clone());
    crate::restore(&restore).await;
    assert_eq!(server.sql("SELECT COUNT(*), MAX(note) FROM vault.customer_ledger"), "6000\tzebra-passphrase-999\n");
    assert_eq!(server.sql("SELECT COUNT(*) FROM vault.ledger_view"), "6000\n");
    assert_eq!(server.sql("SELECT COUNT(*) FROM mysql.user WHERE User = 'vault_reader'"), "1\n");

    // Rotation: the next backup is encrypted with k2, and a plain one is taken too; one keys
    // directory restores both encrypted ones, and the plain one with a keys directory given.
    server.sql("DELETE FROM vault.customer_ledger WHERE id > 100");
    let rotated = tempfile::tempdir().unwrap();
    let mut options = small_backup(&server, &file_location(rotated.path()));
    options.encrypt = Some(seal_key(key_files.path(), "k2", &k2));
    back_up(&options).await;
    let plain = tempfile::tempdir().unwrap();
    back_up(&small_backup(&server, &file_location(plain.path()))).await;

    for (from, rows) in
        [(&location, "6000"), (&file_location(rotated.path()), "100"), (&file_location(plain.path()), "100")]
    {
        server.sql("DROP DATABASE vault");
        crate::restore(&with_keys(restore_options(&server, from), Some(right.path()))).await;
        assert_eq!(server.sql("SELECT COUNT(*) FROM vault.customer_ledger"), format!("{rows}\n"), "{from}");
    }

    // `delete` needs no key and knows the opaque folders as the backup's own.
    let deleted = visitors_agent::delete::delete(&visitors_agent::delete::DeleteOptions {
        location: file_location(rotated.path()),
        s3: S3Settings::default(),
        break_lock: false,
    })
    .await
    .unwrap();
    assert!(deleted.deleted_files > 2, "{deleted:?}");
    assert!(!rotated.path().exists() || files_under(rotated.path()).is_empty(), "files were left");
}

/// `verify --deep` of an encrypted backup: refused without the key before the scratch server
/// is touched, and passes with it, every content digest recomputed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drill_of_an_encrypted_backup_needs_its_key() {
    let Some(source) = MariaDb::start() else { return };
    let Some(scratch) = MariaDb::start() else { return };
    source.sql(DATA);
    let identity = age::x25519::Identity::generate();
    let key_files = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    let mut options = small_backup(&source, &location);
    options.encrypt = Some(seal_key(key_files.path(), "nightly.k1", &identity));
    let backup = back_up(&options).await;

    let drill_options = |keys: Option<PathBuf>| DrillOptions {
        from: location.clone(),
        s3: Default::default(),
        expect_manifest_sha256: Some(backup.manifest_sha256.clone()),
        connection: scratch.settings(),
        parallelism: 2,
        progress_interval: Duration::ZERO,
        decrypt_keys_dir: keys,
    };
    let error = drill::drill(&drill_options(None)).await.unwrap_err();
    assert_eq!(error.kind(), "encryptionKeyMissing", "{error}");
    assert!(error.to_string().contains("key 'nightly.k1'"), "{error}");
    assert!(!vault_exists(&scratch), "a refused drill touched the scratch server");

    let keys = keys_dir(&[("nightly.k1", &identity)]);
    let report = drill::drill(&drill_options(Some(keys.path().to_path_buf()))).await.expect("the drill passes");
    assert_eq!((report.tables, report.rows), (1, 6000));
    assert_eq!(report.manifest.encryption.as_ref().map(|e| e.key_id.as_str()), Some("nightly.k1"));
}
