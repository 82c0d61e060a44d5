//! Point-in-time recovery of a replicated app against real MariaDB servers replicating with
//! GTIDs: the archive follows a failover to another server without a gap, a backup of a
//! replica restores to a point from the primary's archive, and a server with a larger binary
//! log file of the same name is never resumed by position.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use visitors_agent::binlog::layout::{SegmentEntry, all_entries, continues, read_epochs};
use visitors_agent::binlog::replay::Target;
use visitors_agent::storage::Storage;

use crate::point_in_time::{APP, Archiver, ParseGtids, checksum, restore_to, rows, unix_now, writer};
use crate::support::{MariaDb, ServerTls};
use crate::{back_up, file_location, small_backup};

/// A primary with the app's table, a replica of it, an empty server to restore into, and the
/// archive's and the base backup's locations in a folder that lives as long as the value.
struct Servers {
    primary: MariaDb,
    replica: MariaDb,
    scratch: MariaDb,
    archive: String,
    base: String,
    _dir: tempfile::TempDir,
}

/// [`Servers`], or none where MariaDB is missing (the test says it skips, as
/// `programs_or_skip` does for every test of this crate).
fn servers() -> Option<Servers> {
    let primary = MariaDb::start_primary()?;
    primary.sql(APP);
    let replica = MariaDb::start_replica_of(&primary, 2)?;
    let scratch = MariaDb::start()?;
    let dir = tempfile::tempdir().unwrap();
    let archive = file_location(&dir.path().join("archive"));
    let base = file_location(&dir.path().join("base"));
    Some(Servers { primary, replica, scratch, archive, base, _dir: dir })
}

