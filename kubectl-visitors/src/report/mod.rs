//! `report APP -o FILE.tar.gz`: everything a support request needs about one app (its
//! resources and their children, Events, the Jobs' results, the pods' and the controllers' logs
//! about it, the status screen), with every secret redacted. What could not be read is said in
//! the report's README, not fatal: a report is most needed when things are broken.

mod redact;

use std::io::Write;

use base64::Engine;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod, Secret, Service};
use kube::api::{ListParams, LogParams};
use kube::{Api, ResourceExt};
use serde::Serialize;
use visitors_api::labels::names;

use crate::cli::ReportArgs;
use crate::client::Session;
use crate::error::Error;
use crate::render::{self, Screen};
use crate::snapshot::{self, AppSnapshot};
use crate::view;
pub use redact::Redactor;

/// Labels of the operator's own pods (the chart's).
const CONTROLLER_PODS: &str = "app.kubernetes.io/part-of=visitors-operator";

/// A report being assembled: files by path, and what could not be read.
#[derive(Default)]
struct Report {
    files: Vec<(String, Vec<u8>)>,
    missing: Vec<String>,
}

impl Report {
    fn add(&mut self, path: &str, text: String) {
        self.files.push((path.to_string(), text.into_bytes()));
    }
    fn missing(&mut self, what: &str, why: impl std::fmt::Display) {
        self.missing.push(format!("{what}: {why}"));
    }
}

pub async fn run(session: &Session, args: &ReportArgs) -> Result<(), Error> {
    let snapshot = snapshot::read_app(session, &args.app).await?;
    let mut report = Report::default();
    let redactor = redactor(session, &snapshot, &mut report).await;
    let now = crate::commands::now();
    let status = view::app_status(&snapshot, now);
    let plain = Screen { width: 120, colour: false };
    report.add("status.txt", redactor.text(&render::app_status(&status, &plain)));
    report.add("status.json", redactor.text(&serde_json::to_string_pretty(&status).unwrap_or_default()));
    add_objects(&mut report, &redactor, "resources/visitorsapp.yaml", std::slice::from_ref(&snapshot.app));
    add_objects(&mut report, &redactor, "resources/mysqlbackups.yaml", &snapshot.backups);
    add_objects(&mut report, &redactor, "resources/mysqlrestores.yaml", &snapshot.restores);
    let pods = children(session, &args.app, &redactor, &mut report).await;
    add_events(session, &snapshot, &redactor, &mut report).await;
    add_pod_logs(session, &pods, args.tail, &redactor, &mut report).await;
    add_controller_logs(session, &args.app, args.tail, &redactor, &mut report).await;
    report.add("README.txt", readme(session, &args.app, now, &report));
    write(&args.file, &args.app, &report.files)?;
    eprintln!("Wrote {} ({} files; secrets redacted).", args.file, report.files.len());
    if !report.missing.is_empty() {
        eprintln!("Some parts could not be read; README.txt in the report says which and why.");
    }
    Ok(())
}

/// A redactor that knows the values of the Secrets the app and its backups use, as far as the
/// caller may read them.
async fn redactor(session: &Session, snapshot: &AppSnapshot, report: &mut Report) -> Redactor {
    let mut redactor = Redactor::default();
    let secrets: Api<Secret> = Api::namespaced(session.client.clone(), &session.namespace);
    for name in secret_names(snapshot) {
        match secrets.get_opt(&name).await {
            Ok(Some(secret)) => {
                let data = secret.data.unwrap_or_default();
                for value in data.iter().filter(|(key, _)| !names_an_account(key)).map(|(_, value)| value) {
                    redactor.knowing(&String::from_utf8_lossy(&value.0));
                    redactor.knowing(&base64::engine::general_purpose::STANDARD.encode(&value.0));
                }
            }
            Ok(None) => {}
            Err(e) => report.missing(
                &format!("Secret {name} (read only to redact its values; redaction fell back to patterns)"),
                e,
            ),
        }
    }
    redactor
}

