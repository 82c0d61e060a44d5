//! Pure edits of the text of statements a restore runs: a trigger or a default moved to the
//! staging schema and back, an event's status set, and what a `CREATE`/`ALTER`/`DROP EVENT`
//! does to an event.

use std::collections::{BTreeMap, HashMap};

use super::EventStatus;
use crate::format::quote_ident;
use crate::mysql::catalog;

/// `statement` with every sequence of `database` it takes values from (`nextval(`db`.`s`)`,
/// `lastval(...)`, as the server prints a default) named in `schema` instead.
pub(super) fn sequences_moved_to(statement: &str, database: &str, schema: &str) -> String {
    let mut moved = statement.to_string();
    for function in ["nextval(", "lastval("] {
        let from = format!("{function}{}.", quote_ident(database));
        moved = moved.replace(&from, &format!("{function}{}.", quote_ident(schema)));
    }
    moved
}

/// `statement` with the status of a `CREATE EVENT` or `ALTER EVENT` (`ENABLE`, `DISABLE`,
/// `DISABLE ON SLAVE`) set to `status`, the clause added where it has none (any other
/// statement as it is).
pub(super) fn event_with_status(statement: &str, status: EventStatus) -> String {
    match status.clause() {
        Some(clause) => event_with_clause(statement, clause),
        None => statement.to_string(),
    }
}

/// `statement` with the status clause of a `CREATE EVENT` or `ALTER EVENT` set to `clause`
/// (`ENABLE`, `DISABLE`, `DISABLE ON SLAVE`), added where it has none (any other statement as
/// it is).
pub(super) fn event_with_clause(statement: &str, clause: &str) -> String {
    if event_change(statement).is_none_or(|change| change.verb == EventVerb::Drop) {
        return statement.to_string();
    }
    let tokens = header_tokens(statement, "DO");
    let mut changed = statement.to_string();
    match status_range(&tokens) {
        Some(range) => changed.replace_range(range, clause),
        None => match tokens
            .iter()
            .find(|t| t.is_word("COMMENT"))
            .map(|t| t.start)
            .or_else(|| body_start(statement, &tokens))
        {
            Some(at) => changed.insert_str(at, &format!("{clause} ")),
            None => changed = format!("{} {clause}", changed.trim_end()),
        },
    }
    changed
}

/// The status clause of a `CREATE EVENT` or `ALTER EVENT`, as the server prints it (`ENABLE`,
/// `DISABLE`, `DISABLE ON SLAVE`); none when the statement has none.
pub(super) fn event_status(statement: &str) -> Option<String> {
    let tokens = header_tokens(statement, "DO");
    let range = status_range(&tokens)?;
    Some(statement[range].split_whitespace().collect::<Vec<_>>().join(" ").to_ascii_uppercase())
}

