//! Reconcile scenarios against an in-memory API server on kube's tower-test mock service.

mod support;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::store::Writer;
use support::{Harness, RESYNC, book_spec};
use visitors_api::VisitorsApp;
use visitors_api::conditions::{self, BACKEND_READY, DATABASE_READY, READY};
use visitors_api::visitors_app::{DeletionPolicy, MysqlSpec, StorageSpec};
use visitors_controller::cleanup::FINALIZER;
use visitors_controller::reconcile;

fn ready_condition(h: &Harness) -> (String, String, String) {
    let status = h.app().status.expect("a status");
    let c = conditions::find(&status.conditions, READY).expect("a Ready condition").clone();
    (c.status, c.reason, c.message)
}

fn condition_reason(h: &Harness, type_: &str) -> String {
    conditions::find(&h.app().status.unwrap().conditions, type_).unwrap().reason.clone()
}

fn replicas(h: &Harness, name: &str) -> Option<i32> {
    h.api.get::<Deployment>(name).and_then(|d| d.spec?.replicas)
}

fn frontend_env(h: &Harness) -> Option<Vec<(String, Option<String>)>> {
    let deployment: Deployment = h.api.get("ex-frontend").unwrap();
    let container = deployment.spec.unwrap().template.spec.unwrap().containers.remove(0);
    container.env.map(|env| env.into_iter().map(|e| (e.name, e.value)).collect())
}

#[tokio::test]
async fn first_creation_builds_the_database_and_frontend_then_waits() {
    let h = Harness::new();
    h.create_app(book_spec());
    let action = h.reconcile().await.unwrap();

    let app = h.app();
    assert!(app.metadata.finalizers.unwrap().contains(&FINALIZER.to_string()));
    let secret: Secret = h.api.get("ex-mysql-credentials").expect("a generated Secret");
    let data = secret.data.unwrap();
    assert!(["username", "password", "root-password"].iter().all(|k| !data[*k].0.is_empty()));
    assert!(h.api.get::<StatefulSet>("ex-mysql").is_some());
    assert!(h.api.get::<Service>("ex-mysql").is_some());
    assert!(h.api.get::<Service>("ex-mysql-headless").is_some());
    assert!(h.api.get::<Deployment>("ex-frontend").is_some());
    assert!(h.api.get::<Service>("ex-frontend").is_some());
    assert!(h.api.get::<Deployment>("ex-backend").is_none(), "the backend waits for the database");

    let (status, reason, _) = ready_condition(&h);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "WaitingForMysqlPod"));
    assert_eq!(h.app().status.unwrap().observed_generation, Some(1));
    assert_eq!(
        action,
        Action::requeue(RESYNC),
        "the MySQL pod becoming ready wakes the app through the StatefulSet watch: no timer but the resync"
    );

    // Normal progress is in the status; at scale an Event per created child or per waiting app
    // would be thousands of writes to the API server that say nothing the status does not.
    let events = h.api.events();
    assert!(events.is_empty(), "no Event for normal creation and progress: {events:?}");
    let password = String::from_utf8(data["password"].0.clone()).unwrap();
    assert!(events.iter().all(|(_, _, note)| !note.contains(&password)), "a password leaked into an Event");
    assert!(!serde_json::to_string(&h.app().status).unwrap().contains(&password), "a password leaked into status");
}

/// A new app's Secrets are known to be absent: created without a read that would answer 404
/// (three per app, a fifth of a first reconcile's requests, before).
#[tokio::test]
async fn a_new_apps_first_reconcile_creates_its_secrets_without_reading_them() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.reconcile().await.unwrap();

    let requests = h.api.requests();
    let secrets =
        |method: http::Method| requests.iter().filter(|r| r.method == method && r.path.contains("/secrets")).count();
    assert_eq!(secrets(http::Method::GET), 0, "{requests:?}");
    assert_eq!(secrets(http::Method::POST), 3, "credentials, CA and server certificate: {requests:?}");
    assert_eq!(requests.len(), 11, "finalizer, claim, 3 Secrets, 5 children, status: {requests:?}");
    let server: Secret = h.api.get("ex-mysql-tls").expect("the server certificate");
    assert!(server.data.unwrap().contains_key("tls.key"));
}

/// An app made again over the volume and Secret an earlier app of its name kept
/// (deletionPolicy Retain) uses that Secret: new passwords would lock the backend out.
#[tokio::test]
async fn a_new_app_over_a_kept_volume_uses_the_secret_kept_with_it() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.reconcile().await.unwrap();
    let kept: Secret = h.api.get("ex-mysql-credentials").unwrap();
    delete_app(&h).await;
    put_database_volume(&h);

    h.create_app(book_spec());
    h.reconcile().await.unwrap();

    assert_eq!(ready_condition(&h).1, "WaitingForMysqlPod");
    let secret: Secret = h.api.get("ex-mysql-credentials").unwrap();
    assert_eq!(secret.data, kept.data, "the kept passwords");
}

