//! The backup format (docs/backup-format.md is its public description): the manifest, the
//! layout of files under a backup's root, the statement files and the row encoding of data
//! chunks (the default text format of `LOAD DATA INFILE`).

use serde::{Deserialize, Serialize};
use visitors_agent_contract::archive::ServerIdentity;

pub const FORMAT_NAME: &str = "visitors-backup";
/// The format of a physical backup's manifest: an agent that reads logical backups only
/// refuses it by its name, where it would otherwise read a backup of no database.
pub const PHYSICAL_FORMAT_NAME: &str = "visitors-physical-backup";

/// Whether `name` is the format of a backup of this agent, logical or physical.
pub fn is_format_name(name: &str) -> bool {
    name == FORMAT_NAME || name == PHYSICAL_FORMAT_NAME
}
pub const FORMAT_VERSION: u32 = 1;
/// The format version of an encrypted backup's manifest (its envelope and the sealed manifest):
/// an agent that reads only version 1 refuses it by its version, not by a missing field.
pub const ENCRYPTED_FORMAT_VERSION: u32 = 2;
pub const MANIFEST_FILE: &str = "manifest.json";
/// Held (create-only) by a backup while it writes to a location; removed when it ends.
pub const LOCK_FILE: &str = ".backup.lock";
/// The encoding of data chunks: tab-separated fields, newline-terminated rows, backslash
/// escapes and `\N` for NULL; the defaults of `LOAD DATA INFILE`.
pub const DATA_FORMAT: &str = "load-data-tsv";
/// Statements in `.sql` files end with this line, inside `DELIMITER ;;` ... `DELIMITER ;`,
/// so the `mariadb` client reads them as they are and routine bodies keep their `;`.
pub const STATEMENT_END: &str = ";;";

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    Zstd,
    Gzip,
    None,
}

impl From<visitors_agent_contract::Compression> for Compression {
    fn from(compression: visitors_agent_contract::Compression) -> Self {
        match compression {
            visitors_agent_contract::Compression::Zstd => Self::Zstd,
            visitors_agent_contract::Compression::Gzip => Self::Gzip,
            visitors_agent_contract::Compression::None => Self::None,
        }
    }
}

impl Compression {
    pub fn name(self) -> &'static str {
        match self {
            Self::Zstd => "zstd",
            Self::Gzip => "gzip",
            Self::None => "none",
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            Self::Zstd => ".zst",
            Self::Gzip => ".gz",
            Self::None => "",
        }
    }
}

/// One file of the backup, relative to the backup's root.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FileEntry {
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub format: String,
    pub format_version: u32,
    pub tool: String,
    pub server: ServerInfo,
    pub started_at: String,
    pub finished_at: String,
    /// How the workers were brought to one snapshot.
    pub consistency: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<Position>,
    pub compression: Compression,
    pub data_format: String,
    pub databases: Vec<DatabaseEntry>,
    /// `users.sql`: the accounts with privileges on the databases and those grants
    /// (`backup --users`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub users: Option<FileEntry>,
    /// The accounts of `users`, as `'name'@'host'`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub user_names: Vec<String>,
    /// An encrypted backup's key, as its envelope says it too (the sealed manifest only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<Encryption>,
    /// A physical backup: the stream of the server's own backup tool, in chunks (`databases`
    /// is then empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical: Option<PhysicalEntry>,
}

/// `dataFormat` of a physical backup: mariadb-backup's `--stream=mbstream`.
pub const PHYSICAL_DATA_FORMAT: &str = "mbstream";

/// What a physical backup holds: the tool's stream, cut into chunks that, decrypted,
/// decompressed and put end to end, are the stream as the tool wrote it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PhysicalEntry {
    /// The tool, as it names itself (`mariadb-backup 10.11.19-MariaDB`).
    pub tool: String,
    /// Bytes of the stream, before compression.
    pub stream_bytes: u64,
    /// Files the stream holds.
    pub files: u64,
    /// The chunks, in the stream's order.
    pub chunks: Vec<FileEntry>,
    /// What every table held at the snapshot, read while the backup held its replica there
    /// (`physical::hold`); none for a run of a primary, which is never held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<TableContent>>,
}

