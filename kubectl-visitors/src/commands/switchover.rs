//! `switchover APP [--to POD]`: the switchover annotation with a new value, followed until the
//! controller answers it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use visitors_api::VisitorsApp;
use visitors_api::visitors_app::{SWITCHOVER_REQUESTED_AT_ANNOTATION, SWITCHOVER_TO_ANNOTATION};

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
    let request = super::now().to_string();
    let mut annotations = BTreeMap::from([(SWITCHOVER_REQUESTED_AT_ANNOTATION.to_string(), Some(request.clone()))]);
    annotations.insert(SWITCHOVER_TO_ANNOTATION.to_string(), args.to.clone());
    let patch = serde_json::json!({"metadata": {"annotations": annotations}});
    apps.patch(&args.app, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| Error::from_api("patch", "visitorsapps", namespace, Some(&args.app), e))?;
    eprintln!("Switchover of {} requested ({request}).", args.app);
    if args.wait.no_wait {
        return Ok(());
    }
    let name = args.app.clone();
    let answered = follow::until(&format!("the switchover of {name}"), args.wait, || async {
        let app =
            apps.get(&name).await.map_err(|e| Error::from_api("get", "visitorsapps", namespace, Some(&name), e))?;
        let replication = app.status.as_ref().and_then(|s| s.replication.clone());
        Ok(match replication {
            Some(r) if r.answered_switchover_request.as_deref() == Some(request.as_str()) => Seen::Done(r),
            _ => Seen::Going { fraction: None, message: format!("switchover of {name}: waiting for the controller") },
        })
    })
    .await?;
    let done = answered.last_switchover.as_ref().filter(|s| s.request.as_deref() == Some(request.as_str()));
    if let Some(change) = done {
        let gap =
            change.write_gap_seconds.map(|g| format!("; writes paused {}", format::duration(g))).unwrap_or_default();
        return output::print(args.wait.output.output, change, || {
            format!(
                "switchover of {name}: {} → {}{gap}\n",
                change.from.clone().unwrap_or_default(),
                change.to.clone().unwrap_or_default()
            )
        });
    }
    Err(refused(session, &name).await)
}

/// Why the controller refused: its newest `SwitchoverRefused` Event about the app.
async fn refused(session: &Session, app: &str) -> Error {
    let events: Api<Event> = Api::namespaced(session.client.clone(), &session.namespace);
    let params = ListParams::default().fields(&format!("involvedObject.name={app},reason=SwitchoverRefused"));
    let message = match events.list(&params).await {
        Ok(list) => list
            .items
            .into_iter()
            .max_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0).or(e.event_time.as_ref().map(|t| t.0)))
            .and_then(|e| e.message)
            .unwrap_or_else(|| "see `kubectl describe vapp`".into()),
        Err(e) => format!("see `kubectl describe vapp` ({e})"),
    };
    Error::Failed {
        what: format!("the switchover of {app}"),
        message: format!("SwitchoverRefused: {message}{}", problems::what_to_do_line("SwitchoverRefused")),
    }
}
