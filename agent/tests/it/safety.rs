//! Data-safety defects found in review, each reproduced against a real MariaDB: values that
//! came back changed, objects silently left out, loads that half-applied, and writes that
//! happened before a check could refuse them.

use visitors_agent::AgentError;
use visitors_agent::backup;
use visitors_agent::format::{LOCK_FILE, MANIFEST_FILE};

use crate::support::MariaDb;
use crate::{back_up, file_location, files_under, restore, restore_options, small_backup};

/// FLOAT is printed with 6 significant digits by the server: 16777216 (what FLOAT keeps of
/// 16777217) came back as 16777200. The backup must read it back bit for bit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn float_columns_keep_their_exact_value() {
    let Some(server) = MariaDb::start() else { return };
    server.sql(
        "CREATE DATABASE fl; CREATE TABLE fl.t (id INT PRIMARY KEY, f FLOAT, fu FLOAT UNSIGNED, f2 FLOAT(7,3));
         INSERT INTO fl.t VALUES (1, 16777217, 16777217, 1234.568), (2, 1234.5678, 1234.5678, -1.5),
           (3, -3.4e38, 3.4e38, 0), (4, 1.17549435e-38, 0.1, NULL), (5, NULL, NULL, 9999.999);",
    );
    let before = server.sql("CHECKSUM TABLE fl.t");
    let exact = server.sql("SELECT id, f + 0e0, fu + 0e0, f2 + 0e0 FROM fl.t ORDER BY id");
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    back_up(&small_backup(&server, &location)).await;
    server.sql("DROP DATABASE fl");
    restore(&restore_options(&server, &location)).await;
    assert_eq!(server.sql("SELECT id, f + 0e0, fu + 0e0, f2 + 0e0 FROM fl.t ORDER BY id"), exact);
    assert_eq!(server.sql("CHECKSUM TABLE fl.t"), before);
}

/// Views, routines and triggers created by a latin1 client with 'café' in their text came
/// back as 'cafÃ©': their utf8mb4 text was replayed as latin1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_ascii_text_of_objects_created_by_a_latin1_client_survives() {
    let Some(server) = MariaDb::start() else { return };
    server.sql("CREATE DATABASE enc CHARACTER SET utf8mb4; CREATE TABLE enc.t (id INT PRIMARY KEY, s VARCHAR(20));");
    // The statements as a latin1 client sends them: 'é' is the single byte E9.
    let mut script: Vec<u8> = b"SET NAMES latin1;\nUSE enc;\nCREATE VIEW v AS SELECT 'caf\xe9' AS s;\n".to_vec();
    script.extend_from_slice(
        b"CREATE FUNCTION f() RETURNS VARCHAR(20) CHARSET utf8mb4 DETERMINISTIC RETURN 'caf\xe9';\n",
    );
    script.extend_from_slice(b"CREATE TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET NEW.s = CONCAT('caf\xe9', '');\n");
    // And ASCII ones, which come back created with the client's character set as they were.
    script.extend_from_slice(b"CREATE VIEW plain AS SELECT 'cafe' AS s;\n");
    script.extend_from_slice(b"CREATE EVENT ev ON SCHEDULE EVERY 1 DAY STARTS '2031-01-01' DO DELETE FROM t;\n");
    let dir = tempfile::tempdir().unwrap();
    let script_path = dir.path().join("latin1.sql");
    std::fs::write(&script_path, &script).unwrap();
    let command =
        format!("{} --default-character-set=latin1 < '{}'", server.client_shell_prefix(), script_path.display());
    let output = std::process::Command::new("bash").arg("-c").arg(&command).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let state = |server: &MariaDb| {
        server.sql("DELETE FROM enc.t; INSERT INTO enc.t (id) VALUES (1)");
        (
            server.sql("SELECT HEX(s) FROM enc.v"),
            server.sql("SELECT HEX(enc.f())"),
            server.sql("SELECT HEX(s) FROM enc.t"),
        )
    };
    let before = state(&server);
    assert_eq!(before.1, "636166C3A9\n", "the function returns utf8mb4 'café'");
    server.sql("DELETE FROM enc.t");
    let location = file_location(&dir.path().join("b"));
    back_up(&small_backup(&server, &location)).await;
    let created_with = "SELECT TABLE_NAME, CHARACTER_SET_CLIENT FROM information_schema.VIEWS WHERE TABLE_SCHEMA = 'enc' \
         UNION ALL SELECT EVENT_NAME, CHARACTER_SET_CLIENT FROM information_schema.EVENTS WHERE EVENT_SCHEMA = 'enc' ORDER BY 1";
    assert_eq!(server.sql(created_with), "ev\tlatin1\nplain\tlatin1\nv\tlatin1\n");
    server.sql("DROP DATABASE enc");
    restore(&restore_options(&server, &location)).await;
    assert_eq!(state(&server), before);
    assert_eq!(
        server.sql(created_with),
        "ev\tlatin1\nplain\tlatin1\nv\tutf8mb4\n",
        "ASCII objects as they were created; 'café' in the character set its text is in"
    );
}