/// Progress towards Ready is in the status only, but losing readiness is news for a user: a
/// Normal Event says why, once.
#[tokio::test]
async fn an_app_that_loses_readiness_says_so_by_an_event() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.converge().await;
    h.api.clear_events();

    h.api.edit::<StatefulSet>("ex-mysql", |sts| sts.status.as_mut().unwrap().ready_replicas = Some(0));
    h.reconcile().await.unwrap();
    h.reconcile().await.unwrap();

    let events = h.api.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!((events[0].0.as_str(), events[0].1.as_str()), ("Normal", "WaitingForMysqlPod"));
}

#[tokio::test]
async fn waiting_for_mysql_then_rolling_out_the_backend() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.reconcile().await.unwrap();

    h.mysql_pod_ready();
    h.check.fail_with("connection refused");
    h.reconcile().await.unwrap();
    assert_eq!(condition_reason(&h, DATABASE_READY), "WaitingForConnection");
    assert!(ready_condition(&h).2.ends_with("connection refused"));
    assert!(h.api.get::<Deployment>("ex-backend").is_none(), "no backend before SELECT 1 succeeds");

    h.check.succeed();
    h.reconcile().await.unwrap();
    assert_eq!(condition_reason(&h, DATABASE_READY), "Connected");
    assert_eq!(replicas(&h, "ex-backend"), Some(1));
    assert!(h.api.get::<Service>("ex-backend").is_some());
    assert_eq!(condition_reason(&h, BACKEND_READY), "RollingOut", "no Deployment status yet");

    h.deployment_ready("ex-backend");
    h.deployment_ready("ex-frontend");
    let action = h.reconcile().await.unwrap();
    assert_eq!(ready_condition(&h).0, "True");
    assert_eq!(action, Action::requeue(RESYNC));
    let status = h.app().status.unwrap();
    assert_eq!(status.backend_image.as_deref(), Some("jdob/visitors-service:1.0.0"));
    assert_eq!(status.frontend_image.as_deref(), Some("jdob/visitors-webui:1.0.0"));
    assert_eq!(status.backend_ready_replicas, Some(1));
    assert!(h.api.events().iter().any(|(type_, reason, _)| type_ == "Normal" && reason == "Ready"));
}

#[tokio::test]
async fn a_database_that_does_not_answer_is_polled_with_a_backoff_growing_to_a_minute() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.reconcile().await.unwrap();
    h.mysql_pod_ready();
    h.check.fail_with("connection refused");

    let delays: Vec<std::time::Duration> = {
        let mut delays = Vec::new();
        for _ in 0..12 {
            delays.push(requeue_delay(&h.reconcile().await.unwrap()));
        }
        delays
    };
    assert!(delays[0] < std::time::Duration::from_secs(2), "the first look comes soon: {delays:?}");
    assert!(delays.windows(2).all(|w| w[1] >= w[0]), "the delay keeps growing: {delays:?}");
    assert_eq!(delays[11], std::time::Duration::from_secs(60), "to about a minute, then stays: {delays:?}");
    assert_eq!(h.check.calls.load(std::sync::atomic::Ordering::SeqCst), 12);

    h.check.succeed();
    let action = h.reconcile().await.unwrap();
    assert_eq!(action, Action::requeue(RESYNC), "waiting for the backend rollout is the watch's job");
    assert_eq!(condition_reason(&h, BACKEND_READY), "RollingOut");
}

/// The delay of a requeue, read from the Action's Debug text (kube keeps it private), for
/// example `Action { requeue_after: Some(1.5s) }`.
fn requeue_delay(action: &Action) -> std::time::Duration {
    let text = format!("{action:?}");
    let inner = text.split("Some(").nth(1).and_then(|t| t.split(')').next()).expect("a requeue");
    let (number, unit) = inner.split_at(inner.find(|c: char| c.is_alphabetic() || c == 'µ').expect("a unit"));
    let seconds_per_unit = match unit {
        "s" => 1.0,
        "ms" => 1e-3,
        "µs" => 1e-6,
        "ns" => 1e-9,
        other => panic!("unit {other} in {text}"),
    };
    std::time::Duration::from_secs_f64(number.parse::<f64>().expect("a number") * seconds_per_unit)
}

#[tokio::test]
async fn converged_reconcile_changes_nothing() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.converge().await;
    let before = h.api.versions();
    h.api.clear_requests();
    h.api.clear_events();

    let action = h.reconcile().await.unwrap();

    assert_eq!(action, Action::requeue(RESYNC));
    assert_eq!(h.api.versions(), before, "a periodic reconcile must leave every resourceVersion unchanged");
    let requests = h.api.requests();
    assert!(requests.iter().all(|r| !r.changed), "{requests:?}");
    assert!(!requests.iter().any(|r| r.path.ends_with("/status")), "an unchanged status is not written");
    assert!(h.api.events().is_empty(), "{:?}", h.api.events());
}

