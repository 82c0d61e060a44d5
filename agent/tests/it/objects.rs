//! Sequences, system-versioned tables and scheduled events are backed up, restored, drilled and
//! restored again over themselves (issue 30); before, a backup of a database holding any of the
//! first two failed (`unsupportedTables`), and events were left out of every backup.

use std::process::Command;
use std::sync::Arc;

use visitors_agent::AgentError;
use visitors_agent::backup::Hook;
use visitors_agent::restore::EventStatus;

use crate::support::MariaDb;
use crate::{back_up, file_location, restore, restore_options, small_backup};

/// Two sequences (one cached, one not), a table taking its key from a sequence, system-versioned
/// tables (implicit and explicit periods, by timestamps and by transaction ids) with history,
/// and two events, one of them disabled.
const OBJECTS: &str = "CREATE DATABASE o;
    CREATE SEQUENCE o.ids START WITH 100 INCREMENT BY 10 MINVALUE 100 MAXVALUE 100000 CACHE 5 CYCLE;
    CREATE SEQUENCE o.tickets NOCACHE;
    CREATE TABLE o.orders (id BIGINT PRIMARY KEY DEFAULT NEXTVAL(o.ids), note VARCHAR(20));
    INSERT INTO o.orders (note) VALUES ('a'), ('b'), ('c');
    DO NEXTVAL(o.tickets); DO NEXTVAL(o.tickets);
    CREATE TABLE o.prices (id INT PRIMARY KEY, price DECIMAL(10,2)) WITH SYSTEM VERSIONING;
    INSERT INTO o.prices VALUES (1, 9.99), (2, 5.00);
    UPDATE o.prices SET price = 10.99 WHERE id = 1; DELETE FROM o.prices WHERE id = 2;
    CREATE TABLE o.stock (id INT PRIMARY KEY, units INT,
        valid_from TIMESTAMP(6) GENERATED ALWAYS AS ROW START INVISIBLE,
        valid_to TIMESTAMP(6) GENERATED ALWAYS AS ROW END INVISIBLE,
        PERIOD FOR SYSTEM_TIME (valid_from, valid_to)) WITH SYSTEM VERSIONING;
    INSERT INTO o.stock VALUES (1, 5), (2, 7); UPDATE o.stock SET units = units - 1;
    CREATE TABLE o.by_trx (id INT PRIMARY KEY, v INT,
        s BIGINT UNSIGNED GENERATED ALWAYS AS ROW START INVISIBLE,
        e BIGINT UNSIGNED GENERATED ALWAYS AS ROW END INVISIBLE,
        PERIOD FOR SYSTEM_TIME (s, e)) ENGINE=InnoDB WITH SYSTEM VERSIONING;
    INSERT INTO o.by_trx VALUES (1, 1); UPDATE o.by_trx SET v = 2;
    CREATE EVENT o.purge ON SCHEDULE EVERY 1 DAY STARTS '2030-01-01 00:00:00'
        DO DELETE FROM o.orders WHERE note IS NULL;
    CREATE EVENT o.paused ON SCHEDULE EVERY 1 HOUR STARTS '2030-01-01 00:00:00' DISABLE COMMENT 'kept off'
        DO DELETE FROM o.orders WHERE note = '';";

/// Every row of the timestamp-versioned tables, history included, with its period.
const HISTORY: &str = "SELECT id, price, row_start, row_end FROM o.prices FOR SYSTEM_TIME ALL ORDER BY 1, 3;
    SELECT id, units, valid_from, valid_to FROM o.stock FOR SYSTEM_TIME ALL ORDER BY 1, 3";

