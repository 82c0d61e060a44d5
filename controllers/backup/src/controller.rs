//! The wiring of the MySQLBackup controller: the watches that wake a backup and the loop that
//! drives its reconciles ([`crate::reconcile`]).

use std::sync::Arc;

use controller_common::args::AgentArgs;
use controller_common::process::{Identity, Reconciling};
use controller_common::watch::{OPERATION_CONCURRENCY, api_in, drive, watched_objects};
use k8s_openapi::api::core::v1::Pod;
use kube::core::{Expression, PartialObjectMeta, Selector};
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::watcher;
use visitors_api::MySQLBackup;
use visitors_api::labels::{Component, scheduled_runs};

use crate::build::drill::DRILL_LABEL;
use crate::context::Context;
use crate::reconcile::{error_policy, reconcile};

pub const IDENTITY: Identity = Identity { name: "backup-controller", crd: "mysqlbackups.example.com" };

/// Watches MySQLBackups, their Jobs (a run wakes when its Job changes or is deleted), the
/// databases of their restore drills (a run wakes when its drill's MySQL is ready or lost) and
/// the runs of schedules (a schedule wakes when a run changes or ends), until `shutdown`.
pub async fn watch_and_reconcile(started: Reconciling<AgentArgs>) {
    let (reader, backups, jobs) = started.operations::<MySQLBackup>(Component::Backup);
    let runs = watched_objects(
        api_in::<PartialObjectMeta<MySQLBackup>>(started.runtime.client.clone(), started.namespace()),
        watcher::Config::default().labels_from(&scheduled_runs()),
    );
    let drill_databases = watched_objects(
        api_in::<PartialObjectMeta<Pod>>(started.runtime.client.clone(), started.namespace()),
        watcher::Config::default().labels_from(&Selector::from(Expression::Exists(DRILL_LABEL.to_string()))),
    );
    let settings = started.agent_settings();
    let Reconciling { runtime, shutdown, .. } = started;
    let context = Arc::new(Context::new(runtime, settings));
    let controller = Controller::for_stream(backups, reader)
        .with_config(ControllerConfig::default().concurrency(OPERATION_CONCURRENCY))
        .owns_stream(jobs)
        .owns_stream(drill_databases)
        .owns_stream(runs);
    drive(controller, reconcile, error_policy, context, shutdown).await;
}
