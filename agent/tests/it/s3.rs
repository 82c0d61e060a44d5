//! The S3 path against a real S3-compatible server (moto): round trip, a missing bucket, and
//! credentials the server rejects.

use visitors_agent::AgentError;
use visitors_agent::storage::S3Settings;
use visitors_agent::{backup, restore};

use crate::support::{MariaDb, Moto};
use crate::{back_up, restore_options, small_backup};

const SECRET: &str = "moto-secret-key-value";

fn settings(moto: &Moto, secret: &str) -> S3Settings {
    S3Settings {
        access_key_id: Some("AKIAIOSFODNN7EXAMPLE".into()),
        secret_access_key: Some(secret.into()),
        session_token: None,
        region: "us-east-1".into(),
        endpoint: Some(moto.endpoint()),
        force_path_style: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backups_go_to_a_bucket_and_come_back() {
    let Some(moto) = Moto::start() else { return };
    let Some(server) = MariaDb::start() else { return };
    moto.create_bucket("backups");
    server.sql(
        "CREATE DATABASE s; CREATE TABLE s.t (id INT PRIMARY KEY, b BLOB);
         INSERT INTO s.t SELECT seq, RANDOM_BYTES(200) FROM seq_1_to_3000;",
    );
    let checksum = server.sql("CHECKSUM TABLE s.t");
    let location = "s3://backups/visitors/run-1";
    let mut options = small_backup(&server, location);
    options.s3 = settings(&moto, SECRET);
    let report = back_up(&options).await;
    assert!(report.manifest.databases[0].tables[0].chunks.len() > 1);

    server.sql("DROP DATABASE s");
    let mut restore_opts = restore_options(&server, location);
    restore_opts.s3 = settings(&moto, SECRET);
    crate::restore(&restore_opts).await;
    assert_eq!(server.sql("CHECKSUM TABLE s.t"), checksum);

    let mut missing = restore_options(&server, "s3://backups/visitors/never-taken");
    missing.s3 = settings(&moto, SECRET);
    assert!(matches!(restore::restore(&missing).await, Err(AgentError::ManifestMissing { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_bucket_and_rejected_credentials_are_named() {
    let Some(moto) = Moto::start() else { return };
    let Some(server) = MariaDb::start() else { return };
    server.sql("CREATE DATABASE s; CREATE TABLE s.t (id INT PRIMARY KEY); INSERT INTO s.t VALUES (1);");

    let mut options = small_backup(&server, "s3://no-such-bucket/x");
    options.s3 = settings(&moto, SECRET);
    match backup::back_up(&options).await {
        Err(error @ AgentError::MissingBucket { .. }) => {
            assert!(error.to_string().contains("'no-such-bucket'"), "{error}")
        }
        other => panic!("expected a missing bucket, got {:?}", other.err()),
    }
    let mut restore_opts = restore_options(&server, "s3://no-such-bucket/x");
    restore_opts.s3 = settings(&moto, SECRET);
    assert!(matches!(restore::restore(&restore_opts).await, Err(AgentError::MissingBucket { .. })));

    moto.create_bucket("locked");
    moto.require_signatures();
    let wrong_secret = "wrong-secret-value-xyz";
    let mut options = small_backup(&server, "s3://locked/x");
    options.s3 = settings(&moto, wrong_secret);
    match backup::back_up(&options).await {
        Err(error @ AgentError::StorageCredentialsRejected { .. }) => {
            let text = error.to_string();
            assert!(text.contains("AWS_SECRET_ACCESS_KEY") && !text.contains(wrong_secret), "{text}");
        }
        other => panic!("expected rejected credentials, got {:?}", other.err()),
    }
}