/// The byte range of the status clause among a header's tokens.
fn status_range(tokens: &[Token<'_>]) -> Option<std::ops::Range<usize>> {
    let at = tokens.iter().position(|t| t.is_word("ENABLE") || t.is_word("DISABLE"))?;
    let on_slave = tokens[at].is_word("DISABLE")
        && tokens.get(at + 1).is_some_and(|t| t.is_word("ON"))
        && tokens.get(at + 2).is_some_and(|t| t.is_word("SLAVE"));
    let last = if on_slave { at + 2 } else { at };
    Some(tokens[at].start..tokens[last].end)
}

/// Where an event's body (`DO ...`) begins, if it has one, after its header's `tokens`.
fn body_start(statement: &str, tokens: &[Token<'_>]) -> Option<usize> {
    let after = tokens.last().map_or(0, |t| t.end);
    let rest = &statement[after..];
    let offset = rest.len() - rest.trim_start().len();
    rest.trim_start().get(..2).filter(|w| w.eq_ignore_ascii_case("DO")).map(|_| after + offset)
}

/// What a `CREATE`, `ALTER` or `DROP EVENT` statement does to which event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct EventChange {
    pub verb: EventVerb,
    /// The event's name, without its database.
    pub name: String,
    /// The database the statement qualifies the name with, if it does.
    pub database: Option<String>,
    /// `ALTER EVENT ... RENAME TO`: its new name, without its database.
    pub renamed_to: Option<String>,
    /// Its status clause, when it has one.
    pub status: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EventVerb {
    Create,
    Alter,
    Drop,
}

/// The object keywords of `CREATE`, `ALTER` and `DROP`: the first one names what they act on.
const OBJECT_WORDS: [&str; 9] =
    ["TABLE", "INDEX", "VIEW", "TRIGGER", "PROCEDURE", "FUNCTION", "EVENT", "SEQUENCE", "DATABASE"];

/// What `statement` does to an event, when it is a `CREATE`, `ALTER` or `DROP EVENT`.
pub(super) fn event_change(statement: &str) -> Option<EventChange> {
    let tokens = header_tokens(statement, "DO");
    let verb = match tokens.first()? {
        t if t.is_word("CREATE") => EventVerb::Create,
        t if t.is_word("ALTER") => EventVerb::Alter,
        t if t.is_word("DROP") => EventVerb::Drop,
        _ => return None,
    };
    let object = tokens.iter().position(|t| OBJECT_WORDS.iter().any(|w| t.is_word(w)))?;
    if !tokens[object].is_word("EVENT") {
        return None;
    }
    let mut at = object + 1;
    while tokens.get(at).is_some_and(|t| t.is_word("IF") || t.is_word("NOT") || t.is_word("EXISTS")) {
        at += 1;
    }
    let (database, name) = name_at(&tokens, at)?;
    let renamed_to = tokens
        .windows(2)
        .position(|pair| pair[0].is_word("RENAME") && pair[1].is_word("TO"))
        .and_then(|rename| name_at(&tokens, rename + 2))
        .map(|(_, name)| name);
    Some(EventChange { verb, name, database, renamed_to, status: event_status(statement) })
}

/// The possibly qualified name that begins at `at`, as its database (if named) and its name.
fn name_at(tokens: &[Token<'_>], at: usize) -> Option<(Option<String>, String)> {
    let first = tokens.get(at)?.identifier()?;
    match (tokens.get(at + 1), tokens.get(at + 2)) {
        (Some(dot), Some(name)) if dot.text == "." => Some((Some(first), name.identifier()?)),
        _ => Some((None, first)),
    }
}

/// `statement` with the database of a `CREATE TRIGGER`'s name and table changed from
/// `database` to `schema` (any other statement as it is). The server keeps a trigger's text as
/// it was written, so a trigger created as `db.t_ins ... ON db.t` names its database: rehearsed
/// as it is, it would be created in the target database instead of the staging schema (and
/// collide with the target's trigger of that name).
pub(super) fn trigger_moved_to(statement: &str, database: &str, schema: &str) -> String {
    let tokens = header_tokens(statement, "FOR");
    let Some(trigger) = tokens.iter().position(|t| t.is_word("TRIGGER")) else { return statement.to_string() };
    if !tokens.first().is_some_and(|t| t.is_word("CREATE")) {
        return statement.to_string();
    }
    let mut name = trigger + 1;
    if tokens.get(name).is_some_and(|t| t.is_word("IF")) {
        name += 3; // IF NOT EXISTS
    }
    let mut qualifiers: Vec<&Token> = qualifier_at(&tokens, name, database).into_iter().collect();
    if let Some(on) = tokens.iter().skip(name).position(|t| t.is_word("ON")) {
        qualifiers.extend(qualifier_at(&tokens, name + on + 1, database));
    }
    let mut moved = statement.to_string();
    for qualifier in qualifiers.into_iter().rev() {
        moved.replace_range(qualifier.start..qualifier.end, &quote_ident(schema));
    }
    moved
}

/// The token at `at` when it is the database part, `database`, of a qualified name.
fn qualifier_at<'a, 's>(tokens: &'a [Token<'s>], at: usize, database: &str) -> Option<&'a Token<'s>> {
    let (qualifier, dot, name) = (tokens.get(at)?, tokens.get(at + 1)?, tokens.get(at + 2)?);
    let qualified = dot.text == "." && name.identifier().is_some();
    (qualified && qualifier.identifier().as_deref() == Some(database)).then_some(qualifier)
}

/// A piece of a statement's text, with its byte range.
struct Token<'a> {
    text: &'a str,
    start: usize,
    end: usize,
}

impl Token<'_> {
    fn is_word(&self, word: &str) -> bool {
        self.text.eq_ignore_ascii_case(word)
    }

    /// The name a bare or backquoted identifier stands for.
    fn identifier(&self) -> Option<String> {
        if let Some(quoted) = self.text.strip_prefix('`').and_then(|t| t.strip_suffix('`')) {
            return Some(quoted.replace("``", "`"));
        }
        let bare = !self.text.is_empty() && self.text.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '$');
        bare.then(|| self.text.to_string())
    }
}

