//! TLS to MySQL: both of the agent's clients (mysql_async, and the backup's data sessions of
//! wire.rs) with each `--ssl-mode`, against servers that require TLS, offer none, or hold a
//! certificate for another name.

use std::path::Path;

use visitors_agent::AgentError;
use visitors_agent::cli::tls_settings;
use visitors_agent::mysql::{Connector, SslMode, TlsSettings};
use visitors_agent_contract::command::ConnectionArgs;

use crate::support::{MariaDb, PASSWORD, ServerTls};
use crate::{back_up, file_location, restore, restore_options, small_backup};

/// The TLS settings the agent makes of `--ssl-ca` and `--ssl-mode`.
pub fn flags(ssl_ca: Option<&Path>, ssl_mode: Option<SslMode>) -> visitors_agent::Result<TlsSettings> {
    tls_settings(&ConnectionArgs { ssl_ca: ssl_ca.map(Path::to_path_buf), ssl_mode, ..ConnectionArgs::default() })
}

/// Both clients' refusal to connect with `tls`: the same error kind, which it returns.
async fn refused(server: &MariaDb, tls: TlsSettings) -> (&'static str, String) {
    let connector = Connector::new(server.settings_with(tls));
    let error = connector.connect().await.expect_err("mysql_async connected");
    let data_error = connector.connect_data().await.err().expect("the data session connected");
    assert_eq!(error.kind(), data_error.kind(), "{error} / {data_error}");
    let message = error.one_line();
    assert!(!message.contains(PASSWORD), "{message}");
    (error.kind(), message)
}

/// Both clients connect with `tls` and run a statement.
async fn connects(server: &MariaDb, tls: TlsSettings) {
    let connector = Connector::new(server.settings_with(tls));
    let mut conn = connector.connect().await.unwrap_or_else(|e| panic!("mysql_async: {e}"));
    connector.execute(&mut conn, "DO 1", "checking").await.unwrap();
    let mut data = connector.connect_data().await.unwrap_or_else(|e| panic!("data session: {e}"));
    connector.execute_data(&mut data, "DO 1", "checking").await.unwrap();
    data.disconnect().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_requiring_tls_is_backed_up_and_restored_with_its_ca_and_refuses_the_rest() {
    let Some(server) = MariaDb::start_configured(&[], ServerTls::Required) else { return };
    server.sql(
        "CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(200));
         INSERT INTO app.t SELECT seq, REPEAT(CHAR(65 + seq % 26), seq % 200) FROM seq_1_to_20000;",
    );
    let checksum = server.sql("CHECKSUM TABLE app.t");
    let ca = server.ca_pem().unwrap().to_path_buf();
    let verified = flags(Some(&ca), None).unwrap();
    assert_eq!(verified.mode(), SslMode::VerifyIdentity, "--ssl-ca alone verifies the host");

    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    let mut backup = small_backup(&server, &location);
    backup.connection = server.settings_with(verified.clone());
    let report = back_up(&backup).await;
    assert_eq!(report.manifest.row_count(), 20_000);
    server.sql("DELETE FROM app.t WHERE id % 3 = 0");
    let mut options = restore_options(&server, &location);
    options.connection = server.settings_with(verified);
    options.drop_existing = true;
    assert_eq!(restore(&options).await.rows, 20_000);
    assert_eq!(server.sql("CHECKSUM TABLE app.t"), checksum);

    let (kind, message) = refused(&server, TlsSettings::disabled()).await;
    // MariaDB answers a plain-text login as it answers a wrong password: the agent says both,
    // and never logs in again over an unverified TLS session to tell them apart.
    assert_eq!(kind, "wrongCredentials", "{message}");
    assert!(message.contains("requires TLS") && message.contains("drop --ssl-mode=disabled"), "{message}");
    let mut wrong = server.settings_with(TlsSettings::disabled());
    wrong.password = Some("not-the-password".into());
    let error = Connector::new(wrong).connect().await.expect_err("a wrong password logged in");
    assert_eq!(error.kind(), "wrongCredentials", "a wrong password is still one: {error}");

    let other_ca = visitors_test_support::tls::write_unrelated_ca(&dir.path().join("other-ca.pem"));
    let (kind, message) = refused(&server, flags(Some(&other_ca), None).unwrap()).await;
    assert_eq!(kind, "tlsUntrusted", "{message}");
    let (kind, _) = refused(&server, flags(Some(&other_ca), Some(SslMode::VerifyCa)).unwrap()).await;
    assert_eq!(kind, "tlsUntrusted", "verify-ca checks the CA too");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_certificate_for_another_name_passes_verify_ca_but_not_verify_identity() {
    let names = ServerTls::Names(vec!["db.example.test".into()]);
    let Some(server) = MariaDb::start_configured(&[], names) else { return };
    let ca = server.ca_pem().unwrap().to_path_buf();
    let (kind, message) = refused(&server, flags(Some(&ca), Some(SslMode::VerifyIdentity)).unwrap()).await;
    assert_eq!(kind, "tlsWrongHost", "{message}");
    assert!(message.contains("does not name the host 127.0.0.1") && message.contains("verify-ca"), "{message}");
    connects(&server, flags(Some(&ca), Some(SslMode::VerifyCa)).unwrap()).await;
    connects(&server, flags(None, None).unwrap()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_without_tls_is_refused_unless_plain_text_is_asked_for() {
    let Some(server) = MariaDb::start_configured(&[], ServerTls::Off) else { return };
    let (kind, message) = refused(&server, flags(None, None).unwrap()).await;
    assert_eq!(kind, "tlsNotOffered", "{message}");
    let address = format!("127.0.0.1:{}", server.port);
    let expected = format!(
        "the server at {address} does not offer TLS; configure ssl-cert/ssl-key on it, or pass --ssl-mode=disabled to connect in plain text"
    );
    assert_eq!(message, expected);
    connects(&server, flags(None, Some(SslMode::Disabled)).unwrap()).await;
}

#[test]
fn a_ca_file_that_cannot_be_used_is_named_with_its_flag() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let error = flags(Some(&missing), None).unwrap_err();
    assert!(matches!(error, AgentError::SslCaFile { .. }), "{error}");
    assert!(error.to_string().contains("--ssl-ca") && error.to_string().contains("missing.pem"), "{error}");
    let not_pem = dir.path().join("key.txt");
    std::fs::write(&not_pem, "hello").unwrap();
    let error = flags(Some(&not_pem), None).unwrap_err();
    assert_eq!(error.kind(), "sslCaFile", "{error}");
    let error = flags(None, Some(SslMode::VerifyCa)).unwrap_err();
    assert!(matches!(&error, AgentError::Usage(message) if message.contains("--ssl-ca")), "{error}");
}
