//! The backend (the book's `visitors-service`): a Deployment of `spec.size` replicas with the
//! book's environment contract, and its Service.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, Probe, Service, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use visitors_api::VisitorsApp;
use visitors_api::labels::{Component, names, selector};
use visitors_api::visitors_app::{BACKEND_PORT, DATABASE_NAME, secret_keys};

use super::tls::{self, ServingTls};
use super::{child_meta, container_port, env, env_from_secret, pod_labels, tier_service};

/// The book's container name.
pub const CONTAINER: &str = "visitors-service";

/// The backend stopped while a restore rewrites its database: the same Deployment at 0
/// replicas, so no client writes into a half-restored database.
pub fn quiesced(mut deployment: Deployment) -> Deployment {
    if let Some(spec) = deployment.spec.as_mut() {
        spec.replicas = Some(0);
    }
    deployment
}

/// The backend's environment for TLS: the CA file to verify MySQL with, and that it must.
pub const SSL_CA_ENV: &str = "MYSQL_SSL_CA";
pub const SSL_MODE_ENV: &str = "MYSQL_SSL_MODE";

/// The backend. With `tls`, it also gets MySQL's CA certificate (only that) at
/// [`tls::CA_FILE`], named by `MYSQL_SSL_CA`, with `MYSQL_SSL_MODE=VERIFY_IDENTITY`; its pods
/// restart when the CA changes.
pub fn deployment(app: &VisitorsApp, secret: &str, tls: Option<&ServingTls>) -> Deployment {
    let name = app.name_any();
    let mut environment = vec![
        env("MYSQL_DATABASE", DATABASE_NAME),
        env("MYSQL_SERVICE_HOST", &names::mysql(&name)),
        env_from_secret("MYSQL_USERNAME", secret, secret_keys::USERNAME),
        env_from_secret("MYSQL_PASSWORD", secret, secret_keys::PASSWORD),
    ];
    if tls.is_some() {
        environment.extend([env(SSL_CA_ENV, tls::CA_FILE), env(SSL_MODE_ENV, "VERIFY_IDENTITY")]);
    }
    let container = Container {
        name: CONTAINER.to_string(),
        image: Some(app.spec.backend_image().to_string()),
        ports: Some(vec![container_port("http", BACKEND_PORT)]),
        env: Some(environment),
        volume_mounts: tls.map(|_| vec![tls::mount(tls::CA_MOUNT)]),
        // The image migrates the database before it listens, so an open port means the
        // service can answer.
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction { port: IntOrString::String("http".to_string()), host: None }),
            period_seconds: Some(5),
            ..Probe::default()
        }),
        resources: app.spec.backend.as_ref().and_then(|t| t.resources.clone()),
        ..Container::default()
    };
    Deployment {
        metadata: child_meta(app, names::backend(&name), Component::Backend),
        spec: Some(DeploymentSpec {
            replicas: Some(app.spec.size),
            selector: LabelSelector {
                match_labels: Some(selector(&name, Component::Backend)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels(app, Component::Backend)),
                    annotations: tls
                        .map(|tls| [(tls::CERTIFICATE_ANNOTATION.to_string(), tls.ca_fingerprint.clone())].into()),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: tls.map(|tls| vec![tls::ca_volume(tls)]),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

pub fn service(app: &VisitorsApp) -> Service {
    tier_service(app, names::backend(&app.name_any()), Component::Backend, BACKEND_PORT, app.spec.backend_node_port())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::book_app;
    use visitors_api::visitors_app::TierSpec;

    fn container(deployment: &Deployment) -> &Container {
        &deployment.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0]
    }

    #[test]
    fn replicas_follow_size() {
        let mut app = book_app();
        app.spec.size = 3;
        let deployment = deployment(&app, "creds", None);
        assert_eq!(deployment.metadata.name.as_deref(), Some("ex-backend"));
        assert_eq!(deployment.spec.as_ref().unwrap().replicas, Some(3));
        let stopped = quiesced(deployment.clone());
        assert_eq!(stopped.spec.as_ref().unwrap().replicas, Some(0), "a restore stops the backend");
        assert_eq!(stopped.spec.unwrap().template, deployment.spec.unwrap().template, "and changes nothing else");
    }

    #[test]
    fn keeps_the_books_environment_contract() {
        let deployment = deployment(&book_app(), "creds", None);
        let env = container(&deployment).env.clone().unwrap();
        let names: Vec<&str> = env.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["MYSQL_DATABASE", "MYSQL_SERVICE_HOST", "MYSQL_USERNAME", "MYSQL_PASSWORD"]);
        assert_eq!(env[0].value.as_deref(), Some("visitors"));
        assert_eq!(env[1].value.as_deref(), Some("ex-mysql"));
        let password = env[3].value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap();
        assert_eq!((password.name.as_str(), password.key.as_str()), ("creds", "password"));
    }

    #[test]
    fn with_tls_the_backend_verifies_mysql_with_the_ca_and_restarts_when_it_changes() {
        let tls = crate::build::tls::tests::serving("ex-mysql-tls");
        let deployment = deployment(&book_app(), "creds", Some(&tls));
        let env = container(&deployment).env.clone().unwrap();
        let value = |name: &str| env.iter().find(|e| e.name == name).and_then(|e| e.value.clone());
        assert_eq!(value("MYSQL_SSL_CA").as_deref(), Some("/etc/visitors/mysql-ca/ca.crt"));
        assert_eq!(value("MYSQL_SSL_MODE").as_deref(), Some("VERIFY_IDENTITY"));
        let template = &deployment.spec.as_ref().unwrap().template;
        let annotations = template.metadata.as_ref().unwrap().annotations.as_ref().unwrap();
        assert_eq!(annotations[crate::build::tls::CERTIFICATE_ANNOTATION], tls.ca_fingerprint);
        let volume = &template.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0];
        let items = volume.secret.as_ref().unwrap().items.as_ref().unwrap();
        assert_eq!(items.iter().map(|i| i.key.as_str()).collect::<Vec<_>>(), ["ca.crt"], "never the server's key");
    }

    #[test]
    fn image_and_resources_follow_the_spec() {
        let mut app = book_app();
        assert_eq!(container(&deployment(&app, "c", None)).image.as_deref(), Some("jdob/visitors-service:1.0.0"));
        app.spec.backend =
            Some(Box::new(TierSpec { image: Some("me/svc:2".into()), resources: Some(Default::default()) }));
        let deployment = deployment(&app, "c", None);
        assert_eq!(container(&deployment).image.as_deref(), Some("me/svc:2"));
        assert!(container(&deployment).resources.is_some());
    }

    #[test]
    fn service_targets_port_8000() {
        let service = service(&book_app());
        assert_eq!(service.metadata.name.as_deref(), Some("ex-backend"));
        assert_eq!(service.spec.unwrap().ports.unwrap()[0].port, 8000);
    }
}