/// One table's rows and content digest at a physical backup's snapshot: what a drill of the
/// run compares its restored copy with.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TableContent {
    pub database: String,
    pub table: String,
    /// The columns read, in order, as a logical backup's [`TableEntry::columns`].
    pub columns: Vec<String>,
    pub rows: u64,
    /// `xxh3-128-sum:<hex>` (see `content.rs`).
    pub content_digest: String,
}

/// How an encrypted backup's files are encrypted: public, in the clear part of its envelope.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Encryption {
    /// `age-x25519` (`crate::encryption::SCHEME`).
    pub scheme: String,
    /// The name of the key (the file a restore looks for in its keys directory), never the key.
    pub key_id: String,
    /// The age recipient (`age1...`) every file is encrypted to: the public half of the key.
    pub recipient: String,
}

/// `manifest.json` of an encrypted backup: in the clear only what commands without the key
/// read (`delete` reads `format`, `prune-archive --before-backup` the position); the whole
/// manifest (with `encryption` and `position` again, which must match) sealed with age.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    pub format: String,
    pub format_version: u32,
    pub encryption: Encryption,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<Position>,
    /// The manifest's JSON, encrypted with age to `encryption.recipient`, in base64.
    pub sealed_manifest: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ServerInfo {
    pub version: String,
    /// `mariadb` or `mysql`.
    pub flavour: String,
}

/// The binary log position of the snapshot, when the server logs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Position {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog_position: Option<u64>,
    /// The server's clock at the snapshot (RFC 3339): where a restore to a point in time
    /// starts its replay, in the server's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// The server the snapshot was taken on (a replica's, in a replicated app): `binlogFile`
    /// and `binlogPosition` are positions in its binary log, and mean nothing on another.
    /// Absent in backups of older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerIdentity>,
}