/// A Secret key whose value names something rather than being a secret: redacting `visitors`
/// (the book's user name) everywhere would garble the report and protect nothing.
fn names_an_account(key: &str) -> bool {
    matches!(key.to_lowercase().as_str(), "username" | "user" | "database" | "host" | "port")
}

fn secret_names(snapshot: &AppSnapshot) -> Vec<String> {
    let app = snapshot.app.name_any();
    let credentials = snapshot.app.spec.credentials_secret.clone().unwrap_or_else(|| names::credentials_secret(&app));
    let mut found = vec![credentials];
    for backup in &snapshot.backups {
        if let Some(s3) = backup.spec.storage.s3.as_ref().and_then(|s| s.credentials_secret.as_ref()) {
            found.push(s3.name.clone());
        }
        if let Some(encryption) = &backup.spec.encryption {
            found.push(encryption.key_secret.clone());
        }
    }
    found.sort();
    found.dedup();
    found
}

fn add_objects<K: Serialize>(report: &mut Report, redactor: &Redactor, path: &str, objects: &[K]) {
    let redacted: Vec<serde_json::Value> =
        objects.iter().filter_map(|o| serde_json::to_value(o).ok()).map(|o| redactor.object(o)).collect();
    let text = serde_saphyr::to_string(&redacted).unwrap_or_else(|e| format!("# cannot write as YAML: {e}\n"));
    report.add(path, text);
}

/// The app's children (every object labelled with its instance), their names and the pods.
async fn children(session: &Session, app: &str, redactor: &Redactor, report: &mut Report) -> Vec<Pod> {
    let params = ListParams::default().labels(&format!("app.kubernetes.io/instance={app}"));
    let client = &session.client;
    let namespace = &session.namespace;
    macro_rules! listed {
        ($kind:ty, $path:expr) => {{
            let api: Api<$kind> = Api::namespaced(client.clone(), namespace);
            match api.list(&params).await {
                Ok(list) => {
                    add_objects(report, redactor, $path, &list.items);
                    list.items
                }
                Err(e) => {
                    report.missing($path, e);
                    Vec::new()
                }
            }
        }};
    }
    listed!(StatefulSet, "resources/statefulsets.yaml");
    listed!(Deployment, "resources/deployments.yaml");
    listed!(Service, "resources/services.yaml");
    listed!(Job, "resources/jobs.yaml");
    listed!(PersistentVolumeClaim, "resources/persistentvolumeclaims.yaml");
    // Secrets by name only: never their data, nor even their keys.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match secrets.list_metadata(&params).await {
        Ok(list) => {
            let names: Vec<String> = list.items.iter().map(|s| format!("{}\n", s.name_any())).collect();
            report.add("resources/secrets.txt", names.concat());
        }
        Err(e) => report.missing("resources/secrets.txt", e),
    }
    listed!(Pod, "resources/pods.yaml")
}

/// Events about the app, its backups and restores, and its children.
async fn add_events(session: &Session, snapshot: &AppSnapshot, redactor: &Redactor, report: &mut Report) {
    let app = snapshot.app.name_any();
    let mut names: Vec<String> = vec![app.clone()];
    names.extend(snapshot.backups.iter().map(|b| b.name_any()));
    names.extend(snapshot.restores.iter().map(|r| r.name_any()));
    let events: Api<Event> = Api::namespaced(session.client.clone(), &session.namespace);
    match events.list(&ListParams::default()).await {
        Ok(list) => {
            let prefix = format!("{app}-");
            let mut about: Vec<Event> = list
                .items
                .into_iter()
                .filter(|e| {
                    let name = e.involved_object.name.clone().unwrap_or_default();
                    names.contains(&name) || name.starts_with(&prefix)
                })
                .collect();
            about.sort_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0).or(e.event_time.as_ref().map(|t| t.0)));
            add_objects(report, redactor, "events.yaml", &about);
        }
        Err(e) => report.missing("events.yaml", e),
    }
}

