//! The run a schedule creates at one fire time: a MySQLBackup without a schedule, named from the
//! schedule and the fire time, owned by the schedule and labelled with its name.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use visitors_api::MySQLBackup;
use visitors_api::labels::{DATABASE_LABEL, SCHEDULE_LABEL};

/// Annotation on a scheduled run: the fire time it was created for (RFC 3339).
pub const SCHEDULED_AT: &str = "example.com/scheduled-at";

/// The name of the run of `schedule` for `fire_time`: `<schedule>-<Unix minutes>`, so each fire
/// time has exactly one run whatever happens to the controller.
pub fn run_name(schedule: &str, fire_time: Timestamp) -> String {
    format!("{schedule}-{}", fire_time.as_second().div_euclid(60))
}

/// The run of `schedule` for `fire_time`.
pub fn scheduled_run(schedule: &MySQLBackup, fire_time: Timestamp) -> MySQLBackup {
    let name = schedule.name_any();
    let spec = schedule.spec.for_run();
    let labels = BTreeMap::from([
        (SCHEDULE_LABEL.to_string(), name.clone()),
        (DATABASE_LABEL.to_string(), schedule.spec.source.visitors_app.clone()),
    ]);
    let mut run = MySQLBackup::new(&run_name(&name, fire_time), spec);
    run.metadata = ObjectMeta {
        name: Some(run_name(&name, fire_time)),
        namespace: schedule.namespace(),
        labels: Some(labels),
        annotations: Some(BTreeMap::from([(SCHEDULED_AT.to_string(), fire_time.to_string())])),
        owner_references: schedule.controller_owner_ref(&()).map(|owner| vec![owner]),
        ..ObjectMeta::default()
    };
    run
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::run;
    use visitors_api::backup::BackupSchedule;

    #[test]
    fn a_run_per_fire_time_owned_and_labelled() {
        let mut schedule = run();
        schedule.metadata.name = Some("nightly".into());
        schedule.spec.schedule = Some(BackupSchedule { cron: "0 3 * * *".into(), ..Default::default() });
        let fire = Timestamp::from_second(1_800_000_000).unwrap();
        let created = scheduled_run(&schedule, fire);
        assert_eq!(created.name_any(), "nightly-30000000");
        assert_eq!(created.spec.schedule, None);
        assert_eq!(created.spec.storage, schedule.spec.storage);
        assert_eq!(created.labels()[SCHEDULE_LABEL], "nightly");
        assert_eq!(created.labels()[DATABASE_LABEL], "ex");
        let owner = &created.owner_references()[0];
        assert_eq!((owner.name.as_str(), owner.controller), ("nightly", Some(true)));
        assert_eq!(created.annotations()[SCHEDULED_AT], "2027-01-15T08:00:00Z");
        assert_eq!(run_name("nightly", fire), run_name("nightly", Timestamp::from_second(1_800_000_059).unwrap()));
    }

    #[test]
    fn a_run_of_a_drilling_schedule_is_drilled_after_it_succeeds_unless_the_schedule_drills_on_a_cron() {
        let mut schedule = run();
        schedule.spec.schedule = Some(BackupSchedule { cron: "0 * * * *".into(), ..Default::default() });
        let fire = Timestamp::from_second(1_800_000_000).unwrap();
        schedule.spec.drill = Some(serde_json::from_value(serde_json::json!({"activeDeadlineSeconds": 600})).unwrap());
        let after_each = scheduled_run(&schedule, fire).spec.drill.unwrap();
        assert!(after_each.after_each_run());
        assert_eq!(after_each.active_deadline_seconds(), 600);
        schedule.spec.drill =
            Some(serde_json::from_value(serde_json::json!({"cron": "0 4 * * *", "maxUnverifiedAge": "7d"})).unwrap());
        let created = scheduled_run(&schedule, fire);
        let on_cron = created.spec.drill.clone().unwrap();
        assert!(!on_cron.after_each_run() && on_cron.cron.is_none() && on_cron.max_unverified_age.is_none());
        assert_eq!(created.spec.validate(), Ok(()), "a run's drill is valid for a run");
    }

    #[test]
    fn a_run_of_an_archiving_schedule_does_not_archive() {
        let mut schedule = run();
        schedule.spec.schedule = Some(BackupSchedule { cron: "* * * * *".into(), ..Default::default() });
        schedule.spec.point_in_time = Some(serde_json::from_value(serde_json::json!({"flushSeconds": 2})).unwrap());
        let created = scheduled_run(&schedule, Timestamp::from_second(1_800_000_000).unwrap());
        assert_eq!(created.spec.point_in_time, None);
    }
}
