//! Observed state → MySQLRestore status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use visitors_api::InvalidSpec;
use visitors_api::conditions::{self, Desired, READY, Status};
use visitors_api::restore::{MySQLRestore, MySQLRestoreStatus, RestorePhase};

/// The status a restore should have, given its spec's validation.
pub fn desired(restore: &MySQLRestore, validation: &Result<(), InvalidSpec>, now: Time) -> MySQLRestoreStatus {
    let mut status = restore.status.clone().unwrap_or_default();
    let generation = restore.metadata.generation;
    status.observed_generation = generation;
    let ready = match validation {
        Err(invalid) => conditions::invalid_spec(invalid),
        Ok(()) => Desired {
            type_: READY,
            status: Status::Unknown,
            reason: "Accepted",
            message: "The spec is valid. This version of the restore controller validates MySQLRestores but does not run them yet."
                .into(),
        },
    };
    conditions::set(&mut status.conditions, ready, generation, now);
    if status.phase.is_none() && validation.is_ok() {
        status.phase = Some(RestorePhase::Pending);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use visitors_api::conditions::REASON_INVALID_SPEC;
    use visitors_api::restore::{MySQLRestoreSpec, RestoreSource, RestoreTarget};

    fn restore(app: &str) -> MySQLRestore {
        let spec = MySQLRestoreSpec {
            source: RestoreSource { backup: Some("nightly-1".into()), storage: None, path: None },
            target: RestoreTarget { visitors_app: app.into() },
            quiesce: None,
            verify: None,
            parallelism: None,
            active_deadline_seconds: None,
        };
        let mut restore = MySQLRestore::new("r1", spec);
        restore.metadata.generation = Some(1);
        restore
    }

    fn now() -> Time {
        Time(jiff::Timestamp::from_second(1_800_000_000).unwrap())
    }

    #[test]
    fn valid_restore_is_pending() {
        let restore = restore("ex");
        let status = desired(&restore, &restore.spec.validate(), now());
        assert_eq!(status.observed_generation, Some(1));
        assert_eq!(status.phase, Some(RestorePhase::Pending));
    }

    #[test]
    fn invalid_target_is_reported() {
        let restore = restore("");
        let status = desired(&restore, &restore.spec.validate(), now());
        let ready = conditions::find(&status.conditions, READY).unwrap();
        assert_eq!(ready.reason, REASON_INVALID_SPEC);
        assert!(ready.message.contains("spec.target.visitorsApp"), "{}", ready.message);
        assert_eq!(status.phase, None);
    }
}
