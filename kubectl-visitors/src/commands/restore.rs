//! `restore APP --run RUN | --time T | --latest [--into OTHER]`: the plan first, a
//! confirmation, then the restore followed to its end.

use std::io::{BufRead, Write};

use jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use visitors_api::restore::RestorePhase;
use visitors_api::{MySQLRestore, VisitorsApp};

use super::plan::{RestorePlan, Target, plan_restore, restore_object};
use crate::cli::RestoreArgs;
use crate::client::Session;
use crate::error::Error;
use crate::follow::{self, Seen};
use crate::{format, output, problems, snapshot, view};

pub async fn run(session: &Session, args: &RestoreArgs) -> Result<(), Error> {
    let target = target(args)?;
    let snapshot = snapshot::read_app(session, &args.app).await?;
    let into = match args.into.as_deref() {
        Some(other) if other != args.app => {
            let apps: Api<VisitorsApp> = Api::namespaced(session.client.clone(), &session.namespace);
            apps.get(other)
                .await
                .map_err(|e| Error::from_api("get", "visitorsapps", &session.namespace, Some(other), e))?
        }
        _ => snapshot.app.clone(),
    };
    let now = super::now();
    let plan = plan_restore(&snapshot, &into, &target, args.schedule.as_deref(), now)?;
    eprint!("{}", plan_text(&plan, now));
    if !args.yes {
        confirm(&plan)?;
    }
    let restore = restore_object(&plan, super::now());
    let name = restore.name_any();
    let api: Api<MySQLRestore> = Api::namespaced(session.client.clone(), &session.namespace);
    api.create(&PostParams::default(), &restore)
        .await
        .map_err(|e| Error::from_api("create", "mysqlrestores", &session.namespace, None, e))?;
    eprintln!("MySQLRestore {name} created.");
    if args.wait.no_wait {
        return output::print(args.wait.output.output, &plan, || format!("{name}\n"));
    }
    let expected = plan.estimated_seconds;
    let ended = follow::until(&format!("restore {name}"), args.wait, || look(&api, &name, expected)).await?;
    let status = ended.status.clone().unwrap_or_default();
    output::print(args.wait.output.output, &status, || {
        let took = status.duration_seconds.map(|d| format!(" in {}", format::duration(d))).unwrap_or_default();
        let content = match (status.tables, status.rows) {
            (Some(t), Some(r)) => format!(": {t} tables, {r} rows"),
            _ => String::new(),
        };
        let phase = status.phase.map_or("Pending".to_string(), |p| format!("{p:?}"));
        format!("restore {name} {phase}{took}{content}\n")
    })?;
    if status.phase == Some(RestorePhase::Succeeded) {
        return Ok(());
    }
    let reason = visitors_api::conditions::find(&status.conditions, visitors_api::conditions::READY)
        .map(|c| c.reason.clone())
        .unwrap_or_else(|| "RestoreFailed".into());
    Err(Error::Failed {
        what: format!("restore {name}"),
        message: format!("{reason}: {}{}", status.error.unwrap_or_default(), problems::what_to_do_line(&reason)),
    })
}

fn target(args: &RestoreArgs) -> Result<Target, Error> {
    if let Some(run) = &args.run {
        return Ok(Target::Run(run.clone()));
    }
    if let Some(time) = &args.time {
        let parsed: Timestamp = time.parse().map_err(|e| {
            Error::Refused(format!("--time {time}: {e}; give a time in RFC 3339, e.g. 2026-11-27T10:15:00Z"))
        })?;
        return Ok(Target::Time(parsed));
    }
    Ok(Target::Latest)
}

async fn look(api: &Api<MySQLRestore>, name: &str, expected: Option<f64>) -> Result<Seen<MySQLRestore>, Error> {
    let restore = api.get(name).await.map_err(|e| Error::from_api("get", "mysqlrestores", "", Some(name), e))?;
    if restore.has_ended() {
        return Ok(Seen::Done(restore));
    }
    let activity = view::restore_progress(&restore, expected, super::now());
    let detail = activity.detail.map(|d| format!(": {d}")).unwrap_or_default();
    Ok(Seen::Going { fraction: activity.progress, message: format!("restore {name} {}{detail}", activity.phase) })
}

pub fn plan_text(plan: &RestorePlan, now: Timestamp) -> String {
    let mut lines = vec![format!("Restore plan for VisitorsApp {}/{}", plan.namespace, plan.into)];
    let backed_up = plan.base_backed_up.map(|t| format!("backed up {} ({})", format::time(t), format::age(t, now)));
    let size = plan.base_size_bytes.map(format::bytes);
    let verified = if plan.base_verified { "verified by a drill" } else { "NOT verified by a drill yet" };
    let facts: Vec<String> = [backed_up, size, Some(verified.to_string())].into_iter().flatten().collect();
    lines.push(format!("  base run       {} of VisitorsApp {} ({})", plan.base_run, plan.app, facts.join(", ")));
    if let Some(replay) = &plan.replay {
        let span = format::duration(replay.to.duration_since(replay.from).as_secs_f64());
        lines.push(format!(
            "  then replay    the archive of {} from {} to {} ({span} of transactions)",
            replay.schedule,
            format::time(replay.from),
            format::time(replay.to)
        ));
        if replay.waits_for_archive {
            lines.push(
                "                 (the archive reaches that time within seconds: the restore waits for it)".into(),
            );
        }
    }
    lines.push(format!(
        "  replaces       the database of VisitorsApp {}, all or nothing: what it holds now is lost",
        plan.into
    ));
    lines.push(format!("  stops          {} meanwhile, started again after", plan.writers_stopped.join(", ")));
    let estimate = match (plan.estimated_seconds, &plan.replay) {
        (Some(seconds), None) => {
            format!("about {} (the restore time its newest drill measured)", format::duration(seconds))
        }
        (Some(seconds), Some(_)) => {
            format!("about {} (the newest drill's restore time), plus the replay", format::duration(seconds))
        }
        (None, _) => "unknown: no drill has measured a restore of this app yet".into(),
    };
    lines.push(format!("  estimated      {estimate}"));
    lines.join("\n") + "\n"
}

fn confirm(plan: &RestorePlan) -> Result<(), Error> {
    if !output::interactive() {
        return Err(Error::Refused(
            "confirmation needed and no terminal to ask on: run again with --yes to restore without asking".into(),
        ));
    }
    eprint!("Replace the database of {}? Type yes to go on: ", plan.into);
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer).map_err(|e| Error::Io(e.to_string()))?;
    if matches!(answer.trim(), "yes" | "y" | "Y" | "YES") { Ok(()) } else { Err(Error::NotConfirmed) }
}
