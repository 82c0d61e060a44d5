//! The accounts that hold privileges on the backed-up databases, with their grants on those
//! databases (`backup --users`), as statements that recreate them.

use std::collections::BTreeSet;

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use super::Connector;
use super::catalog::Definitions;
use crate::error::Result;
use crate::format::quote_ident;

/// Tables of `information_schema` that list grantees per database.
const PRIVILEGE_TABLES: [&str; 3] = ["SCHEMA_PRIVILEGES", "TABLE_PRIVILEGES", "COLUMN_PRIVILEGES"];

/// `CREATE USER IF NOT EXISTS` (with the account's authentication, a password hash) and the
/// `GRANT`s on `databases` of every account with a privilege on one of them.
pub async fn read(connector: &Connector, conn: &mut Conn, databases: &[String]) -> Result<Definitions> {
    let during = "reading users and grants";
    let mut grantees = BTreeSet::new();
    for database in databases {
        for table in PRIVILEGE_TABLES {
            let sql = format!("SELECT DISTINCT GRANTEE FROM information_schema.{table} WHERE TABLE_SCHEMA = ?");
            let found: Vec<String> = conn.exec(sql, (database,)).await.map_err(|e| connector.error(during, e))?;
            grantees.extend(found);
        }
    }
    let mut definitions = Definitions::default();
    for grantee in grantees {
        // GRANTEE is already quoted: 'name'@'host'.
        let create: Option<String> =
            conn.query_first(format!("SHOW CREATE USER {grantee}")).await.map_err(|e| connector.error(during, e))?;
        let Some(create) = create else { continue };
        definitions.statements.push(create.replacen("CREATE USER ", "CREATE USER IF NOT EXISTS ", 1));
        let grants: Vec<String> =
            conn.query(format!("SHOW GRANTS FOR {grantee}")).await.map_err(|e| connector.error(during, e))?;
        definitions.statements.extend(grants.into_iter().filter(|grant| grants_on(grant, databases)));
        definitions.names.push(grantee);
    }
    Ok(definitions)
}

/// Whether a `SHOW GRANTS` line grants privileges on one of `databases` (or its objects).
fn grants_on(grant: &str, databases: &[String]) -> bool {
    grant.starts_with("GRANT ") && databases.iter().any(|d| grant.contains(&format!(" ON {}.", quote_ident(d))))
}

#[cfg(test)]
mod tests {
    use super::grants_on;

    #[test]
    fn only_grants_on_the_backed_up_databases_are_kept() {
        let databases = ["app".to_string()];
        assert!(grants_on("GRANT SELECT, INSERT ON `app`.* TO `u`@`%`", &databases));
        assert!(grants_on("GRANT SELECT ON `app`.`t` TO `u`@`%`", &databases));
        assert!(!grants_on("GRANT USAGE ON *.* TO `u`@`%` IDENTIFIED BY PASSWORD '*AB'", &databases));
        assert!(!grants_on("GRANT ALL PRIVILEGES ON `app2`.* TO `u`@`%`", &databases));
    }
}