/// Each write of a reconcile comes back through a watch. Those echoes must not wake the app
/// again (at scale they crowd out new apps): only what the reconcile did not do itself does.
#[tokio::test]
async fn the_watch_events_of_a_reconciles_own_writes_are_no_news() {
    let h = Harness::new();
    h.create_app(book_spec());
    let seen = &h.ctx.seen;
    assert!(seen.is_news(&h.app()), "a new app");
    h.reconcile().await.unwrap();

    assert!(!seen.is_news(&h.app()), "the finalizer the reconcile added");
    assert!(!seen.is_news(&h.api.get::<StatefulSet>("ex-mysql").unwrap()), "the StatefulSet it created");
    assert!(!seen.is_news(&h.api.get::<Deployment>("ex-frontend").unwrap()), "the Deployment it created");
    for name in ["ex-mysql", "ex-mysql-headless", "ex-frontend"] {
        assert!(!seen.is_news(&h.api.get::<Service>(name).unwrap()), "the Service {name} it created");
    }

    h.mysql_pod_ready();
    assert!(seen.is_news(&h.api.get::<StatefulSet>("ex-mysql").unwrap()), "the database pod became ready");
    h.api.edit::<Service>("ex-frontend", |service| {
        service.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 1;
    });
    assert!(seen.is_news(&h.api.get::<Service>("ex-frontend").unwrap()), "someone edited a Service");
    h.edit_spec(|spec| spec.size = 3);
    assert!(seen.is_news(&h.app()), "a new generation");
}

/// A reconcile woken by a workload's status (the StatefulSet controller counting its pod)
/// applies nothing again: server-side apply is the API server's most expensive request, and at
/// scale such reconciles are most of them. While no database pod is ready nothing needs the
/// Secret (the first reconcile checked it): it writes the status if it moved, nothing else.
#[tokio::test]
async fn a_status_change_of_a_child_costs_no_apply() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.reconcile().await.unwrap();
    h.api.clear_requests();

    report_statefulset_status(&h);
    h.reconcile().await.unwrap();

    let requests = h.api.requests();
    let applies: Vec<_> =
        requests.iter().filter(|r| r.method.as_str() == "PATCH" && !r.path.ends_with("/status")).collect();
    assert!(applies.is_empty(), "{applies:?}");
    assert_eq!(requests.iter().filter(|r| r.method.as_str() == "GET").count(), 0, "not even the Secret: {requests:?}");
}

/// The StatefulSet controller's first status update: one replica, none ready.
fn report_statefulset_status(h: &Harness) {
    h.api.edit::<StatefulSet>("ex-mysql", |sts| {
        sts.status = Some(k8s_openapi::api::apps::v1::StatefulSetStatus {
            observed_generation: sts.metadata.generation,
            replicas: 1,
            ..Default::default()
        });
    });
}

/// The credentials are read at the first reconcile of each spec (and once a resync period): a
/// user Secret deleted while the database started is named at the next read, a spec change here.
#[tokio::test]
async fn a_deleted_secret_is_named_at_the_next_read_of_the_credentials() {
    let h = Harness::new();
    let data = ["username", "password", "root-password"]
        .map(|key| (key.to_string(), k8s_openapi::ByteString(format!("{key}-value").into_bytes())));
    h.api.put(&Secret {
        metadata: kube::api::ObjectMeta { name: Some("mine".into()), ..Default::default() },
        data: Some(data.into()),
        ..Default::default()
    });
    h.create_app(visitors_api::VisitorsAppSpec { credentials_secret: Some("mine".into()), ..book_spec() });
    h.reconcile().await.unwrap();
    assert_eq!(ready_condition(&h).1, "WaitingForMysqlPod");

    h.api.remove::<Secret>("mine");
    h.mysql_pod_ready();
    h.api.clear_requests();
    h.reconcile().await.unwrap();
    assert!(!h.api.requests().iter().any(|r| r.path.contains("/secrets/")), "the credentials read stands");
    assert_eq!(h.check.calls.load(std::sync::atomic::Ordering::SeqCst), 1, "the check ran with them");

    h.api.edit::<visitors_api::VisitorsApp>("ex", |app| app.spec.title = Some("Another Title".into()));
    h.reconcile().await.unwrap();
    let (_, reason, message) = ready_condition(&h);
    assert_eq!(reason, "InvalidCredentialsSecret");
    assert!(message.contains("mine"), "{message}");
}

/// The API server fills in the claim template of a StatefulSet (its volume mode, a status).
/// The controller keeps the template as the server has it (it is immutable), so its desired form
/// changes once the cache holds the StatefulSet: that change is the server's own, and applying
/// it again would change nothing. Each child is applied once.
#[tokio::test]
async fn the_statefulset_is_applied_once_although_the_server_fills_in_its_claim_template() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.reconcile().await.unwrap();
    let claim = h.api.get::<StatefulSet>("ex-mysql").unwrap().spec.unwrap().volume_claim_templates.unwrap().remove(0);
    assert_eq!(claim.spec.unwrap().volume_mode.as_deref(), Some("Filesystem"), "the fake fills it in");

    report_statefulset_status(&h);
    h.reconcile().await.unwrap();

    let statefulset_applies = h
        .api
        .requests()
        .iter()
        .filter(|r| r.method.as_str() == "PATCH" && r.path.ends_with("/statefulsets/ex-mysql"))
        .count();
    assert_eq!(statefulset_applies, 1, "{:?}", h.api.requests());
}

