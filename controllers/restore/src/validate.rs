//! What the schema and `MySQLRestoreSpec::validate` cannot check: the object's own name, which
//! the Job's name is derived from, and a GTID target (parsed as the agent will).

use kube::ResourceExt;
use visitors_api::validation::Problems;
use visitors_api::{InvalidSpec, MySQLRestore};

/// Longest name of a restore: its Job `<restore>-restore` must fit the 63 characters of a label
/// value (the Job controller labels the pods with the Job's name).
pub const MAX_NAME: usize = 63 - "-restore".len();

/// The whole check of a MySQLRestore: its spec, then its name.
pub fn restore(restore: &MySQLRestore) -> Result<(), InvalidSpec> {
    let mut problems = Problems::default();
    if let Err(invalid) = restore.spec.validate() {
        for error in invalid.0 {
            problems.add(error.field, error.problem);
        }
    }
    if let Some(gtid) = restore.spec.source.point_in_time.as_ref().and_then(|p| p.target_gtid.as_deref())
        && let Err(problem) = visitors_agent_contract::gtid::GtidSet::parse(gtid)
    {
        problems.add("spec.source.pointInTime.targetGtid", problem);
    }
    let name = restore.name_any();
    if name.len() > MAX_NAME {
        problems.add(
            "metadata.name",
            format!("{name:?} is too long: use at most {MAX_NAME} characters, as the restore's Job is named after it"),
        );
    }
    problems.into_result()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::from_run;

    #[test]
    fn long_names_are_refused_by_field() {
        let mut r = from_run();
        assert_eq!(restore(&r), Ok(()));
        r.metadata.name = Some("x".repeat(MAX_NAME + 1));
        assert_eq!(restore(&r).unwrap_err().first_field(), "metadata.name");
    }
}
