//! What the schema and `MySQLBackupSpec::checked` cannot check: the object's own name, which
//! the Job's name (and a schedule's run names) are derived from.

use kube::ResourceExt;
use visitors_api::schedule::Plan;
use visitors_api::validation::Problems;
use visitors_api::{InvalidSpec, MySQLBackup};

/// Longest name of a run: its Job `<run>-backup` must fit the 63 characters of a label value
/// (the Job controller labels the pods with the Job's name).
pub const MAX_RUN_NAME: usize = 56;
/// Longest name of a schedule: its runs are `<schedule>-<fire time in Unix minutes>`.
pub const MAX_SCHEDULE_NAME: usize = MAX_RUN_NAME - 10;

/// The whole check of a MySQLBackup: its spec, then its name. A schedule's plan is parsed
/// here, once, and returned.
pub fn backup(backup: &MySQLBackup) -> Result<Option<Plan>, InvalidSpec> {
    let mut problems = Problems::default();
    let plan = match backup.spec.checked() {
        Ok(plan) => plan,
        Err(invalid) => {
            for error in invalid.0 {
                problems.add(error.field, error.problem);
            }
            None
        }
    };
    let name = backup.name_any();
    let max = if backup.spec.is_schedule() { MAX_SCHEDULE_NAME } else { MAX_RUN_NAME };
    if name.len() > max {
        let what = if backup.spec.is_schedule() { "a schedule's runs" } else { "the run's Job" };
        problems.add(
            "metadata.name",
            format!("{name:?} is too long: use at most {max} characters, as {what} are named after it"),
        );
    }
    problems.into_result().map(|()| plan)
}

/// The check of a schedule: [`backup`], and the plan it runs on.
pub fn schedule(schedule: &MySQLBackup) -> Result<Plan, InvalidSpec> {
    backup(schedule)?.ok_or_else(|| {
        let mut problems = Problems::default();
        problems.add("spec.schedule", "is required for a schedule");
        problems.into_result().unwrap_err()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::run;

    #[test]
    fn long_names_are_refused_by_field() {
        let mut b = run();
        assert!(backup(&b).is_ok_and(|plan| plan.is_none()), "a run has no plan");
        b.metadata.name = Some("x".repeat(MAX_RUN_NAME + 1));
        let invalid = backup(&b).unwrap_err();
        assert_eq!(invalid.first_field(), "metadata.name");
    }
}
