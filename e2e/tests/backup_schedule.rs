//! A MySQLBackup schedule on a real cluster: a run every minute with retention, then suspend.
//! Apart from tests/backup.rs because it waits for fire times, so it runs side by side with the
//! other scenarios (e2e/run.sh) instead of holding up the files that run one after another.

use std::collections::BTreeSet;
use std::time::Duration;

use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use visitors_api::MySQLBackup;
use visitors_api::backup::{BackupPhase, condition};
use visitors_api::conditions;
use visitors_e2e::book_backups::{backup_object, ready_app_with_rows};
use visitors_e2e::{cluster, wait_for};

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn a_schedule_every_minute_keeps_two_successful_runs_and_suspend_stops_it() {
    let client = cluster().await;
    let namespace = ready_app_with_rows(&client, "e2e-backup-schedule").await;
    let ns = namespace.name.clone();
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);
    let schedule = backup_object(
        "minutely",
        json!({"schedule": {"cron": "* * * * *", "retention": {"keepSuccessful": 2}}, "compression": "gzip"}),
    );
    backups.create(&PostParams::default(), &schedule).await.expect("create the schedule");

    let runs = ListParams::default().labels("example.com/backup-schedule=minutely");
    let seen = std::sync::Mutex::new(BTreeSet::new());
    wait_for("four fire times with retention applied", || async {
        let listed = backups.list(&runs).await.map_err(|e| e.to_string())?;
        let mut seen = seen.lock().unwrap();
        seen.extend(listed.items.iter().map(|r| r.name_any()));
        let finished = listed
            .items
            .iter()
            .filter(|r| r.status.as_ref().and_then(|s| s.phase) == Some(BackupPhase::Succeeded))
            .count();
        if seen.len() >= 4 && finished == 2 && listed.items.len() == 2 {
            Ok(())
        } else {
            Err(format!("runs seen {seen:?}, now {} of which {finished} succeeded", listed.items.len()))
        }
    })
    .await;
    let status = backups.get("minutely").await.unwrap().status.unwrap();
    let kept: BTreeSet<String> = backups.list(&runs).await.unwrap().items.iter().map(|r| r.name_any()).collect();
    let seen = seen.into_inner().unwrap();
    let newest_seen = seen.iter().max().cloned();
    assert!(kept.iter().max() == newest_seen.as_ref(), "the newest run is kept: {kept:?} of {seen:?}");
    assert_eq!(status.last_successful_run.as_ref(), kept.iter().max(), "the newest successful run is kept");
    assert!(conditions::is_true(&status.conditions, condition::LAST_BACKUP_SUCCEEDED));
    assert!(status.next_schedule_time.is_some());

    backups
        .patch("minutely", &PatchParams::default(), &Patch::Merge(json!({"spec": {"schedule": {"suspend": true}}})))
        .await
        .expect("suspend the schedule");
    wait_for("the schedule to be suspended", || async {
        let status = backups.get("minutely").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        let ready = conditions::find(&status.conditions, conditions::READY).cloned();
        if ready.as_ref().is_some_and(|c| c.reason == "Suspended") { Ok(()) } else { Err(format!("{ready:?}")) }
    })
    .await;
    let before: BTreeSet<String> = backups.list(&runs).await.unwrap().items.iter().map(|r| r.name_any()).collect();
    tokio::time::sleep(past_the_next_fire_time()).await;
    let after: BTreeSet<String> = backups.list(&runs).await.unwrap().items.iter().map(|r| r.name_any()).collect();
    assert_eq!(before, after, "a suspended schedule creates no runs");
    namespace.delete().await;
}

/// How long until 15 s after the next minute starts: the next fire time of `* * * * *` and the
/// margin a controller needs to create its run.
fn past_the_next_fire_time() -> Duration {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    Duration::from_secs(60 - now.as_secs() % 60 + 15)
}
