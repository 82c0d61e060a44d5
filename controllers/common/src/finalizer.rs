//! Finalizers: run clean-up before an object disappears. A thin wrapper over kube's finalizer
//! state machine (add the finalizer first, run `apply` while the object lives, run `cleanup`
//! once it is being deleted, then remove the finalizer) with one error type per controller.

use std::fmt::Debug;
use std::sync::Arc;

use kube::Api;
use kube::Resource;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Error as KubeFinalizerError, Event, finalizer};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why a reconcile with a finalizer failed.
#[derive(Debug, thiserror::Error)]
pub enum FinalizerError<E: std::error::Error + 'static> {
    /// The reconcile or the clean-up itself failed.
    #[error(transparent)]
    Reconcile(E),
    #[error("cannot add the finalizer: {0}")]
    Add(#[source] kube::Error),
    #[error("cannot remove the finalizer: {0}")]
    Remove(#[source] kube::Error),
    #[error("the object has no name")]
    UnnamedObject,
    #[error("invalid finalizer name: {0}")]
    InvalidName(String),
}

/// Reconciles `object` under finalizer `name`: `apply` while it lives, `cleanup` once when it
/// is deleted. Both must be idempotent: either may run again after a failure.
pub async fn reconcile_with_finalizer<K, E, A, AF, C, CF>(
    api: &Api<K>,
    name: &str,
    object: Arc<K>,
    apply: A,
    cleanup: C,
) -> Result<Action, FinalizerError<E>>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
    E: std::error::Error + 'static,
    A: FnOnce(Arc<K>) -> AF,
    AF: Future<Output = Result<Action, E>>,
    C: FnOnce(Arc<K>) -> CF,
    CF: Future<Output = Result<Action, E>>,
{
    finalizer(api, name, object, |event| async move {
        match event {
            Event::Apply(object) => apply(object).await,
            Event::Cleanup(object) => cleanup(object).await,
        }
    })
    .await
    .map_err(|error| match error {
        KubeFinalizerError::ApplyFailed(e) | KubeFinalizerError::CleanupFailed(e) => FinalizerError::Reconcile(e),
        KubeFinalizerError::AddFinalizer(e) => FinalizerError::Add(e),
        KubeFinalizerError::RemoveFinalizer(e) => FinalizerError::Remove(e),
        KubeFinalizerError::UnnamedObject => FinalizerError::UnnamedObject,
        KubeFinalizerError::InvalidFinalizer => FinalizerError::InvalidName(name.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::mock_client;
    use http::{Method, StatusCode};
    use visitors_api::VisitorsApp;

    const FINALIZER: &str = "example.com/test-cleanup";
    const PATH: &str = "/apis/example.com/v1/namespaces/shop/visitorsapps/ex";

    #[derive(Debug, thiserror::Error)]
    #[error("never")]
    struct Never;

    fn app(finalizers: &[&str], deleting: bool) -> VisitorsApp {
        let mut app = VisitorsApp::new("ex", Default::default());
        app.metadata.namespace = Some("shop".into());
        app.metadata.finalizers = Some(finalizers.iter().map(ToString::to_string).collect());
        if deleting {
            app.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::from_second(1_800_000_000).unwrap(),
            ));
        }
        app
    }

    async fn run(app: VisitorsApp, api: Api<VisitorsApp>) -> Result<&'static str, FinalizerError<Never>> {
        let ran = std::sync::Arc::new(std::sync::Mutex::new(""));
        let (on_apply, on_cleanup) = (ran.clone(), ran.clone());
        reconcile_with_finalizer(
            &api,
            FINALIZER,
            Arc::new(app),
            |_| async move {
                *on_apply.lock().unwrap() = "apply";
                Ok(Action::await_change())
            },
            |_| async move {
                *on_cleanup.lock().unwrap() = "cleanup";
                Ok(Action::await_change())
            },
        )
        .await?;
        Ok(*ran.lock().unwrap())
    }

    #[tokio::test]
    async fn adds_the_finalizer_before_anything_else() {
        let (client, mut server) = mock_client();
        let task = tokio::spawn(run(app(&[], false), Api::namespaced(client, "shop")));
        let patch = server
            .expect(Method::PATCH, PATH, StatusCode::OK, serde_json::to_value(app(&[FINALIZER], false)).unwrap())
            .await;
        assert!(patch.body.to_string().contains(FINALIZER), "{}", patch.body);
        assert_eq!(task.await.unwrap().unwrap(), "");
    }

    #[tokio::test]
    async fn applies_while_alive_and_cleans_up_once_deleted() {
        let (client, mut server) = mock_client();
        let api: Api<VisitorsApp> = Api::namespaced(client, "shop");
        assert_eq!(run(app(&[FINALIZER], false), api.clone()).await.unwrap(), "apply");

        let task = tokio::spawn(run(app(&[FINALIZER], true), api));
        let removal =
            server.expect(Method::PATCH, PATH, StatusCode::OK, serde_json::to_value(app(&[], true)).unwrap()).await;
        assert!(removal.body.to_string().contains("remove"), "{}", removal.body);
        assert_eq!(task.await.unwrap().unwrap(), "cleanup");
    }
}
