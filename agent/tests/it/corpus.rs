//! The round-trip corpus (tests/fixtures/type_corpus.sql): a table per column type at its
//! limits, and awkward identifiers, backed up, restored and drilled; the restored database
//! equals the source by an independent `mariadb-dump --hex-blob` and by `CHECKSUM TABLE`.

use crate::support::MariaDb;
use crate::{back_up, file_location, mariadb_dump, restore, restore_options, small_backup};

const CORPUS: &str = include_str!("../fixtures/type_corpus.sql");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_value_of_the_type_corpus_comes_back_exactly() {
    let Some(source) = MariaDb::start() else { return };
    let Some(target) = MariaDb::start() else { return };
    let Some(scratch) = MariaDb::start() else { return };
    source.sql(CORPUS);
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    let mut options = small_backup(&source, &location);
    options.table_checksums = true;
    let backup = back_up(&options).await;
    let tables = backup.manifest.databases[0].tables.len();
    assert!(tables >= 20, "{tables} tables of the corpus backed up");

    restore(&restore_options(&target, &location)).await;
    let dump = |server: &MariaDb| mariadb_dump(server, &["--databases", "corpus"]);
    assert_eq!(dump(&target), dump(&source), "mariadb-dump --hex-blob of the restored corpus");
    crate::verify_with_checksums(&target, &location).await.expect("every CHECKSUM TABLE matches the backup's");
    let drilled = crate::drill::drill(&scratch, &location, Some(backup.manifest_sha256)).await;
    assert!(drilled.is_ok(), "the drill passes: {:?}", drilled.err());
    assert_eq!(dump(&scratch), dump(&source), "the drill's copy too");
}