#[tokio::test]
async fn size_change_scales_the_backend() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.converge().await;

    h.edit_spec(|spec| spec.size = 3);
    h.reconcile().await.unwrap();

    assert_eq!(replicas(&h, "ex-backend"), Some(3));
    assert_eq!(ready_condition(&h).1, "RollingOut");
    assert_eq!(h.app().status.unwrap().observed_generation, Some(2));
    h.deployment_ready("ex-backend");
    h.reconcile().await.unwrap();
    assert_eq!(ready_condition(&h).0, "True");
    assert_eq!(h.app().status.unwrap().backend_ready_replicas, Some(3));
}

#[tokio::test]
async fn clearing_the_title_removes_the_variable() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.reconcile().await.unwrap();
    assert_eq!(frontend_env(&h), Some(vec![("REACT_APP_TITLE".into(), Some("Custom Dashboard Title".into()))]));

    h.edit_spec(|spec| spec.title = Some(String::new()));
    h.reconcile().await.unwrap();
    assert_eq!(frontend_env(&h), None);

    h.edit_spec(|spec| spec.title = Some("Visitors".into()));
    h.reconcile().await.unwrap();
    assert_eq!(frontend_env(&h), Some(vec![("REACT_APP_TITLE".into(), Some("Visitors".into()))]));
}

#[tokio::test]
async fn drift_is_repaired() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.converge().await;

    h.api.edit::<Deployment>("ex-backend", |d| d.spec.as_mut().unwrap().replicas = Some(7));
    h.api.remove::<Service>("ex-frontend");
    h.api.edit::<StatefulSet>("ex-mysql", |s| {
        s.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].image = Some("mysql:5.7".into());
    });
    h.reconcile().await.unwrap();

    assert_eq!(replicas(&h, "ex-backend"), Some(1));
    assert!(h.api.get::<Service>("ex-frontend").is_some(), "a deleted child comes back");
    let sts: StatefulSet = h.api.get("ex-mysql").unwrap();
    assert_eq!(sts.spec.unwrap().template.spec.unwrap().containers[0].image.as_deref(), Some("mysql:8.4"));
}

fn service_ports(h: &Harness, name: &str) -> Vec<i32> {
    let service: Service = h.api.get(name).unwrap();
    service.spec.unwrap().ports.unwrap().iter().map(|p| p.port).collect()
}

fn mysql_container(h: &Harness) -> k8s_openapi::api::core::v1::Container {
    let sts: StatefulSet = h.api.get("ex-mysql").unwrap();
    sts.spec.unwrap().template.spec.unwrap().containers.remove(0)
}

#[tokio::test]
async fn an_edited_service_port_is_repaired_although_apply_alone_is_rejected() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.converge().await;
    // `kubectl patch svc ex-mysql --type=json -p='[{"op":"replace","path":"/spec/ports/0/port","value":3307}]'`
    h.api.edit::<Service>("ex-mysql", |s| s.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 3307);

    let action = h.reconcile().await.expect("the reconcile repairs the Service");

    assert_eq!(service_ports(&h, "ex-mysql"), [3306], "the edited port is replaced, not kept next to ours");
    assert_eq!(action, Action::requeue(RESYNC));
    assert_eq!(ready_condition(&h).0, "True");
    let repaired = h.api.events().into_iter().find(|(_, reason, _)| reason == "Repaired").expect("a Repaired Event");
    assert!(repaired.2.contains("Service ex-mysql") && repaired.2.contains("port=3307"), "{repaired:?}");
}

#[tokio::test]
async fn edited_list_items_of_every_child_kind_are_repaired() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.converge().await;
    h.api.edit::<StatefulSet>("ex-mysql", |s| {
        let container = &mut s.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0];
        container.ports.as_mut().unwrap()[0].container_port = 3307;
        container.volume_mounts.as_mut().unwrap()[0].mount_path = "/elsewhere".into();
        container.env.as_mut().unwrap()[1].name = "MYSQL_DATABASE_EDITED".into();
    });
    h.api.edit::<Deployment>("ex-frontend", |d| {
        let container = &mut d.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0];
        container.env.as_mut().unwrap()[0].name = "REACT_APP_TITLE_EDITED".into();
    });
    h.api.edit::<Service>("ex-backend", |s| s.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 8001);
    h.api.edit::<Service>("ex-mysql-headless", |s| s.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 1);

    h.reconcile().await.expect("every child is repaired");

    let mysql = mysql_container(&h);
    let ports: Vec<i32> = mysql.ports.unwrap().iter().map(|p| p.container_port).collect();
    assert_eq!(ports, [3306]);
    let mounts: Vec<String> = mysql.volume_mounts.unwrap().into_iter().map(|m| m.mount_path).collect();
    assert_eq!(mounts, ["/var/lib/mysql", "/tmp", "/etc/mysql/tls"]);
    let env: Vec<String> = mysql.env.unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(env, ["MYSQL_ROOT_PASSWORD", "MYSQL_DATABASE", "MYSQL_USER", "MYSQL_PASSWORD"]);
    assert_eq!(frontend_env(&h), Some(vec![("REACT_APP_TITLE".into(), Some("Custom Dashboard Title".into()))]));
    assert_eq!(service_ports(&h, "ex-backend"), [8000]);
    assert_eq!(service_ports(&h, "ex-mysql-headless"), [3306]);

    h.api.clear_requests();
    h.reconcile().await.unwrap();
    assert!(h.api.requests().iter().all(|r| !r.changed), "repaired children stay put: {:?}", h.api.requests());
}

