//! Point-in-time recovery against a real MariaDB: the archiver streams its binary log into an
//! archive on a volume, and restores replay it after a base backup up to a time or a GTID set,
//! all or nothing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use visitors_agent::AgentError;
use visitors_agent::binlog::archive::{self, ArchiveOptions, Observer};
use visitors_agent::binlog::layout::{all_entries, read_epochs};
use visitors_agent::binlog::prune::{self, PruneTarget};
use visitors_agent::binlog::replay::Target;
use visitors_agent::restore::{self, PointInTimeOptions};
use visitors_agent::storage::Storage;
use visitors_agent_contract::archive::{ArchiveStatus, PruneBefore};

use crate::support::{MariaDb, ServerTls};
use crate::{back_up, file_location, restore_options, small_backup};

/// The statuses an archiver reported, newest last.
#[derive(Clone, Default)]
pub(crate) struct Reports(Arc<Mutex<Vec<ArchiveStatus>>>);

impl Reports {
    pub(crate) fn last(&self) -> Option<ArchiveStatus> {
        self.0.lock().unwrap().last().cloned()
    }
}

impl Observer for Reports {
    async fn report(&mut self, status: &ArchiveStatus) -> visitors_agent::Result<()> {
        self.0.lock().unwrap().push(status.clone());
        Ok(())
    }

    fn prune_before(&self) -> Option<PruneBefore> {
        None
    }
}

/// An archiver running in the test's runtime.
pub(crate) struct Archiver {
    stop: CancellationToken,
    task: JoinHandle<visitors_agent::Result<()>>,
    pub(crate) reports: Reports,
}

pub(crate) fn archive_options(server: &MariaDb, to: &str) -> ArchiveOptions {
    ArchiveOptions {
        connection: server.settings(),
        to: to.to_string(),
        s3: Default::default(),
        flush: Duration::from_secs(1),
        segment_bytes: 64 << 20,
        replica_server_id: 77,
        seal: None,
    }
}

impl Archiver {
    pub(crate) fn start(server: &MariaDb, to: &str) -> Self {
        Self::start_with(archive_options(server, to))
    }

    pub(crate) fn start_with(options: ArchiveOptions) -> Self {
        let stop = CancellationToken::new();
        let reports = Reports::default();
        let (token, mut observer) = (stop.clone(), reports.clone());
        let task = tokio::spawn(async move { archive::archive(&options, &mut observer, token).await });
        Archiver { stop, task, reports }
    }

