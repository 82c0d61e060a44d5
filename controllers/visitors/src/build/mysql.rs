//! MySQL: a StatefulSet of one server (or, replicated, of a primary and replicas) with a data
//! volume claim each, the headless Service that governs it, the client Service the backend (and
//! the controller's `SELECT 1`) connect to, and, replicated, the Service of the replicas.

use std::collections::BTreeMap;

use controller_common::mysql_server;
use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, ExecAction, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodSecurityContext,
    PodSpec, PodTemplateSpec, Probe, Service, ServicePort, ServiceSpec as K8sServiceSpec, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use visitors_api::VisitorsApp;
use visitors_api::labels::{
    Component, MYSQL_ROLE_LABEL, REPLICATED_LABEL, ROLE_PRIMARY, ROLE_REPLICA, names, selector,
};
use visitors_api::validation::quantity_bytes;
use visitors_api::visitors_app::{DATABASE_NAME, DeletionPolicy, MYSQL_PORT, TlsMode, secret_keys};

use super::seeding;
use super::tls::{self, ServingTls};
use super::{child_meta, container_port, env, env_from_secret, pod_labels};

/// Name of the volume claim template; the claim of pod 0 is `data-<app>-mysql-0`.
pub const DATA_VOLUME: &str = "data";
/// The emptyDir MySQL keeps its temporary files in.
pub const TMP_VOLUME: &str = "tmp";
/// Name of the MySQL container.
pub const CONTAINER: &str = "mysql";

/// mysqld flags. The book's backend links an old client library that may lack
/// `caching_sha2_password`, so accounts are created with `mysql_native_password`, which MySQL
/// 8.4 ships disabled. Restores load data with `LOAD DATA LOCAL INFILE`, which MySQL 8 ships
/// disabled (`local_infile`; MariaDB's default is on). `loose-` makes servers that do not know
/// an option (5.7, 8.0) warn instead of refusing to start, so older images still work.
///
/// The binary log is always on, in row format with GTIDs (MySQL's `gtid_mode`; MariaDB's are
/// always on), kept three days: a schedule's point-in-time archiving then starts without a
/// restart of MySQL, and an archiver that was down for a while finds what it missed.
///
/// Temporary files go to the pod's own volume [`TMP_VOLUME`] at `/tmp`: a MariaDB server that
/// starts removes every `#sql*` file of its temporary folder, so servers sharing one (processes
/// of a node without containers, as in the test cluster) would remove each other's temporary
/// tables in use.
pub const MYSQLD_ARGS: [&str; 10] = [
    "--loose-mysql-native-password=ON",
    "--loose-authentication-policy=mysql_native_password,,",
    "--loose-local-infile=1",
    "--loose-log-bin=binlog",
    "--loose-binlog-format=ROW",
    "--loose-server-id=1",
    "--loose-gtid-mode=ON",
    "--loose-enforce-gtid-consistency=ON",
    "--loose-binlog-expire-logs-seconds=259200",
    "--loose-tmpdir=/tmp",
];

/// mysqld flags of a replicated app's servers (docs/high-availability.md): every server starts
/// read-only and replicating nothing, until the controller opens writes on the primary and
/// points the others at it; each logs what it replicates (so that any can become the primary),
/// in GTID order; a commit is durable on disk before it is acknowledged; the semi-synchronous
/// replica side is on, which also makes a server that restarts after a crash cut from its binary
/// log the transactions no replica acknowledged (MariaDB's `init-rpl-role`). MariaDB and MySQL
/// spell several of these differently: each ignores the other's spelling (`loose-`).
pub const REPLICATION_ARGS: [&str; 11] = [
    "--loose-read-only=ON",
    "--loose-super-read-only=ON",
    "--loose-skip-slave-start",
    "--loose-skip-replica-start",
    "--loose-log-slave-updates=ON",
    "--loose-log-replica-updates=ON",
    "--loose-gtid-strict-mode=ON",
    "--loose-sync-binlog=1",
    "--loose-innodb-flush-log-at-trx-commit=1",
    "--loose-init-rpl-role=SLAVE",
    "--loose-rpl-semi-sync-slave-enabled=ON",
];