async fn add_pod_logs(session: &Session, pods: &[Pod], tail: i64, redactor: &Redactor, report: &mut Report) {
    let api: Api<Pod> = Api::namespaced(session.client.clone(), &session.namespace);
    for pod in pods {
        for container in pod.spec.iter().flat_map(|s| &s.containers) {
            let path = format!("logs/{}/{}.log", pod.name_any(), container.name);
            let params =
                LogParams { container: Some(container.name.clone()), tail_lines: Some(tail), ..LogParams::default() };
            match api.logs(&pod.name_any(), &params).await {
                Ok(text) => report.add(&path, redactor.text(&text)),
                Err(e) => report.missing(&path, e),
            }
        }
    }
}

/// The controllers' log lines that name the app (they log the object of every reconcile).
async fn add_controller_logs(session: &Session, app: &str, tail: i64, redactor: &Redactor, report: &mut Report) {
    let pods: Api<Pod> = Api::all(session.client.clone());
    let listed = match pods.list(&ListParams::default().labels(CONTROLLER_PODS)).await {
        Ok(list) => list.items,
        Err(e) => return report.missing("controllers/ (the operator's pods)", e),
    };
    for pod in listed {
        let namespace = pod.namespace().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(session.client.clone(), &namespace);
        let path = format!("controllers/{}.log", pod.name_any());
        let params = LogParams { tail_lines: Some(tail * 10), ..LogParams::default() };
        match api.logs(&pod.name_any(), &params).await {
            Ok(text) => {
                let about: String = text.lines().filter(|l| mentions(l, app)).map(|l| format!("{l}\n")).collect();
                report.add(&path, redactor.text(&about));
            }
            Err(e) => report.missing(&path, e),
        }
    }
}

/// Whether a log line is about `app`: its name as a whole word (not inside another name).
fn mentions(line: &str, app: &str) -> bool {
    line.match_indices(app).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + app.len()..].chars().next();
        let boundary = |c: Option<char>| c.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        boundary(before) && (boundary(after) || after == Some('-'))
    })
}

fn readme(session: &Session, app: &str, now: jiff::Timestamp, report: &Report) -> String {
    let mut text = format!(
        "Support report of VisitorsApp {}/{app}, made {now} by kubectl-visitors {}.\n\n\
         status.txt, status.json   what `kubectl visitors status {app}` shows\n\
         resources/                the app, its backups and restores, and its children (Secrets by name only)\n\
         events.yaml               Events about them\n\
         logs/                     the app's pods' logs (Jobs included)\n\
         controllers/              the controllers' log lines that name the app\n\n\
         Secret values, passwords, tokens and private keys are replaced by REDACTED.\n",
        session.namespace,
        env!("CARGO_PKG_VERSION"),
    );
    if !report.missing.is_empty() {
        text.push_str("\nNot in this report:\n");
        for missing in &report.missing {
            text.push_str(&format!("- {missing}\n"));
        }
    }
    text
}

fn write(path: &str, app: &str, files: &[(String, Vec<u8>)]) -> Result<(), Error> {
    let io = |e: std::io::Error| Error::Io(format!("writing {path}: {e}"));
    let file = std::fs::File::create(path).map_err(io)?;
    let mut archive = tar::Builder::new(flate2::write::GzEncoder::new(file, flate2::Compression::default()));
    let mtime = u64::try_from(jiff::Timestamp::now().as_second()).unwrap_or(0);
    for (name, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(mtime);
        header.set_cksum();
        archive.append_data(&mut header, format!("{app}-report/{name}"), content.as_slice()).map_err(io)?;
    }
    archive.into_inner().and_then(|gz| gz.finish()).and_then(|mut f| f.flush()).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_controller_line_is_kept_when_it_names_the_app_and_not_a_longer_name() {
        let cases = [
            (r#"{"object":"shop/ex","msg":"reconciled"}"#, true),
            ("reconciling VisitorsApp ex", true),
            ("job ex-nightly-1-backup finished", true),
            ("reconciling VisitorsApp example", false),
            ("reconciling VisitorsApp flex", false),
        ];
        for (line, kept) in cases {
            assert_eq!(mentions(line, "ex"), kept, "{line}");
        }
    }
}
