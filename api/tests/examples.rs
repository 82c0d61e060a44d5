//! Every example in deploy/examples deserialises into its type without losing a field (so a
//! typo cannot be silently pruned) and passes the validation the controllers apply.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use visitors_api::{InvalidSpec, MySQLBackup, MySQLRestore, VisitorsApp};

fn examples() -> Vec<(PathBuf, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let value: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path, value)
        })
        .collect()
}

/// Deserialises `value` as `T`, checks nothing was dropped, and returns it.
fn typed<T: DeserializeOwned + Serialize>(path: &Path, value: &Value) -> T {
    let typed: T = serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(&back, value, "{}: a field was dropped or renamed (typo?)", path.display());
    typed
}

#[test]
fn every_example_is_a_valid_resource() {
    let examples = examples();
    assert!(examples.len() >= 6, "expected the shipped examples, found {}", examples.len());
    for (path, value) in &examples {
        let result: Result<(), InvalidSpec> = match value["kind"].as_str() {
            Some("VisitorsApp") => typed::<VisitorsApp>(path, value).spec.validate(),
            Some("MySQLBackup") => typed::<MySQLBackup>(path, value).spec.validate(),
            Some("MySQLRestore") => typed::<MySQLRestore>(path, value).spec.validate(),
            other => panic!("{}: unexpected kind {other:?}", path.display()),
        };
        assert_eq!(result, Ok(()), "{}", path.display());
    }
}

#[test]
fn the_books_resource_is_shipped_verbatim() {
    let book = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples/visitorsapp-book.yaml"),
    )
    .unwrap();
    assert_eq!(
        book,
        "apiVersion: example.com/v1\nkind: VisitorsApp\nmetadata:\n  name: ex\nspec:\n  size: 1\n  title: \"Custom Dashboard Title\"\n"
    );
}
