//! What a workload's own status says, as the app's status and its readiness read it.

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;

/// What a workload's own status says.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Workload {
    pub desired: i32,
    pub ready: i32,
    pub updated: i32,
    /// Every pod of the workload, of any template revision.
    pub total: i32,
    /// Pods ready for at least `minReadySeconds`.
    pub available: i32,
    /// The workload controller has seen the latest spec (and, for a StatefulSet, every pod is
    /// at the update revision).
    pub current: bool,
    /// The image of the first container of the pod template.
    pub image: Option<String>,
}

impl Workload {
    pub fn from_statefulset(sts: &StatefulSet) -> Self {
        let status = sts.status.clone().unwrap_or_default();
        let spec = sts.spec.as_ref();
        let seen = status.observed_generation.unwrap_or(0) >= sts.metadata.generation.unwrap_or(0);
        // Under `OnDelete` the StatefulSet controller never moves `currentRevision`: the pods
        // at the update revision (`updatedReplicas`) say how far an update went.
        let on_delete = spec.and_then(|s| s.update_strategy.as_ref()?.type_.as_deref()) == Some("OnDelete");
        let one_revision =
            on_delete || status.current_revision.is_none() || status.current_revision == status.update_revision;
        Self {
            desired: spec.and_then(|s| s.replicas).unwrap_or(1),
            ready: status.ready_replicas.unwrap_or(0),
            updated: status.updated_replicas.unwrap_or(0),
            total: status.replicas,
            available: status.available_replicas.unwrap_or(0),
            current: seen && one_revision,
            image: spec.and_then(|s| first_image(&s.template)),
        }
    }

    pub fn from_deployment(deployment: &Deployment) -> Self {
        let status = deployment.status.clone().unwrap_or_default();
        let spec = deployment.spec.as_ref();
        Self {
            desired: spec.and_then(|s| s.replicas).unwrap_or(1),
            ready: status.ready_replicas.unwrap_or(0),
            updated: status.updated_replicas.unwrap_or(0),
            total: status.replicas.unwrap_or(0),
            available: status.available_replicas.unwrap_or(0),
            current: status.observed_generation.unwrap_or(0) >= deployment.metadata.generation.unwrap_or(0),
            image: spec.and_then(|s| first_image(&s.template)),
        }
    }

    /// Every desired replica runs the latest template and is available, and no pod of an
    /// older template is left. `readyReplicas` counts old pods too: a new template that
    /// crash-loops while an old pod still serves must not look rolled out.
    pub fn rolled_out(&self) -> bool {
        self.current
            && self.updated >= self.desired
            && self.total <= self.updated
            && self.ready >= self.desired
            && self.available >= self.desired
    }

    pub fn readiness(&self) -> Readiness {
        Readiness { a_pod_ready: self.ready >= 1, rolled_out: self.rolled_out() }
    }
}

/// What the app's readiness and its next step depend on in a workload's status: a pod ready
/// (for the database, the check runs and the backend follows) and the rollout done (the
/// workload's condition turns `True`). The rest of what the status reads (pods created,
/// updated, observed generation) only refreshes replica counts and a condition's wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Readiness {
    pub a_pod_ready: bool,
    pub rolled_out: bool,
}

fn first_image(template: &PodTemplateSpec) -> Option<String> {
    template.spec.as_ref()?.containers.first()?.image.clone()
}