#[tokio::test]
async fn a_child_that_cannot_be_applied_is_named_and_the_others_are_still_reported() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.converge().await;
    let denial = "services \"ex-mysql\" is forbidden: User \"system:serviceaccount:ops:visitors-controller\" cannot patch resource \"services\"";
    h.api.fail_with("/services/ex-mysql", 403, denial);
    // Deleted, so that it must be applied again (an unchanged child is not).
    h.api.remove::<Service>("ex-mysql");
    h.edit_spec(|spec| spec.size = 3);

    let error = h.reconcile().await.expect_err("the failed child fails the reconcile, for its backoff");
    assert!(error.to_string().contains("Service ex-mysql"), "{error}");
    assert_eq!(replicas(&h, "ex-backend"), Some(3), "the other children are still applied");
    let (status, reason, message) = ready_condition(&h);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "ChildApplyFailed"));
    assert!(message.contains("applying Service ex-mysql failed") && message.contains(denial), "{message}");
    assert_eq!(h.app().status.unwrap().observed_generation, Some(2));

    h.deployment_ready("ex-backend");
    h.reconcile().await.unwrap_err();
    assert_eq!(h.app().status.unwrap().backend_ready_replicas, Some(3), "status keeps being refreshed");
    assert_eq!(ready_condition(&h).1, "ChildApplyFailed");

    h.api.stop_failing();
    h.reconcile().await.unwrap();
    assert_eq!(ready_condition(&h).0, "True");
}

#[tokio::test]
async fn invalid_spec_is_reported_once_and_not_retried() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.edit_spec(|spec| spec.size = 99);

    let action = h.reconcile().await.unwrap();

    assert_eq!(action, Action::await_change(), "only a spec change can fix it");
    let (status, reason, message) = ready_condition(&h);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "InvalidSpec"));
    assert!(message.contains("spec.size"), "{message}");
    assert!(h.api.get::<StatefulSet>("ex-mysql").is_none(), "nothing is built from an invalid spec");
    let warnings: Vec<_> = h.api.events().into_iter().filter(|(t, _, _)| t == "Warning").collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].2.contains("spec.size"));

    h.api.clear_requests();
    let again = h.reconcile().await.unwrap();
    assert_eq!(again, Action::await_change());
    assert!(h.api.requests().iter().all(|r| !r.changed), "no status rewrite, no new Event: {:?}", h.api.requests());
    assert_eq!(h.api.events().iter().filter(|(t, _, _)| t == "Warning").count(), 1);

    h.edit_spec(|spec| spec.size = 2);
    h.reconcile().await.unwrap();
    assert_eq!(ready_condition(&h).1, "WaitingForMysqlPod");
}

#[tokio::test]
async fn user_secret_missing_a_key_is_named_and_retried_with_backoff() {
    let h = Harness::new();
    h.api.put(&Secret {
        metadata: kube::api::ObjectMeta { name: Some("mine".into()), ..Default::default() },
        string_data: None,
        data: Some([("username".to_string(), k8s_openapi::ByteString(b"app".to_vec()))].into()),
        ..Default::default()
    });
    h.create_app(visitors_api::VisitorsAppSpec { credentials_secret: Some("mine".into()), ..book_spec() });

    let first = h.reconcile().await.unwrap();
    let (_, reason, message) = ready_condition(&h);
    assert_eq!(reason, "InvalidCredentialsSecret");
    assert!(message.contains("password, root-password"), "{message}");
    let second = h.reconcile().await.unwrap();
    assert_ne!(first, Action::await_change(), "a Secret fix does not change the app, so it is looked at again");
    assert_ne!(first, second, "retries back off");

    h.api.edit::<Secret>("mine", |s| {
        let data = s.data.as_mut().unwrap();
        data.insert("password".into(), k8s_openapi::ByteString(b"p".to_vec()));
        data.insert("root-password".into(), k8s_openapi::ByteString(b"r".to_vec()));
    });
    h.reconcile().await.unwrap();
    assert_eq!(ready_condition(&h).1, "WaitingForMysqlPod");
    assert!(h.api.get::<Secret>("ex-mysql-credentials").is_none(), "a user Secret is used, none generated");
}

/// The claim of the app's database volume, as a MySQL pod left it (or `deletionPolicy: Retain`).
fn put_database_volume(h: &Harness) {
    h.api.put(&PersistentVolumeClaim {
        metadata: kube::api::ObjectMeta { name: Some("data-ex-mysql-0".into()), ..Default::default() },
        ..Default::default()
    });
}

