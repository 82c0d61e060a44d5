//! Observed state → MySQLBackup status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use visitors_api::InvalidSpec;
use visitors_api::backup::{BackupPhase, MySQLBackup, MySQLBackupStatus};
use visitors_api::conditions::{self, Desired, READY, Status};

/// The status a backup should have, given its spec's validation.
pub fn desired(backup: &MySQLBackup, validation: &Result<(), InvalidSpec>, now: Time) -> MySQLBackupStatus {
    let mut status = backup.status.clone().unwrap_or_default();
    let generation = backup.metadata.generation;
    status.observed_generation = generation;
    let ready = match validation {
        Err(invalid) => conditions::invalid_spec(invalid),
        Ok(()) => Desired {
            type_: READY,
            status: Status::Unknown,
            reason: "Accepted",
            message: "The spec is valid. This version of the backup controller validates MySQLBackups but does not run them yet."
                .into(),
        },
    };
    conditions::set(&mut status.conditions, ready, generation, now);
    if !backup.spec.is_schedule() && status.phase.is_none() && validation.is_ok() {
        status.phase = Some(BackupPhase::Pending);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use visitors_api::backup::{BackupSource, MySQLBackupSpec};
    use visitors_api::conditions::REASON_INVALID_SPEC;
    use visitors_api::storage::{BackupStorage, PvcStorage};

    fn backup(app: &str) -> MySQLBackup {
        let spec = MySQLBackupSpec {
            source: BackupSource { visitors_app: app.into() },
            storage: BackupStorage {
                s3: None,
                persistent_volume_claim: Some(PvcStorage { claim_name: "backups".into(), sub_path: None }),
            },
            schedule: None,
            compression: None,
            parallelism: None,
            active_deadline_seconds: None,
            deletion_policy: None,
        };
        let mut backup = MySQLBackup::new("b1", spec);
        backup.metadata.generation = Some(2);
        backup
    }

    fn now() -> Time {
        Time(jiff::Timestamp::from_second(1_800_000_000).unwrap())
    }

    #[test]
    fn valid_run_is_pending() {
        let backup = backup("ex");
        let status = desired(&backup, &backup.spec.validate(), now());
        assert_eq!(status.observed_generation, Some(2));
        assert_eq!(status.phase, Some(BackupPhase::Pending));
        assert_eq!(conditions::find(&status.conditions, READY).unwrap().reason, "Accepted");
    }

    #[test]
    fn invalid_spec_names_the_field_and_sets_no_phase() {
        let backup = backup("Not A Name");
        let status = desired(&backup, &backup.spec.validate(), now());
        let ready = conditions::find(&status.conditions, READY).unwrap();
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason, REASON_INVALID_SPEC);
        assert!(ready.message.contains("spec.source.visitorsApp"), "{}", ready.message);
        assert_eq!(status.phase, None);
    }

    #[test]
    fn recomputing_an_unchanged_status_is_stable() {
        let mut backup = backup("ex");
        let first = desired(&backup, &backup.spec.validate(), now());
        backup.status = Some(first.clone());
        let later = Time(jiff::Timestamp::from_second(1_800_000_600).unwrap());
        assert_eq!(desired(&backup, &backup.spec.validate(), later), first);
    }
}
