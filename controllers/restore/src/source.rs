//! Which backup a restore reads: a MySQLBackup run that succeeded (its recorded location and
//! manifest), or an explicit storage location. A run that failed is refused, one that has not
//! finished is waited for.

use controller_common::operation::Wait;
use kube::ResourceExt;
use visitors_api::MySQLBackup;
use visitors_api::backup::BackupPhase;
use visitors_api::restore::reason;

use crate::build::{Backup, agent_location_of_recorded, display_location};

/// Why a restore cannot start now: it waits (and says for what), or it can never run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    Wait(Wait),
    Refuse { reason: &'static str, message: String },
}

impl From<Wait> for Blocked {
    fn from(wait: Wait) -> Self {
        Blocked::Wait(wait)
    }
}

pub fn wait(reason: &'static str, message: String) -> Blocked {
    Blocked::Wait(Wait::new(reason, message))
}

fn refuse(reason: &'static str, message: String) -> Blocked {
    Blocked::Refuse { reason, message }
}

/// The backup of run `run`, if it can be restored: a `Succeeded` run with a recorded location
/// and manifest; a failed one is refused, one still to finish is waited for.
pub fn backup_of_run(run: &MySQLBackup) -> Result<Backup, Blocked> {
    let name = run.name_any();
    if run.spec.is_schedule() {
        let message = format!(
            "MySQLBackup {name} (spec.source.backup) is a schedule, not a run: name one of its runs (status.lastSuccessfulRun)"
        );
        return Err(refuse(reason::BACKUP_IS_SCHEDULE, message));
    }
    let status = run.status.clone().unwrap_or_default();
    match status.phase {
        Some(BackupPhase::Succeeded) => {}
        Some(BackupPhase::Failed) => {
            let why = status.error.map(|e| format!(": {e}")).unwrap_or_default();
            let message = format!(
                "MySQLBackup {name} (spec.source.backup) failed{why}; a failed backup is never restored, nothing was touched"
            );
            return Err(refuse(reason::BACKUP_FAILED, message));
        }
        phase => {
            let phase = phase.map(|p| format!("{p:?}")).unwrap_or_else(|| "not started".into());
            let message =
                format!("MySQLBackup {name} (spec.source.backup) is {phase}; the restore waits until it succeeds");
            return Err(wait(reason::BACKUP_NOT_FINISHED, message));
        }
    }
    let recorded = status.location.clone().unwrap_or_default();
    let Some(agent_location) = agent_location_of_recorded(&recorded) else {
        let message = format!("MySQLBackup {name} records no location the restore can read ({recorded:?})");
        return Err(refuse(reason::BACKUP_LOCATION_UNKNOWN, message));
    };
    let Some(manifest_sha256) = status.manifest_sha256.clone() else {
        let message = format!(
            "MySQLBackup {name} records no manifestSha256, so a backup changed in storage could not be detected"
        );
        return Err(refuse(reason::BACKUP_UNVERIFIABLE, message));
    };
    Ok(Backup {
        location: display_location(&run.spec.storage, &agent_location),
        agent_location,
        storage: run.spec.storage.clone(),
        run: Some(name),
        manifest_sha256: Some(manifest_sha256),
        completion_time: status.completion_time,
        tables: status.tables,
        rows: status.rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(status: serde_json::Value) -> MySQLBackup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "MySQLBackup",
            "metadata": {"name": "b1", "namespace": "shop", "uid": "u-1"},
            "spec": {"source": {"visitorsApp": "ex"}, "storage": {"persistentVolumeClaim": {"claimName": "backups"}}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn only_a_succeeded_run_is_restored_and_a_failed_one_is_refused() {
        let succeeded = run(serde_json::json!({"phase": "Succeeded", "location": "file:///backup/shop/ex/b1",
            "manifestSha256": "ab".repeat(32), "completionTime": "2026-11-23T10:00:00Z", "tables": 2, "rows": 7}));
        let backup = backup_of_run(&succeeded).unwrap();
        assert_eq!(backup.agent_location, "file:///backup/shop/ex/b1");
        assert_eq!(backup.location, "pvc://backups/shop/ex/b1");
        assert_eq!(backup.manifest_sha256, Some("ab".repeat(32)));
        assert_eq!((backup.tables, backup.rows), (Some(2), Some(7)));

        let failed = run(serde_json::json!({"phase": "Failed", "error": "MySQL rejected user root"}));
        let Err(Blocked::Refuse { reason, message }) = backup_of_run(&failed) else {
            panic!("a failed run is refused")
        };
        assert_eq!(reason, "BackupFailed");
        assert!(message.contains("MySQLBackup b1") && message.contains("rejected user root"), "{message}");

        for phase in ["Running", "Pending"] {
            let unfinished = run(serde_json::json!({"phase": phase}));
            assert!(matches!(backup_of_run(&unfinished), Err(Blocked::Wait(Wait { reason: "BackupNotFinished", .. }))));
        }
        let unverifiable = run(serde_json::json!({"phase": "Succeeded", "location": "s3://b/x"}));
        assert!(matches!(backup_of_run(&unverifiable), Err(Blocked::Refuse { reason: "BackupUnverifiable", .. })));
    }
}