/// mysqld flags of a replicated app's servers for applying their source's transactions with
/// `threads` threads (`spec.mysql.replication.applierThreads`), committing them in the source's
/// order, so that a replica's applied transactions are always a prefix of its source's history
/// (election and seeding compare positions: docs/high-availability.md). MariaDB's optimistic
/// mode applies any transactions side by side and retries one that conflicts with an earlier
/// one; MySQL's workers follow the source's commit groups (`LOGICAL_CLOCK`). One thread applies
/// one transaction at a time, as MySQL and MariaDB do by default (MariaDB: no worker threads).
pub fn parallel_apply_args(threads: i32) -> Vec<String> {
    let threads = threads.max(1);
    let mariadb_threads = if threads == 1 { 0 } else { threads };
    vec![
        format!("--loose-slave-parallel-threads={mariadb_threads}"),
        "--loose-slave-parallel-mode=optimistic".to_string(),
        format!("--loose-replica-parallel-workers={threads}"),
        "--loose-replica-parallel-type=LOGICAL_CLOCK".to_string(),
        "--loose-replica-preserve-commit-order=ON".to_string(),
    ]
}

/// MySQL's semi-synchronous replication is a pair of plugins, loaded at every start (MariaDB's is
/// built in and ignores these, logging that it has no such library).
pub const MYSQL_SEMI_SYNC_ARGS: [&str; 3] = [
    "--loose-plugin-load-add=semisync_source.so",
    "--loose-plugin-load-add=semisync_replica.so",
    "--loose-rpl-semi-sync-replica-enabled=ON",
];

/// Readiness: the application user runs `SELECT 1` in its database over TCP. It fails while
/// the image's first-start initialisation runs (that server listens on the socket only), and
/// proves that mysqld accepts connections with the credentials the backend uses.
const READINESS_SCRIPT: &str = r#"MYSQL_PWD="$MYSQL_PASSWORD" exec mysql --protocol=TCP -h 127.0.0.1 -u "$MYSQL_USER" -D "$MYSQL_DATABASE" -e 'SELECT 1'"#;
/// Readiness under TLS: the same login over mysqld's socket, which `require_secure_transport`
/// allows. Client programs of MySQL and MariaDB images disagree on how to ask for TLS, and
/// the controller checks the TLS path itself over TCP.
const TLS_READINESS_SCRIPT: &str =
    r#"MYSQL_PWD="$MYSQL_PASSWORD" exec mysql --protocol=SOCKET -u "$MYSQL_USER" -D "$MYSQL_DATABASE" -e 'SELECT 1'"#;
/// Liveness: mysqld answers on its socket (`ping` succeeds even when access is denied, so a
/// credentials problem never restarts the database).
const LIVENESS_SCRIPT: &str = r#"MYSQL_PWD="$MYSQL_ROOT_PASSWORD" exec mysqladmin --protocol=SOCKET -u root ping"#;

/// The name of the data volume claim of MySQL pod 0 (the only one of an app that does not
/// replicate).
pub fn claim_name(app: &str) -> String {
    format!("{DATA_VOLUME}-{}-0", names::mysql(app))
}

/// The in-cluster host name of the client Service.
pub fn client_host(app: &VisitorsApp) -> String {
    format!("{}.{}.svc", names::mysql(&app.name_any()), app.namespace().unwrap_or_default())
}

/// Every name clients verify MySQL's certificate for: the client Service's, and, with
/// replicas, each server's own (replicas reach their source by it, backups read a replica by
/// it).
pub fn verified_hosts(app: &VisitorsApp) -> Vec<String> {
    let mut hosts = vec![client_host(app)];
    if app.spec.replicated() {
        let (name, namespace) = (app.name_any(), app.namespace().unwrap_or_default());
        hosts.extend(
            (0..app.spec.mysql_replicas())
                .map(|i| names::mysql_pod_host(&name, &names::mysql_pod(&name, i), &namespace)),
        );
    }
    hosts
}

