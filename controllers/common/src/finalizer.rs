//! Finalizers: clean-up before an object disappears, one implementation for every controller.
//!
//! A finalizer is added or removed by a merge patch of the finalizer list that holds the
//! resourceVersion read: if the object changed meanwhile (another controller added its own
//! finalizer), the API server answers 409 and the next reconcile works on the fresh object, so
//! no one else's finalizer is ever lost. An object being deleted keeps the finalizer until its
//! clean-up says it is done; the clean-up may take several reconciles (a Job to wait for).

use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};

use crate::error::ApiError;
use crate::kind::NamespacedKind;
use crate::reconcile::Runtime;

/// Where the clean-up of an object being deleted stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleanup<T = ()> {
    /// Nothing is left to do: the finalizer goes, and with it the object. `T` is what the
    /// clean-up has to say once it has gone (see [`Finalized::Released`]).
    Done(T),
    /// The clean-up waits (for a Job, a pod to stop): look again as the action says.
    Waiting(Action),
}

/// How the reconcile of an object being deleted ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finalized<T = ()> {
    /// The clean-up is done and the finalizer removed: the object goes.
    Released(T),
    /// The object carried no finalizer: nothing was left to clean up.
    NothingToDo,
    /// The clean-up waits.
    Waiting(Action),
}

impl<T> Finalized<T> {
    /// What the controller does next: nothing until the object changes, unless it waits.
    pub fn action(&self) -> Action {
        match self {
            Finalized::Waiting(action) => action.clone(),
            Finalized::Released(_) | Finalized::NothingToDo => Action::await_change(),
        }
    }
}

/// One finalizer of one controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finalizer(pub &'static str);

