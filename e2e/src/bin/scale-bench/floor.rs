//! The floor: the control plane doing, for each app, the work our first reconcile asks of it,
//! without our controller. A bulk client writes exactly the objects a first reconcile of a book
//! app writes, built by the controller's own pure builders: the credentials, CA and server
//! certificate Secrets (created), the MySQL StatefulSet, its headless and client Services, the
//! frontend Deployment and Service (applied), and one status (applied), all of an app at once,
//! as soon as its POST is answered. No controller can do that work in less time on the same
//! machine; ours is judged against it.
//!
//! The certificates are made once and their PEM reused for every app (the API server stores
//! bytes of the same size whatever they certify), so the bench's own CPU stays out of the floor.

use controller_common::apply::{apply, apply_status};
use controller_common::certificates::{self, KeyedCertificate};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret, Service};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use visitors_api::VisitorsApp;
use visitors_api::labels::names;
use visitors_controller::build::{self, Children, Inputs, secret::Credentials, tls::ServingTls};
use visitors_controller::database::check::Database;
use visitors_controller::status::{self, Facts};

/// The field manager of the floor's writes.
const FIELD_MANAGER: &str = "scale-bench-floor";

/// The certificates every app's Secrets carry.
pub struct Certificates {
    authority: KeyedCertificate,
    server: KeyedCertificate,
}

impl Certificates {
    pub fn new() -> Result<Self, String> {
        let now = jiff::Timestamp::now();
        let authority = certificates::new_authority("scale-bench floor CA", now).map_err(|e| e.to_string())?;
        let names = ["app-mysql".to_string(), "app-mysql.scale.svc".to_string()];
        let server = certificates::issue_server(&authority, "app-mysql", &names, now, certificates::SERVER_VALIDITY)
            .map_err(|e| e.to_string())?;
        Ok(Self { authority, server })
    }
}

/// What a first reconcile of `app` (as the API server answered its creation) writes.
struct FirstWrites {
    secrets: [Secret; 3],
    children: Children,
    status: visitors_api::VisitorsAppStatus,
}

fn first_writes(app: &VisitorsApp, certificates: &Certificates) -> Result<FirstWrites, String> {
    let credentials = build::secret::generated(app, &Credentials::generate());
    let ca = build::tls::ca_secret(app, &certificates.authority);
    let server = build::tls::server_secret(app, &certificates.server, &certificates.authority.certificate_pem);
    let tls = serving(app, &server)?;
    let credentials_secret = build::secret::secret_name(app);
    let inputs = Inputs { credentials_secret: &credentials_secret, tls: Some(&tls), ..Inputs::default() };
    let children = build::children(app, &inputs);
    let facts = Facts {
        secret: credentials_secret.clone(),
        mysql: Default::default(),
        database: Database::PodNotReady,
        backend: None,
        backend_held: true,
        quiesced_by: None,
        frontend: Default::default(),
        failed_children: Vec::new(),
        tls: Some(tls),
        replication: None,
    };
    let status =
        status::compute(app, &facts, k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()));
    Ok(FirstWrites { secrets: [credentials, ca, server], children, status })
}

/// The TLS the server Secret holds, as the controller reads it (the names it serves are not
/// checked: the floor's certificate serves other names than each app's).
fn serving(app: &VisitorsApp, server: &Secret) -> Result<ServingTls, String> {
    let name = names::mysql_tls_secret(&app.name_any());
    visitors_controller::validate::tls_secret(&name, Some(server), &[], jiff::Timestamp::now())
        .map_err(|e| e.to_string())
}

/// The requests a first reconcile makes before its writes: the finalizer's patch (JSON merge,
/// as the controller's), then the read of the data claim's metadata.
pub async fn make_first_checks(client: &Client, app: &VisitorsApp) -> Result<(), String> {
    let namespace = app.namespace().unwrap_or_default();
    let name = app.name_any();
    let apps: Api<VisitorsApp> = Api::namespaced(client.clone(), &namespace);
    let finalizer = serde_json::json!({"metadata": {"finalizers": [visitors_controller::cleanup::FINALIZER]}});
    apps.patch(&name, &PatchParams::default(), &Patch::Merge(finalizer))
        .await
        .map_err(|e| format!("the finalizer of {name}: {e}"))?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &namespace);
    claims
        .get_metadata_opt(&visitors_controller::build::mysql::claim_name(&name))
        .await
        .map_err(|e| format!("the claim of {name}: {e}"))?;
    Ok(())
}

/// Writes what a first reconcile of `app` writes, every request at once.
pub async fn write_first_reconcile(
    client: &Client,
    app: &VisitorsApp,
    certificates: &Certificates,
) -> Result<(), String> {
    let writes = first_writes(app, certificates)?;
    let namespace = app.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    let apps: Api<VisitorsApp> = Api::namespaced(client.clone(), &namespace);
    let children = &writes.children;
    let failed = |what: &str| {
        let what = format!("{what} of {}", app.name_any());
        move |e: kube::Error| format!("{what}: {e}")
    };
    let post = PostParams::default();
    let secrets_created =
        futures::future::try_join_all(writes.secrets.iter().map(|secret| secrets.create(&post, secret)));
    let name = app.name_any();
    let (secrets, statefulset, headless, client_service, frontend, frontend_service, status) = futures::join!(
        secrets_created,
        apply(&statefulsets, FIELD_MANAGER, &children.mysql),
        apply(&services, FIELD_MANAGER, &children.mysql_headless),
        apply(&services, FIELD_MANAGER, &children.mysql_client),
        apply(&deployments, FIELD_MANAGER, &children.frontend),
        apply(&services, FIELD_MANAGER, &children.frontend_service),
        apply_status(&apps, FIELD_MANAGER, &name, &writes.status),
    );
    secrets.map_err(failed("the Secrets"))?;
    statefulset.map_err(failed("the StatefulSet"))?;
    headless.map_err(failed("the headless Service"))?;
    client_service.map_err(failed("the client Service"))?;
    frontend.map_err(failed("the frontend Deployment"))?;
    frontend_service.map_err(failed("the frontend Service"))?;
    status.map_err(failed("the status"))?;
    Ok(())
}
