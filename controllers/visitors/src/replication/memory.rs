//! What the controller remembers of each replicated app between looks, and the decisions made
//! from it alone: a silent primary counted, the member being restarted on a new pod template,
//! the switchover an annotation asks for, the write gap of a role change.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use visitors_api::VisitorsApp;
use visitors_api::visitors_app::{SWITCHOVER_REQUESTED_AT_ANNOTATION, SWITCHOVER_TO_ANNOTATION};

use super::decide::{self, Change, Member, PodState, Switchover};
use super::following::{self, Sample};

/// A server that stopped being the primary has its client sessions closed at each look this
/// long after: a client that reconnected through a name that still led to it (a DNS answer
/// cached, the client Service not yet moved) is moved on too.
const DISCONNECT_WINDOW: Duration = Duration::from_secs(10);

/// A server restarted on a new pod template that is not seen at it within this is looked at
/// afresh (restarted again if it still runs the old one).
const UPDATE_LIMIT: Duration = Duration::from_secs(600);

/// What the controller remembers of each replicated app between looks. Lost on a restart of the
/// controller, which costs a look: a switchover under way is then decided again (an election
/// that keeps the old primary), a silent primary counted again.
#[derive(Default)]
pub struct Memory {
    apps: Mutex<HashMap<String, Remembered>>,
}

#[derive(Debug, Clone, Default)]
pub(super) struct Remembered {
    /// Looks in a row in which the primary's pod was ready but its server silent.
    pub(super) primary_silent: u32,
    /// A switchover whose primary is fenced, since when.
    pub(super) switching: Option<(Switchover, Instant)>,
    /// When the primary was last seen accepting writes, and which it was.
    pub(super) writable: Option<(String, jiff::Timestamp)>,
    /// The member restarted on the new pod template, since when: no other is restarted until
    /// its new pod is seen (the cache may still hold the old one at the next look).
    pub(super) updating: Option<(String, Instant)>,
    /// Each server's recent positions against the primary's: how it follows the primary.
    pub(super) samples: BTreeMap<String, VecDeque<Sample>>,
    /// A promotion waiting for its server to apply what it received: which, since when.
    pub(super) applying: Option<(String, Instant)>,
    /// The server that stopped being the primary last, and when.
    pub(super) demoted: Option<(String, Instant)>,
}

impl Memory {
    pub(super) fn get(&self, app: &VisitorsApp) -> Remembered {
        self.apps.lock().unwrap_or_else(|p| p.into_inner()).get(&key(app)).cloned().unwrap_or_default()
    }

    pub(super) fn put(&self, app: &VisitorsApp, remembered: Remembered) {
        self.apps.lock().unwrap_or_else(|p| p.into_inner()).insert(key(app), remembered);
    }

    /// The app is gone.
    pub fn forget(&self, app: &VisitorsApp) {
        self.apps.lock().unwrap_or_else(|p| p.into_inner()).remove(&key(app));
    }
}

fn key(app: &VisitorsApp) -> String {
    app.uid().unwrap_or_else(|| format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any()))
}

pub(super) fn remember_the_primary(remembered: &mut Remembered, primary: Option<&str>, members: &[Member]) {
    let Some(member) = primary.and_then(|p| members.iter().find(|m| m.name == p)) else { return };
    match (&member.server, member.pod) {
        (Some(server), _) => {
            remembered.primary_silent = 0;
            if !server.read_only {
                remembered.writable = Some((member.name.clone(), jiff::Timestamp::now()));
            }
        }
        (None, PodState::Ready) => remembered.primary_silent += 1,
        (None, _) => {}
    }
}

/// The server demoted moments ago (within [`DISCONNECT_WINDOW`]).
pub(super) fn recently_demoted(remembered: &Remembered) -> Option<String> {
    let (member, since) = remembered.demoted.as_ref()?;
    (since.elapsed() < DISCONNECT_WINDOW).then(|| member.clone())
}

/// Notes a promotion that waits for `member` to apply what it received, from its first look.
pub(super) fn note_applying(remembered: &mut Remembered, member: &str) {
    if remembered.applying.as_ref().is_none_or(|(waiting, _)| waiting != member) {
        remembered.applying = Some((member.to_string(), Instant::now()));
    }
}

/// Seconds the promotion to `member` waited for it to apply what it received (0 when it did
/// not wait), forgetting the wait.
pub(super) fn apply_wait(remembered: &mut Remembered, member: &str) -> f64 {
    let waited = remembered.applying.take().filter(|(waiting, _)| waiting == member);
    waited.map_or(0.0, |(_, since)| (since.elapsed().as_secs_f64() * 10.0).round() / 10.0)
}