const EVENTS: &str = "SELECT EVENT_NAME, STATUS, EVENT_DEFINITION, INTERVAL_VALUE, INTERVAL_FIELD, STARTS, EVENT_COMMENT \
     FROM information_schema.EVENTS WHERE EVENT_SCHEMA = 'o' ORDER BY 1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequences_versioned_tables_and_events_come_back_through_a_restore_a_drill_and_a_second_restore() {
    let Some(source) = MariaDb::start() else { return };
    let Some(target) = MariaDb::start() else { return };
    let Some(scratch) = MariaDb::start() else { return };
    source.sql(OBJECTS);
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    let mut options = small_backup(&source, &location);
    options.table_checksums = true;
    // Rows written after the catalog was read are in the snapshot: the sequence read with the
    // catalog would stand before the keys they took.
    let client = source.client_shell_prefix();
    options.after_catalog = Some(Hook(Arc::new(move || {
        let insert = format!("{client} -e \"INSERT INTO o.orders (note) SELECT 'late' FROM o.seq_1_to_20\"");
        let done = Command::new("bash").arg("-c").arg(insert).output().unwrap();
        assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    })));
    let backup = back_up(&options).await;
    let database = &backup.manifest.databases[0];
    assert_eq!(database.sequence_names, ["ids", "tickets"]);
    assert_eq!(database.event_names, ["paused", "purge"]);
    let history: Vec<(&str, bool, u64)> =
        database.tables.iter().map(|t| (t.name.as_str(), t.history, t.rows)).collect();
    assert_eq!(
        history,
        [("by_trx", false, 1), ("orders", false, 23), ("prices", true, 3), ("stock", true, 4)],
        "history is kept by timestamps, current rows by transaction ids"
    );

    restore(&restore_options(&target, &location)).await;
    assert_restored_as_source(&source, &target);
    assert_eq!(target.sql(EVENTS), source.sql(EVENTS), "events as they were, the disabled one disabled");
    assert_eq!(
        target.sql("SELECT id, v FROM o.by_trx FOR SYSTEM_TIME ALL"),
        "1\t2\n",
        "a table versioned by transaction ids comes back with its current rows"
    );
    // The next values are the first ones the source had not handed out or cached.
    let next_ids = source.sql("SELECT next_not_cached_value FROM o.ids");
    assert_eq!(target.sql("SELECT NEXTVAL(o.ids)"), next_ids);
    assert_eq!(
        target.sql("SELECT NEXTVAL(o.tickets)"),
        source.sql("SELECT NEXTVAL(o.tickets)"),
        "no cache: the very next value"
    );
    target.sql("INSERT INTO o.orders (note) VALUES ('after')");
    assert_eq!(
        target.sql("SELECT COUNT(*) FROM o.orders WHERE note = 'after' AND id > (SELECT MAX(id) FROM o.orders WHERE note <> 'after')"),
        "1\n",
        "the default takes the restored sequence's next value, past every key of the backup"
    );
    assert!(
        target.sql("SHOW CREATE TABLE o.orders").contains("nextval(`o`.`ids`)"),
        "the default names the database's sequence, not the staging schema's"
    );
    assert_eq!(target.sql("SHOW DATABASES LIKE 'visitors%'"), "", "no staging schema left");

    let drilled = crate::drill::drill(&scratch, &location, Some(backup.manifest_sha256.clone())).await;
    assert!(drilled.is_ok(), "the drill passes: {:?}", drilled.err());
    assert_eq!(
        scratch.sql("SELECT GROUP_CONCAT(STATUS) FROM information_schema.EVENTS WHERE EVENT_SCHEMA = 'o'"),
        "DISABLED,DISABLED\n",
        "a drill's events cannot change what it compares"
    );

    // Restored again over itself, as a replica seeded from it would be.
    let mut again = restore_options(&target, &location);
    again.drop_existing = true;
    again.events = EventStatus::DisabledOnReplica;
    restore(&again).await;
    assert_eq!(target.sql(HISTORY), source.sql(HISTORY));
    assert_eq!(target.sql("SELECT COUNT(*) FROM o.orders"), "23\n", "the row written since is gone");
    assert_eq!(target.sql("SELECT NEXTVAL(o.ids)"), next_ids, "the sequence stands where the backup left it");
    assert_eq!(
        target.sql(
            "SELECT GROUP_CONCAT(STATUS ORDER BY EVENT_NAME) FROM information_schema.EVENTS WHERE EVENT_SCHEMA = 'o'"
        ),
        "SLAVESIDE_DISABLED,SLAVESIDE_DISABLED\n"
    );
}

