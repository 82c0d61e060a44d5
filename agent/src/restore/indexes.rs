//! Secondary indexes of a large table built after its rows are loaded.
//!
//! InnoDB inserts every loaded row into every index of a table; an index added afterwards
//! (`ALTER TABLE ... ADD KEY`) is built from the rows sorted once, which costs the server
//! about a quarter less CPU for a table with one secondary index (docs/benchmarks.md, run 9).
//! Only the plain `KEY` lines of `SHOW CREATE TABLE` are deferred, and only where nothing can
//! depend on them while the table is loaded: no foreign key in or into the table, InnoDB, no
//! system versioning. `UNIQUE`, `FULLTEXT` and `SPATIAL` keys stay in the `CREATE TABLE`.
//! The staged table gets its indexes back before it is checked and swapped in, so the table
//! `D` receives is the one the backup describes.

use crate::format::quote_ident;

/// A table's `CREATE TABLE` with its plain secondary keys taken out, and those keys.
#[derive(Debug, PartialEq)]
pub(super) struct DeferredKeys {
    pub create_without_keys: String,
    pub keys: Vec<String>,
}

impl DeferredKeys {
    /// The statement that adds the keys back to `target` (`schema`.`table`, quoted).
    pub fn alter_statement(&self, target: &str) -> String {
        let adds: Vec<String> = self.keys.iter().map(|key| format!("ADD {key}")).collect();
        format!("ALTER TABLE {target} {}", adds.join(", "))
    }
}

/// Splits the plain secondary keys out of `create` (a `SHOW CREATE TABLE` statement of table
/// `table`), unless the table cannot go without them during the load (see the module) or the
/// statement is not laid out as `SHOW CREATE TABLE` prints it. `others` are the `CREATE TABLE`
/// statements of the database's other tables, to see whether a foreign key points at `table`.
pub(super) fn split_plain_keys(table: &str, create: &str, others: &[&str]) -> Option<DeferredKeys> {
    if !create.starts_with("CREATE TABLE ")
        || !create.contains("ENGINE=InnoDB")
        || create.contains("FOREIGN KEY")
        || create.contains("WITH SYSTEM VERSIONING")
        || is_referenced(table, others)
    {
        return None;
    }
    let lines: Vec<&str> = create.lines().collect();
    let close = lines.iter().position(|line| line.starts_with(')'))?;
    if close < 2 || !lines[0].ends_with(" (") {
        return None;
    }
    let body = &lines[1..close];
    if !body.iter().all(|line| line.starts_with("  ")) || !is_one_definition_per_line(body) {
        return None;
    }
    let (keys, kept): (Vec<&str>, Vec<&str>) = body
        .iter()
        .map(|line| line.trim().trim_end_matches(','))
        .partition(|definition| definition.starts_with("KEY `"));
    if keys.is_empty() || kept.is_empty() {
        return None;
    }
    let kept: Vec<String> = kept.iter().map(|definition| format!("  {definition}")).collect();
    let create_without_keys = [lines[0].to_string(), kept.join(",\n"), lines[close..].join("\n")].join("\n");
    Some(DeferredKeys { create_without_keys, keys: keys.into_iter().map(String::from).collect() })
}

/// Every line but the last ends with a comma: each definition is on a line of its own.
fn is_one_definition_per_line(body: &[&str]) -> bool {
    let (last, rest) = body.split_last().expect("a body of at least one line");
    rest.iter().all(|line| line.ends_with(',')) && !last.ends_with(',')
}