    /// Waits until everything committed up to `unix_seconds` is archived.
    pub(crate) async fn wait_until_archived(&self, unix_seconds: i64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let last = self.reports.last();
            let archived = last
                .as_ref()
                .and_then(|s| s.last_recoverable_time.as_deref())
                .and_then(|t| t.parse::<jiff::Timestamp>().ok());
            if archived.is_some_and(|t| t.as_second() >= unix_seconds) {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "not archived up to {unix_seconds}: {last:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub(crate) async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap().expect("the archiver stops cleanly");
    }

    /// Stops it as a SIGKILL would: wherever it is, nothing more happens.
    async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

pub(crate) fn unix_now(server: &MariaDb) -> i64 {
    server.sql("SELECT UNIX_TIMESTAMP()").trim().parse().unwrap()
}

pub(crate) fn rows(server: &MariaDb) -> String {
    server.sql("SELECT id, UNIX_TIMESTAMP(written_at) FROM app.t ORDER BY id")
}

pub(crate) fn checksum(server: &MariaDb) -> String {
    server.sql("CHECKSUM TABLE app.t")
}

pub(crate) async fn restore_to(
    server: &MariaDb,
    base: &str,
    archive: &str,
    target: Target,
) -> visitors_agent::Result<restore::RestoreReport> {
    let mut options = restore_options(server, base);
    options.drop_existing = true;
    options.point_in_time = Some(PointInTimeOptions { archive: archive.to_string(), s3: Default::default(), target });
    restore::restore(&options).await
}

pub(crate) const APP: &str =
    "CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY, written_at DATETIME NOT NULL, note VARCHAR(20))";

#[tokio::test(flavor = "multi_thread")]
async fn a_restore_to_a_time_between_two_writes_holds_exactly_the_rows_committed_up_to_it() {
    let Some(server) = MariaDb::start_row_logging() else { return };
    server.sql(APP);
    let dir = tempfile::tempdir().unwrap();
    let archive = file_location(&dir.path().join("archive"));
    let base = file_location(&dir.path().join("base"));
    let archiver = Archiver::start(&server, &archive);
    for id in 1..=6 {
        server.sql(&format!("INSERT INTO app.t VALUES ({id}, NOW(), NULL)"));
        if id == 2 {
            back_up(&small_backup(&server, &base)).await;
        }
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let written: Vec<(i64, i64)> = rows(&server)
        .lines()
        .map(|line| {
            let (id, at) = line.split_once('\t').unwrap();
            (id.parse().unwrap(), at.parse().unwrap())
        })
        .collect();
    archiver.wait_until_archived(written[5].1).await;
    archiver.stop().await;
    server.sql("DELETE FROM app.t WHERE id < 3; UPDATE app.t SET note = 'diverged'");

    let target = written[3].1;
    let report = restore_to(&server, &base, &archive, Target::Time(target)).await.unwrap();
    let expected: String = written.iter().take(4).map(|(id, at)| format!("{id}\t{at}\n")).collect();
    assert_eq!(rows(&server), expected, "rows 1-4: the base's two and the two replayed");
    assert_eq!(server.sql("SELECT COUNT(*) FROM app.t WHERE note IS NOT NULL").trim(), "0");
    let replay = report.replay.unwrap();
    assert_eq!(replay.transactions, 2, "{replay:?}");
    let applied: jiff::Timestamp = replay.last_applied_time.unwrap().parse().unwrap();
    assert_eq!(applied.as_second(), target);

    let everything = restore_to(&server, &base, &archive, Target::Time(written[5].1)).await.unwrap();
    assert_eq!(everything.rows, 6);
    let future = restore_to(&server, &base, &archive, Target::Time(written[5].1 + 3600)).await;
    assert!(matches!(future, Err(AgentError::TargetNotArchived { .. })), "{future:?}");
    let before_base = restore_to(&server, &base, &archive, Target::Time(written[0].1 - 60)).await;
    assert!(matches!(before_base, Err(AgentError::Usage(_))), "{before_base:?}");
    assert_eq!(server.sql("SELECT COUNT(*) FROM app.t").trim(), "6", "refused restores touched nothing");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_committed_after_a_rotation_is_restored_whole_or_not_at_all_by_gtid() {
    let Some(server) = MariaDb::start_row_logging() else { return };
    server.sql(APP);
    let dir = tempfile::tempdir().unwrap();
    let archive = file_location(&dir.path().join("archive"));
    let base = file_location(&dir.path().join("base"));
    back_up(&small_backup(&server, &base)).await;
    let archiver = Archiver::start(&server, &archive);
    server.sql("INSERT INTO app.t VALUES (1, NOW(), 'before')");
    let before: String = server.sql("SELECT @@gtid_binlog_pos").trim().to_string();
    let mut session = mysql_async::Conn::new(
        mysql_async::OptsBuilder::default()
            .ip_or_hostname("127.0.0.1")
            .tcp_port(server.port)
            .user(Some(crate::support::USER))
            .pass(Some(crate::support::PASSWORD)),
    )
    .await
    .unwrap();
    session.query_drop("BEGIN").await.unwrap();
    session.query_drop("INSERT INTO app.t VALUES (10, NOW(), 'spanning')").await.unwrap();
    // Another session rotates the binary log while the transaction is open.
    server.sql("FLUSH BINARY LOGS");
    session.query_drop("INSERT INTO app.t VALUES (11, NOW(), 'spanning')").await.unwrap();
    session.query_drop("COMMIT").await.unwrap();
    let spanning: String = session.query_first("SELECT @@last_gtid").await.unwrap().unwrap();
    server.sql("INSERT INTO app.t VALUES (12, NOW(), 'after')");
    archiver.wait_until_archived(unix_now(&server)).await;
    archiver.stop().await;

    let storage = Storage::open(&archive, &Default::default(), false).unwrap();
    let entries = all_entries(&storage).await.unwrap();
    assert!(entries.iter().any(|e| e.ends_file), "the rotation ended a file in the archive: {entries:?}");
    assert!(entries.windows(2).all(|pair| pair[0].is_followed_by(&pair[1])), "{entries:?}");

    restore_to(&server, &base, &archive, Target::Gtids(before.parse_gtids())).await.unwrap();
    assert_eq!(server.sql("SELECT id FROM app.t ORDER BY id"), "1\n", "before the transaction: none of it");
    restore_to(&server, &base, &archive, Target::Gtids(spanning.parse_gtids())).await.unwrap();
    assert_eq!(server.sql("SELECT id FROM app.t ORDER BY id"), "1\n10\n11\n", "up to it: all of it");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gtid_target_not_reached_before_a_transaction_it_excludes_is_refused() {
    let Some(server) = MariaDb::start_row_logging() else { return };
    server.sql(APP);
    let dir = tempfile::tempdir().unwrap();
    let archive = file_location(&dir.path().join("archive"));
    let base = file_location(&dir.path().join("base"));
    back_up(&small_backup(&server, &base)).await;
    let archiver = Archiver::start(&server, &archive);
    server.sql("INSERT INTO app.t VALUES (1, NOW(), 'domain 0')");
    server.sql("SET SESSION gtid_domain_id = 1; INSERT INTO app.t VALUES (2, NOW(), 'domain 1')");
    server.sql("INSERT INTO app.t VALUES (3, NOW(), 'domain 0')");
    let everything: String = server.sql("SELECT @@gtid_binlog_pos").trim().to_string();
    let domain_0: String = everything.split(',').find(|g| g.starts_with("0-")).unwrap().to_string();
    archiver.wait_until_archived(unix_now(&server)).await;
    archiver.stop().await;
    server.sql("DELETE FROM app.t");

    // Domain 0 up to row 3: the log has domain 1's transaction before it, which the target excludes.
    let refused = restore_to(&server, &base, &archive, Target::Gtids(domain_0.parse_gtids())).await;
    let Err(AgentError::ReplayUnsupported(why)) = refused else { panic!("{refused:?}") };
    assert!(why.contains("stops at the first transaction outside the target"), "{why}");
    assert_eq!(server.sql("SELECT COUNT(*) FROM app.t").trim(), "0", "the refused restore touched nothing");
    restore_to(&server, &base, &archive, Target::Gtids(everything.parse_gtids())).await.unwrap();
    assert_eq!(server.sql("SELECT id FROM app.t ORDER BY id"), "1\n2\n3\n");
}

pub(crate) trait ParseGtids {
    fn parse_gtids(&self) -> visitors_agent_contract::gtid::GtidSet;
}

impl ParseGtids for String {
    fn parse_gtids(&self) -> visitors_agent_contract::gtid::GtidSet {
        visitors_agent_contract::gtid::GtidSet::parse(self).unwrap()
    }
}

/// Inserts a row every 50 ms until stopped, through whatever restarts; returns how many it
/// tried.
pub(crate) fn writer(server: &MariaDb, stop: CancellationToken) -> JoinHandle<u64> {
    let settings = server.settings();
    tokio::spawn(async move {
        let mut id = 1000;
        while !stop.is_cancelled() {
            id += 1;
            let opts = mysql_async::OptsBuilder::default()
                .ip_or_hostname(settings.host.clone())
                .tcp_port(settings.port)
                .user(Some(settings.user.clone()))
                .pass(settings.password.clone());
            if let Ok(mut conn) = mysql_async::Conn::new(opts).await {
                let _ = conn.query_drop(format!("INSERT INTO app.t VALUES ({id}, NOW(), 'w')")).await;
                let _ = conn.disconnect().await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        id - 1000
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn archiving_survives_server_and_archiver_restarts_without_losing_or_repeating_an_event() {
    let Some(mut server) = MariaDb::start_row_logging() else { return };
    server.sql(APP);
    let dir = tempfile::tempdir().unwrap();
    let archive = file_location(&dir.path().join("archive"));
    let base = file_location(&dir.path().join("base"));
    back_up(&small_backup(&server, &base)).await;
    let archiver = Archiver::start(&server, &archive);
    let stop_writes = CancellationToken::new();
    let writes = writer(&server, stop_writes.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.restart();
    tokio::time::sleep(Duration::from_secs(2)).await;
    archiver.stop().await;
    let archiver = Archiver::start(&server, &archive);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    archiver.kill().await;
    let archiver = Archiver::start(&server, &archive);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop_writes.cancel();
    assert!(writes.await.unwrap() > 20);
    let live = checksum(&server);
    let written = server.sql("SELECT COUNT(*) FROM app.t").trim().to_string();
    let now = unix_now(&server);
    archiver.wait_until_archived(now).await;
    archiver.stop().await;

    let storage = Storage::open(&archive, &Default::default(), false).unwrap();
    let entries = all_entries(&storage).await.unwrap();
    assert!(entries.windows(2).all(|pair| pair[0].is_followed_by(&pair[1])), "no hole, no overlap: {entries:#?}");
    assert_eq!(read_epochs(&storage).await.unwrap().len(), 1, "no gap");
    server.sql("DELETE FROM app.t");
    let report = restore_to(&server, &base, &archive, Target::Time(now)).await.unwrap();
    assert_eq!(checksum(&server), live, "the newest point equals the live data");
    assert_eq!(server.sql("SELECT COUNT(*) FROM app.t").trim(), written);
    assert!(report.replay.unwrap().transactions >= written.parse::<u64>().unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn binary_logs_purged_while_the_archiver_is_stopped_make_a_gap_no_restore_crosses() {
    let Some(server) = MariaDb::start_row_logging() else { return };
    server.sql(APP);
    let dir = tempfile::tempdir().unwrap();
    let archive = file_location(&dir.path().join("archive"));
    let base = file_location(&dir.path().join("base"));
    let archiver = Archiver::start(&server, &archive);
    server.sql("INSERT INTO app.t VALUES (1, NOW(), NULL)");
    back_up(&small_backup(&server, &base)).await;
    server.sql("INSERT INTO app.t VALUES (2, NOW(), NULL)");
    archiver.wait_until_archived(unix_now(&server)).await;
    archiver.stop().await;
    server
        .sql("INSERT INTO app.t VALUES (3, NOW(), NULL); FLUSH BINARY LOGS; INSERT INTO app.t VALUES (4, NOW(), NULL)");
    let newest = server.sql("SHOW BINARY LOGS").lines().last().unwrap().split('\t').next().unwrap().to_string();
    // The server keeps a file a replica's dump still reads: the stopped archiver's dump ends at
    // its next heartbeat.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while server.sql("SHOW BINARY LOGS").lines().count() > 1 {
        assert!(std::time::Instant::now() < deadline, "the old binary logs are never purged");
        server.sql(&format!("PURGE BINARY LOGS TO '{newest}'"));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let archiver = Archiver::start(&server, &archive);
    let now = unix_now(&server);
    archiver.wait_until_archived(now).await;
    let status = archiver.reports.last().unwrap();
    archiver.stop().await;
    let gap = status.epochs.last().and_then(|e| e.gap_before.clone());
    assert_eq!(gap.map(|g| g.reason).as_deref(), Some("binlogPurged"), "{status:#?}");

    let before = checksum(&server);
    let across = restore_to(&server, &base, &archive, Target::Time(now)).await;
    assert!(matches!(across, Err(AgentError::ArchiveGap { .. })), "{across:?}");
    assert_eq!(checksum(&server), before, "the database is untouched");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_segment_that_fails_its_checksum_is_refused_before_anything_is_touched() {
    let Some(server) = MariaDb::start_row_logging() else { return };
    server.sql(APP);
    let dir = tempfile::tempdir().unwrap();
    let archive_dir = dir.path().join("archive");
    let archive = file_location(&archive_dir);
    let base = file_location(&dir.path().join("base"));
    back_up(&small_backup(&server, &base)).await;
    let archiver = Archiver::start(&server, &archive);
    server.sql("INSERT INTO app.t VALUES (1, NOW(), NULL)");
    let now = unix_now(&server);
    archiver.wait_until_archived(now).await;
    archiver.stop().await;
    let storage = Storage::open(&archive, &Default::default(), false).unwrap();
    let entries = all_entries(&storage).await.unwrap();
    let object = entries.iter().rev().find_map(|e| e.object.clone()).unwrap();
    let path = archive_dir.join(&object);
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&path, bytes).unwrap();

    let before = checksum(&server);
    let refused = restore_to(&server, &base, &archive, Target::Time(now)).await;
    let Err(AgentError::SegmentChecksumMismatch { file, .. }) = refused else { panic!("{refused:?}") };
    assert_eq!(file, object);
    assert_eq!(checksum(&server), before);
    assert_eq!(server.sql("SHOW DATABASES LIKE 'visitors\\_%'"), "", "no staging left");
}

#[tokio::test(flavor = "multi_thread")]
async fn table_changes_are_replayed_and_a_statement_reading_another_database_is_refused() {
    let Some(server) = MariaDb::start_row_logging() else { return };
    server.sql(APP);
    server.sql("CREATE DATABASE other; CREATE TABLE other.src (id INT); INSERT INTO other.src VALUES (40)");
    let dir = tempfile::tempdir().unwrap();
    let archive = file_location(&dir.path().join("archive"));
    let base = file_location(&dir.path().join("base"));
    let mut options = small_backup(&server, &base);
    options.databases = vec!["app".into()];
    back_up(&options).await;
    let archiver = Archiver::start(&server, &archive);
    server.sql(
        "ALTER TABLE app.t ADD COLUMN size INT NOT NULL DEFAULT 0;
         INSERT INTO app.t VALUES (1, NOW(), 'altered', 7);
         CREATE TABLE app.added (k INT PRIMARY KEY); INSERT INTO app.added VALUES (5);
         CREATE VIEW app.sizes AS SELECT size FROM app.t;",
    );
    let after_tables = unix_now(&server);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // Logged as a statement, it reads a database the restore does not restore.
    server.sql(
        "SET SESSION binlog_format = 'STATEMENT';
         INSERT INTO app.t SELECT id, NOW(), 'copied', 0 FROM other.src",
    );
    let now = unix_now(&server);
    archiver.wait_until_archived(now).await;
    archiver.stop().await;
    server.sql("DROP VIEW app.sizes; DROP TABLE app.added; ALTER TABLE app.t DROP COLUMN size; DELETE FROM app.t");

    let mut to_tables = restore_options(&server, &base);
    to_tables.drop_existing = true;
    to_tables.point_in_time = Some(PointInTimeOptions {
        archive: archive.clone(),
        s3: Default::default(),
        target: Target::Time(after_tables),
    });
    restore::restore(&to_tables).await.unwrap();
    assert_eq!(server.sql("SELECT id, note, size FROM app.t"), "1\taltered\t7\n");
    assert_eq!(server.sql("SELECT k FROM app.added"), "5\n");
    assert_eq!(server.sql("SELECT * FROM app.sizes"), "7\n", "the view created in the window");

    let before = checksum(&server);
    let mut to_now = to_tables.clone();
    to_now.point_in_time = Some(PointInTimeOptions { archive, s3: Default::default(), target: Target::Time(now) });
    let refused = restore::restore(&to_now).await;
    let Err(AgentError::ReplayUnsupported(why)) = refused else { panic!("{refused:?}") };
    assert!(why.contains("INSERT") && why.contains("other"), "{why}");
    assert_eq!(checksum(&server), before, "refused before anything was touched");
}

#[tokio::test(flavor = "multi_thread")]
async fn retention_prunes_what_the_oldest_kept_backup_does_not_need() {
    let Some(server) = MariaDb::start_row_logging() else { return };
    server.sql(APP);
    let dir = tempfile::tempdir().unwrap();
    let archive = file_location(&dir.path().join("archive"));
    let (old, kept) = (file_location(&dir.path().join("old")), file_location(&dir.path().join("kept")));
    let archiver = Archiver::start(&server, &archive);
    server.sql("INSERT INTO app.t VALUES (1, NOW(), NULL)");
    back_up(&small_backup(&server, &old)).await;
    server
        .sql("INSERT INTO app.t VALUES (2, NOW(), NULL); FLUSH BINARY LOGS; INSERT INTO app.t VALUES (3, NOW(), NULL)");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let kept_report = back_up(&small_backup(&server, &kept)).await;
    server.sql("INSERT INTO app.t VALUES (4, NOW(), NULL)");
    let now = unix_now(&server);
    archiver.wait_until_archived(now).await;
    archiver.stop().await;

    let storage = Storage::open(&archive, &Default::default(), false).unwrap();
    let before = all_entries(&storage).await.unwrap();
    let target = PruneTarget::from_manifest(kept_report.manifest.position.as_ref(), &kept).unwrap();
    let report = prune::prune(&storage, &target).await.unwrap();
    let after = all_entries(&storage).await.unwrap();
    assert!(report.segments > 0 && after.len() < before.len(), "{report}");
    let position = target.position.clone().unwrap();
    assert!(after.first().unwrap().start_pos().is_before(&position) || after.first().unwrap().start_pos() == position);
    let live = checksum(&server);
    server.sql("DELETE FROM app.t");
    restore_to(&server, &kept, &archive, Target::Time(now)).await.unwrap();
    assert_eq!(checksum(&server), live, "the kept backup still reaches the newest point");
    let pruned = restore_to(&server, &old, &archive, Target::Time(now)).await;
    assert!(matches!(pruned, Err(AgentError::BaseNotInArchive { .. })), "{pruned:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn statements_larger_than_one_binlog_statement_are_replayed_whole() {
    let Some(server) = MariaDb::start_row_logging() else { return };
    server.sql("CREATE DATABASE app; CREATE TABLE app.bulk (id INT PRIMARY KEY, v VARCHAR(100))");
    let dir = tempfile::tempdir().unwrap();
    let archive = file_location(&dir.path().join("archive"));
    let base = file_location(&dir.path().join("base"));
    let archiver = Archiver::start(&server, &archive);
    server.sql("INSERT INTO app.bulk SELECT seq, REPEAT('b', 100) FROM seq_1_to_150000");
    back_up(&small_backup(&server, &base)).await;
    // Each about 17 MB of row events: more than one BINLOG statement of the replay carries, and
    // more than the archiver holds in memory for a transaction.
    for n in 1..=3 {
        let (first, last) = (n * 150_000 + 1, (n + 1) * 150_000);
        server.sql(&format!("INSERT INTO app.bulk SELECT seq, REPEAT('b', 100) FROM seq_{first}_to_{last}"));
    }
    let live = server.sql("CHECKSUM TABLE app.bulk");
    let end = unix_now(&server) + 1;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    archiver.wait_until_archived(end).await;
    archiver.stop().await;
    server.sql("TRUNCATE app.bulk");

    let report = restore_to(&server, &base, &archive, Target::Time(end)).await.unwrap();
    assert_eq!(report.replay.unwrap().transactions, 3);
    assert_eq!(server.sql("SELECT COUNT(*) FROM app.bulk").trim(), "600000");
    assert_eq!(server.sql("CHECKSUM TABLE app.bulk"), live);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_requiring_tls_is_archived_and_replayed_over_tls() {
    let Some(server) = MariaDb::start_configured(&["--binlog-format=ROW"], ServerTls::Required) else { return };
    server.sql(APP);
    let tls = crate::tls::flags(server.ca_pem(), None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let archive = file_location(&dir.path().join("archive"));
    let base = file_location(&dir.path().join("base"));
    let archiver = Archiver::start_with(ArchiveOptions {
        connection: server.settings_with(tls.clone()),
        ..archive_options(&server, &archive)
    });
    let mut backup = small_backup(&server, &base);
    backup.connection = server.settings_with(tls.clone());
    back_up(&backup).await;
    server.sql("INSERT INTO app.t VALUES (1, NOW(), NULL), (2, NOW(), NULL)");
    let written: i64 = server.sql("SELECT UNIX_TIMESTAMP(MAX(written_at)) FROM app.t").trim().parse().unwrap();
    archiver.wait_until_archived(written).await;
    archiver.stop().await;

    let mut options = restore_options(&server, &base);
    options.connection = server.settings_with(tls);
    options.drop_existing = true;
    options.point_in_time = Some(PointInTimeOptions { archive, s3: Default::default(), target: Target::Time(written) });
    let report = restore::restore(&options).await.unwrap();
    assert_eq!(report.replay.unwrap().transactions, 1);
    assert_eq!(server.sql("SELECT COUNT(*) FROM app.t").trim(), "2");
}

/// An archive of an encrypted schedule: every segment is an age file whose record names its key
/// (a rotation leaves segments under two), none holds a row in the clear, and a restore replays
/// them only with every key it needs, refusing a missing or wrong one before it touches the
/// server. The documented pipe (`age -d | zstd -dc | mariadb-binlog`) reads a segment.
#[tokio::test(flavor = "multi_thread")]
async fn an_encrypted_archive_hides_its_rows_and_replays_only_with_every_key_it_names() {
    use crate::encryption::{keys_dir, seal_key};
    let Some(server) = MariaDb::start_row_logging() else { return };
    server.sql(APP);
    let (k1, k2, stranger) =
        (age::x25519::Identity::generate(), age::x25519::Identity::generate(), age::x25519::Identity::generate());
    let key_files = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let archive_dir = dir.path().join("archive");
    let archive = file_location(&archive_dir);
    let base = file_location(&dir.path().join("base"));
    let mut backup = small_backup(&server, &base);
    backup.encrypt = Some(seal_key(key_files.path(), "k1", &k1));
    back_up(&backup).await;
    for (id, key, marker) in [(1, &k1, "marker-under-k1"), (2, &k2, "marker-under-k2")] {
        let seal = seal_key(key_files.path(), &format!("k{id}"), key);
        let archiver = Archiver::start_with(ArchiveOptions { seal: Some(seal), ..archive_options(&server, &archive) });
        server.sql(&format!("INSERT INTO app.t VALUES ({id}, NOW(), '{marker}')"));
        archiver.wait_until_archived(unix_now(&server)).await;
        assert_eq!(archiver.reports.last().unwrap().encryption_key_id.as_deref(), Some(&*format!("k{id}")));
        archiver.stop().await;
    }
    let written: i64 = server.sql("SELECT UNIX_TIMESTAMP(MAX(written_at)) FROM app.t").trim().parse().unwrap();

    let storage = Storage::open(&archive, &Default::default(), false).unwrap();
    let stored: Vec<_> = all_entries(&storage).await.unwrap().into_iter().filter(|e| e.object.is_some()).collect();
    let key_ids: std::collections::BTreeSet<_> = stored.iter().map(|e| e.key_id.clone()).collect();
    assert_eq!(key_ids, [Some("k1".to_string()), Some("k2".to_string())].into(), "{stored:?}");
    for entry in &stored {
        let object = entry.object.as_ref().unwrap();
        assert!(object.ends_with(".binlog.zst.age"), "{object}");
        let bytes = std::fs::read(archive_dir.join(object)).unwrap();
        assert!(bytes.starts_with(b"age-encryption.org/v1\n"), "{object} is no age file");
        assert!(!bytes.windows(7).any(|w| w == b"marker-"), "{object} holds a row in the clear");
    }

    let before = checksum(&server);
    let untouched = |server: &MariaDb| {
        assert_eq!(checksum(server), before, "a refused restore touched the table");
        assert_eq!(server.sql("SHOW DATABASES LIKE 'visitors\\_%'"), "", "no staging left");
    };
    let restore_with = |keys: &[(&str, &age::x25519::Identity)]| {
        let keys = keys_dir(keys);
        let mut options = restore_options(&server, &base);
        options.drop_existing = true;
        options.decrypt_keys_dir = Some(keys.path().to_path_buf());
        options.point_in_time = Some(PointInTimeOptions {
            archive: archive.clone(),
            s3: Default::default(),
            target: Target::Time(written),
        });
        async move {
            let result = restore::restore(&options).await;
            drop(keys);
            result
        }
    };
    let missing = restore_with(&[("k1", &k1)]).await.unwrap_err();
    assert_eq!(missing.kind(), "encryptionKeyMissing", "{missing}");
    assert!(
        missing.to_string().starts_with("a segment of the binary log archive was encrypted with key 'k2'"),
        "{missing}"
    );
    untouched(&server);
    let wrong = restore_with(&[("k1", &k1), ("k2", &stranger)]).await.unwrap_err();
    assert_eq!(wrong.kind(), "encryptionKeyWrong", "{wrong}");
    assert!(wrong.to_string().contains("a segment of the binary log archive"), "{wrong}");
    untouched(&server);

    server.sql("DELETE FROM app.t");
    let report = restore_with(&[("k1", &k1), ("k2", &k2)]).await.unwrap();
    assert_eq!(report.replay.unwrap().transactions, 2);
    assert_eq!(server.sql("SELECT note FROM app.t ORDER BY id"), "marker-under-k1\nmarker-under-k2\n");

    read_a_segment_by_hand(&archive_dir, stored.last().unwrap(), &k2, key_files.path());
}

/// The pipe docs/backup-format.md gives for an encrypted segment, with the plain tools.
fn read_a_segment_by_hand(
    archive_dir: &std::path::Path,
    entry: &visitors_agent::binlog::layout::SegmentEntry,
    key: &age::x25519::Identity,
    key_files: &std::path::Path,
) {
    let tools = ["age", "zstd", "mariadb-binlog"];
    if tools.iter().any(|tool| std::process::Command::new(tool).arg("--version").output().is_err()) {
        eprintln!(
            "SKIPPED the by-hand read: one of {tools:?} is not installed (Debian packages age, zstd, mariadb-client)"
        );
        return;
    }
    let key_file = key_files.join("by-hand.txt");
    std::fs::write(&key_file, crate::encryption::key_text(key)).unwrap();
    let segment = archive_dir.join(entry.object.as_ref().unwrap());
    let output = std::process::Command::new("bash")
        .arg("-c")
        .arg(r#"set -o pipefail; age -d -i "$1" "$2" | zstd -dc | mariadb-binlog --base64-output=decode-rows -v -"#)
        .args(["bash", key_file.to_str().unwrap(), segment.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(text.contains("marker-under-k2"), "{text}");
}
