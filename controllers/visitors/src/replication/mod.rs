//! Replication of a VisitorsApp's MySQL servers (`spec.mysql.replicas` of 2 or more): one
//! manager, run by the app's reconcile after the StatefulSet is applied, that looks, decides
//! and acts until nothing needs a fresh look, as MOCO's `clustering` does.
//!
//! - [`observe`] reads every server (SQL), its pod (the cache), the Jobs that copy a diverged
//!   server's transactions aside or load a backup run into an empty one, the seeding tokens, the
//!   app's switchover annotations: one [`model::Observed`].
//! - [`decide`] is pure: from what was observed and what is remembered ([`model::Memory`]) it
//!   returns the [`model::Decision`] (the server rules of [`rules`], every time-out, the records
//!   and Events of changes, how each server follows the primary: [`following`]) and what to
//!   remember next.
//! - [`act`] carries the decision out, SQL ([`sql`]) and Kubernetes alike (pods, Jobs, the
//!   seeding tokens, the role labels the client Service selects by), each act a span, each
//!   decision's notes an Event.
//!
//! [`memory`] keeps each app's memory between reconciles, [`report`] is what the status and the
//! metrics read, [`backup_seed`] finds the run an empty server is loaded from.

pub mod act;
pub mod backup_seed;
pub mod decide;
pub mod following;
pub mod memory;
pub mod model;
pub mod observe;
pub mod report;
pub mod rules;
pub mod server;
pub mod sql;

use std::sync::Arc;
use std::time::Duration;

use controller_common::Runtime;
use controller_common::error::ApiError;
use controller_common::kind::NamespacedKind;
use controller_common::operation::AgentSettings;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use visitors_api::VisitorsApp;

use crate::build::secret::Credentials;
use crate::build::tls::ServingTls;
use memory::Memories;
use report::Report;

/// How often a replicated app's servers are looked at while all is well: a primary that stops
/// answering is failed over within two looks.
pub const LOOK_INTERVAL: Duration = Duration::from_secs(2);
/// How soon the next look comes while something is under way (a failover waits for a replica).
pub const BUSY_LOOK_INTERVAL: Duration = Duration::from_millis(500);
/// Looks within one reconcile, while a decision needs a fresh look (a fence, a receiver
/// stopped, a promotion waiting for its server to apply).
const LOOKS_PER_RECONCILE: usize = 4;

/// What the manager needs of the reconcile: the app, the API, the cache of its MySQL pods, and
/// where its memory is kept.
pub struct Scope<'a> {
    pub app: &'a VisitorsApp,
    pub name: &'a str,
    pub namespace: &'a str,
    pub runtime: &'a Runtime,
    pub pods: &'a Store<Pod>,
    /// The pod template revision the StatefulSet's pods should run, once its controller has
    /// seen the latest spec.
    pub update_revision: Option<String>,
    /// What the Jobs that load a backup run into an empty server are started with; `None`: the
    /// controller was given no agent image.
    pub agent: Option<&'a AgentSettings>,
    pub memories: &'a Memories,
    pub credentials: &'a Credentials,
    pub tls: Option<&'a ServingTls>,
}

impl Scope<'_> {
    /// The API of kind `K` in the app's namespace.
    pub fn api<K: NamespacedKind>(&self) -> Api<K> {
        Api::namespaced(self.runtime.client.clone(), self.namespace)
    }

    /// MySQL pod `name`, as the watch cached it.
    pub fn pod(&self, name: &str) -> Option<Arc<Pod>> {
        self.pods.get(&ObjectRef::new(name).within(self.namespace))
    }
}

/// Why a look could not be decided or carried out: an API request that failed, or an act on a
/// server (its answer, never a statement: some hold a password).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Act(#[from] act::ActError),
}

/// Looks at the servers of `scope`'s app, decides and acts, until nothing needs a fresh look.
pub async fn manage(scope: &Scope<'_>) -> Result<Report, Error> {
    let mut memory = scope.memories.get(scope.app);
    let mut report = Report::default();
    for _ in 0..LOOKS_PER_RECONCILE {
        let look = observe::look(scope, &memory).await?;
        let (decision, next) = decide::decide(&look.observed, &memory);
        act::carry_out(scope, &look, &decision).await?;
        memory = next;
        report.add(&decision, &look.observed);
        if !decision.look_again {
            break;
        }
    }
    scope.memories.put(scope.app, memory);
    Ok(report)
}