/// Without the EVENT privilege `information_schema.EVENTS` shows no event: the backup would say
/// it was whole without them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_that_cannot_list_the_events_fails_and_says_which_privilege() {
    let Some(server) = MariaDb::start() else { return };
    server.sql(
        "CREATE DATABASE ev; CREATE TABLE ev.t (id INT PRIMARY KEY);
         CREATE EVENT ev.e ON SCHEDULE EVERY 1 DAY DO DELETE FROM ev.t;
         CREATE USER 'no_event'@'%' IDENTIFIED BY 'pw-no-event';
         GRANT SELECT, SHOW VIEW, TRIGGER, LOCK TABLES, RELOAD, BINLOG MONITOR, PROCESS ON *.* TO 'no_event'@'%';",
    );
    let dir = tempfile::tempdir().unwrap();
    let mut options = small_backup(&server, &file_location(dir.path()));
    options.connection.user = "no_event".into();
    options.connection.password = Some("pw-no-event".into());
    match visitors_agent::backup::back_up(&options).await {
        Err(error @ AgentError::MissingPrivilege { .. }) => {
            assert!(error.to_string().contains("grant EVENT"), "{error}");
        }
        other => panic!("expected a missing privilege, got {:?}", other.map(|r| r.manifest_sha256)),
    }
}

/// A restore into a database that holds an event of the backup's name (no table in the way)
/// swapped the tables in, then failed to create the event: refused before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_over_an_event_of_the_same_name_is_refused_before_anything_is_written() {
    let Some(server) = MariaDb::start() else { return };
    server.sql(
        "CREATE DATABASE ev; CREATE TABLE ev.t (id INT PRIMARY KEY); INSERT INTO ev.t VALUES (1);
         CREATE EVENT ev.e ON SCHEDULE EVERY 1 DAY DO DELETE FROM ev.t;",
    );
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    back_up(&small_backup(&server, &location)).await;
    server.sql("DROP TABLE ev.t");
    match visitors_agent::restore::restore(&restore_options(&server, &location)).await {
        Err(error @ AgentError::ObjectExists { .. }) => {
            assert_eq!(error.to_string().split(" already").next(), Some("scheduled event e of `ev`"), "{error}");
        }
        other => panic!("expected an existing object, got {:?}", other.map(|r| r.rows)),
    }
    assert_eq!(server.sql("SHOW TABLES FROM ev"), "", "nothing was written");
}

/// The restored database equals the source: an independent `mariadb-dump` (rows as hex, every
/// sequence's `SETVAL`, routines, triggers and events) and every history row. The table
/// versioned by transaction ids is left out of the dump: its period holds the ids of each
/// server's own transactions.
fn assert_restored_as_source(source: &MariaDb, target: &MariaDb) {
    assert_eq!(dump(target), dump(source), "mariadb-dump of the restored database");
    assert_eq!(target.sql(HISTORY), source.sql(HISTORY), "history rows with their periods");
    for table in ["o.prices", "o.stock", "o.orders"] {
        assert_eq!(target.sql(&format!("CHECKSUM TABLE {table}")), source.sql(&format!("CHECKSUM TABLE {table}")));
    }
}

fn dump(server: &MariaDb) -> String {
    crate::mariadb_dump(server, &["--ignore-table=o.by_trx", "--databases", "o"])
}

/// A restore to a point in time replays what the window did to sequences (keys taken by a
/// default, values handed out) and to system-versioned tables (their history rows included).
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_to_a_point_in_time_replays_sequences_and_history() {
    use crate::point_in_time::restore_to;
    use visitors_agent::binlog::replay::Target;

    let Some(server) = MariaDb::start_row_logging() else { return };
    server.sql(OBJECTS);
    let mut window = Window::open(&server).await;
    server.sql(
        "INSERT INTO o.orders (note) VALUES ('replayed'), ('replayed'); DO NEXTVAL(o.tickets);
         UPDATE o.prices SET price = 11.99 WHERE id = 1; INSERT INTO o.prices VALUES (3, 1.00);
         UPDATE o.stock SET units = 0 WHERE id = 2;",
    );
    let target = second_over(&server).await;
    window.archive_until(target).await;
    let expected = (dump(&server), server.sql(HISTORY), server.sql("SELECT id, v FROM o.by_trx"));
    let next_ids = server.sql("SELECT next_not_cached_value FROM o.ids");
    server.sql("DELETE FROM o.orders; UPDATE o.prices SET price = 0; DO NEXTVAL(o.ids); DO NEXTVAL(o.ids)");

    restore_to(&server, &window.base, &window.archive, Target::Time(target))
        .await
        .expect("the restore to a point in time");
    assert_eq!((dump(&server), server.sql(HISTORY), server.sql("SELECT id, v FROM o.by_trx")), expected);
    assert_eq!(server.sql("SELECT NEXTVAL(o.ids)"), next_ids, "the sequence stands where it stood at the target");
}

