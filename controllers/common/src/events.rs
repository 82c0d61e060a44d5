//! Kubernetes Events about the objects a controller reconciles. Events are best-effort: a
//! failure to publish one is logged and never fails a reconcile.

use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};

/// Publishes Events as one controller (the `reportingController` of each Event).
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl Events {
    pub fn new(client: Client, controller: &str, instance: Option<String>) -> Self {
        let reporter = Reporter { controller: controller.to_string(), instance };
        Self { recorder: Recorder::new(client, reporter) }
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
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(truncate(note, 1000)),
            action: action.into(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &object.object_ref(&())).await {
            tracing::warn!(%error, reason, "could not publish an event");
        }
    }
}

/// Events notes are limited to 1 kB; cut on a character boundary.
fn truncate(mut note: String, max: usize) -> String {
    if note.len() > max {
        let mut cut = max;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
    }
    note
}

#[cfg(test)]
mod tests {
    #[test]
    fn truncates_on_char_boundary() {
        let note = super::truncate("é".repeat(600), 1000);
        assert_eq!(note.len(), 1000);
        assert_eq!(super::truncate("short".into(), 1000), "short");
    }
}
