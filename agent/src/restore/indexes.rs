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

use std::collections::HashSet;

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
/// statement is not laid out as `SHOW CREATE TABLE` prints it. `referenced` are the tables a
/// foreign key of the database points at ([`referenced_tables`]).
pub(super) fn split_plain_keys(table: &str, create: &str, referenced: &HashSet<String>) -> Option<DeferredKeys> {
    if !create.starts_with("CREATE TABLE ")
        || !create.contains("ENGINE=InnoDB")
        || create.contains("FOREIGN KEY")
        || create.contains("WITH SYSTEM VERSIONING")
        || referenced.contains(table)
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

/// The tables the foreign keys of `creates` point at (`REFERENCES `t`` or `REFERENCES `db`.`t``),
/// read once for a whole database.
pub(super) fn referenced_tables<'a>(creates: impl IntoIterator<Item = &'a str>) -> HashSet<String> {
    let mut referenced = HashSet::new();
    for create in creates {
        for (at, _) in create.match_indices("REFERENCES ") {
            let rest = &create[at + "REFERENCES ".len()..];
            let Some((first, rest)) = quoted_identifier(rest) else { continue };
            let table = rest.strip_prefix('.').and_then(quoted_identifier).map_or(first, |(second, _)| second);
            referenced.insert(table);
        }
    }
    referenced
}

/// The backquoted identifier `text` starts with (``` `` ``` stands for a backquote), and what follows.
fn quoted_identifier(text: &str) -> Option<(String, &str)> {
    let mut rest = text.strip_prefix('`')?;
    let mut name = String::new();
    loop {
        let end = rest.find('`')?;
        name.push_str(&rest[..end]);
        rest = &rest[end + 1..];
        match rest.strip_prefix('`') {
            Some(after) => {
                name.push('`');
                rest = after;
            }
            None => return Some((name, rest)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIG: &str = "CREATE TABLE `big` (\n  `id` bigint(20) NOT NULL,\n  `name` varchar(64) NOT NULL,\n  `at` datetime DEFAULT NULL,\n  PRIMARY KEY (`id`),\n  UNIQUE KEY `name_u` (`name`),\n  KEY `by_at` (`at`),\n  KEY `name_at` (`name`(10),`at`) COMMENT 'two, columns'\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci";

    #[test]
    fn plain_keys_are_taken_out_and_added_back_in_order() {
        let deferred = split_plain_keys("big", BIG, &HashSet::new()).expect("big defers its plain keys");
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
        assert_eq!(split_plain_keys("big", &with_foreign_key, &HashSet::new()), None);
        let child = "CREATE TABLE `child` (\n  `at` datetime,\n  KEY `at` (`at`),\n  CONSTRAINT `c` FOREIGN KEY (`at`) REFERENCES `big` (`at`)\n) ENGINE=InnoDB";
        assert_eq!(split_plain_keys("big", BIG, &referenced_tables([child])), None);
        let elsewhere = "CREATE TABLE `child` (\n  `at` datetime,\n  CONSTRAINT `c` FOREIGN KEY (`at`) REFERENCES `db`.`big` (`at`)\n) ENGINE=InnoDB";
        assert_eq!(split_plain_keys("big", BIG, &referenced_tables([elsewhere])), None);
        assert!(
            split_plain_keys("big", BIG, &referenced_tables(["CREATE TABLE `bigger` (\n  `a` int\n) ENGINE=InnoDB"]))
                .is_some()
        );
        let other_table = child.replace("REFERENCES `big`", "REFERENCES `bigger`");
        assert!(split_plain_keys("big", BIG, &referenced_tables([other_table.as_str()])).is_some());
        assert_eq!(referenced_tables(["x REFERENCES `a``b`.`c``d` (`e`)"]), HashSet::from(["c`d".to_string()]));
    }

    #[test]
    fn other_engines_versioned_tables_and_unusual_layouts_keep_their_keys() {
        assert_eq!(split_plain_keys("big", &BIG.replace("InnoDB", "Aria"), &HashSet::new()), None);
        assert_eq!(split_plain_keys("big", &format!("{BIG} WITH SYSTEM VERSIONING"), &HashSet::new()), None);
        let one_line = "CREATE TABLE `big` (`id` int, KEY `k` (`id`)) ENGINE=InnoDB";
        assert_eq!(split_plain_keys("big", one_line, &HashSet::new()), None);
        let only_keys_left = "CREATE TABLE `t` (\n  KEY `k` (`id`)\n) ENGINE=InnoDB";
        assert_eq!(split_plain_keys("t", only_keys_left, &HashSet::new()), None);
        let no_plain_key = BIG
            .replace("  KEY `by_at` (`at`),\n", "")
            .replace(",\n  KEY `name_at` (`name`(10),`at`) COMMENT 'two, columns'", "");
        assert_eq!(split_plain_keys("big", &no_plain_key, &HashSet::new()), None);
    }

    #[test]
    fn the_last_key_leaves_no_trailing_comma() {
        let create = "CREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n  `v` int(11) DEFAULT NULL,\n  PRIMARY KEY (`id`),\n  KEY `v` (`v`)\n) ENGINE=InnoDB";
        let deferred = split_plain_keys("t", create, &HashSet::new()).unwrap();
        assert_eq!(
            deferred.create_without_keys,
            "CREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n  `v` int(11) DEFAULT NULL,\n  PRIMARY KEY (`id`)\n) ENGINE=InnoDB"
        );
    }
}
