//! ENUM and SET columns round-trip whatever the server holds (issue 30): the error value `''`
//! that a non-strict server stores for a value that is not a member (index 0), which the
//! restore refused (warning 1265) or, in an ENUM with a `''` member, silently stored as that
//! member; while a value that truly does not fit still fails its chunk.

use visitors_agent::AgentError;

use crate::roundtrip::table_state;
use crate::safety::edit_first_schema;
use crate::support::MariaDb;
use crate::{back_up, file_location, restore, restore_options, small_backup};

/// Every ENUM's error value (index 0), a `''` member, numeric members, SETs and NULLs, written
/// under a non-strict `sql_mode` as older applications do.
const ROWS: &str = "SET SESSION sql_mode = ''; CREATE DATABASE e;
    CREATE TABLE e.t (id INT PRIMARY KEY, plain ENUM('a','b') NOT NULL, digits ENUM('0','a'),
                      blank ENUM('','x'), flags SET('x','y'), maybe ENUM('a') NULL);
    INSERT INTO e.t VALUES (1, 'a', '0', '', 'x,y', NULL), (2, 'bogus', 'bogus', 'bogus', '', 'bogus'),
                           (3, 'b', 'a', 'x', 'y', 'a'), (4, 'nope', '0', 'nope', 'x', NULL);";

/// The stored indexes of every ENUM and SET, which the text of a value can hide.
const INDEXES: &str = "SELECT id, plain + 0, digits + 0, blank + 0, flags + 0, maybe + 0 FROM e.t ORDER BY id";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enum_error_value_comes_back_as_the_error_value_through_a_restore_and_a_drill() {
    let Some(source) = MariaDb::start() else { return };
    let Some(target) = MariaDb::start() else { return };
    let Some(scratch) = MariaDb::start() else { return };
    source.sql(ROWS);
    assert_eq!(
        source.sql("SELECT COUNT(*) FROM e.t WHERE plain + 0 = 0 AND blank + 0 = 0"),
        "2\n",
        "error values stored"
    );
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    let mut options = small_backup(&source, &location);
    options.table_checksums = true;
    let backup = back_up(&options).await;
    restore(&restore_options(&target, &location)).await;
    assert_eq!(target.sql(INDEXES), source.sql(INDEXES));
    assert_eq!(table_state(&target, "e.t"), table_state(&source, "e.t"), "rows, CHECKSUM TABLE and definition");
    crate::verify_with_checksums(&target, &location).await.expect("the restored table matches the backup's checksum");
    let drilled = crate::drill::drill(&scratch, &location, Some(backup.manifest_sha256)).await;
    assert!(drilled.is_ok(), "the drill passes: {:?}", drilled.err());
}

/// A value that is no member of the restored column's type (the backup's schema edited by hand
/// to drop member 'b') still fails its chunk, named, as any truncation does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_that_is_no_member_of_the_restored_enum_still_fails_its_chunk() {
    let Some(server) = MariaDb::start() else { return };
    server.sql(ROWS);
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    let report = back_up(&small_backup(&server, &location)).await;
    edit_first_schema(dir.path(), &report, "enum('a','b')", "enum('a')");
    let mut options = restore_options(&server, &location);
    options.drop_existing = true;
    match visitors_agent::restore::restore(&options).await {
        Err(error @ AgentError::BadChunk { .. }) => {
            assert!(error.to_string().contains("raised Warning 1265"), "{error}");
        }
        other => panic!("expected a refused chunk, got {:?}", other.err()),
    }
    assert_eq!(server.sql("SELECT COUNT(*) FROM e.t"), "4\n", "the target was left as it was");
}
