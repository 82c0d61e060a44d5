//! Server-side apply under a controller's field manager. Applying an unchanged object is a
//! no-op on the server (its resourceVersion does not move), which keeps converged reconciles
//! free of writes.

use std::fmt::Debug;

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Applies `desired` (which must carry its name) with `force`, taking ownership of the fields
/// it sets from any other manager: the operator is the source of truth for those fields.
pub async fn apply<K>(api: &Api<K>, field_manager: &str, desired: &K) -> Result<K, kube::Error>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    let params = PatchParams::apply(field_manager).force();
    api.patch(&desired.name_any(), &params, &Patch::Apply(desired)).await
}

/// Applies the status subresource of object `name` to `status`.
pub async fn apply_status<K, S>(api: &Api<K>, field_manager: &str, name: &str, status: &S) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug,
    S: Serialize,
{
    let body = status_patch::<K, S>(status);
    let params = PatchParams::apply(field_manager).force();
    api.patch_status(name, &params, &Patch::Apply(&body)).await
}

/// The apply body for a status: server-side apply needs apiVersion and kind.
pub fn status_patch<K, S>(status: &S) -> serde_json::Value
where
    K: Resource<DynamicType = ()>,
    S: Serialize,
{
    serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use visitors_api::VisitorsApp;
    use visitors_api::visitors_app::VisitorsAppStatus;

    #[test]
    fn status_patch_names_the_kind() {
        let status = VisitorsAppStatus { observed_generation: Some(3), ..Default::default() };
        let body = status_patch::<VisitorsApp, _>(&status);
        assert_eq!(body["apiVersion"], "example.com/v1");
        assert_eq!(body["kind"], "VisitorsApp");
        assert_eq!(body["status"]["observedGeneration"], 3);
    }
}