#[tokio::test]
async fn lost_credentials_are_never_regenerated_over_existing_data() {
    let h = Harness::new();
    put_database_volume(&h);
    h.create_app(book_spec());
    h.reconcile().await.unwrap();
    assert_eq!(ready_condition(&h).1, "CredentialsLost");
    assert!(h.api.get::<Secret>("ex-mysql-credentials").is_none());
}

#[tokio::test]
async fn storage_growth_is_requested_on_the_claim() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.reconcile().await.unwrap();
    h.api.put(&claim_requesting("1Gi"));
    h.edit_spec(|spec| {
        spec.mysql = Some(Box::new(MysqlSpec {
            storage: Some(StorageSpec { size: Some("5Gi".into()), ..Default::default() }),
            ..Default::default()
        }))
    });
    h.reconcile().await.unwrap();

    let claim: PersistentVolumeClaim = h.api.get("data-ex-mysql-0").unwrap();
    let requested = claim.spec.unwrap().resources.unwrap().requests.unwrap()["storage"].0.clone();
    assert_eq!(requested, "5Gi");
    let sts: StatefulSet = h.api.get("ex-mysql").unwrap();
    let template = &sts.spec.unwrap().volume_claim_templates.unwrap()[0];
    assert_eq!(
        template.spec.as_ref().unwrap().resources.as_ref().unwrap().requests.as_ref().unwrap()["storage"].0,
        "1Gi"
    );
}

