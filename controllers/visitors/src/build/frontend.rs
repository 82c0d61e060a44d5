//! The frontend (the book's `visitors-webui`): one replica showing `spec.title`, and its Service.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, Probe, Service, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use visitors_api::VisitorsApp;
use visitors_api::labels::{Component, names, selector};
use visitors_api::visitors_app::FRONTEND_PORT;

use super::{child_meta, container_port, env, pod_labels, tier_service};

/// The book's container name.
pub const CONTAINER: &str = "visitors-webui";
/// The variable the web UI reads its title from.
pub const TITLE_ENV: &str = "REACT_APP_TITLE";

pub fn deployment(app: &VisitorsApp) -> Deployment {
    let name = app.name_any();
    // No title: the variable is left out (not set empty), so the UI shows its own default;
    // server-side apply removes a variable we set before.
    let env = app.spec.title().map(|title| vec![env(TITLE_ENV, title)]);
    let container = Container {
        name: CONTAINER.to_string(),
        image: Some(app.spec.frontend_image().to_string()),
        ports: Some(vec![container_port("http", FRONTEND_PORT)]),
        env,
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction { port: IntOrString::String("http".to_string()), host: None }),
            period_seconds: Some(5),
            ..Probe::default()
        }),
        resources: app.spec.frontend.as_ref().and_then(|t| t.resources.clone()),
        ..Container::default()
    };
    Deployment {
        metadata: child_meta(app, names::frontend(&name), Component::Frontend),
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(selector(&name, Component::Frontend)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels(app, Component::Frontend)),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec { containers: vec![container], ..PodSpec::default() }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

pub fn service(app: &VisitorsApp) -> Service {
    tier_service(
        app,
        names::frontend(&app.name_any()),
        Component::Frontend,
        FRONTEND_PORT,
        app.spec.frontend_node_port(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::book_app;

    fn container(deployment: &Deployment) -> &Container {
        &deployment.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0]
    }

    #[test]
    fn title_is_passed_to_the_ui() {
        let deployment = deployment(&book_app());
        assert_eq!(deployment.metadata.name.as_deref(), Some("ex-frontend"));
        let env = container(&deployment).env.clone().unwrap();
        assert_eq!(env.len(), 1);
        assert_eq!((env[0].name.as_str(), env[0].value.as_deref()), (TITLE_ENV, Some("Custom Dashboard Title")));
    }

    #[test]
    fn empty_or_missing_title_sets_no_variable() {
        let mut app = book_app();
        app.spec.title = Some(String::new());
        assert_eq!(container(&deployment(&app)).env, None);
        app.spec.title = None;
        assert_eq!(container(&deployment(&app)).env, None);
    }

    #[test]
    fn one_replica_on_port_3000() {
        let deployment = deployment(&book_app());
        assert_eq!(deployment.spec.as_ref().unwrap().replicas, Some(1));
        assert_eq!(container(&deployment).ports.as_ref().unwrap()[0].container_port, 3000);
        assert_eq!(container(&deployment).image.as_deref(), Some("jdob/visitors-webui:1.0.0"));
        assert_eq!(service(&book_app()).spec.unwrap().ports.unwrap()[0].port, 3000);
    }
}
