//! The errors every reconcile shares: a failed API request with what the reconcile was doing,
//! a namespaced object without a namespace, and the metric label each failure is counted under.

use kube::{Resource, ResourceExt};

/// An error a reconcile can fail with; `metric_label` is its kind in the failure metric (a
/// short fixed word, never a message, to keep the metric's cardinality bounded).
pub trait ReconcileFailure: std::error::Error {
    fn metric_label(&self) -> &'static str;
}

/// A namespaced object came without a namespace: a bug of the API server or the CRD.
#[derive(Debug, thiserror::Error)]
#[error("{kind} {name:?} has no namespace, but the kind is namespaced; this is a bug in the API server or the CRD")]
pub struct NoNamespace {
    kind: String,
    name: String,
}

/// The namespace of `object`.
pub fn namespace_of<K: Resource<DynamicType = ()>>(object: &K) -> Result<String, NoNamespace> {
    object.namespace().ok_or_else(|| NoNamespace { kind: K::kind(&()).into_owned(), name: object.name_any() })
}

/// Why a reconcile whose steps only talk to the API failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    NoNamespace(#[from] NoNamespace),
    #[error(transparent)]
    Api(#[from] ApiError),
}

impl ReconcileFailure for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::NoNamespace(_) => "NoNamespace",
            Error::Api(error) => error.metric_label(),
        }
    }
}

/// A failed API request and what the reconcile was doing: `"{action} failed: {why}"`.
#[derive(Debug, thiserror::Error)]
#[error("{action} failed: {}", explain_kube_error(.source))]
pub struct ApiError {
    pub action: String,
    #[source]
    pub source: kube::Error,
}

impl ApiError {
    pub fn metric_label(&self) -> &'static str {
        kube_error_label(&self.source)
    }

    /// The API server found the request invalid (422).
    pub fn is_rejected(&self) -> bool {
        matches!(&self.source, kube::Error::Api(status) if status.code == 422)
    }
}

/// Wraps a kube error with what was being done.
pub fn api_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> ApiError {
    let action = action.into();
    move |source| ApiError { action, source }
}

/// The metric label of a failed API request: `Forbidden`, `Conflict`, `Rejected` or `Kube`.
pub fn kube_error_label(error: &kube::Error) -> &'static str {
    match error {
        kube::Error::Api(status) if status.code == 403 => "Forbidden",
        kube::Error::Api(status) if status.code == 409 => "Conflict",
        kube::Error::Api(status) if status.code == 422 || status.code == 400 => "Rejected",
        _ => "Kube",
    }
}

/// A failed API request in words a user can act on (a missing RBAC rule names the chart).
pub fn explain_kube_error(error: &kube::Error) -> String {
    match error {
        // RBAC denials read "... cannot <verb> resource ..."; other 403s come from admission
        // (a storage class that cannot expand, a quota) and are no permission problem.
        kube::Error::Api(status) if status.code == 403 && status.message.contains(" cannot ") => format!(
            "the controller's ServiceAccount lacks a permission ({}); check the Role or ClusterRole from the Helm chart",
            status.message
        ),
        kube::Error::Api(status) if status.code == 403 => format!("the API server refused it: {}", status.message),
        kube::Error::Api(status) if status.code == 422 || status.code == 400 => {
            format!("the API server rejected it: {}", status.message)
        }
        kube::Error::Api(status) => {
            format!("the API server answered {} {}: {}", status.code, status.reason, status.message)
        }
        other => format!("{other} (is the API server reachable?)"),
    }
}
