//! `switchover APP [--to POD]`: the switchover annotation with a new value, followed until the
//! controller answers it.

use std::collections::BTreeMap;

use kube::Api;
use visitors_api::VisitorsApp;
use visitors_api::visitors_app::{
    ReplicationStatus, RoleChange, SWITCHOVER_REQUESTED_AT_ANNOTATION, SWITCHOVER_TO_ANNOTATION,
};

use crate::cli::SwitchoverArgs;
use crate::client::Session;
use crate::error::Error;
use crate::follow::{self, Seen};
use crate::{format, output, problems};

pub async fn run(session: &Session, args: &SwitchoverArgs) -> Result<(), Error> {
    let namespace = &session.namespace;
    let apps: Api<VisitorsApp> = Api::namespaced(session.client.clone(), namespace);
    let app =
        apps.get(&args.app).await.map_err(|e| Error::from_api("get", "visitorsapps", namespace, Some(&args.app), e))?;
    let replicas = app.spec.mysql.as_ref().and_then(|m| m.replicas).unwrap_or(1);
    if replicas < 2 {
        return Err(Error::Refused(format!(
            "VisitorsApp {} runs one MySQL server (spec.mysql.replicas {replicas}): there is no replica to switch to",
            args.app
        )));
    }
    // To the nanosecond: two requests within one second are two requests.
    let request = jiff::Timestamp::now().to_string();
    let annotations = BTreeMap::from([
        (SWITCHOVER_REQUESTED_AT_ANNOTATION, Some(request.clone())),
        (SWITCHOVER_TO_ANNOTATION, args.to.clone()),
    ]);
    super::annotate(&apps, "visitorsapps", namespace, &args.app, annotations).await?;
    eprintln!("Switchover of {} requested ({request}).", args.app);
    if args.wait.no_wait {
        return Ok(());
    }
    let name = args.app.clone();
    let answered = follow::until(&format!("the switchover of {name}"), args.wait, || async {
        let app =
            apps.get(&name).await.map_err(|e| Error::from_api("get", "visitorsapps", namespace, Some(&name), e))?;
        let replication = app.status.as_ref().and_then(|s| s.replication.clone()).unwrap_or_default();
        Ok(match answer(&replication, &request) {
            Answer::Pending => {
                Seen::Going { fraction: None, message: format!("switchover of {name}: waiting for the controller") }
            }
            answered => Seen::Done(answered),
        })
    })
    .await?;
    match answered {
        Answer::Made(change) => {
            let gap = change
                .write_gap_seconds
                .map(|g| format!("; writes paused {}", format::duration(g)))
                .unwrap_or_default();
            output::print(args.wait.output.output, &change, || {
                format!(
                    "switchover of {name}: {} → {}{gap}\n",
                    change.from.clone().unwrap_or_default(),
                    change.to.clone().unwrap_or_default()
                )
            })
        }
        Answer::Refused(refusal) => Err(Error::Failed {
            what: format!("the switchover of {name}"),
            message: format!(
                "{}: {}{}",
                refusal.reason,
                refusal.message.clone().unwrap_or_default(),
                problems::what_to_do_line(&refusal.reason)
            ),
        }),
        Answer::Pending | Answer::Overtaken => Err(Error::Failed {
            what: format!("the switchover of {name}"),
            message: "answered, but another role change was recorded since: see `kubectl visitors status` and `kubectl describe vapp`".into(),
        }),
    }
}

/// The controller's answer to a switchover request, read from the app's replication status.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    /// Not answered yet.
    Pending,
    /// The primary moved.
    Made(RoleChange),
    /// Refused: the controller records a refusal as a switchover to nobody, with its reason.
    Refused(RoleChange),
    /// Answered, but a later role change (a rolling update's) replaced the record.
    Overtaken,
}

fn answer(replication: &ReplicationStatus, request: &str) -> Answer {
    if replication.answered_switchover_request.as_deref() != Some(request) {
        return Answer::Pending;
    }
    match replication.last_switchover.clone() {
        Some(change) if change.request.as_deref() == Some(request) && change.to.is_some() => Answer::Made(change),
        Some(change) if change.request.as_deref() == Some(request) => Answer::Refused(change),
        _ => Answer::Overtaken,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(request: &str, to: Option<&str>, reason: &str) -> RoleChange {
        serde_json::from_value(serde_json::json!({"time": "2026-11-28T00:00:00Z", "from": "ex-mysql-0", "to": to,
            "reason": reason, "request": request}))
        .unwrap()
    }

    fn status(answered: Option<&str>, last: Option<RoleChange>) -> ReplicationStatus {
        ReplicationStatus {
            answered_switchover_request: answered.map(str::to_string),
            last_switchover: last,
            ..ReplicationStatus::default()
        }
    }

    #[test]
    fn a_request_is_pending_made_refused_or_overtaken() {
        let made = change("t2", Some("ex-mysql-1"), "Requested");
        let refused = change("t2", None, "TargetNotAHealthyReplica");
        let cases = [
            ("never answered", status(None, None), Answer::Pending),
            (
                "an older request answered",
                status(Some("t1"), Some(change("t1", Some("ex-mysql-2"), "Requested"))),
                Answer::Pending,
            ),
            ("made", status(Some("t2"), Some(made.clone())), Answer::Made(made)),
            ("refused", status(Some("t2"), Some(refused.clone())), Answer::Refused(refused)),
            (
                "a rolling update since",
                status(Some("t2"), Some(change("", Some("ex-mysql-2"), "RollingUpdate"))),
                Answer::Overtaken,
            ),
        ];
        for (case, replication, expected) in cases {
            assert_eq!(answer(&replication, "t2"), expected, "{case}");
        }
    }
}