fn claim_requesting(size: &str) -> PersistentVolumeClaim {
    let requests = std::collections::BTreeMap::from([(
        "storage".to_string(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity(size.into()),
    )]);
    PersistentVolumeClaim {
        metadata: kube::api::ObjectMeta { name: Some("data-ex-mysql-0".into()), ..Default::default() },
        spec: Some(k8s_openapi::api::core::v1::PersistentVolumeClaimSpec {
            resources: Some(k8s_openapi::api::core::v1::VolumeResourceRequirements {
                requests: Some(requests),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_refused_volume_resize_is_reported_and_the_rest_still_converges() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.converge().await;
    h.api.put(&claim_requesting("1Gi"));
    h.api.fail_with(
        "/persistentvolumeclaims/data-ex-mysql-0",
        403,
        "persistentvolumeclaims \"data-ex-mysql-0\" is forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize",
    );
    h.edit_spec(|spec| {
        spec.size = 2;
        spec.mysql = Some(Box::new(MysqlSpec {
            storage: Some(StorageSpec { size: Some("5Gi".into()), ..Default::default() }),
            ..Default::default()
        }));
    });
    h.reconcile().await.unwrap();

    let backend: k8s_openapi::api::apps::v1::Deployment = h.api.get("ex-backend").unwrap();
    assert_eq!(backend.spec.unwrap().replicas, Some(2), "the size change went through");
    let warning =
        h.api.events().into_iter().find(|(_, reason, _)| reason == "StorageResizeFailed").expect("a Warning Event");
    assert!(warning.2.contains("storageclass that provisions the pvc must support resize"), "{warning:?}");
    assert!(!warning.2.contains("ServiceAccount"), "not blamed on RBAC: {warning:?}");
}

async fn delete_app(h: &Harness) {
    h.api.edit::<visitors_api::VisitorsApp>("ex", |app| {
        app.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap()));
    });
    let action = h.reconcile().await.unwrap();
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn deletion_retains_the_volume_by_default_and_says_so() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.reconcile().await.unwrap();
    let sts: StatefulSet = h.api.get("ex-mysql").unwrap();
    let policy = sts.spec.unwrap().persistent_volume_claim_retention_policy.unwrap();
    assert_eq!(policy.when_deleted.as_deref(), Some("Retain"));
    let secret: Secret = h.api.get("ex-mysql-credentials").unwrap();
    assert!(secret.metadata.owner_references.is_none(), "a retained volume keeps its credentials");

    delete_app(&h).await;

    assert!(h.api.get::<visitors_api::VisitorsApp>("ex").is_none(), "the finalizer is removed, the app goes");
    let events = h.api.events();
    let retained = events.iter().find(|(_, reason, _)| reason == "VolumeRetained").expect("a VolumeRetained Event");
    assert!(retained.2.contains("data-ex-mysql-0") && retained.2.contains("ex-mysql-credentials"), "{retained:?}");
}

#[tokio::test]
async fn deletion_policy_delete_lets_the_volume_and_secret_go() {
    let h = Harness::new();
    h.create_app(visitors_api::VisitorsAppSpec { deletion_policy: Some(DeletionPolicy::Delete), ..book_spec() });
    h.reconcile().await.unwrap();
    let sts: StatefulSet = h.api.get("ex-mysql").unwrap();
    let policy = sts.spec.unwrap().persistent_volume_claim_retention_policy.unwrap();
    assert_eq!(policy.when_deleted.as_deref(), Some("Delete"));
    let secret: Secret = h.api.get("ex-mysql-credentials").unwrap();
    assert_eq!(secret.metadata.owner_references.unwrap()[0].name, "ex");

    delete_app(&h).await;
    assert!(h.api.events().iter().any(|(_, reason, _)| reason == "VolumeDeleted"));
    assert!(h.api.get::<visitors_api::VisitorsApp>("ex").is_none());
}

#[tokio::test]
async fn switching_the_policy_moves_the_secret_ownership() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.reconcile().await.unwrap();
    h.edit_spec(|spec| spec.deletion_policy = Some(DeletionPolicy::Delete));
    h.reconcile().await.unwrap();
    let secret: Secret = h.api.get("ex-mysql-credentials").unwrap();
    assert_eq!(secret.metadata.owner_references.map(|r| r.len()), Some(1));
    let password_before = secret.data.unwrap()["password"].clone();

    h.edit_spec(|spec| spec.deletion_policy = Some(DeletionPolicy::Retain));
    h.reconcile().await.unwrap();
    let secret: Secret = h.api.get("ex-mysql-credentials").unwrap();
    assert!(secret.metadata.owner_references.unwrap_or_default().is_empty());
    assert_eq!(secret.data.unwrap()["password"], password_before, "the Secret is never rotated");
}

#[tokio::test]
async fn api_failures_are_explained_counted_and_backed_off() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.api.fail_when("/statefulsets", 403);

    let error = h.reconcile().await.unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("StatefulSet ex-mysql") && message.contains("ServiceAccount lacks a permission"),
        "{message}"
    );

    let app = std::sync::Arc::new(h.app());
    reconcile::error_policy(app.clone(), &error, h.ctx.clone());
    reconcile::error_policy(app.clone(), &error, h.ctx.clone());
    let third = h.ctx.runtime.retry_delay(app.as_ref());
    assert!(third >= std::time::Duration::from_secs(2), "two failures backed off: {third:?}");
    assert!(h.ctx.runtime.metrics.encode().contains(r#"error="Forbidden"} 2"#));
    // The Warning Event is published on a spawned task: let it run.
    for _ in 0..1_000 {
        if h.api.events().iter().any(|(t, reason, _)| t == "Warning" && reason == "Forbidden") {
            break;
        }
        tokio::task::yield_now().await;
    }
    let warning = h.api.events().into_iter().find(|(t, _, _)| t == "Warning").expect("a Warning Event");
    assert!(warning.2.contains("ServiceAccount lacks a permission"), "{warning:?}");

    h.api.stop_failing();
    h.reconcile().await.unwrap();
    assert!(h.api.get::<StatefulSet>("ex-mysql").is_some());
}

#[tokio::test]
async fn nothing_is_done_before_the_caches_are_filled() {
    let h = Harness::new();
    h.create_app(book_spec());
    let app = std::sync::Arc::new(h.app());
    let action = reconcile::reconcile(app, h.ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(std::time::Duration::from_secs(1)));
    assert!(h.api.requests().is_empty(), "{:?}", h.api.requests());
}

#[tokio::test]
async fn a_foreign_secret_with_the_generated_name_is_never_adopted() {
    let h = Harness::new();
    let data = ["username", "password", "root-password"]
        .map(|key| (key.to_string(), k8s_openapi::ByteString(b"someone-elses".to_vec())));
    h.api.put(&Secret {
        metadata: kube::api::ObjectMeta { name: Some("ex-mysql-credentials".into()), ..Default::default() },
        data: Some(data.into_iter().collect()),
        ..Default::default()
    });
    h.create_app(visitors_api::VisitorsAppSpec { deletion_policy: Some(DeletionPolicy::Delete), ..book_spec() });
    h.reconcile().await.unwrap();

    let (status, reason, message) = ready_condition(&h);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "CredentialsSecretConflict"));
    assert!(message.contains("set spec.credentialsSecret"), "{message}");
    let secret: Secret = h.api.get("ex-mysql-credentials").unwrap();
    assert!(secret.metadata.owner_references.unwrap_or_default().is_empty(), "not owned, so never garbage-collected");
    assert!(h.api.get::<StatefulSet>("ex-mysql").is_none(), "nothing is built on someone else's credentials");
}

/// A restore of app ex's database in `phase`, as the restore controller reports it.
fn restore(phase: &str) -> visitors_api::MySQLRestore {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "example.com/v1", "kind": "MySQLRestore",
        "metadata": {"name": support::RESTORE, "namespace": "shop", "uid": "r-1"},
        "spec": {"source": {"backup": "b1"}, "target": {"visitorsApp": "ex"}},
        "status": {"phase": phase},
    }))
    .unwrap()
}

#[tokio::test]
async fn a_restore_holding_the_database_stops_the_backend_until_it_ends() {
    let h = Harness::new();
    let mut spec = book_spec();
    spec.size = 2;
    h.create_app(spec);
    h.converge().await;
    assert_eq!(replicas(&h, "ex-backend"), Some(2));
    let frontend = replicas(&h, "ex-frontend");

    // Waiting for its backup, the restore does not stop anything yet.
    h.api.put(&restore("Pending"));
    h.reconcile().await.unwrap();
    assert_eq!(replicas(&h, "ex-backend"), Some(2));

    for phase in ["Quiescing", "Running"] {
        h.api.put(&restore(phase));
        h.reconcile().await.unwrap();
        assert_eq!(replicas(&h, "ex-backend"), Some(0), "{phase}");
        assert_eq!(condition_reason(&h, BACKEND_READY), "Quiesced", "{phase}");
        let (status, reason, message) = ready_condition(&h);
        assert_eq!((status.as_str(), reason.as_str()), ("False", "Quiesced"));
        assert!(message.contains("MySQLRestore r1"), "{message}");
    }
    assert_eq!(replicas(&h, "ex-frontend"), frontend, "only the backend writes to the database");

    h.api.put(&restore("Failed"));
    h.reconcile().await.unwrap();
    assert_eq!(replicas(&h, "ex-backend"), Some(2), "back at spec.size once no restore holds the database");
    assert_ne!(condition_reason(&h, BACKEND_READY), "Quiesced");
}

