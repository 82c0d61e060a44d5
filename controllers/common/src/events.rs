//! Kubernetes Events about the objects a controller reconciles. Events are best-effort: a
//! failure to publish one is logged and never fails a reconcile.
//!
//! Repeats of the same Event are aggregated into one series (kube's `Recorder` does that for
//! six minutes), but kube's series key leaves the note out: a second, different message with
//! the same reason would only bump the first one's count and never be shown. So each distinct
//! note gets its own recorder, and therefore its own series.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use visitors_agent_contract::text::truncate_on_char_boundary;

/// Distinct (object, reason, action, note) series remembered before the memory is reset; a
/// reset only means the next repeat starts a new series.
const MAX_SERIES: usize = 4096;

/// Publishes Events as one controller (the `reportingController` of each Event).
#[derive(Clone)]
pub struct Events {
    client: Client,
    reporter: Reporter,
    series: Arc<Mutex<HashMap<String, Recorder>>>,
}

impl Events {
    pub fn new(client: Client, controller: &str, instance: Option<String>) -> Self {
        let reporter = Reporter { controller: controller.to_string(), instance };
        Self { client, reporter, series: Arc::default() }
    }

    /// The recorder of one series: same object, type, reason, action and note.
    fn recorder_for(&self, key: String) -> Recorder {
        let mut series = self.series.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if series.len() >= MAX_SERIES && !series.contains_key(&key) {
            series.clear();
        }
        series.entry(key).or_insert_with(|| Recorder::new(self.client.clone(), self.reporter.clone())).clone()
    }

    /// A Normal event: something happened as expected (created, ready, completed).
    pub async fn normal<K>(&self, object: &K, reason: &str, action: &str, note: impl Into<String>)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(object, EventType::Normal, reason, action, note.into()).await;
    }

    /// A Warning event: something needs a user's attention (invalid spec, failure).
    pub async fn warning<K>(&self, object: &K, reason: &str, action: &str, note: impl Into<String>)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(object, EventType::Warning, reason, action, note.into()).await;
    }

    async fn publish<K>(&self, object: &K, type_: EventType, reason: &str, action: &str, note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        // Event notes are limited to 1 kB.
        let note = truncate_on_char_boundary(note, 1000);
        let reference = object.object_ref(&());
        let key = format!(
            "{:?}/{:?}/{:?}/{type_:?}/{reason}/{action}/{note}",
            reference.namespace, reference.name, reference.uid
        );
        let recorder = self.recorder_for(key);
        let event = Event { type_, reason: reason.into(), note: Some(note), action: action.into(), secondary: None };
        if let Err(error) = recorder.publish(&event, &reference).await {
            tracing::warn!(%error, reason, "could not publish an event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::mock_client;
    use http::Method;
    use visitors_api::VisitorsApp;

    const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/shop/events";

    fn app() -> VisitorsApp {
        let mut app = VisitorsApp::new("ex", Default::default());
        app.metadata.namespace = Some("shop".into());
        app.metadata.uid = Some("u-1".into());
        app
    }

    #[tokio::test]
    async fn a_repeat_joins_its_series_and_a_new_note_gets_its_own_event() {
        let (client, mut server) = mock_client();
        let events = Events::new(client, "test", None);
        let publisher = tokio::spawn(async move {
            events.normal(&app(), "Created", "Apply", "StatefulSet ex-mysql").await;
            events.normal(&app(), "Created", "Apply", "Deployment ex-frontend").await;
            events.normal(&app(), "Created", "Apply", "StatefulSet ex-mysql").await;
        });
        let first = server.expect_echo(Method::POST, EVENTS).await;
        assert_eq!(first.body["note"], "StatefulSet ex-mysql");
        let second = server.expect_echo(Method::POST, EVENTS).await;
        assert_eq!(second.body["note"], "Deployment ex-frontend", "a different note is a new Event");
        let repeat = server.next_request(http::StatusCode::OK, first.body.clone()).await;
        assert_eq!(repeat.method, Method::PATCH, "a repeat updates its own series");
        assert_eq!(repeat.body["note"], "StatefulSet ex-mysql");
        assert_eq!(repeat.body["series"]["count"], 2);
        publisher.await.unwrap();
    }
}