impl Position {
    pub fn describe(&self) -> Option<String> {
        match (&self.gtid, &self.binlog_file, self.binlog_position) {
            (Some(gtid), _, _) if !gtid.is_empty() => Some(format!("gtid:{gtid}")),
            (_, Some(file), Some(pos)) => Some(format!("{file}:{pos}")),
            _ => None,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseEntry {
    pub name: String,
    /// `CREATE DATABASE IF NOT EXISTS` with the database's character set and collation.
    pub schema: FileEntry,
    pub tables: Vec<TableEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub views: Option<FileEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub view_names: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routines: Option<FileEntry>,
    /// The routines of `routines`, as `PROCEDURE name` or `FUNCTION name`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routine_names: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triggers: Option<FileEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trigger_names: Vec<String>,
    /// `CREATE SEQUENCE` and `SETVAL` of each sequence, created before the tables (whose
    /// defaults may name them). Absent in backups of agents before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequences: Option<FileEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sequence_names: Vec<String>,
    /// `CREATE EVENT` of each scheduled event, recreated after the tables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<FileEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub event_names: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TableEntry {
    pub name: String,
    /// `CREATE TABLE` statement.
    pub schema: FileEntry,
    /// The columns in each data row, in order (generated columns are left out; a
    /// system-versioned table read with its history ends with its period's start and end).
    pub columns: Vec<String>,
    /// A system-versioned table whose rows include its history rows (`FOR SYSTEM_TIME ALL`),
    /// loaded with `system_versioning_insert_history`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub history: bool,
    /// The statement that loads one chunk read from standard input.
    pub load_sql: String,
    pub rows: u64,
    /// Uncompressed bytes of all chunks.
    pub data_bytes: u64,
    /// `CHECKSUM TABLE` in the snapshot, when the backup was asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<u64>,
    /// The content digest of the table's rows (`xxh3-128-sum:<hex>`, see `content.rs`),
    /// computed from the rows the backup read; a restore drill recomputes it from the restored
    /// server. Absent in backups of agents before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_digest: Option<String>,
    pub chunks: Vec<ChunkEntry>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChunkEntry {
    #[serde(flatten)]
    pub file: FileEntry,
    pub rows: u64,
    pub data_bytes: u64,
    /// Fields of the chunk holding an ENUM's error value (the index 0 a non-strict server
    /// stores for a value that is not a member): each raises warning 1265 when loaded, which
    /// the restore expects, and only those. Absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub enum_error_values: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl Manifest {
    /// Every file the manifest lists, the manifest itself excepted.
    pub fn files(&self) -> Vec<&FileEntry> {
        let mut files = Vec::new();
        for database in &self.databases {
            files.push(&database.schema);
            for table in &database.tables {
                files.push(&table.schema);
                files.extend(table.chunks.iter().map(|chunk| &chunk.file));
            }
            files.extend(
                database
                    .views
                    .iter()
                    .chain(&database.routines)
                    .chain(&database.triggers)
                    .chain(&database.sequences)
                    .chain(&database.events),
            );
        }
        files.extend(&self.users);
        files.extend(self.physical.iter().flat_map(|physical| &physical.chunks));
        files
    }

    pub fn table_count(&self) -> u64 {
        self.databases.iter().map(|d| d.tables.len() as u64).sum()
    }

    pub fn row_count(&self) -> u64 {
        self.databases.iter().flat_map(|d| &d.tables).map(|t| t.rows).sum()
    }

    /// Bytes of table data read, or of a physical backup's stream.
    pub fn data_bytes(&self) -> u64 {
        let tables: u64 = self.databases.iter().flat_map(|d| &d.tables).map(|t| t.data_bytes).sum();
        tables + self.physical.as_ref().map_or(0, |physical| physical.stream_bytes)
    }

    pub fn stored_bytes(&self) -> u64 {
        self.files().iter().map(|f| f.bytes).sum()
    }

    /// The manifest's own consistency, checked before any file is read: each table's rows and
    /// data bytes are the sums of its chunks', every file entry is a safe relative path with a
    /// SHA-256, no file is listed twice and no name appears twice. The first problem found.
    pub fn inconsistency(&self) -> Option<String> {
        let mut databases = std::collections::HashSet::new();
        for database in &self.databases {
            if !databases.insert(database.name.as_str()) {
                return Some(format!("database {} is listed twice", quote_ident(&database.name)));
            }
            let mut tables = std::collections::HashSet::new();
            for table in &database.tables {
                let name = format!("{}.{}", quote_ident(&database.name), quote_ident(&table.name));
                if !tables.insert(table.name.as_str()) {
                    return Some(format!("table {name} is listed twice"));
                }
                let chunk_rows: u64 = table.chunks.iter().map(|c| c.rows).sum();
                if chunk_rows != table.rows {
                    return Some(format!("table {name} has {} rows, its chunks {chunk_rows}", table.rows));
                }
                let chunk_bytes: u64 = table.chunks.iter().map(|c| c.data_bytes).sum();
                if chunk_bytes != table.data_bytes {
                    return Some(format!("table {name} has {} data bytes, its chunks {chunk_bytes}", table.data_bytes));
                }
            }
        }
        let physical = self.format == PHYSICAL_FORMAT_NAME;
        if physical != self.physical.is_some() || (physical && !self.databases.is_empty()) {
            return Some(format!(
                "a manifest of format {} lists {} and {} databases",
                self.format,
                if self.physical.is_some() { "a physical stream" } else { "no physical stream" },
                self.databases.len()
            ));
        }
        let mut paths = std::collections::HashSet::new();
        for file in self.files() {
            if let Some(problem) = file_entry_problem(file) {
                return Some(problem);
            }
            if !paths.insert(file.path.as_str()) {
                return Some(format!("file {} is listed twice", file.path));
            }
        }
        None
    }
}

/// What is wrong with one file entry, if anything: its path must stay inside the backup and
/// its SHA-256 be 64 hexadecimal digits.
fn file_entry_problem(file: &FileEntry) -> Option<String> {
    let path = &file.path;
    let safe_path = !path.is_empty()
        && !path.starts_with('/')
        && !path.contains('\\')
        && path.split('/').all(|segment| !segment.is_empty() && segment != "." && segment != "..")
        && path != MANIFEST_FILE
        && path != LOCK_FILE;
    if !safe_path {
        return Some(format!("file path '{path}' is not a file of the backup"));
    }
    let sha256_ok =
        file.sha256.len() == 64 && file.sha256.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !sha256_ok {
        return Some(format!("file {path} has no valid SHA-256 ('{}')", file.sha256));
    }
    None
}

/// Backup-relative paths. Names are encoded so that any database or table name gives one
/// safe path segment. Readers never rebuild a path from names: they take the manifest's.
pub mod layout {
    use sha2::{Digest, Sha256};

    use super::Compression;

    pub const USERS: &str = "users.sql";

    /// How a backup names the folders and files of its databases and tables.
    #[derive(Clone, Debug)]
    pub enum Names {
        /// The names themselves, encoded ([`segment`]).
        Plain,
        /// For an encrypted backup, whose storage must not learn its names either: 32 hex
        /// digits of a SHA-256 of the name keyed with this salt, drawn for the run and never
        /// stored (only the sealed manifest ties a name to its files).
        Opaque([u8; 16]),
    }

    impl Names {
        /// Opaque names with a salt of their own.
        pub fn opaque() -> Self {
            Names::Opaque(rand::random())
        }

        fn segment(&self, name: &str) -> String {
            match self {
                Names::Plain => segment(name),
                Names::Opaque(salt) => {
                    let digest = Sha256::new().chain_update(salt).chain_update(name.as_bytes()).finalize();
                    hex::encode(&digest[..16])
                }
            }
        }

        pub fn database_schema(&self, database: &str) -> String {
            format!("{}/database.sql", self.segment(database))
        }
        pub fn table_schema(&self, database: &str, table: &str) -> String {
            format!("{}/tables/{}.sql", self.segment(database), self.segment(table))
        }
        pub fn chunk(
            &self,
            database: &str,
            table: &str,
            range: usize,
            part: usize,
            compression: Compression,
        ) -> String {
            let (database, table) = (self.segment(database), self.segment(table));
            format!("{database}/data/{table}/{range:05}-{part:05}.tsv{}", compression.extension())
        }
        pub fn views(&self, database: &str) -> String {
            format!("{}/views.sql", self.segment(database))
        }
        pub fn routines(&self, database: &str) -> String {
            format!("{}/routines.sql", self.segment(database))
        }
        pub fn triggers(&self, database: &str) -> String {
            format!("{}/triggers.sql", self.segment(database))
        }
        pub fn sequences(&self, database: &str) -> String {
            format!("{}/sequences.sql", self.segment(database))
        }
        pub fn events(&self, database: &str) -> String {
            format!("{}/events.sql", self.segment(database))
        }
    }

    /// Keeps ASCII letters, digits, `_` and `-`; anything else becomes `@` and four hex
    /// digits per UTF-16 unit (as MySQL names its own files).
    pub fn segment(name: &str) -> String {
        let mut out = String::with_capacity(name.len());
        for unit in name.encode_utf16() {
            match char::from_u32(unit as u32) {
                Some(c) if c.is_ascii_alphanumeric() || c == '_' || c == '-' => out.push(c),
                _ => out.push_str(&format!("@{unit:04x}")),
            }
        }
        out
    }
}

/// Quotes an identifier with backticks.
pub fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// Quotes a string literal for SQL. Only for text without a backslash (a mode, a collation,
/// a file name), which the server reads alike whatever `sql_mode` says about backslashes;
/// [`binary_literal`] takes any text.
pub fn quote_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// A string as a hexadecimal literal: a binary string, the same bytes whatever the session's
/// character set and `sql_mode`.
pub fn binary_literal(value: &str) -> String {
    format!("X'{}'", hex::encode(value))
}

/// The statement that loads one chunk into `target` (an already quoted table name) from
/// `source` (a file name the client reads).
pub fn load_data_sql(target: &str, columns: &[String], source: &str) -> String {
    let columns: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
    format!(
        "LOAD DATA LOCAL INFILE {} INTO TABLE {target} CHARACTER SET binary ({})",
        quote_literal(source),
        columns.join(",")
    )
}

/// Writes statements as a `.sql` file the `mariadb` client can run as it is.
pub fn write_statements(header: &str, statements: &[String]) -> String {
    let mut out = format!("-- {header}\nDELIMITER {STATEMENT_END}\n");
    for statement in statements {
        out.push_str(statement.trim_end());
        out.push('\n');
        out.push_str(STATEMENT_END);
        out.push('\n');
    }
    out.push_str("DELIMITER ;\n");
    out
}

/// Reads back the statements of a file written by [`write_statements`].
pub fn read_statements(text: &str) -> Vec<String> {
    let mut statements = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        if line == STATEMENT_END {
            statements.push(std::mem::take(&mut current).trim_end().to_string());
        } else if current.is_empty() && (line.starts_with("DELIMITER ") || line.starts_with("-- ")) {
            continue;
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    statements
}

/// Appends one field in `LOAD DATA` text form; `None` is SQL NULL.
pub fn encode_field(out: &mut Vec<u8>, value: Option<&[u8]>) {
    let Some(bytes) = value else {
        out.extend_from_slice(b"\\N");
        return;
    };
    // Most values hold no byte to escape: a check without early exit (which the compiler
    // turns into vector instructions) and one copy cost a fraction of the byte-wise loop.
    if !bytes.iter().fold(false, |found, &byte| found | needs_escape(byte)) {
        out.extend_from_slice(bytes);
        return;
    }
    let mut start = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let escaped: &[u8] = match byte {
            b'\\' => b"\\\\",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            0 => b"\\0",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(escaped);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

fn needs_escape(byte: u8) -> bool {
    matches!(byte, b'\\' | b'\t' | b'\n' | b'\r' | 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_survive_a_round_trip_through_a_sql_file() {
        let statements = vec![
            "CREATE PROCEDURE p()\nBEGIN\n  SELECT 1;\n  SELECT ';;x';\nEND".to_string(),
            "SET SESSION sql_mode = ''".to_string(),
        ];
        let text = write_statements("routines of `d`", &statements);
        assert!(text.starts_with("-- routines of `d`\nDELIMITER ;;\n"));
        assert_eq!(read_statements(&text), statements);
    }

    #[test]
    fn fields_escape_what_load_data_unescapes() {
        let mut out = Vec::new();
        encode_field(&mut out, Some(b"a\tb\nc\\d\re\0f"));
        out.push(b'\t');
        encode_field(&mut out, None);
        assert_eq!(out, b"a\\tb\\nc\\\\d\\re\\0f\t\\N");
    }

    #[test]
    fn every_byte_is_escaped_as_load_data_expects_anywhere_in_a_long_field() {
        for byte in 0..=255u8 {
            let escaped: &[u8] = match byte {
                b'\\' => b"\\\\",
                b'\t' => b"\\t",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                0 => b"\\0",
                _ => std::slice::from_ref(&byte),
            };
            let mut field = vec![b'x'; 37];
            field.push(byte);
            field.extend_from_slice(&[b'y'; 70]);
            let mut out = Vec::new();
            encode_field(&mut out, Some(&field));
            let expected = [&[b'x'; 37][..], escaped, &[b'y'; 70][..]].concat();
            assert_eq!(out, expected, "byte {byte}");
        }
    }

    #[test]
    fn odd_names_become_one_safe_path_segment() {
        assert_eq!(layout::segment("plain_Name-1"), "plain_Name-1");
        assert_eq!(layout::segment("a/b.c"), "a@002fb@002ec");
        assert_eq!(layout::segment("é😀"), "@00e9@d83d@de00");
        assert_eq!(layout::Names::Plain.table_schema("db", ".."), "db/tables/@002e@002e.sql");
    }

    /// Opaque names hide the name, are stable within a run, differ between runs and between
    /// names, and are paths the plain layout accepts too (`delete` walks them alike).
    #[test]
    fn opaque_names_tell_nothing_and_stay_one_path_per_name_in_a_run() {
        let (run, other_run) = (layout::Names::opaque(), layout::Names::opaque());
        let chunk = run.chunk("customers", "ledger", 3, 1, Compression::Zstd);
        assert!(!chunk.contains("customers") && !chunk.contains("ledger"), "{chunk}");
        assert_eq!(chunk, run.chunk("customers", "ledger", 3, 1, Compression::Zstd));
        assert_ne!(chunk, other_run.chunk("customers", "ledger", 3, 1, Compression::Zstd));
        let parts: Vec<&str> = chunk.split('/').collect();
        assert_eq!(parts.len(), 4, "{chunk}");
        assert!(parts[0].len() == 32 && parts[0].bytes().all(|b| b.is_ascii_hexdigit()), "{chunk}");
        assert_eq!((parts[1], parts[3]), ("data", "00003-00001.tsv.zst"));
        assert_ne!(run.table_schema("customers", "ledger"), run.table_schema("customers", "ledger2"));
        assert_eq!(
            run.database_schema("customers").split('/').next(),
            run.table_schema("customers", "x").split('/').next(),
            "one folder per database"
        );
    }

    fn consistent_manifest() -> Manifest {
        let file = |path: &str| FileEntry { path: path.into(), bytes: 10, sha256: "ab".repeat(32) };
        let chunk =
            |path: &str, rows| ChunkEntry { file: file(path), rows, data_bytes: rows * 10, enum_error_values: 0 };
        Manifest {
            format: FORMAT_NAME.into(),
            format_version: FORMAT_VERSION,
            tool: "test".into(),
            server: ServerInfo { version: "10.11".into(), flavour: "mariadb".into() },
            started_at: String::new(),
            finished_at: String::new(),
            consistency: String::new(),
            position: None,
            compression: Compression::Zstd,
            data_format: DATA_FORMAT.into(),
            databases: vec![DatabaseEntry {
                name: "d".into(),
                schema: file("d/database.sql"),
                tables: vec![TableEntry {
                    name: "t".into(),
                    schema: file("d/tables/t.sql"),
                    columns: vec!["id".into()],
                    history: false,
                    load_sql: String::new(),
                    rows: 12,
                    data_bytes: 120,
                    checksum: None,
                    content_digest: None,
                    chunks: vec![chunk("d/data/t/00000-00000.tsv.zst", 5), chunk("d/data/t/00001-00000.tsv.zst", 7)],
                }],
                views: None,
                view_names: vec![],
                routines: None,
                routine_names: vec![],
                triggers: None,
                trigger_names: vec![],
                sequences: None,
                sequence_names: vec![],
                events: None,
                event_names: vec![],
            }],
            users: None,
            user_names: vec![],
            encryption: None,
            physical: None,
        }
    }

    #[test]
    fn a_consistent_manifest_passes_and_each_kind_of_edit_is_named() {
        assert_eq!(consistent_manifest().inconsistency(), None);
        let edited = |edit: fn(&mut Manifest)| {
            let mut manifest = consistent_manifest();
            edit(&mut manifest);
            manifest.inconsistency().expect("the edit is found")
        };
        assert_eq!(edited(|m| m.databases[0].tables[0].rows = 11), "table `d`.`t` has 11 rows, its chunks 12");
        assert!(edited(|m| m.databases[0].tables[0].data_bytes = 1).contains("data bytes"));
        assert!(edited(|m| m.databases[0].tables[0].chunks[1].file.path = "../x".into()).contains("'../x'"));
        assert!(edited(|m| m.databases[0].tables[0].schema.path = "/etc/passwd".into()).contains("not a file"));
        assert!(edited(|m| m.databases[0].schema.sha256 = "".into()).contains("no valid SHA-256"));
        assert!(edited(|m| m.databases[0].tables[0].chunks[1].file.path = "d/tables/t.sql".into()).contains("twice"));
        assert!(edited(|m| m.databases.push(m.databases[0].clone())).contains("database `d` is listed twice"));
    }

    #[test]
    fn load_sql_quotes_names() {
        let sql = load_data_sql(&quote_ident("t`x"), &["a".into(), "b c".into()], "/dev/stdin");
        assert_eq!(sql, "LOAD DATA LOCAL INFILE '/dev/stdin' INTO TABLE `t``x` CHARACTER SET binary (`a`,`b c`)");
    }
}
