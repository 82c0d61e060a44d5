//! One module per subcommand: read, decide (pure, in `view` and `plan`), act, follow.

pub mod backup;
pub mod drill;
pub mod plan;
pub mod restore;
pub mod runs;
pub mod status;
pub mod switchover;

use std::collections::BTreeMap;

use jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};

use crate::error::Error;

/// Now, to the second: statuses and annotations keep whole seconds.
pub fn now() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now())
}

/// Sets annotations of object `name` by a merge patch (a `None` value removes one): how the
/// plugin asks a controller for a drill or a switchover.
pub async fn annotate<K>(
    api: &Api<K>,
    resource: &'static str,
    namespace: &str,
    name: &str,
    annotations: BTreeMap<&str, Option<String>>,
) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({"metadata": {"annotations": annotations}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(drop)
        .map_err(|e| Error::from_api("patch", resource, namespace, Some(name), e))
}