/// The tokens of a statement up to the word `stop` (`FOR EACH ROW` ends a trigger's header,
/// `DO` an event's): words, backquoted names, quoted strings, and single characters.
fn header_tokens<'s>(statement: &'s str, stop: &str) -> Vec<Token<'s>> {
    let bytes = statement.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if matches!(c, b'`' | b'\'' | b'"') {
            i += 1;
            while i < bytes.len() {
                if bytes[i] == c && bytes.get(i + 1) == Some(&c) {
                    i += 2;
                } else if bytes[i] == c {
                    i += 1;
                    break;
                } else {
                    i += 1;
                }
            }
        } else if c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80 {
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric() || matches!(bytes[i], b'_' | b'$') || bytes[i] >= 0x80)
            {
                i += 1;
            }
        } else {
            i += 1;
        }
        let token = Token { text: &statement[start..i], start, end: i };
        if token.is_word(stop) {
            break;
        }
        tokens.push(token);
    }
    tokens
}

/// The status each event of the staging schemas is to have once swapped in: a replay creates
/// and alters events there disabled (enabled, one would run against the staged tables), so what
/// its statements set is kept here. Staging schema → event name → status clause.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct EventStatuses(HashMap<String, BTreeMap<String, String>>);

impl EventStatuses {
    /// Records the events of `schema` as `statements` (a backup's `events.sql`) create them.
    pub fn add_backed_up(&mut self, schema: &str, statements: &[String]) {
        for statement in statements {
            self.record(schema, statement);
        }
    }

    /// `statement` as it is run in `schema` during a replay: an event's status recorded and
    /// the event created or altered disabled.
    pub fn staged(&mut self, schema: &str, statement: &str) -> String {
        if !self.record(schema, statement) {
            return statement.to_string();
        }
        event_with_status(statement, EventStatus::Disabled)
    }

    /// `statement` as it is run during a replay from a database that is not restored: the event
    /// it names is qualified with its staging schema (`staging`.`e`).
    pub fn staged_qualified(&mut self, statement: &str) -> String {
        let Some(schema) = event_change(statement).and_then(|change| change.database) else {
            return statement.to_string();
        };
        self.staged(&schema, statement)
    }

    /// The statuses of the events of `schema`.
    pub fn of(&self, schema: &str) -> BTreeMap<String, String> {
        self.0.get(schema).cloned().unwrap_or_default()
    }

    /// Notes what `statement` does to an event of `schema`; whether it is an event statement.
    fn record(&mut self, schema: &str, statement: &str) -> bool {
        let Some(change) = event_change(statement) else { return false };
        let events = self.0.entry(schema.to_string()).or_default();
        match change.verb {
            EventVerb::Create => {
                events.insert(change.name, change.status.unwrap_or_else(|| "ENABLE".into()));
            }
            EventVerb::Alter => {
                let status = events.remove(&change.name).unwrap_or_else(|| "ENABLE".into());
                let status = change.status.unwrap_or(status);
                events.insert(change.renamed_to.unwrap_or(change.name), status);
            }
            EventVerb::Drop => {
                events.remove(&change.name);
            }
        }
        true
    }
}