impl Finalizer {
    pub fn name(&self) -> &'static str {
        self.0
    }

    /// Whether `object` carries it.
    pub fn is_on<K: Resource>(&self, object: &K) -> bool {
        object.finalizers().iter().any(|f| f == self.0)
    }

    /// Adds the finalizer to `object` when `wanted` and missing, removes it when unwanted and
    /// there. Returns the finalizer list written, `None` when nothing had to change.
    pub async fn keep<K>(&self, runtime: &Runtime, object: &K, wanted: bool) -> Result<Option<Vec<String>>, ApiError>
    where
        K: NamespacedKind,
    {
        let finalizers: Vec<String> = match (wanted, self.is_on(object)) {
            (true, false) => object.finalizers().iter().cloned().chain([self.0.to_string()]).collect(),
            (false, true) => self.without(object),
            _ => return Ok(None),
        };
        self.write(runtime, object, &finalizers).await?;
        Ok(Some(finalizers))
    }

    /// The reconcile of an object being deleted: `cleanup` runs while the finalizer is on it,
    /// and the finalizer is removed once it says [`Cleanup::Done`]. An object without the
    /// finalizer has nothing left to clean up. Either way, once the object goes its backoff is
    /// forgotten.
    pub async fn finalize<K, T, E, F>(&self, runtime: &Runtime, object: &K, cleanup: F) -> Result<Finalized<T>, E>
    where
        K: NamespacedKind,
        E: From<ApiError>,
        F: Future<Output = Result<Cleanup<T>, E>>,
    {
        let finalized = if self.is_on(object) {
            match cleanup.await? {
                Cleanup::Waiting(action) => return Ok(Finalized::Waiting(action)),
                Cleanup::Done(said) => {
                    self.write(runtime, object, &self.without(object)).await?;
                    Finalized::Released(said)
                }
            }
        } else {
            Finalized::NothingToDo
        };
        runtime.forget(object);
        Ok(finalized)
    }

    fn without<K: Resource>(&self, object: &K) -> Vec<String> {
        object.finalizers().iter().filter(|f| *f != self.0).cloned().collect()
    }

    /// A merge patch of the whole list on the resourceVersion read; an object already gone is
    /// fine.
    async fn write<K>(&self, runtime: &Runtime, object: &K, finalizers: &[String]) -> Result<(), ApiError>
    where
        K: NamespacedKind,
    {
        let api: Api<K> = Api::namespaced(runtime.client.clone(), &object.namespace().unwrap_or_default());
        let patch = serde_json::json!({
            "metadata": {"finalizers": finalizers, "resourceVersion": object.resource_version()}
        });
        let params = PatchParams { field_manager: Some(runtime.field_manager.clone()), ..PatchParams::default() };
        match api.patch_metadata(&object.name_any(), &params, &Patch::Merge(&patch)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(source) => Err(ApiError {
                action: format!("updating the finalizers of {} {}", K::kind(&()), object.name_any()),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::mock_runtime;
    use http::{Method, StatusCode};
    use visitors_api::VisitorsApp;

    const FINALIZER: Finalizer = Finalizer("example.com/test-cleanup");
    const PATH: &str = "/apis/example.com/v1/namespaces/shop/visitorsapps/ex";

    fn app(finalizers: &[&str], deleting: bool) -> VisitorsApp {
        let mut app = VisitorsApp::new("ex", Default::default());
        app.metadata.namespace = Some("shop".into());
        app.metadata.resource_version = Some("7".into());
        app.metadata.finalizers = Some(finalizers.iter().map(ToString::to_string).collect());
        if deleting {
            app.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::from_second(1_800_000_000).unwrap(),
            ));
        }
        app
    }

    #[tokio::test]
    async fn it_is_added_and_removed_on_the_version_read_keeping_other_finalizers() {
        let (runtime, mut server) = mock_runtime("test");
        let runtime = std::sync::Arc::new(runtime);
        let task = tokio::spawn({
            let runtime = runtime.clone();
            async move { FINALIZER.keep(&runtime, &app(&["other"], false), true).await }
        });
        let patch =
            server.expect(Method::PATCH, PATH, StatusCode::OK, serde_json::to_value(app(&[], false)).unwrap()).await;
        assert_eq!(patch.body["metadata"]["finalizers"], serde_json::json!(["other", FINALIZER.name()]));
        assert_eq!(patch.body["metadata"]["resourceVersion"], "7");
        assert!(task.await.unwrap().unwrap().is_some());

        let kept = FINALIZER.keep(&runtime, &app(&[FINALIZER.name()], false), true).await.unwrap();
        assert_eq!(kept, None, "nothing to write");
        server.expect_no_request(std::time::Duration::from_millis(50)).await;

        let task = tokio::spawn({
            let runtime = runtime.clone();
            async move { FINALIZER.keep(&runtime, &app(&["other", FINALIZER.name()], false), false).await }
        });
        let patch =
            server.expect(Method::PATCH, PATH, StatusCode::OK, serde_json::to_value(app(&[], false)).unwrap()).await;
        assert_eq!(patch.body["metadata"]["finalizers"], serde_json::json!(["other"]));
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_deleted_object_is_cleaned_up_once_and_let_go_only_when_done() {
        let (runtime, mut server) = mock_runtime("test");
        let waiting = FINALIZER
            .finalize(&runtime, &app(&[FINALIZER.name()], true), async {
                Ok::<_, ApiError>(Cleanup::<()>::Waiting(Action::requeue(std::time::Duration::from_secs(5))))
            })
            .await
            .unwrap();
        assert_eq!(waiting, Finalized::Waiting(Action::requeue(std::time::Duration::from_secs(5))));
        server.expect_no_request(std::time::Duration::from_millis(50)).await;

        let runtime = std::sync::Arc::new(runtime);
        let task = tokio::spawn({
            let runtime = runtime.clone();
            async move {
                FINALIZER
                    .finalize(&runtime, &app(&[FINALIZER.name()], true), async {
                        Ok::<_, ApiError>(Cleanup::Done("said"))
                    })
                    .await
            }
        });
        let removal =
            server.expect(Method::PATCH, PATH, StatusCode::OK, serde_json::to_value(app(&[], true)).unwrap()).await;
        assert_eq!(removal.body["metadata"]["finalizers"], serde_json::json!([]));
        assert_eq!(task.await.unwrap().unwrap(), Finalized::Released("said"));

        let ran = std::sync::atomic::AtomicBool::new(false);
        let gone = FINALIZER
            .finalize(&runtime, &app(&[], true), async {
                ran.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok::<_, ApiError>(Cleanup::Done(()))
            })
            .await
            .unwrap();
        assert_eq!(gone, Finalized::NothingToDo);
        assert_eq!(gone.action(), Action::await_change());
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst), "no clean-up without the finalizer");
    }
}
