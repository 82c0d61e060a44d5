//! `backup APP [--schedule NAME]`: a run of the schedule now, followed to its end.

use kube::api::PostParams;
use kube::{Api, ResourceExt};
use visitors_api::MySQLBackup;
use visitors_api::backup::{BackupMethod, BackupPhase};

use super::plan::{backup_run, pick_schedule};
use crate::cli::BackupArgs;
use crate::client::Session;
use crate::error::Error;
use crate::follow::{self, Seen};
use crate::view::{self, Run};
use crate::{format, output, problems, snapshot};

pub async fn run(session: &Session, args: &BackupArgs) -> Result<(), Error> {
    let snapshot = snapshot::read_app(session, &args.app).await?;
    let schedule = pick_schedule(&snapshot, args.schedule.as_deref(), false)?;
    let expected = view::expected_backup_seconds(&snapshot.backups, Some(&schedule.name_any()));
    let mut run = backup_run(schedule, super::now());
    if args.physical {
        run.spec.method = Some(BackupMethod::Physical);
    }
    let name = run.name_any();
    let api: Api<MySQLBackup> = Api::namespaced(session.client.clone(), &session.namespace);
    api.create(&PostParams::default(), &run)
        .await
        .map_err(|e| Error::from_api("create", "mysqlbackups", &session.namespace, None, e))?;
    eprintln!("MySQLBackup {name} created (a run of schedule {}).", schedule.name_any());
    if args.wait.no_wait {
        return output::print(args.wait.output.output, &view::run(&run), || format!("{name}\n"));
    }
    let ended = follow::until(&format!("backup {name}"), args.wait, || look(&api, &name, expected)).await?;
    let summary = view::run(&ended);
    let drilled = ended.spec.drill.as_ref().is_some_and(|d| d.after_each_run());
    output::print(args.wait.output.output, &summary, || result_text(&summary, drilled))?;
    match ended.status.as_ref().and_then(|s| s.phase) {
        Some(BackupPhase::Succeeded) => Ok(()),
        _ => Err(failure(&ended)),
    }
}

async fn look(api: &Api<MySQLBackup>, name: &str, expected: Option<f64>) -> Result<Seen<MySQLBackup>, Error> {
    let run = api.get(name).await.map_err(|e| Error::from_api("get", "mysqlbackups", "", Some(name), e))?;
    let status = run.status.clone().unwrap_or_default();
    if run.has_ended() {
        return Ok(Seen::Done(run));
    }
    let started = status.start_time.as_ref().map(|t| t.0);
    let elapsed = started.map(|s| super::now().duration_since(s).as_secs_f64());
    let fraction = elapsed.zip(expected).map(|(e, x)| (e / x).min(0.99));
    let waiting = visitors_api::conditions::find(&status.conditions, visitors_api::conditions::PENDING)
        .filter(|c| c.status == "True")
        .map(|c| format!(": {}", c.reason))
        .unwrap_or_default();
    let phase = status.phase.map_or("Pending".to_string(), |p| format!("{p:?}"));
    let of = expected.map(|x| format!(" (last run took {})", format::duration(x))).unwrap_or_default();
    Ok(Seen::Going { fraction, message: format!("backup {name} {phase}{waiting}{of}") })
}

fn result_text(run: &Run, drilled: bool) -> String {
    let mut lines = vec![format!("{}: {}", run.name, run.phase)];
    if let Some(size) = run.size_bytes {
        lines.push(format!("  size      {}", format::bytes(size)));
    }
    if let (Some(tables), Some(rows)) = (run.tables, run.rows) {
        lines.push(format!("  content   {tables} tables, {rows} rows"));
    }
    if let Some(took) = run.duration_seconds {
        lines.push(format!("  took      {}", format::duration(took)));
    }
    if let Some(from) = &run.taken_from {
        lines.push(format!("  from      {from}"));
    }
    lines.push(format!("  method    {}", run.method.to_lowercase()));
    if run.encrypted {
        lines.push("  encrypted with age".to_string());
    }
    match (run.phase.as_str(), drilled) {
        ("Succeeded", true) => lines.push("  verified  not yet: the schedule's drill of it starts now".to_string()),
        ("Succeeded", false) => {
            lines.push(format!("  verified  not yet: `kubectl visitors drill {}` proves it restores", run.name))
        }
        _ => {}
    }
    lines.join("\n") + "\n"
}

fn failure(run: &MySQLBackup) -> Error {
    let status = run.status.clone().unwrap_or_default();
    let reason = visitors_api::conditions::find(&status.conditions, visitors_api::conditions::READY)
        .map(|c| c.reason.clone())
        .unwrap_or_else(|| "BackupFailed".into());
    let what = problems::what_to_do_line(&reason);
    Error::Failed {
        what: format!("backup {}", run.name_any()),
        message: format!("{reason}: {}{what}", status.error.unwrap_or_default()),
    }
}