/// Adds this look's positions of every answering server to their samples, against the
/// primary's; forgets servers that are no longer members.
pub(super) fn sample(remembered: &mut Remembered, primary: Option<&str>, members: &[Member], at: f64) {
    let primary = primary.and_then(|p| members.iter().find(|m| m.name == p)).and_then(|m| m.server.as_ref());
    let Some(primary) = primary.filter(|s| !s.read_only) else { return };
    let committed = primary.position.transactions();
    for member in members {
        let Some(server) = &member.server else { continue };
        let sample = Sample {
            at,
            primary: committed,
            applied: server.position.transactions(),
            received: server.received().transactions(),
        };
        following::record(remembered.samples.entry(member.name.clone()).or_default(), sample);
    }
    remembered.samples.retain(|name, _| members.iter().any(|m| &m.name == name));
}

/// Forgets the member restarted on the new pod template once its new pod runs it, or after
/// [`UPDATE_LIMIT`].
pub(super) fn forget_a_finished_update(remembered: &mut Remembered, members: &[Member]) {
    let Some((member, since)) = &remembered.updating else { return };
    let updated = members.iter().any(|m| &m.name == member && !m.outdated && m.pod == decide::PodState::Ready);
    if updated || since.elapsed() > UPDATE_LIMIT {
        remembered.updating = None;
    }
}

/// The switchover the app's annotations ask for, unless it was answered or is under way.
pub(super) fn requested(app: &VisitorsApp, remembered: &Remembered) -> Option<Switchover> {
    let request = app.annotations().get(SWITCHOVER_REQUESTED_AT_ANNOTATION)?.clone();
    let replication = app.status.as_ref().and_then(|s| s.replication.as_ref());
    // Before `answeredSwitchoverRequest` existed, the last switchover's request said it.
    let answered = replication.and_then(|r| {
        r.answered_switchover_request.as_deref().or_else(|| r.last_switchover.as_ref()?.request.as_deref())
    });
    if answered == Some(request.as_str()) || remembered.switching.as_ref().is_some_and(|(s, _)| s.request == request) {
        return None;
    }
    let to = app.annotations().get(SWITCHOVER_TO_ANNOTATION).filter(|to| !to.is_empty()).cloned();
    Some(Switchover::requested(request, to))
}

/// Seconds from the last moment the old primary was seen accepting writes to now.
pub(super) fn write_gap(remembered: &Remembered, change: &Change) -> Option<f64> {
    let (pod, at) = remembered.writable.as_ref()?;
    (change.from.as_deref() == Some(pod.as_str())).then(|| {
        let elapsed = jiff::Timestamp::now().duration_since(*at);
        (elapsed.as_secs_f64() * 10.0).round() / 10.0
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use visitors_api::VisitorsAppStatus;
    use visitors_api::visitors_app::ReplicationStatus;

    use super::*;
    use crate::replication::report::asked_by;

    fn app(annotation: &str, answered: Option<&str>, last_request: Option<&str>) -> VisitorsApp {
        let mut app = VisitorsApp::new("ex", Default::default());
        app.metadata.annotations =
            Some(BTreeMap::from([(SWITCHOVER_REQUESTED_AT_ANNOTATION.to_string(), annotation.to_string())]));
        let last_switchover = last_request.map(asked_by);
        let replication = ReplicationStatus {
            answered_switchover_request: answered.map(Into::into),
            last_switchover,
            ..ReplicationStatus::default()
        };
        app.status =
            Some(VisitorsAppStatus { replication: Some(Box::new(replication)), ..VisitorsAppStatus::default() });
        app
    }

    #[test]
    fn an_annotations_switchover_is_carried_out_once_even_after_a_rolling_updates_switchover() {
        let cases = [
            ("answered, then a rolling update switched over", app("second", Some("second"), Some(UPDATE)), false),
            ("answered before the field existed", app("second", None, Some("second")), false),
            ("a new request", app("third", Some("second"), Some("second")), true),
            ("a new request after a rolling update", app("third", Some("second"), Some(UPDATE)), true),
        ];
        for (case, app, asked) in cases {
            assert_eq!(requested(&app, &Remembered::default()).is_some(), asked, "{case}");
        }
    }

    const UPDATE: &str = decide::UPDATE_REQUEST;
}
