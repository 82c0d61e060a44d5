//! TLS to MySQL, reconciled against the in-memory API server: the generated CA and certificate,
//! a user's certificate Secret, apps from before TLS, and renewal.

mod support;

use controller_common::certificates::{KeyedCertificate, issue_server, new_authority};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use support::{Harness, book_spec};
use visitors_api::conditions::{self, READY};
use visitors_api::visitors_app::{TlsMode, TlsSpec};
use visitors_controller::build::tls::{CERTIFICATE_ANNOTATION, MODE_ANNOTATION};

fn now() -> jiff::Timestamp {
    jiff::Timestamp::now()
}

fn data(secret: &Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().unwrap()[key].0.clone()).unwrap()
}

fn mysql_args(h: &Harness) -> Vec<String> {
    let sts: StatefulSet = h.api.get("ex-mysql").unwrap();
    sts.spec.unwrap().template.spec.unwrap().containers.remove(0).args.unwrap()
}

fn pod_fingerprint(h: &Harness) -> Option<String> {
    let sts: StatefulSet = h.api.get("ex-mysql").unwrap();
    sts.spec.unwrap().template.metadata.unwrap().annotations?.get(CERTIFICATE_ANNOTATION).cloned()
}

fn ready(h: &Harness) -> (String, String, String) {
    let c = conditions::find(&h.app().status.unwrap().conditions, READY).unwrap().clone();
    (c.status, c.reason, c.message)
}

/// A Secret the user made: a certificate for `names` from a CA of their own.
fn user_secret(name: &str, names: &[&str], validity: jiff::SignedDuration) -> (Secret, KeyedCertificate) {
    let ca = new_authority("user CA", now()).unwrap();
    let names: Vec<String> = names.iter().map(ToString::to_string).collect();
    let server = issue_server(&ca, "mysql", &names, now(), validity).unwrap();
    let data = [
        ("tls.crt", server.certificate_pem.clone()),
        ("tls.key", server.private_key_pem.clone()),
        ("ca.crt", ca.certificate_pem.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
    .collect();
    let secret = Secret {
        metadata: ObjectMeta { name: Some(name.into()), namespace: Some("shop".into()), ..ObjectMeta::default() },
        data: Some(data),
        ..Secret::default()
    };
    (secret, server)
}

#[tokio::test]
async fn a_new_app_gets_a_generated_ca_and_certificate_and_requires_tls() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.converge().await;

    let ca: Secret = h.api.get("ex-mysql-ca").expect("a generated CA");
    let tls: Secret = h.api.get("ex-mysql-tls").expect("a generated certificate");
    assert_eq!(tls.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(data(&tls, "ca.crt"), data(&ca, "ca.crt"));
    for secret in [&ca, &tls] {
        let owner = &secret.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("VisitorsApp", "ex"));
    }
    let sts: StatefulSet = h.api.get("ex-mysql").unwrap();
    assert_eq!(sts.metadata.annotations.unwrap()[MODE_ANNOTATION], "Required");
    assert!(mysql_args(&h).contains(&"--require-secure-transport=ON".to_string()));
    assert!(pod_fingerprint(&h).is_some());
    let backend: Deployment = h.api.get("ex-backend").unwrap();
    let env = backend.spec.unwrap().template.spec.unwrap().containers.remove(0).env.unwrap();
    assert!(env.iter().any(|e| e.name == "MYSQL_SSL_CA"));

    let status = h.app().status.unwrap();
    let tls_status = status.tls.as_ref().unwrap();
    assert_eq!(tls_status.mode, TlsMode::Required);
    assert_eq!(tls_status.secret_name.as_deref(), Some("ex-mysql-tls"));
    assert!(tls_status.not_after.is_some());
    assert_eq!(h.check.last_ca().as_deref(), Some(data(&ca, "ca.crt").as_bytes()), "the check verifies the CA");

    let keys = [data(&ca, "ca.key"), data(&tls, "tls.key")];
    let status_json = serde_json::to_string(&status).unwrap();
    let events = h.api.events();
    for key in &keys {
        assert!(!status_json.contains(key.trim()), "a private key leaked into status");
        assert!(events.iter().all(|(_, _, note)| !note.contains(key.trim())), "a private key leaked into an Event");
    }
}

#[tokio::test]
async fn an_app_from_before_tls_keeps_plain_text_until_its_spec_asks_then_switches_once() {
    let h = Harness::new();
    h.create_app(book_spec());
    // The StatefulSet as the controller before TLS support made it: no mode annotation.
    h.converge().await;
    h.api.edit::<StatefulSet>("ex-mysql", |sts| {
        sts.metadata.annotations = None;
    });
    h.edit_spec(|spec| spec.size = 2);
    h.reconcile().await.unwrap();
    let sts: StatefulSet = h.api.get("ex-mysql").unwrap();
    assert_eq!(sts.metadata.annotations.unwrap()[MODE_ANNOTATION], "Disabled", "kept as it was");
    assert!(!mysql_args(&h).iter().any(|a| a.starts_with("--ssl")));
    assert_eq!(h.app().status.unwrap().tls.unwrap().mode, TlsMode::Disabled);

    h.edit_spec(|spec| spec.tls = Some(TlsSpec { mode: Some(TlsMode::Required), secret_name: None }));
    h.reconcile().await.unwrap();
    assert!(mysql_args(&h).contains(&"--require-secure-transport=ON".to_string()));
    assert_eq!(h.app().status.unwrap().tls.unwrap().mode, TlsMode::Required);
}

#[tokio::test]
async fn a_users_certificate_is_served_checked_and_a_replaced_one_rolls_mysql() {
    let h = Harness::new();
    let spec = book_spec();
    h.create_app(visitors_api::VisitorsAppSpec {
        tls: Some(TlsSpec { mode: None, secret_name: Some("mine".into()) }),
        ..spec
    });
    h.reconcile().await.unwrap();
    let (status, reason, message) = ready(&h);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "InvalidTLSSecret"));
    assert!(message.contains("\"mine\" does not exist"), "{message}");

    let (wrong, _) = user_secret("mine", &["db.example.com"], jiff::SignedDuration::from_hours(24 * 90));
    h.api.put(&wrong);
    h.edit_spec(|spec| spec.size = 2);
    h.reconcile().await.unwrap();
    let message = ready(&h).2;
    assert!(message.contains("does not name ex-mysql.shop.svc"), "{message}");

    let (good, _) = user_secret("mine", &["ex-mysql.shop.svc"], jiff::SignedDuration::from_hours(24 * 90));
    h.api.put(&good);
    h.edit_spec(|spec| spec.size = 1);
    h.reconcile().await.unwrap();
    h.mysql_pod_ready();
    h.check.succeed();
    h.reconcile().await.unwrap();
    let database = conditions::find(&h.app().status.unwrap().conditions, "DatabaseReady").unwrap().reason.clone();
    assert_eq!(database, "Connected");
    assert!(h.api.get::<Secret>("ex-mysql-ca").is_none(), "nothing generated for a user's certificate");
    assert_eq!(h.app().status.unwrap().tls.unwrap().secret_name.as_deref(), Some("mine"));
    let before = pod_fingerprint(&h).unwrap();

    let (replaced, _) = user_secret("mine", &["ex-mysql.shop.svc"], jiff::SignedDuration::from_hours(24 * 90));
    h.api.put(&replaced);
    h.edit_spec(|spec| spec.size = 2);
    h.reconcile().await.unwrap();
    let after = pod_fingerprint(&h).unwrap();
    assert_ne!(before, after, "a new certificate restarts MySQL");
    h.reconcile().await.unwrap();
    assert_eq!(pod_fingerprint(&h).unwrap(), after, "once");
}