fn is_referenced(table: &str, others: &[&str]) -> bool {
    let reference = format!("REFERENCES {}", quote_ident(table));
    let qualified = format!(".{} (", quote_ident(table));
    others
        .iter()
        .any(|other| other.contains(&reference) || (other.contains("REFERENCES ") && other.contains(&qualified)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIG: &str = "CREATE TABLE `big` (\n  `id` bigint(20) NOT NULL,\n  `name` varchar(64) NOT NULL,\n  `at` datetime DEFAULT NULL,\n  PRIMARY KEY (`id`),\n  UNIQUE KEY `name_u` (`name`),\n  KEY `by_at` (`at`),\n  KEY `name_at` (`name`(10),`at`) COMMENT 'two, columns'\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci";

    #[test]
    fn plain_keys_are_taken_out_and_added_back_in_order() {
        let deferred = split_plain_keys("big", BIG, &[]).expect("big defers its plain keys");
        assert_eq!(
            deferred.create_without_keys,
            "CREATE TABLE `big` (\n  `id` bigint(20) NOT NULL,\n  `name` varchar(64) NOT NULL,\n  `at` datetime DEFAULT NULL,\n  PRIMARY KEY (`id`),\n  UNIQUE KEY `name_u` (`name`)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci"
        );
        assert_eq!(
            deferred.alter_statement("`s`.`big`"),
            "ALTER TABLE `s`.`big` ADD KEY `by_at` (`at`), ADD KEY `name_at` (`name`(10),`at`) COMMENT 'two, columns'"
        );
    }

    #[test]
    fn a_table_that_a_foreign_key_may_need_keeps_its_keys() {
        let with_foreign_key = BIG.replace(
            "  KEY `by_at` (`at`),",
            "  KEY `by_at` (`at`),\n  CONSTRAINT `f` FOREIGN KEY (`at`) REFERENCES `other` (`at`),",
        );
        assert_eq!(split_plain_keys("big", &with_foreign_key, &[]), None);
        let child = "CREATE TABLE `child` (\n  `at` datetime,\n  KEY `at` (`at`),\n  CONSTRAINT `c` FOREIGN KEY (`at`) REFERENCES `big` (`at`)\n) ENGINE=InnoDB";
        assert_eq!(split_plain_keys("big", BIG, &[child]), None);
        let elsewhere = "CREATE TABLE `child` (\n  `at` datetime,\n  CONSTRAINT `c` FOREIGN KEY (`at`) REFERENCES `db`.`big` (`at`)\n) ENGINE=InnoDB";
        assert_eq!(split_plain_keys("big", BIG, &[elsewhere]), None);
        assert!(split_plain_keys("big", BIG, &["CREATE TABLE `bigger` (\n  `a` int\n) ENGINE=InnoDB"]).is_some());
    }

    #[test]
    fn other_engines_versioned_tables_and_unusual_layouts_keep_their_keys() {
        assert_eq!(split_plain_keys("big", &BIG.replace("InnoDB", "Aria"), &[]), None);
        assert_eq!(split_plain_keys("big", &format!("{BIG} WITH SYSTEM VERSIONING"), &[]), None);
        let one_line = "CREATE TABLE `big` (`id` int, KEY `k` (`id`)) ENGINE=InnoDB";
        assert_eq!(split_plain_keys("big", one_line, &[]), None);
        let only_keys_left = "CREATE TABLE `t` (\n  KEY `k` (`id`)\n) ENGINE=InnoDB";
        assert_eq!(split_plain_keys("t", only_keys_left, &[]), None);
        let no_plain_key = BIG
            .replace("  KEY `by_at` (`at`),\n", "")
            .replace(",\n  KEY `name_at` (`name`(10),`at`) COMMENT 'two, columns'", "");
        assert_eq!(split_plain_keys("big", &no_plain_key, &[]), None);
    }

    #[test]
    fn the_last_key_leaves_no_trailing_comma() {
        let create = "CREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n  `v` int(11) DEFAULT NULL,\n  PRIMARY KEY (`id`),\n  KEY `v` (`v`)\n) ENGINE=InnoDB";
        let deferred = split_plain_keys("t", create, &[]).unwrap();
        assert_eq!(
            deferred.create_without_keys,
            "CREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n  `v` int(11) DEFAULT NULL,\n  PRIMARY KEY (`id`)\n) ENGINE=InnoDB"
        );
    }
}