/// A migration window: views, triggers, routines and events created, changed and dropped, a
/// `CREATE TABLE ... SELECT`, a `RENAME TABLE`, a `TRUNCATE`, and changes the server logged as
/// statements (an auto-increment key, `RAND()`, user variables, a trigger firing, a table
/// versioned by transaction ids). A restore to a second inside it equals a dump taken at that
/// second; before, the first view refused the whole window (`replayUnsupported`).
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_to_a_second_after_a_migration_equals_a_dump_taken_then() {
    use crate::point_in_time::{restore_to, unix_now};
    use visitors_agent::binlog::replay::Target;
    use visitors_agent::restore::{PointInTimeOptions, RestoreStep};

    let Some(server) = MariaDb::start_row_logging() else { return };
    server.sql(OBJECTS);
    server.sql(
        "CREATE TABLE o.visits (id INT AUTO_INCREMENT PRIMARY KEY, page VARCHAR(20), weight DOUBLE);
         CREATE TABLE o.audit (at_id INT, what VARCHAR(40));
         CREATE VIEW o.old_view AS SELECT id FROM o.orders;
         CREATE FUNCTION o.doubled(x INT) RETURNS INT DETERMINISTIC RETURN 2 * x;
         CREATE FUNCTION o.obsolete() RETURNS INT DETERMINISTIC RETURN 1;
         CREATE TRIGGER o.visits_audit AFTER INSERT ON o.visits FOR EACH ROW INSERT INTO o.audit VALUES (NEW.id, 'visit');
         INSERT INTO o.visits (page, weight) VALUES ('home', 1);",
    );
    let mut window = Window::open(&server).await;
    server.sql(
        "CREATE VIEW o.priced AS SELECT o.prices.id, o.doubled(o.prices.price) AS twice FROM o.prices;
         CREATE OR REPLACE VIEW o.old_view AS SELECT id, note FROM o.orders WHERE note IS NOT NULL;
         CREATE PROCEDURE o.add_visit(p VARCHAR(20)) INSERT INTO o.visits (page, weight) VALUES (p, 0.5);
         DROP FUNCTION o.obsolete;
         CREATE TRIGGER o.prices_audit AFTER UPDATE ON o.prices FOR EACH ROW INSERT INTO o.audit VALUES (NEW.id, 'price');
         DROP TRIGGER o.visits_audit;
         CREATE TRIGGER o.visits_audit BEFORE INSERT ON o.visits FOR EACH ROW SET NEW.page = UPPER(NEW.page);
         CREATE EVENT o.nightly ON SCHEDULE EVERY 1 DAY STARTS '2031-01-01 00:00:00' DO DELETE FROM o.audit;
         ALTER EVENT o.paused ENABLE; ALTER EVENT o.purge DISABLE;
         CREATE TABLE o.summary AS SELECT note, COUNT(*) AS n FROM o.orders GROUP BY note;
         RENAME TABLE o.summary TO o.order_summary; TRUNCATE o.audit;
         UPDATE o.prices SET price = price + 1;
         INSERT INTO o.orders (note) VALUES ('migrated');
         SET SESSION binlog_format = 'STATEMENT';
         SET @page := 'ünïcode', @weight := 2.5e0, @n := 7;
         INSERT INTO o.visits (page, weight) VALUES (@page, @weight * @n);
         INSERT INTO o.visits (page, weight) VALUES ('rand', RAND(3));
         USE o; CALL add_visit('called');
         UPDATE o.by_trx SET v = 9;",
    );
    let target = second_over(&server).await;
    let expected = (dump(&server), server.sql(HISTORY), server.sql("SELECT id, v FROM o.by_trx"), server.sql(EVENTS));
    server.sql("DROP VIEW o.priced; INSERT INTO o.visits (page) VALUES ('later'); DROP EVENT o.nightly");
    window.archive_until(unix_now(&server)).await;

    restore_to(&server, &window.base, &window.archive, Target::Time(target))
        .await
        .expect("the restore to a point in time");
    let restored = (dump(&server), server.sql(HISTORY), server.sql("SELECT id, v FROM o.by_trx"), server.sql(EVENTS));
    assert_eq!(restored.0, expected.0, "mariadb-dump of the database at the target");
    assert_eq!(restored.1, expected.1, "history rows");
    assert_eq!(restored.2, expected.2, "the statement-logged change of a table versioned by transaction ids");
    assert_eq!(restored.3, expected.3, "events as the window left them");
    assert!(restored.0.contains("TRIGGER o.prices_audit"), "the trigger created in the window");
    assert_eq!(server.sql("SHOW DATABASES LIKE 'visitors%'"), "", "no staging schema left");

    // In two steps, as the restore controller runs it: the staged copy keeps the replayed
    // objects, and the event statuses the replay gave them, until the swap.
    server.sql("DROP VIEW o.priced; DROP TRIGGER o.prices_audit; ALTER EVENT o.paused DISABLE; DELETE FROM o.visits");
    for step in [RestoreStep::StageOnly, RestoreStep::FromStage] {
        let mut options = restore_options(&server, &window.base);
        options.drop_existing = true;
        options.step = step;
        options.point_in_time = Some(PointInTimeOptions {
            archive: window.archive.clone(),
            s3: Default::default(),
            target: Target::Time(target),
        });
        visitors_agent::restore::restore(&options).await.unwrap_or_else(|e| panic!("{step:?}: {e}"));
    }
    let in_two_steps =
        (dump(&server), server.sql(HISTORY), server.sql("SELECT id, v FROM o.by_trx"), server.sql(EVENTS));
    assert_eq!(in_two_steps, expected, "the same database, restored in two steps");
}