#[tokio::test]
async fn a_generated_certificate_near_its_expiry_is_renewed_with_an_event() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.converge().await;
    let ca: Secret = h.api.get("ex-mysql-ca").unwrap();
    let before = pod_fingerprint(&h).unwrap();
    // Ten days left: as if the certificate had been issued 80 days ago.
    let authority = KeyedCertificate { certificate_pem: data(&ca, "ca.crt"), private_key_pem: data(&ca, "ca.key") };
    let names = vec!["ex-mysql.shop.svc".to_string()];
    let old = issue_server(&authority, "ex-mysql", &names, now(), jiff::SignedDuration::from_hours(24 * 10)).unwrap();
    h.api.edit::<Secret>("ex-mysql-tls", |secret| {
        let data = secret.data.as_mut().unwrap();
        data.insert("tls.crt".into(), ByteString(old.certificate_pem.clone().into_bytes()));
        data.insert("tls.key".into(), ByteString(old.private_key_pem.clone().into_bytes()));
    });
    h.api.clear_events();
    h.edit_spec(|spec| spec.size = 2);
    h.reconcile().await.unwrap();

    let renewed: Secret = h.api.get("ex-mysql-tls").unwrap();
    assert_ne!(data(&renewed, "tls.crt"), old.certificate_pem);
    assert_eq!(data(&h.api.get::<Secret>("ex-mysql-ca").unwrap(), "ca.crt"), data(&ca, "ca.crt"), "the CA stays");
    assert_ne!(pod_fingerprint(&h).unwrap(), before);
    let events = h.api.events();
    assert!(events.iter().any(|(kind, reason, _)| kind == "Normal" && reason == "CertificateRenewed"), "{events:?}");
}

/// A new app's certificate Secret is created without a read first; a Secret of that name that is
/// not the app's is still never overwritten nor served.
#[tokio::test]
async fn a_secret_of_someone_else_in_the_way_of_a_new_apps_certificate_is_left_alone() {
    let h = Harness::new();
    let (theirs, _) = user_secret("ex-mysql-tls", &["elsewhere"], jiff::SignedDuration::from_hours(24 * 90));
    h.api.put(&theirs);
    h.create_app(book_spec());
    h.reconcile().await.unwrap();

    let (status, reason, message) = ready(&h);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "InvalidTLSSecret"), "{message}");
    let after: Secret = h.api.get("ex-mysql-tls").unwrap();
    assert_eq!(after.data, theirs.data, "their Secret is untouched");
    assert!(h.api.get::<StatefulSet>("ex-mysql").is_none(), "MySQL is not built on someone else's certificate");
}
