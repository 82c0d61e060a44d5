//! The shape of the crate, checked on its source (issue 41): replication decides only in
//! `decide.rs` (and the pure modules it calls), so that every judgement has a row in a table of
//! cases; the loop in `mod.rs` only looks, decides and acts; and no folder of the crate imports
//! one that imports it back.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// A file's code without its comments and its test module.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(start) => &text[..start],
        None => &text[..],
    };
    text.lines().filter(|line| !line.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// The files of `replication/` that carry a decision out or read what it needs: none of them
/// may judge time (a time-out, a window, a silent look) or keep a time of its own.
const CARRIERS: [&str; 5] = ["mod.rs", "act.rs", "observe.rs", "report.rs", "memory.rs"];

#[test]
fn no_decision_of_replication_lives_outside_decide() {
    let judging = [".elapsed()", "duration_since(", "Instant::now() -", "> SWITCHOVER", "UPDATE_LIMIT", "WINDOW"];
    for file in CARRIERS {
        let code = code(&source_dir().join("replication").join(file));
        for token in judging {
            assert!(!code.contains(token), "replication/{file} judges time ({token}): that is decide.rs's");
        }
        // The bounds of I/O are the carriers' own (a read, an act, a wait for apply); any other
        // duration is a time-out of a decision.
        for line in code.lines().filter(|l| l.contains("Duration::from_")) {
            let allowed =
                ["READ_TIMEOUT", "ACT_TIMEOUT", "STOP_RECEIVING_TIMEOUT", "LOOK_INTERVAL", "BUSY_LOOK_INTERVAL"];
            assert!(allowed.iter().any(|name| line.contains(name)), "replication/{file}: {line}");
        }
    }
}

#[test]
fn the_replication_loop_only_looks_decides_and_acts() {
    let code = code(&source_dir().join("replication").join("mod.rs"));
    let manage = &code[code.find("pub async fn manage").expect("the loop")..];
    let branches = manage.matches(" if ").count() + manage.matches("match ").count();
    assert_eq!(branches, 1, "the loop's one branch is whether the decision looks again:\n{manage}");
    for step in ["observe::look(", "decide::decide(", "act::carry_out("] {
        assert!(manage.contains(step), "the loop calls {step}");
    }
}

/// The folder (`src` for the crate's own files) each `crate::` path of `file` leads to.
fn imported_folders(file: &Path, root: &Path) -> BTreeSet<String> {
    let code = code(file);
    let mut folders = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let mut names: Vec<String> = Vec::new();
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find("};").or_else(|| group.find('}')).unwrap_or(group.len())];
            names.extend(inner.split(',').map(|part| part.trim().split("::").next().unwrap_or("").to_string()));
        } else {
            names.push(rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect());
        }
        for name in names.into_iter().filter(|n| !n.is_empty()) {
            folders.insert(if root.join(&name).is_dir() { name } else { "src".to_string() });
        }
    }
    folders
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

#[test]
fn no_folder_imports_one_that_imports_it_back() {
    let root = source_dir();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(&root) {
        let relative = file.strip_prefix(&root).unwrap();
        let folder = match relative.components().count() {
            1 => "src".to_string(),
            _ => relative.components().next().unwrap().as_os_str().to_string_lossy().into_owned(),
        };
        for target in imported_folders(&file, &root).into_iter().filter(|t| *t != folder) {
            edges.entry(folder.clone()).or_default().insert(target);
        }
    }
    // Any cycle among the folders, found by walking from each.
    for start in edges.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<Vec<String>> = vec![vec![start.clone()]];
        while let Some(path) = stack.pop() {
            let last = path.last().unwrap();
            for next in edges.get(last).into_iter().flatten() {
                assert!(
                    next != start,
                    "the folders import each other around: {} -> {next} (all: {edges:?})",
                    path.join(" -> ")
                );
                if seen.insert(next.clone()) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push(longer);
                }
            }
        }
    }
    assert!(
        edges.get("replication").is_some_and(|to| !to.contains("src")),
        "replication reads nothing of the reconcile's own files: {edges:?}"
    );
}
