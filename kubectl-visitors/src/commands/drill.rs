//! `drill RUN`: ask for a restore drill of a run now and follow it to its end.

use std::collections::BTreeMap;

use kube::Api;
use visitors_api::MySQLBackup;
use visitors_api::drill::{DRILL_REQUESTED_AT, DrillPhase};

use crate::cli::DrillArgs;
use crate::client::Session;
use crate::error::Error;
use crate::follow::{self, Seen};
use crate::{format, output, problems};

pub async fn run(session: &Session, args: &DrillArgs) -> Result<(), Error> {
    let namespace = &session.namespace;
    let api: Api<MySQLBackup> = Api::namespaced(session.client.clone(), namespace);
    let run =
        api.get(&args.run).await.map_err(|e| Error::from_api("get", "mysqlbackups", namespace, Some(&args.run), e))?;
    if run.spec.is_schedule() {
        return Err(Error::Refused(format!(
            "{} is a schedule: drill one of its runs (`kubectl visitors runs`)",
            args.run
        )));
    }
    if !run.is_kept_success() {
        return Err(Error::Refused(format!(
            "run {} has not succeeded: only a successful run can be drilled",
            args.run
        )));
    }
    let requested = super::now();
    let annotations = BTreeMap::from([(DRILL_REQUESTED_AT, Some(requested.to_string()))]);
    super::annotate(&api, "mysqlbackups", namespace, &args.run, annotations).await?;
    eprintln!("Drill of {} requested.", args.run);
    if args.wait.no_wait {
        return Ok(());
    }
    let name = args.run.clone();
    let ended = follow::until(&format!("the drill of {name}"), args.wait, || async {
        let run =
            api.get(&name).await.map_err(|e| Error::from_api("get", "mysqlbackups", namespace, Some(&name), e))?;
        let drill = run.status.as_ref().and_then(|s| s.drill.clone()).filter(|d| d.requested_at.0 >= requested);
        Ok(match drill {
            Some(drill) if drill.has_ended() => Seen::Done(drill),
            Some(drill) => Seen::Going { fraction: None, message: format!("drill of {name}: {:?}", drill.phase) },
            None => Seen::Going { fraction: None, message: format!("drill of {name}: requested") },
        })
    })
    .await?;
    output::print(args.wait.output.output, &ended, || {
        let restore =
            ended.restore_seconds.map(|s| format!(", restored in {}", format::duration(s))).unwrap_or_default();
        let content = match (ended.tables, ended.rows) {
            (Some(t), Some(r)) => format!(", {t} tables and {r} rows compared"),
            _ => String::new(),
        };
        format!("drill of {name}: {:?}{restore}{content}\n", ended.phase)
    })?;
    if ended.phase == DrillPhase::Succeeded {
        return Ok(());
    }
    let reason = ended.reason.clone().unwrap_or_else(|| "DrillError".into());
    Err(Error::Failed {
        what: format!("the drill of {name}"),
        message: format!("{reason}: {}{}", ended.message.unwrap_or_default(), problems::what_to_do_line(&reason)),
    })
}
