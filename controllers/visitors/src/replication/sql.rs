//! The SQL of replication in both server families, pure: MariaDB (the e2e suite's server) and
//! MySQL 8.4 (the default image), whose statements differ in nearly every word. Each function
//! returns the statements to run, in order, on one connection.

/// The server family, told by `SELECT VERSION()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    MariaDb,
    MySql,
}

/// The account replicas log in to their upstream with.
pub const REPLICATION_USER: &str = "visitors_repl";

/// A commit waits this long for a replica's acknowledgement before the server would fall back to
/// asynchronous replication: about 49 days, in effect never. Writes wait instead, and the
/// controller reports that no replica acknowledges (docs/high-availability.md).
pub const SEMI_SYNC_TIMEOUT_MS: u64 = 4_294_967_295;

/// Where a replica replicates from: its upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream<'a> {
    /// The upstream's stable name, `<pod>.<headless service>.<namespace>.svc`, which its
    /// certificate names.
    pub host: &'a str,
    pub port: u16,
    pub password: &'a str,
    /// The CA file on the replica's own server that the upstream's certificate is verified with;
    /// `None`: plain text.
    pub ssl_ca: Option<&'a str>,
}

impl Flavor {
    pub fn of_version(version: &str) -> Self {
        if version.to_ascii_lowercase().contains("mariadb") { Flavor::MariaDb } else { Flavor::MySql }
    }

