//! The backup's data sessions (agent/src/mysql/wire.rs) against a real MariaDB: every byte
//! value, NULLs, a value longer than one protocol packet, statements without rows, server
//! errors, and logins that succeed, fail, or ask for a plugin the agent does not speak. The rows
//! are read over TLS (the agent's default), the logins tried over plain text too.

use visitors_agent::AgentError;
use visitors_agent::mysql::wire::{DataConn, Login, WireError};
use visitors_agent::mysql::{Connector, TlsSettings};

use crate::support::{MariaDb, PASSWORD, USER};

async fn connect(server: &MariaDb) -> DataConn {
    DataConn::connect(login(server, USER, Some(PASSWORD), true)).await.expect("a data session logs in")
}

fn login<'a>(server: &MariaDb, user: &'a str, password: Option<&'a str>, tls: bool) -> Login<'a> {
    let tls = if tls { TlsSettings::required() } else { TlsSettings::disabled() };
    Login { host: "127.0.0.1", port: server.port, user, password, tls: tls.client_config().unwrap() }
}

/// Every row of a query, each field as bytes.
async fn all_rows(conn: &mut DataConn, sql: &str) -> Vec<Vec<Option<Vec<u8>>>> {
    let mut rows = conn.query(sql).await.unwrap();
    let mut all = Vec::new();
    while let Some(row) = rows.next().await.unwrap() {
        all.push(row.fields().map(|field| field.unwrap().map(<[u8]>::to_vec)).collect());
    }
    all
}

#[tokio::test]
async fn rows_come_back_byte_for_byte_with_nulls_and_values_longer_than_a_packet() {
    let Some(server) = MariaDb::start() else { return };
    // A row of over 16 MiB needs more than one protocol packet; the server sends it only to a
    // session whose max_allowed_packet allows it.
    server.sql("SET GLOBAL max_allowed_packet = 64 * 1024 * 1024");
    server.sql(
        "CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY, b LONGBLOB, s VARCHAR(10));
         INSERT INTO d.t VALUES (1, NULL, ''), (3, REPEAT('x', 20 * 1024 * 1024), 'long');
         INSERT INTO d.t SELECT 2, GROUP_CONCAT(CHAR(seq) ORDER BY seq SEPARATOR ''), NULL FROM seq_0_to_255;",
    );
    let mut conn = connect(&server).await;
    conn.execute("SET NAMES binary").await.unwrap();

    let rows = all_rows(&mut conn, "SELECT id, b, s FROM d.t ORDER BY id").await;

    let every_byte: Vec<u8> = (0..=255u8).collect();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0], vec![Some(b"1".to_vec()), None, Some(Vec::new())]);
    assert_eq!(rows[1], vec![Some(b"2".to_vec()), Some(every_byte), None]);
    assert_eq!(rows[2][0], Some(b"3".to_vec()));
    assert_eq!(rows[2][1].as_ref().map(Vec::len), Some(20 * 1024 * 1024));
    assert!(rows[2][1].as_ref().unwrap().iter().all(|&b| b == b'x'));
    assert_eq!(rows[2][2], Some(b"long".to_vec()));

    // The session goes on after the long row: a statement without rows, then a first row.
    conn.execute("SET @x = 1").await.unwrap();
    let first = conn.query_first("SELECT id FROM d.t ORDER BY id DESC").await.unwrap();
    assert_eq!(first, Some(vec![Some(b"3".to_vec())]));
    assert_eq!(conn.query_first("SELECT id FROM d.t WHERE id = 42").await.unwrap(), None);
}

#[tokio::test]
async fn a_server_error_is_reported_with_its_code_and_the_session_goes_on() {
    let Some(server) = MariaDb::start() else { return };
    let mut conn = connect(&server).await;

    let error = conn.execute("SELECT * FROM no_such_database.t").await.expect_err("an unknown table fails");
    assert!(
        matches!(&error, WireError::Server { code: 1146, message } if message.contains("no_such_database.t")),
        "{error:?}"
    );
    // An error in the middle of a result ends it; the rows before it arrived.
    conn.execute("CREATE DATABASE d").await.unwrap();
    conn.execute(
        "CREATE FUNCTION d.f(x INT) RETURNS INT NOT DETERMINISTIC NO SQL \
         BEGIN IF x > 1 THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'row 2 refused'; END IF; RETURN x; END",
    )
    .await
    .unwrap();
    let mut rows = conn.query("SELECT d.f(seq) FROM d.seq_0_to_3").await.unwrap();
    let mut seen = Vec::new();
    let failure = loop {
        match rows.next().await {
            Ok(Some(row)) => seen.push(row.fields().next().unwrap().unwrap().unwrap().to_vec()),
            Ok(None) => panic!("the result ended without the function's error"),
            Err(error) => break error,
        }
    };
    assert_eq!(seen, [b"0".to_vec(), b"1".to_vec()]);
    assert!(matches!(&failure, WireError::Server { code: 1644, message } if message == "row 2 refused"), "{failure:?}");
    assert!(rows.next().await.unwrap().is_none(), "an error ends the result");

    assert_eq!(conn.query_first("SELECT 6 * 7").await.unwrap(), Some(vec![Some(b"42".to_vec())]));
    conn.disconnect().await;
}

#[tokio::test]
async fn logins_are_told_apart_a_wrong_password_an_unreachable_server_and_an_unknown_plugin() {
    let Some(server) = MariaDb::start() else { return };
    let mut settings = server.settings();
    settings.password = Some("not-the-password".into());
    let connector = Connector::new(settings.clone());

    let refused = connector.connect_data().await.err().expect("a wrong password fails");
    assert!(matches!(&refused, AgentError::WrongCredentials { user, .. } if user == USER), "{refused:?}");
    assert!(!refused.to_string().contains("not-the-password"));

    settings.port = visitors_test_support::free_port();
    let unreachable = Connector::new(settings).connect_data().await.err().expect("no server there");
    assert!(matches!(unreachable, AgentError::Unreachable { .. }), "{unreachable:?}");

    // An account of a plugin the data sessions do not speak: a clear error naming it.
    if server.try_sql("INSTALL SONAME 'auth_ed25519'").is_err() {
        eprintln!(
            "SKIPPED (part): MariaDB's auth_ed25519 plugin is not installed, so the unknown-plugin login is not tried"
        );
        return;
    }
    server.sql("CREATE USER 'edward'@'%' IDENTIFIED VIA ed25519 USING PASSWORD('secret')");
    for tls in [false, true] {
        let unknown = DataConn::connect(login(&server, "edward", Some("secret"), tls)).await.err();
        assert!(
            matches!(&unknown, Some(WireError::UnsupportedAuthPlugin(plugin)) if plugin == "client_ed25519"),
            "{unknown:?}"
        );
    }
}

#[tokio::test]
async fn an_account_without_a_password_logs_in() {
    let Some(server) = MariaDb::start() else { return };
    server.sql("CREATE USER 'open'@'%'; GRANT SELECT ON *.* TO 'open'@'%'");
    for tls in [false, true] {
        let mut conn = DataConn::connect(login(&server, "open", None, tls)).await.expect("an empty password logs in");
        assert_eq!(conn.query_first("SELECT CURRENT_USER()").await.unwrap(), Some(vec![Some(b"open@%".to_vec())]));
    }
}