/// MariaDB does not log the values a statement takes from a sequence when the table it writes
/// has triggers: replayed, the sequence stood before the key the replayed row holds, and the
/// next insert after the restore failed with a duplicate key. It is moved past it.
#[tokio::test(flavor = "multi_thread")]
async fn a_sequence_the_log_does_not_follow_is_moved_past_the_replayed_keys() {
    use crate::point_in_time::restore_to;
    use visitors_agent::binlog::replay::Target;

    let Some(server) = MariaDb::start_row_logging() else { return };
    server.sql(
        "CREATE DATABASE lg; CREATE SEQUENCE lg.ids START WITH 1000 CACHE 10;
         CREATE TABLE lg.orders (id BIGINT PRIMARY KEY DEFAULT NEXTVAL(lg.ids), item VARCHAR(10));
         CREATE TABLE lg.log (id BIGINT); INSERT INTO lg.orders (item) VALUES ('a'), ('b');",
    );
    let mut window = Window::open(&server).await;
    server.sql(
        "CREATE TRIGGER lg.logged AFTER INSERT ON lg.orders FOR EACH ROW INSERT INTO lg.log VALUES (NEW.id);
         INSERT INTO lg.orders (item) VALUES ('c');",
    );
    let keys = server.sql("SELECT GROUP_CONCAT(id ORDER BY id) FROM lg.orders");
    let target = second_over(&server).await;
    window.archive_until(target).await;

    restore_to(&server, &window.base, &window.archive, Target::Time(target))
        .await
        .expect("the restore to a point in time");
    assert_eq!(server.sql("SELECT GROUP_CONCAT(id ORDER BY id) FROM lg.orders"), keys);
    server.sql("INSERT INTO lg.orders (item) VALUES ('after')");
    assert_eq!(
        server.sql("SELECT COUNT(*) FROM lg.orders WHERE item = 'after' AND id > (SELECT MAX(id) FROM lg.orders WHERE item <> 'after')"),
        "1\n",
        "the next key is past every replayed one"
    );
}

/// A window of a server's binary log after a base backup: its archive and the backup, the
/// archiver running since before the backup.
struct Window {
    _dir: tempfile::TempDir,
    archive: String,
    base: String,
    archiver: Option<crate::point_in_time::Archiver>,
}

impl Window {
    async fn open(server: &MariaDb) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let archive = file_location(&dir.path().join("archive"));
        let base = file_location(&dir.path().join("base"));
        let archiver = crate::point_in_time::Archiver::start(server, &archive);
        back_up(&small_backup(server, &base)).await;
        Window { _dir: dir, archive, base, archiver: Some(archiver) }
    }

    /// Waits until everything committed up to `second` is archived, and stops the archiver.
    async fn archive_until(&mut self, second: i64) {
        let archiver = self.archiver.take().expect("archiving");
        archiver.wait_until_archived(second).await;
        archiver.stop().await;
    }
}

/// The second of the server's clock now, once it is over: every write so far was committed at
/// or before it, and none after it is.
async fn second_over(server: &MariaDb) -> i64 {
    let second = crate::point_in_time::unix_now(server);
    while crate::point_in_time::unix_now(server) <= second {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    second
}