    /// One row: server id, read-only, GTID position, history by origin, whether the server would
    /// wait for semi-synchronous acknowledgements, and the CA file it serves TLS with.
    pub fn state_query(self) -> &'static str {
        match self {
            Flavor::MariaDb => {
                "SELECT @@server_id, @@read_only, @@gtid_binlog_pos, @@gtid_binlog_state, \
                 @@rpl_semi_sync_master_enabled, IFNULL(@@ssl_ca, ''), \
                 (SELECT COUNT(*) FROM mysql.user WHERE User = 'visitors_repl')"
            }
            Flavor::MySql => {
                "SELECT @@server_id, @@read_only, @@gtid_executed, @@gtid_executed, \
                 IFNULL((SELECT VARIABLE_VALUE = 'ON' FROM performance_schema.global_variables \
                 WHERE VARIABLE_NAME = 'rpl_semi_sync_source_enabled'), 0), IFNULL(@@ssl_ca, ''), \
                 (SELECT COUNT(*) FROM mysql.user WHERE User = 'visitors_repl')"
            }
        }
    }

    /// The replica status statement (zero rows on a server that replicates from none).
    pub fn replica_status(self) -> &'static str {
        match self {
            Flavor::MariaDb => "SHOW SLAVE STATUS",
            Flavor::MySql => "SHOW REPLICA STATUS",
        }
    }

    /// The replica status columns, in [`ReplicaColumns`]' order.
    pub fn replica_columns(self) -> ReplicaColumns {
        match self {
            Flavor::MariaDb => ReplicaColumns {
                upstream_host: "Master_Host",
                io_running: "Slave_IO_Running",
                sql_running: "Slave_SQL_Running",
                received: "Gtid_IO_Pos",
                lag: "Seconds_Behind_Master",
            },
            Flavor::MySql => ReplicaColumns {
                upstream_host: "Source_Host",
                io_running: "Replica_IO_Running",
                sql_running: "Replica_SQL_Running",
                received: "Retrieved_Gtid_Set",
                lag: "Seconds_Behind_Source",
            },
        }
    }

    /// Rows `(name, value)` of the semi-synchronous source's status: whether it runs, its
    /// acknowledging replicas, and the commits waiting for an acknowledgement.
    pub fn semi_sync_status(self) -> &'static str {
        match self {
            Flavor::MariaDb => {
                "SHOW GLOBAL STATUS WHERE Variable_name IN \
                 ('Rpl_semi_sync_master_status', 'Rpl_semi_sync_master_clients', 'Rpl_semi_sync_master_wait_sessions')"
            }
            Flavor::MySql => {
                "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM performance_schema.global_status WHERE VARIABLE_NAME IN \
                 ('Rpl_semi_sync_source_status', 'Rpl_semi_sync_source_clients', 'Rpl_semi_sync_source_wait_sessions')"
            }
        }
    }

    /// Gives the server the id it must replicate under (ids are per data directory: see
    /// docs/high-availability.md).
    pub fn set_server_id(self, id: u32) -> Vec<String> {
        vec![format!("SET GLOBAL server_id = {id}")]
    }

    /// Creates (or updates) the replication account on this server alone: not binary-logged,
    /// so that no primary waits for its acknowledgement and every server has it, seeded or not.
    pub fn ensure_replication_user(self, password: &str) -> Vec<String> {
        let password = quote(password);
        vec![
            "SET SESSION sql_log_bin = 0".to_string(),
            format!("CREATE USER IF NOT EXISTS '{REPLICATION_USER}'@'%' IDENTIFIED BY {password}"),
            format!("ALTER USER '{REPLICATION_USER}'@'%' IDENTIFIED BY {password}"),
            format!("GRANT REPLICATION SLAVE ON *.* TO '{REPLICATION_USER}'@'%'"),
        ]
    }

    /// No writes from clients (MySQL's `super_read_only` holds even for administrators;
    /// MariaDB has none: its administrators' accounts are the controller's and the agent's).
    /// A transaction open now cannot commit any more.
    pub fn fence(self) -> Vec<String> {
        match self {
            Flavor::MariaDb => vec!["SET GLOBAL read_only = ON".into()],
            Flavor::MySql => vec!["SET GLOBAL super_read_only = ON".into()],
        }
    }

    /// The ids of the server's client sessions: every session but this one, the server's own
    /// threads and replication's, and the operator's accounts (root: the controller, the agent
    /// and their Jobs; the replication account).
    pub fn client_sessions(self) -> &'static str {
        match self {
            Flavor::MariaDb | Flavor::MySql => {
                "SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() \
                 AND USER NOT IN ('root', 'visitors_repl', 'system user', 'event_scheduler', 'unauthenticated user', '') \
                 AND COMMAND NOT IN ('Binlog Dump', 'Binlog Dump GTID', 'Daemon', 'Connect', 'Killed')"
            }
        }
    }

    /// Writes from clients again: on the primary only.
    pub fn open_writes(self) -> Vec<String> {
        match self {
            Flavor::MariaDb => vec!["SET GLOBAL read_only = OFF".into()],
            Flavor::MySql => vec!["SET GLOBAL super_read_only = OFF".into(), "SET GLOBAL read_only = OFF".into()],
        }
    }

    /// Stops receiving from the upstream, keeping what was received to be applied: the fence of a
    /// failover (the old primary can get no acknowledgement any more, so it cannot commit).
    /// Never the applier: stopping both and starting again throws the unapplied events away.
    pub fn stop_receiving(self) -> Vec<String> {
        match self {
            Flavor::MariaDb => vec!["STOP SLAVE IO_THREAD".into()],
            Flavor::MySql => vec!["STOP REPLICA IO_THREAD".into()],
        }
    }

    /// A query returning 0 once the server has applied `position` (what it received), within
    /// `seconds`.
    pub fn wait_applied(self, position: &str, seconds: f64) -> String {
        let position = quote(position);
        match self {
            Flavor::MariaDb => format!("SELECT MASTER_GTID_WAIT({position}, {seconds})"),
            // WAIT_FOR_EXECUTED_GTID_SET answers 1 on a timeout; its timeout is whole seconds
            // (0 would wait forever).
            Flavor::MySql => {
                format!("SELECT WAIT_FOR_EXECUTED_GTID_SET({position}, {})", seconds.ceil().max(1.0) as u64)
            }
        }
    }

    /// The replica becomes a primary: it forgets its upstream. Its writes stay closed until
    /// [`Flavor::open_writes`].
    pub fn promote(self) -> Vec<String> {
        match self {
            Flavor::MariaDb => vec!["STOP SLAVE".into(), "RESET SLAVE ALL".into()],
            Flavor::MySql => vec!["STOP REPLICA".into(), "RESET REPLICA ALL".into()],
        }
    }

    /// The server, loaded from a backup out of its binary log (which is empty), starts its
    /// binary log at the backup's GTID `position`: it then holds, for replication and for the
    /// comparison of histories, exactly the transactions of the backup.
    pub fn adopt_position(self, position: &str) -> Vec<String> {
        let position = quote(position);
        match self {
            Flavor::MariaDb => {
                vec!["STOP SLAVE".into(), "RESET MASTER".into(), format!("SET GLOBAL gtid_binlog_state = {position}")]
            }
            Flavor::MySql => vec![
                "STOP REPLICA".into(),
                "RESET BINARY LOGS AND GTIDS".into(),
                format!("SET GLOBAL gtid_purged = {position}"),
            ],
        }
    }

    /// The primary waits for a replica's acknowledgement of every commit, and never falls back to
    /// not waiting. Armed only on the primary, once its replicas point at it: a replica that has
    /// it armed would wait for acknowledgements of what it applies, which nobody sends.
    pub fn arm_semi_sync(self) -> Vec<String> {
        let timeout = SEMI_SYNC_TIMEOUT_MS;
        match self {
            Flavor::MariaDb => vec![
                format!("SET GLOBAL rpl_semi_sync_master_timeout = {timeout}"),
                "SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_SYNC".into(),
                "SET GLOBAL rpl_semi_sync_master_wait_no_slave = ON".into(),
                "SET GLOBAL rpl_semi_sync_master_enabled = ON".into(),
            ],
            Flavor::MySql => vec![
                format!("SET GLOBAL rpl_semi_sync_source_timeout = {timeout}"),
                "SET GLOBAL rpl_semi_sync_source_wait_point = AFTER_SYNC".into(),
                "SET GLOBAL rpl_semi_sync_source_wait_no_replica = ON".into(),
                "SET GLOBAL rpl_semi_sync_source_wait_for_replica_count = 1".into(),
                "SET GLOBAL rpl_semi_sync_source_enabled = ON".into(),
            ],
        }
    }

    /// The server waits for no acknowledgement (a replica, or a primary under asynchronous
    /// durability). Releases commits that wait: run only where every waiting commit is known to
    /// be on the primary.
    pub fn disarm_semi_sync(self) -> Vec<String> {
        match self {
            Flavor::MariaDb => vec!["SET GLOBAL rpl_semi_sync_master_enabled = OFF".into()],
            Flavor::MySql => vec!["SET GLOBAL rpl_semi_sync_source_enabled = OFF".into()],
        }
    }

    /// The server replicates from `source`, acknowledging what it receives, starting after what
    /// its binary log holds (a former primary's own transactions included), which the caller has
    /// checked is all on the source. Any waiting commit of a former primary is released first
    /// (see [`Flavor::disarm_semi_sync`]); what it received and not applied is fetched again.
    pub fn replicate_from(self, upstream: &Upstream<'_>) -> Vec<String> {
        let host = quote(upstream.host);
        let password = quote(upstream.password);
        let port = upstream.port;
        let ssl = match upstream.ssl_ca {
            Some(ca) => {
                format!("1, {}_SSL_CA = {}, {}_SSL_VERIFY_SERVER_CERT = 1", self.prefix(), quote(ca), self.prefix())
            }
            None => "0".to_string(),
        };
        let prefix = self.prefix();
        let mut statements = self.disarm_semi_sync();
        match self {
            Flavor::MariaDb => {
                statements.push("STOP SLAVE".into());
                statements.push("SET GLOBAL gtid_slave_pos = @@gtid_binlog_pos".into());
                statements.push("SET GLOBAL rpl_semi_sync_slave_enabled = ON".into());
                statements.push(format!(
                    "CHANGE MASTER TO MASTER_HOST = {host}, MASTER_PORT = {port}, MASTER_USER = '{REPLICATION_USER}', \
                     MASTER_PASSWORD = {password}, MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1, \
                     {prefix}_SSL = {ssl}"
                ));
                statements.push("START SLAVE".into());
            }
            Flavor::MySql => {
                statements.push("STOP REPLICA".into());
                statements.push("SET GLOBAL rpl_semi_sync_replica_enabled = ON".into());
                statements.push(format!(
                    "CHANGE REPLICATION SOURCE TO SOURCE_HOST = {host}, SOURCE_PORT = {port}, \
                     SOURCE_USER = '{REPLICATION_USER}', SOURCE_PASSWORD = {password}, SOURCE_AUTO_POSITION = 1, \
                     SOURCE_CONNECT_RETRY = 1, {prefix}_SSL = {ssl}"
                ));
                statements.push("START REPLICA".into());
            }
        }
        statements
    }

    fn prefix(self) -> &'static str {
        match self {
            Flavor::MariaDb => "MASTER",
            Flavor::MySql => "SOURCE",
        }
    }
}