/// The MySQL client Service as the controller made it before it became headless: a virtual IP.
fn client_service_with_a_cluster_ip(h: &Harness, owned: bool) -> Service {
    let mut service = visitors_controller::build::mysql::client_service(&h.app());
    let spec = service.spec.as_mut().unwrap();
    spec.cluster_ip = Some("10.96.7.7".into());
    spec.type_ = Some("ClusterIP".into());
    if !owned {
        service.metadata.owner_references = None;
    }
    service
}

fn cluster_ip(h: &Harness, name: &str) -> Option<String> {
    h.api.get::<Service>(name).and_then(|s| s.spec?.cluster_ip)
}

#[tokio::test]
async fn the_client_service_of_an_older_version_is_recreated_headless() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.api.put(&client_service_with_a_cluster_ip(&h, true));
    let old_uid = h.api.get::<Service>("ex-mysql").unwrap().metadata.uid;

    h.converge().await;

    assert_eq!(cluster_ip(&h, "ex-mysql").as_deref(), Some("None"));
    assert_ne!(h.api.get::<Service>("ex-mysql").unwrap().metadata.uid, old_uid, "a new Service");
    let recreated = h.api.events().into_iter().find(|(_, reason, _)| reason == "Recreated").expect("a Recreated Event");
    assert!(recreated.2.contains("Service ex-mysql") && recreated.2.contains("10.96.7.7"), "{recreated:?}");
    assert!(cluster_ip(&h, "ex-frontend").is_some_and(|ip| ip != "None"), "the frontend keeps its address");
}

#[tokio::test]
async fn a_service_in_the_way_that_is_not_the_apps_is_never_deleted() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.api.put(&client_service_with_a_cluster_ip(&h, false));
    let old_uid = h.api.get::<Service>("ex-mysql").unwrap().metadata.uid;

    let error = h.reconcile().await.expect_err("the Service cannot be applied");

    assert!(error.to_string().contains("may not change once set"), "{error}");
    let service = h.api.get::<Service>("ex-mysql").unwrap();
    assert_eq!((service.metadata.uid, cluster_ip(&h, "ex-mysql")), (old_uid, Some("10.96.7.7".into())));
    assert!(h.api.requests().iter().all(|r| r.method != http::Method::DELETE), "{:?}", h.api.requests());
    let (status, reason, message) = ready_condition(&h);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "ChildApplyFailed"));
    assert!(message.contains("applying Service ex-mysql failed"), "{message}");
}

/// The released wake-ups of the harness's app, as the controller's `reconcile_on` gets them.
fn released_wake_ups(
    h: &Harness,
) -> (impl futures::Stream<Item = ObjectRef<VisitorsApp>> + Unpin, Writer<VisitorsApp>) {
    let mut apps = Writer::default();
    apps.apply_watcher_event(&kube::runtime::watcher::Event::Apply(h.app()));
    (Box::pin(h.ctx.hold.clone().released(apps.as_reader())), apps)
}

async fn released_within(
    wake_ups: &mut (impl futures::Stream<Item = ObjectRef<VisitorsApp>> + Unpin),
    seconds: u64,
) -> bool {
    use futures::StreamExt;
    tokio::time::timeout(std::time::Duration::from_secs(seconds), wake_ups.next()).await.is_ok()
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_that_finds_the_database_answering_brings_the_pace_back_to_a_few_seconds() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.check.fail_with("connection refused");
    h.reconcile().await.unwrap();
    h.mysql_pod_ready();
    h.reconcile().await.unwrap();
    assert_eq!(condition_reason(&h, DATABASE_READY), "WaitingForConnection", "the pod is ready, the query fails");
    let (mut wake_ups, _apps) = released_wake_ups(&h);
    let app = ObjectRef::from_obj(&h.app());
    h.ctx.hold.pace(app.clone());
    assert!(released_within(&mut wake_ups, 6).await, "the first status refresh comes 5 s after the reconcile");
    h.reconcile().await.unwrap();
    h.ctx.hold.pace(app.clone());
    assert!(!released_within(&mut wake_ups, 10).await, "the next one waits a minute");

    // The poll, which no watch sees, finds the database answering: the app made progress.
    h.check.succeed();
    h.reconcile().await.unwrap();
    assert_eq!(condition_reason(&h, DATABASE_READY), "Connected");
    h.ctx.hold.pace(app);
    assert!(released_within(&mut wake_ups, 6).await, "status refreshes come soon again");
}