/// A chunk whose rows the server has to adjust is rolled back whole and named. The backup is
/// edited as someone might by hand: the table's schema file narrows a column (VARCHAR(40) to
/// VARCHAR(3)) and the manifest gets the file's new size and SHA-256, so every file matches
/// the manifest, but the rows no longer fit and the server truncates them with warning 1265.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_whose_rows_raise_warnings_is_rolled_back_and_named() {
    let Some(server) = MariaDb::start() else { return };
    server.sql(
        "CREATE DATABASE w; CREATE TABLE w.t (id INT PRIMARY KEY, name VARCHAR(40));
         INSERT INTO w.t SELECT seq, CONCAT('a long name ', seq) FROM seq_1_to_50;",
    );
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    let mut options = small_backup(&server, &location);
    options.parallelism = 1;
    let report = back_up(&options).await;
    let table = &report.manifest.databases[0].tables[0];
    edit_first_schema(dir.path(), &report, "varchar(40)", "varchar(3)");

    let mut restore_opts = restore_options(&server, &location);
    restore_opts.drop_existing = true;
    restore_opts.parallelism = 1;
    match visitors_agent::restore::restore(&restore_opts).await {
        Err(error @ AgentError::BadChunk { .. }) => {
            let text = error.to_string();
            let chunk = &table.chunks[0].file.path;
            assert!(text.contains(chunk.as_str()), "{text}");
            assert!(text.contains(".`t` raised Warning 1265"), "{text}");
            assert!(text.contains("nothing of it was kept"), "{text}");
        }
        other => panic!("expected a refused chunk, got {:?}", other.err()),
    }
    assert_eq!(server.sql("SELECT COUNT(*) FROM w.t"), "50\n", "the target was left as it was");
    assert_eq!(server.sql("SHOW DATABASES LIKE 'visitors\\_%'"), "", "the staging schema was dropped");
}

/// Rewrites the schema file of the backup's first table, `from` replaced by `to`, and gives the
/// manifest the file's new size and SHA-256, as someone editing a backup by hand might: every
/// file then matches the manifest.
pub fn edit_first_schema(dir: &std::path::Path, report: &backup::BackupReport, from: &str, to: &str) {
    let table = &report.manifest.databases[0].tables[0];
    let schema_path = dir.join(&table.schema.path);
    let edited = std::fs::read_to_string(&schema_path).unwrap().replace(from, to);
    assert!(edited.contains(to), "{edited}");
    std::fs::write(&schema_path, &edited).unwrap();
    let manifest_path = dir.join(MANIFEST_FILE);
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    let schema = &mut manifest["databases"][0]["tables"][0]["schema"];
    schema["bytes"] = edited.len().into();
    schema["sha256"] = crate::hex_sha256(edited.as_bytes()).into();
    std::fs::write(&manifest_path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
}

/// `--drop-existing` dropped the database and only then found the server refuses
/// `LOAD DATA LOCAL INFILE`: every check now runs before the first write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_existing_checks_local_infile_before_dropping_anything() {
    let Some(server) = MariaDb::start() else { return };
    server.sql(
        "CREATE DATABASE kept; CREATE TABLE kept.t (id INT PRIMARY KEY); INSERT INTO kept.t SELECT seq FROM seq_1_to_100;",
    );
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    back_up(&small_backup(&server, &location)).await;
    server.sql("INSERT INTO kept.t VALUES (1000); SET GLOBAL local_infile = 0;");
    let mut options = restore_options(&server, &location);
    options.drop_existing = true;
    match visitors_agent::restore::restore(&options).await {
        Err(AgentError::LocalInfileDisabled) => {}
        other => panic!("expected local_infile to be refused, got {:?}", other.err()),
    }
    assert_eq!(server.sql("SELECT COUNT(*) FROM kept.t"), "101\n", "the database was not touched");
    server.sql("SET GLOBAL local_infile = 1");
    restore(&options).await;
    assert_eq!(server.sql("SELECT COUNT(*) FROM kept.t"), "100\n");
}