/// The StatefulSet. `existing_claim` is the data claim template of the StatefulSet already in
/// the cluster: claim templates are immutable, so it is kept verbatim (a size change goes
/// through [`claim_resize`]); rebuilding it would fail the apply as soon as anything in it
/// differed from creation time, labels included.
///
/// With `tls`, mysqld serves the certificate of its Secret and refuses plain text over TCP, and
/// the pod restarts when the certificate changes; the StatefulSet records the mode it was built
/// with ([`tls::MODE_ANNOTATION`]).
///
/// Replicated, it runs `spec.mysql.replicas` servers, started together (`Parallel`: a pod that
/// cannot start holds up no other), with [`REPLICATION_ARGS`], their pods labelled
/// [`REPLICATED_LABEL`] for the controller's watch. The pod management policy cannot change
/// once created: `existing_policy` keeps that of the StatefulSet in the cluster.
pub fn statefulset(app: &VisitorsApp, secret: &str, kept: Kept<'_>, tls: Option<&ServingTls>) -> StatefulSet {
    let Kept { claim: existing_claim, policy: existing_policy } = kept;
    let name = app.name_any();
    let replicated = app.spec.replicated();
    let mut pod_labels = pod_labels(app, Component::Mysql);
    if replicated {
        pod_labels.insert(REPLICATED_LABEL.to_string(), "true".to_string());
    }
    let claims = vec![claim_template(app, existing_claim)];
    let mode = if tls.is_some() { TlsMode::Required } else { TlsMode::Disabled };
    let mut metadata = child_meta(app, names::mysql(&name), Component::Mysql);
    metadata.annotations = Some(BTreeMap::from([(tls::MODE_ANNOTATION.to_string(), mode.as_str().to_string())]));
    let mut volumes = vec![Volume {
        name: TMP_VOLUME.to_string(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }];
    volumes.extend(tls.map(tls::server_volume));
    if replicated {
        volumes.push(seeding::seeds_volume(app));
    }
    StatefulSet {
        metadata,
        spec: Some(StatefulSetSpec {
            replicas: Some(app.spec.mysql_replicas()),
            pod_management_policy: Some(existing_policy.unwrap_or("Parallel").to_string()),
            service_name: Some(names::mysql_headless(&name)),
            selector: LabelSelector {
                match_labels: Some(selector(&name, Component::Mysql)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: tls.map(|tls| {
                        BTreeMap::from([(tls::CERTIFICATE_ANNOTATION.to_string(), tls.server_fingerprint.clone())])
                    }),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    init_containers: replicated.then(|| vec![seeding::seed_container(app, DATA_VOLUME)]),
                    containers: vec![container(app, secret, tls.is_some(), replicated)],
                    volumes: Some(volumes),
                    security_context: tls.map(|_| PodSecurityContext {
                        fs_group: Some(mysql_server::MYSQL_GROUP),
                        fs_group_change_policy: Some("OnRootMismatch".to_string()),
                        ..PodSecurityContext::default()
                    }),
                    ..PodSpec::default()
                }),
            },
            volume_claim_templates: Some(claims),
            persistent_volume_claim_retention_policy: Some(retention_policy(app.spec.deletion_policy())),
            update_strategy: Some(update_strategy(replicated)),
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    }
}

/// One server restarts itself on a new template. The servers of a replicated app wait for the
/// VisitorsApp controller, which restarts the replicas first, then hands the primary over and
/// restarts the old one (`replication::decide`): a rolling update by the StatefulSet controller
/// would restart the primary whenever its ordinal's turn came, a failover instead of a
/// switchover.
pub fn update_strategy(replicated: bool) -> StatefulSetUpdateStrategy {
    let type_ = if replicated { "OnDelete" } else { "RollingUpdate" };
    StatefulSetUpdateStrategy { type_: Some(type_.to_string()), ..StatefulSetUpdateStrategy::default() }
}

/// The StatefulSet controller deletes the claim with the StatefulSet only under `Delete`.
pub fn retention_policy(policy: DeletionPolicy) -> StatefulSetPersistentVolumeClaimRetentionPolicy {
    let when_deleted = match policy {
        DeletionPolicy::Retain => "Retain",
        DeletionPolicy::Delete => "Delete",
    };
    StatefulSetPersistentVolumeClaimRetentionPolicy {
        when_deleted: Some(when_deleted.to_string()),
        when_scaled: Some("Retain".to_string()),
    }
}

fn container(app: &VisitorsApp, secret: &str, tls: bool, replicated: bool) -> Container {
    let mut args: Vec<String> = MYSQLD_ARGS.iter().map(ToString::to_string).collect();
    if replicated {
        args.extend(REPLICATION_ARGS.iter().map(ToString::to_string));
        args.extend(parallel_apply_args(app.spec.applier_threads()));
        if !app.spec.mysql_image().contains("mariadb") {
            args.extend(MYSQL_SEMI_SYNC_ARGS.iter().map(ToString::to_string));
        }
    }
    let mut mounts = vec![
        VolumeMount {
            name: DATA_VOLUME.to_string(),
            mount_path: "/var/lib/mysql".to_string(),
            ..VolumeMount::default()
        },
        VolumeMount { name: TMP_VOLUME.to_string(), mount_path: "/tmp".to_string(), ..VolumeMount::default() },
    ];
    if tls {
        args.extend(mysql_server::tls_args());
        mounts.push(tls::mount(mysql_server::TLS_MOUNT));
    }
    let readiness = if tls { TLS_READINESS_SCRIPT } else { READINESS_SCRIPT };
    Container {
        name: CONTAINER.to_string(),
        image: Some(app.spec.mysql_image().to_string()),
        args: Some(args),
        ports: Some(vec![container_port("mysql", MYSQL_PORT)]),
        env: Some(vec![
            env_from_secret("MYSQL_ROOT_PASSWORD", secret, secret_keys::ROOT_PASSWORD),
            env("MYSQL_DATABASE", DATABASE_NAME),
            env_from_secret("MYSQL_USER", secret, secret_keys::USERNAME),
            env_from_secret("MYSQL_PASSWORD", secret, secret_keys::PASSWORD),
        ]),
        volume_mounts: Some(mounts),
        readiness_probe: Some(shell_probe(readiness, 10, 5, 3)),
        // Up to ten minutes to start (first initialisation, InnoDB crash recovery of a large
        // volume) before liveness may restart mysqld; after that, a minute of failed pings.
        startup_probe: Some(shell_probe(LIVENESS_SCRIPT, 10, 5, 60)),
        liveness_probe: Some(shell_probe(LIVENESS_SCRIPT, 10, 5, 6)),
        resources: app.spec.mysql.as_ref().and_then(|m| m.resources.clone()),
        ..Container::default()
    }
}

fn shell_probe(script: &str, period: i32, timeout: i32, failures: i32) -> Probe {
    Probe {
        exec: Some(ExecAction { command: Some(vec!["sh".to_string(), "-c".to_string(), script.to_string()]) }),
        period_seconds: Some(period),
        timeout_seconds: Some(timeout),
        failure_threshold: Some(failures),
        ..Probe::default()
    }
}

/// What the StatefulSet in the cluster keeps from its creation: its data claim template and its
/// pod management policy, both immutable.
#[derive(Debug, Clone, Copy, Default)]
pub struct Kept<'a> {
    pub claim: Option<&'a PersistentVolumeClaim>,
    pub policy: Option<&'a str>,
}

impl<'a> Kept<'a> {
    pub fn of(sts: Option<&'a StatefulSet>) -> Self {
        let policy = sts.and_then(|sts| sts.spec.as_ref()?.pod_management_policy.as_deref());
        // A StatefulSet made before the policy was set has the API server's default.
        let policy = sts.map(|_| policy.unwrap_or("OrderedReady"));
        Kept { claim: sts.and_then(data_claim_template), policy }
    }
}

/// The data claim template of a StatefulSet in the cluster.
pub fn data_claim_template(sts: &StatefulSet) -> Option<&PersistentVolumeClaim> {
    sts.spec.as_ref()?.volume_claim_templates.as_ref()?.iter().find(|c| c.metadata.name.as_deref() == Some(DATA_VOLUME))
}

fn claim_template(app: &VisitorsApp, existing: Option<&PersistentVolumeClaim>) -> PersistentVolumeClaim {
    if let Some(existing) = existing {
        return PersistentVolumeClaim { status: None, ..existing.clone() };
    }
    let size = app.spec.storage_size();
    let class = app.spec.storage_class_name().map(ToString::to_string);
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(DATA_VOLUME.to_string()),
            labels: Some(pod_labels(app, Component::Mysql)),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_string()]),
            storage_class_name: class,
            resources: Some(storage_request(size)),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