/// The names of the replica status columns the controller reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaColumns {
    pub upstream_host: &'static str,
    pub io_running: &'static str,
    pub sql_running: &'static str,
    /// What the replica received: MariaDB's position, MySQL's retrieved set (to which its
    /// executed set is added).
    pub received: &'static str,
    pub lag: &'static str,
}

/// A SQL string literal.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream() -> Upstream<'static> {
        Upstream { host: "ex-mysql-1.ex-mysql-headless.shop.svc", port: 3306, password: "p'w", ssl_ca: Some("/ca.crt") }
    }

    #[test]
    fn the_family_is_told_by_the_version() {
        assert_eq!(Flavor::of_version("10.11.19-MariaDB-0+deb12u1"), Flavor::MariaDb);
        assert_eq!(Flavor::of_version("8.4.3"), Flavor::MySql);
    }

    #[test]
    fn a_mariadb_replica_starts_from_its_own_log_over_verified_tls() {
        let statements = Flavor::MariaDb.replicate_from(&upstream());
        assert_eq!(
            statements,
            [
                "SET GLOBAL rpl_semi_sync_master_enabled = OFF",
                "STOP SLAVE",
                "SET GLOBAL gtid_slave_pos = @@gtid_binlog_pos",
                "SET GLOBAL rpl_semi_sync_slave_enabled = ON",
                "CHANGE MASTER TO MASTER_HOST = 'ex-mysql-1.ex-mysql-headless.shop.svc', MASTER_PORT = 3306, \
                 MASTER_USER = 'visitors_repl', MASTER_PASSWORD = 'p\\'w', MASTER_USE_GTID = slave_pos, \
                 MASTER_CONNECT_RETRY = 1, MASTER_SSL = 1, MASTER_SSL_CA = '/ca.crt', MASTER_SSL_VERIFY_SERVER_CERT = 1",
                "START SLAVE",
            ]
        );
        let plain = Upstream { ssl_ca: None, ..upstream() };
        let replica = Flavor::MariaDb.replicate_from(&plain);
        assert!(replica[4].ends_with("MASTER_SSL = 0"), "{}", replica[4]);
    }

    /// MySQL 8.4 cannot run in the e2e suite: its SQL is checked here, word by word, against the
    /// statements the 8.4 manual gives (8.4 removed every SLAVE and MASTER form).
    #[test]
    fn mysql_uses_the_8_4_statements_only() {
        let mysql = Flavor::MySql;
        assert_eq!(
            mysql.replicate_from(&upstream()),
            [
                "SET GLOBAL rpl_semi_sync_source_enabled = OFF",
                "STOP REPLICA",
                "SET GLOBAL rpl_semi_sync_replica_enabled = ON",
                "CHANGE REPLICATION SOURCE TO SOURCE_HOST = 'ex-mysql-1.ex-mysql-headless.shop.svc', SOURCE_PORT = 3306, \
                 SOURCE_USER = 'visitors_repl', SOURCE_PASSWORD = 'p\\'w', SOURCE_AUTO_POSITION = 1, \
                 SOURCE_CONNECT_RETRY = 1, SOURCE_SSL = 1, SOURCE_SSL_CA = '/ca.crt', SOURCE_SSL_VERIFY_SERVER_CERT = 1",
                "START REPLICA",
            ]
        );
        assert_eq!(mysql.promote(), ["STOP REPLICA", "RESET REPLICA ALL"]);
        assert_eq!(
            mysql.adopt_position("u:1-5"),
            ["STOP REPLICA", "RESET BINARY LOGS AND GTIDS", "SET GLOBAL gtid_purged = 'u:1-5'"]
        );
        assert_eq!(mysql.stop_receiving(), ["STOP REPLICA IO_THREAD"]);
        assert_eq!(mysql.fence(), ["SET GLOBAL super_read_only = ON"]);
        assert_eq!(mysql.open_writes(), ["SET GLOBAL super_read_only = OFF", "SET GLOBAL read_only = OFF"]);
        assert_eq!(mysql.wait_applied("u:1-5", 2.5), "SELECT WAIT_FOR_EXECUTED_GTID_SET('u:1-5', 3)");
        assert_eq!(mysql.replica_status(), "SHOW REPLICA STATUS");
        assert!(mysql.arm_semi_sync().contains(&"SET GLOBAL rpl_semi_sync_source_wait_point = AFTER_SYNC".to_string()));
        for statement in [mysql.state_query(), mysql.semi_sync_status()] {
            assert!(!statement.contains("slave") && !statement.contains("master"), "{statement}");
        }
    }

    #[test]
    fn the_primary_waits_after_sync_and_never_falls_back() {
        let armed = Flavor::MariaDb.arm_semi_sync();
        assert_eq!(armed[0], "SET GLOBAL rpl_semi_sync_master_timeout = 4294967295");
        assert!(armed.contains(&"SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_SYNC".to_string()));
        assert!(armed.contains(&"SET GLOBAL rpl_semi_sync_master_wait_no_slave = ON".to_string()));
        assert_eq!(armed.last().unwrap(), "SET GLOBAL rpl_semi_sync_master_enabled = ON", "armed last");
        assert_eq!(Flavor::MariaDb.wait_applied("0-101-7", 2.0), "SELECT MASTER_GTID_WAIT('0-101-7', 2)");
    }

    #[test]
    fn client_sessions_leave_the_operators_and_the_servers_own_alone() {
        for flavor in [Flavor::MariaDb, Flavor::MySql] {
            let query = flavor.client_sessions();
            for kept in ["'root'", "'visitors_repl'", "CONNECTION_ID()", "'Binlog Dump'", "'system user'"] {
                assert!(query.contains(kept), "{flavor:?} {query}");
            }
        }
    }

    #[test]
    fn a_server_loaded_from_a_backup_starts_its_binary_log_at_the_backup_position() {
        assert_eq!(
            Flavor::MariaDb.adopt_position("0-101-7,1-102-3"),
            ["STOP SLAVE", "RESET MASTER", "SET GLOBAL gtid_binlog_state = '0-101-7,1-102-3'"]
        );
    }

    #[test]
    fn the_replication_account_is_made_on_each_server_without_the_binary_log() {
        let statements = Flavor::MariaDb.ensure_replication_user("s3cret");
        assert_eq!(statements[0], "SET SESSION sql_log_bin = 0");
        assert!(statements.iter().any(|s| s == "GRANT REPLICATION SLAVE ON *.* TO 'visitors_repl'@'%'"));
    }
}
