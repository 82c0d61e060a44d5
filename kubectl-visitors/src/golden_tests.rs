//! The screens drawn from recorded resources, against the golden files of tests/golden/: wide
//! and narrow terminals, with and without colour. `UPDATE_GOLDEN=1 cargo test -p
//! kubectl-visitors golden` rewrites them; review the diff before committing.

use std::path::PathBuf;

use jiff::Timestamp;
use visitors_api::{MySQLBackup, MySQLRestore, VisitorsApp};

use crate::render::{self, Screen};
use crate::snapshot::ManySnapshot;
use crate::view;

const NOW: &str = "2026-11-28T12:00:00Z";

fn folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests")
}

fn recorded(name: &str) -> ManySnapshot {
    let path = folder().join("fixtures").join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let list: serde_json::Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut snapshot = ManySnapshot { apps: Vec::new(), backups: Vec::new(), restores: Vec::new() };
    for item in list["items"].as_array().cloned().unwrap_or_default() {
        let kind = item["kind"].as_str().unwrap_or_default().to_string();
        match kind.as_str() {
            "VisitorsApp" => snapshot.apps.push(parse::<VisitorsApp>(name, item)),
            "MySQLBackup" => snapshot.backups.push(parse::<MySQLBackup>(name, item)),
            "MySQLRestore" => snapshot.restores.push(parse::<MySQLRestore>(name, item)),
            other => panic!("{name}: unexpected kind {other}"),
        }
    }
    snapshot
}

fn parse<K: serde::de::DeserializeOwned>(fixture: &str, item: serde_json::Value) -> K {
    let kind = item["kind"].clone();
    serde_json::from_value(item).unwrap_or_else(|e| panic!("{fixture}: a {kind}: {e}"))
}

fn check(golden: &str, drawn: &str) {
    let path = folder().join("golden").join(golden);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, drawn).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
    assert!(drawn == expected, "{golden} differs; drawn:\n{drawn}\n(UPDATE_GOLDEN=1 rewrites it)");
}

fn screens() -> [(&'static str, Screen); 3] {
    [
        ("wide", Screen { width: 120, colour: false }),
        ("narrow", Screen { width: 60, colour: false }),
        ("colour", Screen { width: 120, colour: true }),
    ]
}

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

#[test]
fn golden_status_screens_of_recorded_apps() {
    for fixture in ["shop", "replicated-broken"] {
        let many = recorded(fixture);
        let status = view::app_status(&many.of(&many.apps[0]), now());
        for (name, screen) in screens() {
            let drawn = render::app_status(&status, &screen);
            check(&format!("status-{fixture}-{name}.txt"), &drawn);
            if !screen.colour {
                assert!(!drawn.contains('\u{1b}'), "no escape codes without colour");
            }
        }
    }
}

#[test]
fn golden_list_and_runs_screens() {
    let mut many = recorded("shop");
    many.apps.extend(recorded("replicated-broken").apps);
    let lines = view::app_lines(&many, now());
    let shop = many.of(&many.apps[0]);
    let runs = view::runs(&shop);
    for (name, screen) in screens() {
        check(&format!("list-{name}.txt"), &render::app_lines(&lines, true, now(), &screen));
        check(&format!("runs-{name}.txt"), &render::runs(&runs, now(), &screen));
    }
}

#[test]
fn narrow_screens_fit_their_width_but_for_single_long_words() {
    let many = recorded("shop");
    let status = view::app_status(&many.of(&many.apps[0]), now());
    let narrow = Screen { width: 60, colour: false };
    let drawn = render::app_status(&status, &narrow);
    for line in drawn.lines().filter(|l| l.contains(' ') && !l.trim_start().starts_with("http")) {
        let longest_word = line.split_whitespace().map(str::len).max().unwrap_or(0);
        assert!(line.chars().count() <= 60 || longest_word > 40, "wider than 60: {line:?}");
    }
}

#[test]
fn the_recorded_app_shows_every_section_with_what_it_holds() {
    let many = recorded("shop");
    let status = view::app_status(&many.of(&many.apps[0]), now());
    assert!(status.ready);
    assert_eq!(status.schedules.len(), 1);
    let schedule = &status.schedules[0];
    assert_eq!(schedule.last_run.as_ref().map(|r| r.name.as_str()), Some("nightly-29406420"), "the newest ended");
    assert_eq!(status.last_verified.as_ref().map(|v| v.run.as_str()), Some("nightly-29404980"));
    assert_eq!(status.last_verified.as_ref().and_then(|v| v.restore_seconds), Some(41.2));
    assert_eq!(status.last_on_demand.as_ref().map(|r| r.name.as_str()), Some("before-migration"));
    let window = &status.point_in_time[0];
    assert_eq!(window.newest_recoverable, Some("2026-11-28T11:59:58Z".parse().unwrap()));
    assert_eq!(window.gaps.len(), 1);
    let running = &status.running[0];
    assert_eq!((running.name.as_str(), running.expected_seconds), ("nightly-now-1795867200", Some(123.0)));
    assert!(running.progress.is_some_and(|p| (p - 80.0 / 123.0).abs() < 0.01), "{running:?}");
    let reasons: Vec<&str> = status.problems.iter().map(|p| p.reason.as_str()).collect();
    assert_eq!(reasons, ["AgentFailed"], "a gap a later run is past is shown, not a problem");
    assert!(status.problems.iter().all(|p| p.what_to_do.is_some()), "{:?}", status.problems);
}