fn storage_request(size: &str) -> VolumeResourceRequirements {
    VolumeResourceRequirements {
        requests: Some(BTreeMap::from([("storage".to_string(), Quantity(size.to_string()))])),
        ..VolumeResourceRequirements::default()
    }
}

/// The storage size requested by a claim template.
fn requested_size(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim.spec.as_ref()?.resources.as_ref()?.requests.as_ref()?.get("storage").map(|q| q.0.as_str())
}

/// Whether the spec asks for more storage than the StatefulSet's (immutable) claim template:
/// only then can the live claim need to grow, so only then is it read.
pub fn asks_for_more_than_template(app: &VisitorsApp, template: &PersistentVolumeClaim) -> bool {
    let template_bytes = requested_size(template).and_then(|size| quantity_bytes(size).ok());
    match (quantity_bytes(app.spec.storage_size()).ok(), template_bytes) {
        (Some(wanted), Some(created)) => wanted > created,
        _ => false,
    }
}

/// When the spec asks for more storage than the live claim of pod 0 requests, the patch that
/// asks it to grow. Sizes compare in bytes (`1024Mi` is `1Gi`). A smaller size is not
/// requested: Kubernetes cannot shrink a claim. The API server refuses to grow a claim whose
/// storage class does not allow expansion; the controller reports that refusal.
pub fn claim_resize(app: &VisitorsApp, live_claim: Option<&PersistentVolumeClaim>) -> Option<PersistentVolumeClaim> {
    let current = quantity_bytes(requested_size(live_claim?)?).ok()?;
    let wanted = app.spec.storage_size();
    if quantity_bytes(wanted).ok()? <= current {
        return None;
    }
    Some(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(&app.name_any())),
            namespace: app.namespace(),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            resources: Some(storage_request(wanted)),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    })
}

