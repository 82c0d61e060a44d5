//! Pure builders: a VisitorsApp in, the desired Kubernetes objects out. No client, no clock, no
//! randomness (generated passwords are passed in), so every object can be checked field by field.
//! [`children`] builds the whole desired set of an app's children at once; the modules build
//! one tier each.

pub mod backend;
pub mod frontend;
pub mod mysql;
pub mod secret;
pub mod seeding;
pub mod tls;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ContainerPort, Service, ServicePort, ServiceSpec as K8sServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use visitors_api::VisitorsApp;
use visitors_api::labels::{Component, labels, selector};
use visitors_api::visitors_app::ServiceType;

use tls::ServingTls;

/// Every child of an app, as desired.
#[derive(Debug, Clone, PartialEq)]
pub struct Children {
    pub mysql: StatefulSet,
    /// The headless Service that names each MySQL pod.
    pub mysql_headless: Service,
    /// The Service clients reach MySQL through.
    pub mysql_client: Service,
    /// The Service of a replicated app's replicas; `None` for a single server.
    pub mysql_replicas: Option<Service>,
    pub backend: Deployment,
    pub backend_service: Service,
    pub frontend: Deployment,
    pub frontend_service: Service,
}

/// What the desired children depend on besides the app: what the reconcile's steps found.
#[derive(Debug, Clone, Copy, Default)]
pub struct Inputs<'a> {
    /// The Secret of the database credentials.
    pub credentials_secret: &'a str,
    /// What the MySQL StatefulSet that exists keeps from its creation (immutable).
    pub kept: mysql::Kept<'a>,
    /// The TLS MySQL serves; `None` for plain text.
    pub tls: Option<&'a ServingTls>,
    /// A restore holds the database: the backend is stopped.
    pub quiesced: bool,
}

/// The whole desired set of children of `app`.
pub fn children(app: &VisitorsApp, inputs: &Inputs<'_>) -> Children {
    let secret = inputs.credentials_secret;
    let backend = backend::deployment(app, secret, inputs.tls);
    Children {
        mysql: mysql::statefulset(app, secret, inputs.kept, inputs.tls),
        mysql_headless: mysql::headless_service(app),
        mysql_client: mysql::client_service(app),
        mysql_replicas: app.spec.replicated().then(|| mysql::replicas_service(app)),
        backend: if inputs.quiesced { backend::quiesced(backend) } else { backend },
        backend_service: backend::service(app),
        frontend: frontend::deployment(app),
        frontend_service: frontend::service(app),
    }
}

/// The controller owner reference every child carries, so that deleting the app deletes it.
pub fn owner_reference(app: &VisitorsApp) -> OwnerReference {
    app.controller_owner_ref(&()).expect("a VisitorsApp read from the API has a name and a UID")
}

/// Metadata of a child named `name` in tier `component` of `app`, owned by the app.
pub fn child_meta(app: &VisitorsApp, name: String, component: Component) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: app.namespace(),
        labels: Some(labels(&app.name_any(), component)),
        owner_references: Some(vec![owner_reference(app)]),
        ..ObjectMeta::default()
    }
}

pub use controller_common::agent_job::{env, env_from_secret};

/// A named TCP container port.
pub fn container_port(name: &str, port: i32) -> ContainerPort {
    ContainerPort { name: Some(name.to_string()), container_port: port, ..ContainerPort::default() }
}

/// The Service in front of a stateless tier (backend or frontend), `ClusterIP` or `NodePort`
/// as the spec asks.
pub fn tier_service(app: &VisitorsApp, name: String, component: Component, port: i32, node_port: i32) -> Service {
    let type_ = app.spec.service_type();
    Service {
        metadata: child_meta(app, name, component),
        spec: Some(K8sServiceSpec {
            type_: Some(service_type_name(type_).to_string()),
            selector: Some(selector(&app.name_any(), component)),
            ports: Some(vec![ServicePort {
                name: Some("http".to_string()),
                port,
                target_port: Some(IntOrString::String("http".to_string())),
                // Omitted for ClusterIP: server-side apply then drops the node port we owned.
                node_port: (type_ == ServiceType::NodePort).then_some(node_port),
                protocol: Some("TCP".to_string()),
                ..ServicePort::default()
            }]),
            ..K8sServiceSpec::default()
        }),
        ..Service::default()
    }
}

fn service_type_name(type_: ServiceType) -> &'static str {
    match type_ {
        ServiceType::ClusterIP => "ClusterIP",
        ServiceType::NodePort => "NodePort",
    }
}

/// The pod template labels of a tier: the selector plus the standard labels.
pub fn pod_labels(app: &VisitorsApp, component: Component) -> BTreeMap<String, String> {
    labels(&app.name_any(), component)
}

#[cfg(test)]
pub(crate) mod fixtures {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use visitors_api::{VisitorsApp, VisitorsAppSpec};

    /// The book's resource, as read back from the API (name, namespace, UID, generation).
    pub fn book_app() -> VisitorsApp {
        let mut app = VisitorsApp::new(
            "ex",
            VisitorsAppSpec { size: 1, title: Some("Custom Dashboard Title".into()), ..VisitorsAppSpec::default() },
        );
        app.metadata = ObjectMeta {
            name: Some("ex".into()),
            namespace: Some("shop".into()),
            uid: Some("0b7a1d4e-uid".into()),
            generation: Some(1),
            ..ObjectMeta::default()
        };
        app
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::book_app;
    use super::*;
    use visitors_api::visitors_app::ServiceSpec;

    #[test]
    fn a_restore_stops_the_backend_and_nothing_else() {
        let app = book_app();
        let running = children(&app, &Inputs::default());
        let quiesced = children(&app, &Inputs { quiesced: true, ..Inputs::default() });
        assert_eq!(quiesced.backend.spec.as_ref().unwrap().replicas, Some(0));
        assert_eq!(running.backend.spec.as_ref().unwrap().replicas, Some(1));
        assert_eq!(Children { backend: running.backend.clone(), ..quiesced }, running);
    }

    #[test]
    fn children_are_owned_and_labelled() {
        let app = book_app();
        let meta = child_meta(&app, "ex-backend".into(), Component::Backend);
        let owner = &meta.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("VisitorsApp", "ex", Some(true)));
        assert_eq!(meta.namespace.as_deref(), Some("shop"));
        assert_eq!(meta.labels.as_ref().unwrap()["app.kubernetes.io/component"], "backend");
    }

    #[test]
    fn cluster_ip_service_has_no_node_port() {
        let service = tier_service(&book_app(), "ex-backend".into(), Component::Backend, 8000, 30685);
        let spec = service.spec.unwrap();
        assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
        assert_eq!(spec.ports.unwrap()[0].node_port, None);
    }

    #[test]
    fn node_port_service_uses_the_spec_port() {
        let mut app = book_app();
        app.spec.service = Some(ServiceSpec { type_: Some(ServiceType::NodePort), ..ServiceSpec::default() });
        let service = tier_service(&app, "ex-backend".into(), Component::Backend, 8000, 30685);
        let spec = service.spec.unwrap();
        assert_eq!(spec.type_.as_deref(), Some("NodePort"));
        let port = &spec.ports.unwrap()[0];
        assert_eq!((port.port, port.node_port), (8000, Some(30685)));
        assert_eq!(spec.selector.unwrap()["app.kubernetes.io/component"], "backend");
    }
}