/// Inserts rows `ids` into `app.t`, one transaction each, a second apart (commit times are
/// whole seconds).
async fn insert_rows(server: &MariaDb, ids: std::ops::RangeInclusive<i64>) {
    for id in ids {
        server.sql(&format!("INSERT INTO app.t VALUES ({id}, NOW(), NULL)"));
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
}

/// The rows of `app.t` and their commit seconds, in order.
fn written(server: &MariaDb) -> Vec<(i64, i64)> {
    rows(server)
        .lines()
        .map(|line| {
            let (id, at) = line.split_once('\t').unwrap();
            (id.parse().unwrap(), at.parse().unwrap())
        })
        .collect()
}

/// `rows()` of the first `count` of `written`.
fn first_rows(written: &[(i64, i64)], count: usize) -> String {
    written.iter().take(count).map(|(id, at)| format!("{id}\t{at}\n")).collect()
}

/// The archive's records, after checking that each one continues the one before it (by
/// position within an epoch, by GTID into an epoch that continues another server's) and that
/// no epoch records a gap.
async fn continuous_archive(archive: &str) -> (Vec<visitors_agent::binlog::layout::Epoch>, Vec<SegmentEntry>) {
    let storage = Storage::open(archive, &Default::default(), false).unwrap();
    let epochs = read_epochs(&storage).await.unwrap();
    let entries = all_entries(&storage).await.unwrap();
    assert!(epochs.iter().all(|e| e.gap_before.is_none()), "no gap: {epochs:#?}");
    assert!(entries.windows(2).all(|pair| continues(&pair[0], &pair[1], &epochs)), "no hole, no overlap: {entries:#?}");
    (epochs, entries)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_archive_follows_a_failover_without_a_gap_and_a_restore_replays_across_it() {
    let Some(Servers { mut primary, replica, scratch, archive, base, _dir }) = servers() else { return };
    back_up(&small_backup(&primary, &base)).await;
    let archiver = Archiver::start(&primary, &archive);
    insert_rows(&primary, 1..=3).await;
    replica.catch_up_with(&primary);
    // The primary dies under the archiver; the replica takes over, and the client Service (the
    // archiver's host) leads to it. What the archiver had not stored yet comes from there.
    primary.kill();
    archiver.stop().await;
    replica.promote();
    let archiver = Archiver::start(&replica, &archive);
    insert_rows(&replica, 4..=5).await;
    archiver.wait_until_archived(unix_now(&replica) - 1).await;
    // Restarted on the new primary, the archiver goes on by position in its binary log.
    archiver.stop().await;
    let archiver = Archiver::start(&replica, &archive);
    insert_rows(&replica, 6..=6).await;
    let written = written(&replica);
    archiver.wait_until_archived(written[5].1).await;
    let status = archiver.reports.last().unwrap();
    archiver.stop().await;

    assert!(status.epochs.iter().all(|e| e.gap_before.is_none()), "the status reports no gap: {status:#?}");
    let (epochs, _) = continuous_archive(&archive).await;
    assert_eq!(epochs.len(), 2, "one epoch per server: {epochs:#?}");
    assert!(epochs[1].continues.is_some(), "the second epoch continues the first by GTID: {epochs:#?}");
    assert_eq!(epochs.iter().map(|e| e.server.as_ref().unwrap().server_id).collect::<Vec<_>>(), [1, 2]);

    let after_failover = written[4].1;
    let report = restore_to(&scratch, &base, &archive, Target::Time(after_failover)).await.unwrap();
    assert_eq!(rows(&scratch), first_rows(&written, 5), "rows 1-5: three of the old primary, two of the new");
    assert_eq!(report.replay.unwrap().transactions, 5);
    restore_to(&scratch, &base, &archive, Target::Time(written[5].1)).await.unwrap();
    assert_eq!(checksum(&scratch), checksum(&replica), "the newest point equals the new primary");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backup_of_a_replica_restores_to_a_point_by_replaying_exactly_what_it_lacks() {
    let Some(Servers { primary, replica, scratch, archive, base, _dir }) = servers() else { return };
    let archiver = Archiver::start(&primary, &archive);
    let before_writes: u64 =
        primary.sql("SELECT @@gtid_binlog_pos").trim().rsplit('-').next().unwrap().parse().unwrap();
    let stop_writes = CancellationToken::new();
    let writes = writer(&primary, stop_writes.clone());
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Taken while the replica applies the writer's rows.
    let backup = back_up(&small_backup(&replica, &base)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop_writes.cancel();
    assert!(writes.await.unwrap() > 20);
    assert!(replica.is_replicating(), "the backup left replication running");
    assert_eq!(replica.sql("SELECT @@GLOBAL.read_only").trim(), "1", "and the replica read-only");
    replica.catch_up_with(&primary);
    archiver.wait_until_archived(unix_now(&primary)).await;
    archiver.stop().await;

    let position = backup.manifest.position.clone().unwrap();
    let server = position.server.clone().unwrap();
    assert_eq!((server.flavor.as_str(), server.server_id), ("mariadb", 2), "{position:?}");
    assert!(server.hostname.is_some(), "{position:?}");
    let in_backup = backup.manifest.databases[0].tables[0].rows;
    let backup_sequence: u64 = position.gtid.as_deref().unwrap().rsplit('-').next().unwrap().parse().unwrap();
    assert_eq!(backup_sequence - before_writes, in_backup, "the recorded GTIDs are exactly the snapshot's rows");
    assert!(in_backup > 0, "the backup holds some of the writer's rows");

    let snapshot: jiff::Timestamp = position.time.unwrap().parse().unwrap();
    let target = snapshot.as_second() + 1;
    let expected = primary.sql(&format!(
        "SELECT id, UNIX_TIMESTAMP(written_at) FROM app.t WHERE UNIX_TIMESTAMP(written_at) <= {target} ORDER BY id"
    ));
    let report = restore_to(&scratch, &base, &archive, Target::Time(target)).await.unwrap();
    assert_eq!(rows(&scratch), expected, "exactly the rows committed up to a second after the snapshot");
    let replayed = report.replay.unwrap().transactions;
    assert_eq!(replayed, expected.lines().count() as u64 - in_backup, "exactly the transactions the backup lacks");

    let everything: String = primary.sql("SELECT @@gtid_binlog_pos").trim().to_string();
    restore_to(&scratch, &base, &archive, Target::Gtids(everything.parse_gtids())).await.unwrap();
    assert_eq!(checksum(&scratch), checksum(&primary), "by GTID, to the newest transaction");
}

/// The dangerous case: the new primary has a binary log file of the name where the archive
/// ends, larger than the archive's position, holding other events there. Resumed by that
/// position, the archive would store events of the wrong place (or half an event).
#[tokio::test(flavor = "multi_thread")]
async fn a_server_with_a_larger_binary_log_of_the_same_name_is_never_resumed_by_position() {
    let Some(Servers { mut primary, replica, scratch, archive, base, _dir }) = servers() else { return };
    back_up(&small_backup(&primary, &base)).await;
    let insert = |server: &MariaDb, ids: std::ops::RangeInclusive<i64>| {
        for id in ids {
            server.sql(&format!("INSERT INTO app.t VALUES ({id}, NOW(), 'n')"));
        }
    };
    // The two servers rotate their binary logs at different transactions.
    insert(&primary, 1..=10);
    replica.catch_up_with(&primary);
    replica.sql("FLUSH BINARY LOGS");
    insert(&primary, 11..=20);
    primary.sql("FLUSH BINARY LOGS");
    let archiver = Archiver::start(&primary, &archive);
    insert(&primary, 21..=23);
    archiver.wait_until_archived(unix_now(&primary)).await;
    archiver.stop().await;

    let storage = Storage::open(&archive, &Default::default(), false).unwrap();
    let newest = all_entries(&storage).await.unwrap().pop().unwrap();
    replica.catch_up_with(&primary);
    let replica_size: u64 = replica
        .sql("SHOW BINARY LOGS")
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{}\t", newest.file)).map(|size| size.trim().parse().unwrap()))
        .expect("the replica has a binary log file of the archive's name");
    assert!(
        replica_size > newest.end,
        "the precondition: {} of the replica is larger than {}",
        newest.file,
        newest.end
    );
    let there = replica.sql(&format!("SELECT BINLOG_GTID_POS('{}', {})", newest.file, newest.end));
    assert_ne!(Some(there.trim()), newest.gtid_after.as_deref(), "and holds other transactions there");

    primary.kill();
    replica.promote();
    let sequence = |server: &MariaDb| -> u64 {
        server.sql("SELECT @@gtid_binlog_pos").trim().rsplit('-').next().unwrap().parse().unwrap()
    };
    let first_on_new_primary = format!("0-2-{}", sequence(&replica) + 1);
    let archiver = Archiver::start(&replica, &archive);
    insert(&replica, 24..=25);
    let now = unix_now(&replica);
    archiver.wait_until_archived(now).await;
    archiver.stop().await;

    restore_to(&scratch, &base, &archive, Target::Time(now)).await.unwrap();
    assert_eq!(scratch.sql("SELECT COUNT(*), COUNT(DISTINCT id), MAX(id) FROM app.t"), "25\t25\t25\n");
    assert_eq!(checksum(&scratch), checksum(&replica));
    let (epochs, entries) = continuous_archive(&archive).await;
    let switched = epochs.last().unwrap();
    assert!(switched.continues.is_some(), "{epochs:#?}");
    let first_of_new = entries.iter().find(|e| e.epoch == switched.epoch).unwrap();
    assert_eq!(first_of_new.gtid_before, newest.gtid_after, "the new epoch starts after the archive's GTIDs");
    assert_eq!(first_of_new.first_gtid, Some(first_on_new_primary), "with the new primary's first transaction");
}

/// A gap stays a gap: another server whose GTIDs pass for holding the archive's by their
/// sequence numbers, but which wrote those transactions itself (a diverged history), refuses
/// to stream after the archive's GTIDs, and the archive records that its server changed.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_whose_history_diverged_is_a_gap_as_before() {
    let Some(primary) = MariaDb::start_primary() else { return };
    primary.sql(APP);
    let options = visitors_test_support::MariaDb::replication_options(3);
    let options: Vec<&str> = options.iter().map(String::as_str).collect();
    let Some(diverged) = MariaDb::start_configured(&options, ServerTls::On) else { return };
    diverged.sql(APP);
    let dir = tempfile::tempdir().unwrap();
    let archive = file_location(&dir.path().join("archive"));
    let archiver = Archiver::start(&primary, &archive);
    primary.sql("INSERT INTO app.t VALUES (1, NOW(), NULL), (2, NOW(), NULL)");
    archiver.wait_until_archived(unix_now(&primary)).await;
    archiver.stop().await;
    for id in 1..=5 {
        diverged.sql(&format!("INSERT INTO app.t VALUES ({id}, NOW(), 'elsewhere')"));
    }

    let archiver = Archiver::start(&diverged, &archive);
    archiver.wait_until_archived(unix_now(&diverged)).await;
    let status = archiver.reports.last().unwrap();
    archiver.stop().await;
    let gap = status.epochs.last().and_then(|e| e.gap_before.clone()).expect("a gap");
    assert_eq!(gap.reason, "serverChanged", "{status:#?}");
    assert!(gap.message.contains("refused to stream after the archive's GTIDs"), "{}", gap.message);
}

/// The failover of a write peak: the old primary committed (and the archiver stored) a
/// transaction no replica received, so the new primary refuses to stream after the archive's
/// GTIDs and a new epoch begins at its oldest binary log. That log holds the whole history,
/// so the new epoch is dated by its first stored transaction, not by when it was begun, and a
/// run of a replica taken before the failover still restores to a second after it, without
/// the transaction that no longer exists anywhere but in the old epoch.
#[tokio::test(flavor = "multi_thread")]
async fn a_commit_no_replica_received_begins_an_epoch_that_still_holds_the_runs_before_it() {
    let Some(Servers { mut primary, replica, scratch, archive, base, _dir }) = servers() else { return };
    let archiver = Archiver::start(&primary, &archive);
    insert_rows(&primary, 1..=2).await;
    replica.catch_up_with(&primary);
    let run = back_up(&small_backup(&replica, &base)).await;
    let run_time: jiff::Timestamp = run.manifest.position.clone().unwrap().time.unwrap().parse().unwrap();
    // Fenced: the replica receives nothing more, and the old primary commits one row alone.
    replica.sql("STOP SLAVE IO_THREAD");
    primary.sql("INSERT INTO app.t VALUES (3, NOW(), 'lost')");
    archiver.wait_until_archived(unix_now(&primary)).await;
    primary.kill();
    archiver.stop().await;
    replica.sql("START SLAVE SQL_THREAD");
    replica.promote();
    let archiver = Archiver::start(&replica, &archive);
    insert_rows(&replica, 4..=5).await;
    let written = written(&replica);
    archiver.wait_until_archived(written.last().unwrap().1).await;
    let status = archiver.reports.last().unwrap();
    archiver.stop().await;

    let newest = status.epochs.last().unwrap();
    let gap = newest.gap_before.as_ref().expect("the old primary's lone commit ends its epoch");
    assert_eq!(gap.reason, "serverChanged", "{status:#?}");
    let epoch_start: jiff::Timestamp = newest.start_time.parse().unwrap();
    assert!(
        epoch_start <= run_time,
        "the new epoch holds the run's position: it starts {epoch_start}, the run {run_time}"
    );
    restore_to(&scratch, &base, &archive, Target::Time(written.last().unwrap().1)).await.unwrap();
    assert_eq!(rows(&scratch), first_rows(&written, 4), "rows 1, 2, 4 and 5: the lost row is not replayed");
    assert_eq!(checksum(&scratch), checksum(&replica));
}
