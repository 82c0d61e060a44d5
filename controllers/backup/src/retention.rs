//! Which finished runs of a schedule to delete: keep the newest `keepSuccessful` successful
//! and `keepFailed` failed runs, drop runs older than `maxAge`, never the newest successful
//! run, never the newest verified one (whose restore drill passed), never an active run nor
//! one being drilled.

use std::time::Duration;

use jiff::Timestamp;
use visitors_api::backup::{BackupPhase, Retention};

/// What retention needs to know of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFacts {
    pub name: String,
    pub phase: Option<BackupPhase>,
    /// When it finished, else when it was created.
    pub at: Timestamp,
    /// A drill of it passed, and none proved it wrong.
    pub verified: bool,
    /// A drill of it is starting or running.
    pub drilling: bool,
}

/// The names of the runs to delete.
pub fn doomed(runs: &[RunFacts], retention: &Retention, now: Timestamp) -> Vec<String> {
    let max_age = retention.max_age().ok().flatten();
    let mut doomed = Vec::new();
    let newest_first = |phase: BackupPhase| {
        let mut selected: Vec<&RunFacts> = runs.iter().filter(|r| r.phase == Some(phase)).collect();
        selected.sort_by(|a, b| b.at.cmp(&a.at).then_with(|| b.name.cmp(&a.name)));
        selected
    };
    let successful = newest_first(BackupPhase::Succeeded);
    let failed = newest_first(BackupPhase::Failed);
    let newest_verified = successful.iter().find(|run| run.verified).map(|run| run.name.as_str());
    let keep = |n: i32| usize::try_from(n).unwrap_or(0);
    for (index, run) in successful.iter().enumerate() {
        if index == 0 || newest_verified == Some(run.name.as_str()) || run.drilling {
            continue;
        }
        if index >= keep(retention.keep_successful()) || too_old(run, max_age, now) {
            doomed.push(run.name.clone());
        }
    }
    for (index, run) in failed.iter().enumerate() {
        if index >= keep(retention.keep_failed()) || too_old(run, max_age, now) {
            doomed.push(run.name.clone());
        }
    }
    doomed
}

fn too_old(run: &RunFacts, max_age: Option<Duration>, now: Timestamp) -> bool {
    max_age.is_some_and(|age| {
        let age_ms = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
        now.as_millisecond().saturating_sub(run.at.as_millisecond()) > age_ms
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, phase: Option<BackupPhase>, hours_ago: i64) -> RunFacts {
        RunFacts {
            name: name.into(),
            phase,
            at: Timestamp::from_second(1_800_000_000 - hours_ago * 3600).unwrap(),
            verified: false,
            drilling: false,
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    fn retention(keep_successful: i32, keep_failed: i32, max_age: Option<&str>) -> Retention {
        Retention {
            keep_successful: Some(keep_successful),
            keep_failed: Some(keep_failed),
            max_age: max_age.map(Into::into),
        }
    }

    #[test]
    fn counts_successful_and_failed_separately() {
        use BackupPhase::{Failed, Succeeded};
        let runs = [
            run("s1", Some(Succeeded), 1),
            run("f1", Some(Failed), 2),
            run("s2", Some(Succeeded), 3),
            run("s3", Some(Succeeded), 4),
            run("f2", Some(Failed), 5),
            run("active", Some(BackupPhase::Running), 50),
            run("new", None, 60),
        ];
        let mut doomed = doomed(&runs, &retention(2, 1, None), now());
        doomed.sort();
        assert_eq!(doomed, ["f2", "s3"]);
    }

    #[test]
    fn max_age_never_takes_the_newest_successful_run() {
        use BackupPhase::{Failed, Succeeded};
        let runs = [run("f1", Some(Failed), 1), run("s1", Some(Succeeded), 100), run("s2", Some(Succeeded), 200)];
        let mut doomed = doomed(&runs, &retention(7, 3, Some("48h")), now());
        doomed.sort();
        assert_eq!(doomed, ["s2"], "s1 is older than maxAge but the newest successful run");
    }

    #[test]
    fn the_newest_verified_run_is_kept_whatever_the_limits_say() {
        use BackupPhase::Succeeded;
        let verified =
            |name: &str, hours_ago: i64| RunFacts { verified: true, ..run(name, Some(Succeeded), hours_ago) };
        // The newest run failed its drill (or has none yet): the older verified one stays.
        let runs = [run("s1", Some(Succeeded), 1), verified("s2", 2), verified("s3", 3), run("s4", Some(Succeeded), 4)];
        let mut deleted = doomed(&runs, &retention(1, 3, Some("1h")), now());
        deleted.sort();
        assert_eq!(deleted, ["s3", "s4"], "s1 is the newest success, s2 the newest verified; maxAge spares neither");
        let drilling = RunFacts { drilling: true, ..run("s4", Some(Succeeded), 4) };
        let runs = [run("s1", Some(Succeeded), 1), verified("s2", 2), drilling];
        assert!(doomed(&runs, &retention(1, 3, None), now()).is_empty(), "a run being drilled is kept");
    }

    #[test]
    fn nothing_to_delete_within_the_limits() {
        let runs = [run("s1", Some(BackupPhase::Succeeded), 1)];
        assert!(doomed(&runs, &Retention::default(), now()).is_empty());
    }
}