/// `statements` (views, routines, triggers or events, each after the `SET`s of its session)
/// with each object whose text is ASCII created with the client character set it was created
/// with (named in its session's `SET`, see [`catalog::CREATED_WITH`]), so that it reads as the
/// source's; an object with other text stays utf8mb4, the character set its text is in.
pub(super) fn in_original_charsets(mut statements: Vec<String>) -> Vec<String> {
    let marker = format!("/* {} ", catalog::CREATED_WITH);
    for at in 0..statements.len().saturating_sub(1) {
        let Some(start) = statements[at].find(&marker) else { continue };
        let original = statements[at][start + marker.len()..].split_whitespace().next().unwrap_or_default().to_string();
        if statements[at + 1].is_ascii() && !original.is_empty() {
            statements[at] = statements[at].replacen(
                "character_set_client = utf8mb4",
                &format!("character_set_client = {original}"),
                1,
            );
        }
    }
    statements
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trigger_naming_its_database_is_rehearsed_in_the_staging_schema() {
        let moved = |statement: &str| trigger_moved_to(statement, "app", "visitors_restore_1");
        assert_eq!(
            moved(
                "CREATE DEFINER=`root`@`localhost` TRIGGER app.a_logged AFTER INSERT ON app.a FOR EACH ROW INSERT INTO app.log VALUES (1)"
            ),
            "CREATE DEFINER=`root`@`localhost` TRIGGER `visitors_restore_1`.a_logged AFTER INSERT ON `visitors_restore_1`.a FOR EACH ROW INSERT INTO app.log VALUES (1)"
        );
        assert_eq!(
            moved(
                "create definer='u'@'%' trigger if not exists `app`.`t``x` before update on `app`.`t y` for each row set @a = 1"
            ),
            "create definer='u'@'%' trigger if not exists `visitors_restore_1`.`t``x` before update on `visitors_restore_1`.`t y` for each row set @a = 1"
        );
        let unqualified = "CREATE TRIGGER a_logged AFTER INSERT ON a FOR EACH ROW INSERT INTO app.log VALUES (1)";
        assert_eq!(moved(unqualified), unqualified, "an unqualified trigger goes where USE says");
        let other = "CREATE TRIGGER other.x AFTER INSERT ON other.a FOR EACH ROW SET @a = 1";
        assert_eq!(moved(other), other, "only the restored database's name is moved");
        let set = "SET SESSION sql_mode = 'STRICT_TRANS_TABLES'";
        assert_eq!(moved(set), set);
        let function = "CREATE DEFINER=`root`@`localhost` FUNCTION `twice`(x INT) RETURNS int(11) RETURN 2 * x";
        assert_eq!(moved(function), function);
        let non_ascii = "CREATE TRIGGER `hård`.`tr` AFTER INSERT ON `hård`.`t` FOR EACH ROW SET @a = 1";
        assert_eq!(
            trigger_moved_to(non_ascii, "hård", "s"),
            "CREATE TRIGGER `s`.`tr` AFTER INSERT ON `s`.`t` FOR EACH ROW SET @a = 1"
        );
    }

    #[test]
    fn an_event_is_recreated_with_the_status_asked_for() {
        let event = |status: &str| {
            format!(
                "CREATE DEFINER=`root`@`localhost` EVENT `PRESERVE ENABLE` ON SCHEDULE EVERY 1 HOUR STARTS \
                 '2026-11-27 22:13:37' ON COMPLETION NOT PRESERVE {status} COMMENT 'DISABLE' DO insert into t values ('ENABLE')"
            )
        };
        let cases = [
            ("ENABLE", EventStatus::Disabled, "DISABLE"),
            ("ENABLE", EventStatus::DisabledOnReplica, "DISABLE ON SLAVE"),
            ("DISABLE ON SLAVE", EventStatus::Disabled, "DISABLE"),
            ("DISABLE", EventStatus::DisabledOnReplica, "DISABLE ON SLAVE"),
            ("ENABLE", EventStatus::AsBackedUp, "ENABLE"),
            ("DISABLE ON SLAVE", EventStatus::AsBackedUp, "DISABLE ON SLAVE"),
        ];
        for (backed_up, status, expected) in cases {
            assert_eq!(event_with_status(&event(backed_up), status), event(expected), "{backed_up} as {status:?}");
        }
        let written = [
            (
                "CREATE EVENT e ON SCHEDULE EVERY 1 DAY DO DELETE FROM t",
                "CREATE EVENT e ON SCHEDULE EVERY 1 DAY DISABLE DO DELETE FROM t",
            ),
            ("ALTER EVENT app.e ENABLE", "ALTER EVENT app.e DISABLE"),
            ("ALTER EVENT e RENAME TO f", "ALTER EVENT e RENAME TO f DISABLE"),
            ("alter event e comment 'x' do delete from t", "alter event e DISABLE comment 'x' do delete from t"),
            ("DROP EVENT IF EXISTS e", "DROP EVENT IF EXISTS e"),
        ];
        for (statement, disabled) in written {
            assert_eq!(event_with_status(statement, EventStatus::Disabled), disabled);
        }
        let preserved = "CREATE EVENT e ON SCHEDULE AT '2030-01-01 00:00:00' ON COMPLETION PRESERVE DO SET @a = 1";
        assert_eq!(
            event_with_status(preserved, EventStatus::Disabled),
            "CREATE EVENT e ON SCHEDULE AT '2030-01-01 00:00:00' ON COMPLETION PRESERVE DISABLE DO SET @a = 1"
        );
        let routine = "CREATE PROCEDURE p() SELECT 'ON COMPLETION PRESERVE ENABLE'";
        assert_eq!(event_with_status(routine, EventStatus::Disabled), routine);
    }

    #[test]
    fn a_staged_table_takes_its_defaults_from_the_staged_sequences() {
        let create = "CREATE TABLE `t` (\n  `id` int(11) NOT NULL DEFAULT nextval(`app`.`s`),\n  `o` int DEFAULT nextval(`other`.`s`),\n  `p` int DEFAULT lastval(`app`.`s``x`)\n)";
        assert_eq!(
            sequences_moved_to(create, "app", "visitors_restore_1"),
            "CREATE TABLE `t` (\n  `id` int(11) NOT NULL DEFAULT nextval(`visitors_restore_1`.`s`),\n  `o` int DEFAULT nextval(`other`.`s`),\n  `p` int DEFAULT lastval(`visitors_restore_1`.`s``x`)\n)"
        );
        assert_eq!(
            sequences_moved_to("nextval(`visitors_restore_1`.`s`)", "visitors_restore_1", "app"),
            "nextval(`app`.`s`)"
        );
    }

    #[test]
    fn what_an_event_statement_does_to_which_event() {
        let change = |verb, name: &str, renamed_to: Option<&str>, status: Option<&str>| EventChange {
            verb,
            name: name.into(),
            database: None,
            renamed_to: renamed_to.map(Into::into),
            status: status.map(Into::into),
        };
        let cases = [
            (
                "CREATE DEFINER=`root`@`localhost` EVENT `app`.`e``1` ON SCHEDULE EVERY 1 HOUR DISABLE ON SLAVE DO SET @a = 1",
                Some(EventChange {
                    database: Some("app".into()),
                    ..change(EventVerb::Create, "e`1", None, Some("DISABLE ON SLAVE"))
                }),
            ),
            (
                "create event if not exists e on schedule every 1 day do delete from t",
                Some(change(EventVerb::Create, "e", None, None)),
            ),
            ("ALTER EVENT e RENAME TO app.f ENABLE", Some(change(EventVerb::Alter, "e", Some("f"), Some("ENABLE")))),
            ("DROP EVENT IF EXISTS `e`", Some(change(EventVerb::Drop, "e", None, None))),
            ("CREATE TRIGGER event AFTER INSERT ON t FOR EACH ROW SET @a = 1", None),
            ("CREATE PROCEDURE p() SELECT 1", None),
        ];
        for (statement, expected) in cases {
            assert_eq!(event_change(statement), expected, "{statement}");
        }
    }

    #[test]
    fn a_replay_remembers_the_status_its_statements_give_each_event() {
        let mut statuses = EventStatuses::default();
        statuses.add_backed_up(
            "s",
            &[
                "SET SESSION sql_mode = ''".into(),
                "CREATE EVENT `kept` ON SCHEDULE EVERY 1 DAY ON COMPLETION NOT PRESERVE ENABLE DO SET @a = 1".into(),
                "CREATE EVENT `off` ON SCHEDULE EVERY 1 DAY ON COMPLETION NOT PRESERVE DISABLE DO SET @a = 1".into(),
            ],
        );
        let replayed = [
            (
                "CREATE EVENT added ON SCHEDULE EVERY 1 HOUR DO SET @a = 1",
                "CREATE EVENT added ON SCHEDULE EVERY 1 HOUR DISABLE DO SET @a = 1",
            ),
            ("ALTER EVENT off ENABLE", "ALTER EVENT off DISABLE"),
            ("ALTER EVENT kept RENAME TO renamed", "ALTER EVENT kept RENAME TO renamed DISABLE"),
            ("DROP EVENT added", "DROP EVENT added"),
            ("INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (1)"),
        ];
        for (statement, staged) in replayed {
            assert_eq!(statuses.staged("s", statement), staged);
        }
        let expected: BTreeMap<String, String> =
            [("off".to_string(), "ENABLE".to_string()), ("renamed".to_string(), "ENABLE".to_string())].into();
        assert_eq!(statuses.of("s"), expected);
        assert!(statuses.of("other").is_empty());
    }

    #[test]
    fn an_ascii_object_is_created_with_the_client_character_set_it_was_created_with() {
        let set = "SET SESSION character_set_client = utf8mb4, SESSION collation_connection = 'latin1_swedish_ci' /* created with character_set_client latin1 */";
        let statements = vec![
            "SET SESSION sql_mode = ''".to_string(),
            set.to_string(),
            "CREATE VIEW v AS SELECT 1".to_string(),
            set.to_string(),
            "CREATE VIEW w AS SELECT 'café'".to_string(),
        ];
        let created = in_original_charsets(statements);
        assert!(created[1].starts_with("SET SESSION character_set_client = latin1,"), "{}", created[1]);
        assert!(created[3].starts_with("SET SESSION character_set_client = utf8mb4,"), "non-ASCII text stays utf8mb4");
        let older =
            vec!["SET SESSION character_set_client = utf8mb4".to_string(), "CREATE VIEW v AS SELECT 1".to_string()];
        assert_eq!(in_original_charsets(older.clone()), older, "a backup of an older agent names no original");
    }
}
