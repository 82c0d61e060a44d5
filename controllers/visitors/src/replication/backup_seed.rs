//! Seeding an empty server from the app's newest verified backup run, when replication cannot
//! (the binary logs it would need were purged): which run ([`newest_verified_run`]), where each
//! empty server's load stands ([`load_state`], from its Job). Pure: [`super::observe`] reads the
//! runs and Jobs, the rules ([`super::rules`]) say when, [`super::act`] starts the load.

use controller_common::agent_job::{JobState, job_state};
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use visitors_api::MySQLBackup;
use visitors_api::storage::agent_location_of_recorded;

use super::model::{BackupSeed, Member, SeedBackup};
use super::server::Position;

/// Annotations on a load's Job: the run it loads and the run's GTID position, which the server
/// then starts from.
pub const RUN_ANNOTATION: &str = "example.com/seed-run";
pub const POSITION_ANNOTATION: &str = "example.com/seed-position";

/// A run an empty server can be loaded from.
#[derive(Debug, Clone)]
pub struct VerifiedRun {
    pub run: MySQLBackup,
    /// The agent's `--from` for the location the run recorded.
    pub location: String,
    /// What the decision reads of it.
    pub seed: SeedBackup,
}

/// The run an empty server of app `app` is loaded from: among `runs`, the newest run of the app
/// that succeeded, passed its restore drill, and recorded where it is stored, its manifest's
/// SHA-256 and the GTID position it was taken at.
pub fn newest_verified_run(app: &str, runs: &[MySQLBackup]) -> Option<VerifiedRun> {
    runs.iter()
        .filter(|run| run.spec.source.visitors_app == app && !run.spec.is_schedule() && run.is_verified())
        .filter_map(|run| {
            let status = run.status.as_ref()?;
            let location = status.location.as_deref().and_then(agent_location_of_recorded)?;
            status.manifest_sha256.as_ref()?;
            let gtid = status.snapshot.as_ref()?.gtid.as_deref()?;
            let position = Position::parse(gtid).ok().filter(|p| !p.is_empty())?;
            let completed = status.completion_time.as_ref()?.0;
            Some((completed, run, location, position))
        })
        .max_by_key(|(completed, run, ..)| (*completed, run.name_any()))
        .map(|(_, run, location, position)| VerifiedRun {
            seed: SeedBackup { run: run.name_any(), position },
            run: run.clone(),
            location,
        })
}

/// The Job that loads a backup run into `member`: one per server incarnation (its server id
/// follows its pod's UID), so a server started again empty is loaded again.
pub fn load_job_name(member: &Member) -> String {
    format!("{}-seed-{:x}", member.name, member.server_id)
}

/// Where a load stands, from its Job (`None`: not started).
pub fn load_state(job: Option<&Job>) -> BackupSeed {
    let Some(job) = job else { return BackupSeed::NotStarted };
    let annotation = |key: &str| job.annotations().get(key).cloned().unwrap_or_default();
    match job_state(job) {
        JobState::Active => BackupSeed::Loading { run: annotation(RUN_ANNOTATION) },
        JobState::Complete => {
            BackupSeed::Loaded { run: annotation(RUN_ANNOTATION), position: annotation(POSITION_ANNOTATION) }
        }
        JobState::Failed { reason, message } => BackupSeed::Failed(format!(
            "Job {} ({reason}: {message}); it is tried again once the Job is gone (deleted, or an hour after it ended)",
            job.name_any()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, app: &str, completed: &str, gtid: Option<&str>, verified: bool) -> MySQLBackup {
        let mut status = serde_json::json!({
            "phase": "Succeeded", "completionTime": completed, "location": format!("pvc://backups/shop/{app}/{name}"),
            "manifestSha256": "ab".repeat(32), "snapshot": {"gtid": gtid},
        });
        if verified {
            status["verifiedTime"] = serde_json::json!(completed);
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "MySQLBackup",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"source": {"visitorsApp": app}, "storage": {"persistentVolumeClaim": {"claimName": "backups"}}},
            "status": status,
        }))
        .unwrap()
    }

    /// Each case: the runs, and the one a server is loaded from.
    #[test]
    fn the_newest_verified_run_of_the_app_with_a_position_is_loaded() {
        let old = run("old", "ex", "2026-11-20T00:00:00Z", Some("0-101-5"), true);
        let new = run("new", "ex", "2026-11-26T00:00:00Z", Some("0-101-9"), true);
        let unverified = run("unverified", "ex", "2026-11-27T00:00:00Z", Some("0-101-12"), false);
        let no_position = run("no-position", "ex", "2026-11-27T00:00:00Z", None, true);
        let other_app = run("other", "other", "2026-11-27T00:00:00Z", Some("0-101-12"), true);
        let mut failed_drill = run("failed-drill", "ex", "2026-11-27T00:00:00Z", Some("0-101-12"), true);
        failed_drill.status.as_mut().unwrap().drill_defect = Some("chunk 3 differs".into());
        let cases: Vec<(Vec<MySQLBackup>, Option<&str>)> = vec![
            (vec![old.clone(), new.clone()], Some("new")),
            (vec![new.clone(), old.clone()], Some("new")),
            (vec![old.clone(), unverified], Some("old")),
            (vec![old.clone(), no_position], Some("old")),
            (vec![old.clone(), other_app], Some("old")),
            (vec![old.clone(), failed_drill], Some("old")),
            (vec![], None),
        ];
        for (runs, expected) in cases {
            let chosen = newest_verified_run("ex", &runs).map(|verified| {
                assert_eq!(verified.run.name_any(), verified.seed.run);
                verified.seed.run
            });
            let names: Vec<String> = runs.iter().map(ResourceExt::name_any).collect();
            assert_eq!(chosen.as_deref(), expected, "{names:?}");
        }
        let verified = newest_verified_run("ex", std::slice::from_ref(&new)).unwrap();
        assert_eq!(verified.seed.position.to_string(), "0-101-9");
        assert_eq!(verified.location, "file:///backup/shop/ex/new", "the claim's folder, as the Job mounts it");
    }

    #[test]
    fn a_load_stands_as_its_job_does_and_remembers_its_run_and_position() {
        let job = |condition: Option<&str>| -> Job {
            let conditions: Vec<serde_json::Value> = condition
                .map(|c| serde_json::json!({"type": c, "status": "True", "reason": "BackoffLimitExceeded", "message": "1 failed"}))
                .into_iter()
                .collect();
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "ex-mysql-2-seed-3e9",
                             "annotations": {RUN_ANNOTATION: "nightly-1", POSITION_ANNOTATION: "0-101-9"}},
                "status": {"conditions": conditions},
            }))
            .unwrap()
        };
        assert_eq!(load_state(None), BackupSeed::NotStarted);
        assert_eq!(load_state(Some(&job(None))), BackupSeed::Loading { run: "nightly-1".into() });
        assert_eq!(
            load_state(Some(&job(Some("Complete")))),
            BackupSeed::Loaded { run: "nightly-1".into(), position: "0-101-9".into() }
        );
        let BackupSeed::Failed(why) = load_state(Some(&job(Some("Failed")))) else { panic!("a failed load") };
        assert!(why.starts_with("Job ex-mysql-2-seed-3e9 (BackoffLimitExceeded: 1 failed)"), "{why}");
    }
}