/// The headless Service that gives the pod its stable DNS name. It publishes the pod before it
/// is ready so that the name resolves while MySQL initialises.
pub fn headless_service(app: &VisitorsApp) -> Service {
    let name = app.name_any();
    Service {
        metadata: child_meta(app, names::mysql_headless(&name), Component::Mysql),
        spec: Some(K8sServiceSpec {
            cluster_ip: Some("None".to_string()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector(&name, Component::Mysql)),
            ports: Some(vec![mysql_port()]),
            ..K8sServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The client Service: the address in `MYSQL_SERVICE_HOST`. Headless, as the book's
/// `mysql-service`: its name resolves to the pod, and only while the pod is ready. A virtual IP
/// would buy a single pod nothing, and Kubernetes before 1.33 allocates each one by rewriting
/// one bitmap of the whole service range in etcd, a queue every new app waits in. Replicated,
/// it leads to the primary only (the pod the controller labels so).
pub fn client_service(app: &VisitorsApp) -> Service {
    role_service(app, names::mysql(&app.name_any()), app.spec.replicated().then_some(ROLE_PRIMARY))
}

/// The Service of a replicated app's replicas, for reads.
pub fn replicas_service(app: &VisitorsApp) -> Service {
    role_service(app, names::mysql_replicas(&app.name_any()), Some(ROLE_REPLICA))
}

fn role_service(app: &VisitorsApp, service: String, role: Option<&str>) -> Service {
    let mut pods = selector(&app.name_any(), Component::Mysql);
    if let Some(role) = role {
        pods.insert(MYSQL_ROLE_LABEL.to_string(), role.to_string());
    }
    Service {
        metadata: child_meta(app, service, Component::Mysql),
        spec: Some(K8sServiceSpec {
            cluster_ip: Some("None".to_string()),
            selector: Some(pods),
            ports: Some(vec![mysql_port()]),
            ..K8sServiceSpec::default()
        }),
        ..Service::default()
    }
}

fn mysql_port() -> ServicePort {
    ServicePort {
        name: Some("mysql".to_string()),
        port: MYSQL_PORT,
        target_port: Some(IntOrString::String("mysql".to_string())),
        protocol: Some("TCP".to_string()),
        ..ServicePort::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::book_app;
    use visitors_api::visitors_app::{MysqlSpec, StorageSpec};

    fn env_names(container: &Container) -> Vec<&str> {
        container.env.as_ref().unwrap().iter().map(|e| e.name.as_str()).collect()
    }

    fn only_container(sts: &StatefulSet) -> &Container {
        &sts.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0]
    }

    #[test]
    fn statefulset_runs_one_mysql_with_a_volume() {
        let sts = statefulset(&book_app(), "ex-mysql-credentials", Kept::default(), None);
        assert_eq!(sts.metadata.name.as_deref(), Some("ex-mysql"));
        let spec = sts.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(1));
        assert_eq!(spec.service_name.as_deref(), Some("ex-mysql-headless"));
        let claim = &spec.volume_claim_templates.as_ref().unwrap()[0];
        assert_eq!(requested_size(claim), Some("1Gi"));
        let container = only_container(&sts);
        assert_eq!(container.image.as_deref(), Some("mysql:8.4"));
        assert_eq!(container.volume_mounts.as_ref().unwrap()[0].mount_path, "/var/lib/mysql");
        let template_labels = spec.template.metadata.as_ref().unwrap().labels.as_ref().unwrap();
        for (key, value) in spec.selector.match_labels.as_ref().unwrap() {
            assert_eq!(template_labels.get(key), Some(value), "the selector must match the pods");
        }
    }

    #[test]
    fn with_tls_mysql_serves_its_certificate_refuses_plain_text_and_restarts_for_a_new_one() {
        let tls = crate::build::tls::tests::serving("ex-mysql-tls");
        let sts = statefulset(&book_app(), "creds", Kept::default(), Some(&tls));
        assert_eq!(sts.metadata.annotations.as_ref().unwrap()[tls::MODE_ANNOTATION], "Required");
        let container = only_container(&sts);
        let args = container.args.as_ref().unwrap();
        for arg in
            ["--ssl-cert=/etc/mysql/tls/tls.crt", "--ssl-key=/etc/mysql/tls/tls.key", "--require-secure-transport=ON"]
        {
            assert!(args.contains(&arg.to_string()), "{arg}");
        }
        let mount =
            container.volume_mounts.as_ref().unwrap().iter().find(|m| m.mount_path == "/etc/mysql/tls").unwrap();
        assert_eq!(mount.read_only, Some(true));
        let template = &sts.spec.as_ref().unwrap().template;
        let annotations = template.metadata.as_ref().unwrap().annotations.as_ref().unwrap();
        assert_eq!(annotations[tls::CERTIFICATE_ANNOTATION], "server-fingerprint");
        let pod = template.spec.as_ref().unwrap();
        assert_eq!(pod.security_context.as_ref().unwrap().fs_group, Some(mysql_server::MYSQL_GROUP));

        let plain = statefulset(&book_app(), "creds", Kept::default(), None);
        assert_eq!(plain.metadata.annotations.as_ref().unwrap()[tls::MODE_ANNOTATION], "Disabled");
        assert!(!only_container(&plain).args.as_ref().unwrap().iter().any(|a| a.starts_with("--ssl")));
        assert_eq!(plain.spec.unwrap().template.metadata.unwrap().annotations, None, "plain text rolls nothing");
    }

    fn replicated(replicas: i32, image: &str) -> VisitorsApp {
        let mut app = book_app();
        app.spec.mysql =
            Some(Box::new(MysqlSpec { replicas: Some(replicas), image: Some(image.into()), ..MysqlSpec::default() }));
        app
    }

    /// Each case: the threads asked for, MariaDB's and MySQL's flags.
    #[test]
    fn replicas_apply_with_the_threads_asked_for_in_the_sources_commit_order() {
        let cases = [(1, "0", "1"), (2, "2", "2"), (16, "16", "16")];
        for (threads, mariadb, mysql) in cases {
            let args = parallel_apply_args(threads);
            assert!(args.contains(&format!("--loose-slave-parallel-threads={mariadb}")), "{args:?}");
            assert!(args.contains(&format!("--loose-replica-parallel-workers={mysql}")), "{args:?}");
            assert!(args.contains(&"--loose-replica-preserve-commit-order=ON".to_string()));
            assert!(args.contains(&"--loose-slave-parallel-mode=optimistic".to_string()));
        }
    }

    #[test]
    fn a_replicated_app_runs_its_servers_read_only_side_by_side_and_its_pods_are_watched() {
        let sts = statefulset(&replicated(3, "mariadb:10.11"), "creds", Kept::default(), None);
        let spec = sts.spec.as_ref().unwrap();
        assert_eq!((spec.replicas, spec.pod_management_policy.as_deref()), (Some(3), Some("Parallel")));
        let labels = spec.template.metadata.as_ref().unwrap().labels.as_ref().unwrap();
        assert_eq!(labels[REPLICATED_LABEL], "true");
        let args = only_container(&sts).args.clone().unwrap();
        for arg in REPLICATION_ARGS {
            assert!(args.contains(&arg.to_string()), "{arg}");
        }
        for arg in [
            "--loose-slave-parallel-threads=8",
            "--loose-replica-parallel-workers=8",
            "--loose-replica-preserve-commit-order=ON",
        ] {
            assert!(args.contains(&arg.to_string()), "parallel apply by default: {arg} in {args:?}");
        }
        assert!(!args.iter().any(|a| a.contains("plugin-load")), "MariaDB's semi-sync is built in");
        let mysql = statefulset(&replicated(3, "mysql:8.4"), "creds", Kept::default(), None);
        let args = only_container(&mysql).args.clone().unwrap();
        assert!(args.contains(&"--loose-plugin-load-add=semisync_source.so".to_string()));

        let single = statefulset(&book_app(), "creds", Kept::default(), None);
        let args = only_container(&single).args.clone().unwrap();
        assert!(!args.iter().any(|a| a.contains("read-only")), "a single server takes writes from its start");
        assert!(!single.spec.unwrap().template.metadata.unwrap().labels.unwrap().contains_key(REPLICATED_LABEL));
    }

    #[test]
    fn an_existing_statefulset_keeps_its_pod_management_policy() {
        let mut old = statefulset(&book_app(), "creds", Kept::default(), None);
        old.spec.as_mut().unwrap().pod_management_policy = None;
        let kept = Kept::of(Some(&old));
        assert_eq!(kept.policy, Some("OrderedReady"), "the API server's default, before the policy was set");
        let scaled = statefulset(&replicated(3, "mariadb:10.11"), "creds", kept, None);
        assert_eq!(scaled.spec.unwrap().pod_management_policy.as_deref(), Some("OrderedReady"));
    }

    #[test]
    fn replicated_the_client_service_leads_to_the_primary_and_another_to_the_replicas() {
        let app = replicated(3, "mariadb:10.11");
        let selector = |service: Service| service.spec.unwrap().selector.unwrap();
        assert_eq!(selector(client_service(&app))[MYSQL_ROLE_LABEL], ROLE_PRIMARY);
        let replicas = replicas_service(&app);
        assert_eq!(replicas.metadata.name.as_deref(), Some("ex-mysql-replicas"));
        assert_eq!(selector(replicas)[MYSQL_ROLE_LABEL], ROLE_REPLICA);
        assert!(!selector(client_service(&book_app())).contains_key(MYSQL_ROLE_LABEL), "a single server is the one");
    }

    #[test]
    fn credentials_come_from_the_secret_never_literals() {
        let sts = statefulset(&book_app(), "creds", Kept::default(), None);
        let container = only_container(&sts);
        assert_eq!(env_names(container), ["MYSQL_ROOT_PASSWORD", "MYSQL_DATABASE", "MYSQL_USER", "MYSQL_PASSWORD"]);
        for var in container.env.as_ref().unwrap() {
            if var.name.contains("PASSWORD") || var.name == "MYSQL_USER" {
                assert!(var.value.is_none());
                assert_eq!(var.value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap().name, "creds");
            }
        }
    }

    #[test]
    fn slow_starts_are_covered_by_a_startup_probe() {
        let sts = statefulset(&book_app(), "creds", Kept::default(), None);
        let container = only_container(&sts);
        let startup = container.startup_probe.as_ref().expect("a startup probe");
        let budget = startup.period_seconds.unwrap() * startup.failure_threshold.unwrap();
        assert!(budget >= 600, "mysqld gets ten minutes to start: {budget}s");
        assert_eq!(container.liveness_probe.as_ref().unwrap().initial_delay_seconds, None);
    }

    #[test]
    fn readiness_probe_runs_a_query_as_the_application_user() {
        let sts = statefulset(&book_app(), "creds", Kept::default(), None);
        let probe = only_container(&sts).readiness_probe.as_ref().unwrap();
        let command = probe.exec.as_ref().unwrap().command.as_ref().unwrap().join(" ");
        assert!(command.contains("SELECT 1") && command.contains("--protocol=TCP"), "{command}");
        assert!(command.contains("$MYSQL_USER") && !command.contains(" -p"), "password must come from MYSQL_PWD");
    }

    #[test]
    fn native_password_is_enabled_loosely() {
        let sts = statefulset(&book_app(), "creds", Kept::default(), None);
        let args = only_container(&sts).args.clone().unwrap();
        assert!(args.iter().all(|a| a.starts_with("--loose-")), "{args:?}");
        assert!(args.iter().any(|a| a.contains("authentication-policy=mysql_native_password")));
        assert!(args.contains(&"--loose-local-infile=1".to_string()), "restores need LOAD DATA LOCAL: {args:?}");
        for binlog in ["--loose-log-bin=binlog", "--loose-binlog-format=ROW", "--loose-gtid-mode=ON"] {
            assert!(args.contains(&binlog.to_string()), "point-in-time recovery needs {binlog}: {args:?}");
        }
    }

    #[test]
    fn storage_and_resources_follow_the_spec() {
        let mut app = book_app();
        app.spec.mysql = Some(Box::new(MysqlSpec {
            storage: Some(StorageSpec { size: Some("5Gi".into()), storage_class_name: Some("fast".into()) }),
            resources: Some(Default::default()),
            ..MysqlSpec::default()
        }));
        let sts = statefulset(&app, "creds", Kept::default(), None);
        let claim = &sts.spec.as_ref().unwrap().volume_claim_templates.as_ref().unwrap()[0];
        assert_eq!(requested_size(claim), Some("5Gi"));
        assert_eq!(claim.spec.as_ref().unwrap().storage_class_name.as_deref(), Some("fast"));
        assert!(only_container(&sts).resources.is_some());
    }

    #[test]
    fn existing_claim_templates_are_kept_and_a_resize_is_requested() {
        let original = statefulset(&book_app(), "creds", Kept::default(), None);
        let claim = data_claim_template(&original).expect("a data claim template").clone();
        let mut app = book_app();
        app.spec.mysql = Some(Box::new(MysqlSpec {
            storage: Some(StorageSpec { size: Some("5Gi".into()), storage_class_name: Some("other".into()) }),
            ..MysqlSpec::default()
        }));
        let sts = statefulset(&app, "creds", Kept { claim: Some(&claim), ..Kept::default() }, None);
        assert_eq!(
            sts.spec.unwrap().volume_claim_templates.unwrap(),
            std::slice::from_ref(&claim),
            "immutable: kept as created"
        );
        let live = |size: &str| PersistentVolumeClaim {
            metadata: ObjectMeta { name: Some("data-ex-mysql-0".into()), ..ObjectMeta::default() },
            spec: Some(PersistentVolumeClaimSpec { resources: Some(storage_request(size)), ..Default::default() }),
            ..PersistentVolumeClaim::default()
        };
        let resize = claim_resize(&app, Some(&live("1Gi"))).expect("a resize");
        assert_eq!(resize.metadata.name.as_deref(), Some("data-ex-mysql-0"));
        assert_eq!(requested_size(&resize), Some("5Gi"));
        assert_eq!(claim_resize(&app, Some(&live("5Gi"))), None, "already grown: nothing to do");
        assert_eq!(claim_resize(&app, Some(&live("5120Mi"))), None, "sizes compare in bytes");
        assert_eq!(claim_resize(&book_app(), Some(&live("5Gi"))), None, "a claim is never shrunk");
        assert_eq!(claim_resize(&app, None), None, "no claim yet: the template has the size");
        assert!(asks_for_more_than_template(&app, &claim), "5Gi over a 1Gi template");
        assert!(!asks_for_more_than_template(&book_app(), &claim), "same size: the claim is not even read");
    }

    #[test]
    fn retention_follows_the_deletion_policy() {
        let mut app = book_app();
        let policy = |app: &VisitorsApp| {
            statefulset(app, "c", Kept::default(), None)
                .spec
                .unwrap()
                .persistent_volume_claim_retention_policy
                .unwrap()
                .when_deleted
        };
        assert_eq!(policy(&app).as_deref(), Some("Retain"));
        app.spec.deletion_policy = Some(DeletionPolicy::Delete);
        assert_eq!(policy(&app).as_deref(), Some("Delete"));
    }

    #[test]
    fn services_select_the_mysql_pod() {
        let app = book_app();
        let headless = headless_service(&app);
        assert_eq!(headless.metadata.name.as_deref(), Some("ex-mysql-headless"));
        assert_eq!(headless.spec.as_ref().unwrap().cluster_ip.as_deref(), Some("None"));
        let client = client_service(&app);
        assert_eq!(client.metadata.name.as_deref(), Some("ex-mysql"));
        let spec = client.spec.unwrap();
        // Headless too, but its name resolves only while the pod is ready.
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, None);
        assert_eq!(spec.ports.unwrap()[0].port, 3306);
        assert_eq!(spec.selector.unwrap()["app.kubernetes.io/component"], "mysql");
        assert_eq!(client_host(&app), "ex-mysql.shop.svc");
    }
}
