//! Where the manager keeps each replicated app's [`Memory`] between reconciles.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::ResourceExt;
use visitors_api::VisitorsApp;

use super::model::Memory;

/// Each replicated app's memory, by the app's UID.
#[derive(Default)]
pub struct Memories {
    apps: Mutex<HashMap<String, Memory>>,
}

impl Memories {
    /// What is remembered of `app` (nothing, for an app not looked at yet).
    pub fn get(&self, app: &VisitorsApp) -> Memory {
        self.apps.lock().unwrap_or_else(|p| p.into_inner()).get(&key(app)).cloned().unwrap_or_default()
    }

    pub fn put(&self, app: &VisitorsApp, memory: Memory) {
        self.apps.lock().unwrap_or_else(|p| p.into_inner()).insert(key(app), memory);
    }

    /// The app is gone.
    pub fn forget(&self, app: &VisitorsApp) {
        self.apps.lock().unwrap_or_else(|p| p.into_inner()).remove(&key(app));
    }
}

fn key(app: &VisitorsApp) -> String {
    app.uid().unwrap_or_else(|| format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any()))
}