/// Two runs to one location removed each other's files: a lock object now refuses the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_refuses_a_second_backup_to_the_same_location() {
    let Some(server) = MariaDb::start() else { return };
    server.sql("CREATE DATABASE l; CREATE TABLE l.t (id INT PRIMARY KEY); INSERT INTO l.t VALUES (1);");
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    std::fs::write(dir.path().join(LOCK_FILE), "host=other-host pid=4242 started=2026-11-23T10:00:00Z\n").unwrap();
    match backup::back_up(&small_backup(&server, &location)).await {
        Err(error @ AgentError::BackupLocked { .. }) => {
            let text = error.to_string();
            assert!(text.contains("another backup is writing to this location"), "{text}");
            assert!(
                text.contains("held by host other-host process 4242 started 2026-11-23T10:00:00Z"),
                "the holder is named: {text}"
            );
            assert!(text.contains(&format!("{location}/.backup.lock")), "{text}");
        }
        other => panic!("expected the lock to refuse the backup, got {:?}", other.err()),
    }
    assert_eq!(files_under(dir.path()), [LOCK_FILE], "the other run's lock is kept, nothing else written");
    std::fs::remove_file(dir.path().join(LOCK_FILE)).unwrap();
    back_up(&small_backup(&server, &location)).await;
    let files = files_under(dir.path());
    assert!(files.contains(&MANIFEST_FILE.to_string()), "{files:?}");
    assert!(!files.contains(&LOCK_FILE.to_string()), "the lock is removed after success: {files:?}");
}

/// A chunk that changes between restore's check of every file and its load must not load
/// silently: the bytes are counted and hashed while they stream into `LOAD DATA`, and the
/// stream fails at its end when they differ from the manifest. The race itself cannot be
/// timed deterministically, so this test gives the stream an entry whose size and SHA-256 no
/// longer match the stored file, as they would after a change; the restore-level effect (the
/// failed load's transaction is rolled back) is covered by the warning test above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_changed_after_the_check_fails_its_stream() {
    use futures::TryStreamExt;
    use visitors_agent::format::Compression;
    use visitors_agent::storage::{S3Settings, Storage};

    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::open(&file_location(dir.path()), &S3Settings::default(), true).unwrap();
    for compression in [Compression::Zstd, Compression::Gzip, Compression::None] {
        let mut writer = storage.writer("chunk", compression, 1);
        writer.write(b"1\tone\n2\ttwo\n").await.unwrap();
        let entry = writer.finish().await.unwrap();
        let read = |entry| {
            let storage = storage.clone();
            async move {
                let stream = storage.decompressed(&entry, compression).await.unwrap();
                stream
                    .try_fold(Vec::new(), |mut all, piece| async move {
                        all.extend_from_slice(&piece);
                        Ok(all)
                    })
                    .await
            }
        };
        assert_eq!(read(entry.clone()).await.unwrap(), b"1\tone\n2\ttwo\n", "{compression:?}");
        let mut changed = entry.clone();
        changed.sha256 = "0".repeat(64);
        let error = read(changed).await.expect_err("a changed file fails the stream");
        assert!(error.to_string().contains("changed while it was loaded"), "{error}");
        let mut longer = entry.clone();
        longer.bytes += 1;
        assert!(read(longer).await.is_err(), "{compression:?}: a size mismatch fails the stream");
    }
}
