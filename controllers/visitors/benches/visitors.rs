//! Performance figures of the visitors controller for `docs/benchmarks.md`:
//! API requests per reconcile (fresh and converged app), reconcile latency without API time,
//! and the memory of the controller's caches with 1,000 VisitorsApps.
//!
//! `cargo bench -p visitors-controller --bench visitors`

#[path = "../tests/support/mod.rs"]
mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use controller_common::watch::trim_for_cache;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, StatefulSet, StatefulSetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta, Time};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use support::{Harness, book_spec};
use visitors_api::VisitorsApp;
use visitors_controller::build;
use visitors_controller::status::{self, Database, Facts, Workload};
use visitors_controller::wake::cache::{CachedDeployment, CachedStatefulSet, cached_event};
use visitors_controller::wake::seen::Seen;

/// Counts live heap bytes, to weigh the caches exactly.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
}

fn app(index: usize) -> VisitorsApp {
    let name = format!("app-{index:04}");
    let mut app = VisitorsApp::new(&name, book_spec());
    app.metadata = ObjectMeta {
        name: Some(name.clone()),
        namespace: Some(format!("team-{}", index % 50)),
        uid: Some(format!("00000000-0000-0000-0000-{index:012}")),
        generation: Some(1),
        resource_version: Some(format!("{}", 100_000 + index)),
        finalizers: Some(vec![visitors_controller::cleanup::FINALIZER.into()]),
        ..ObjectMeta::default()
    };
    app
}

/// A managedFields entry about as large as the API server writes for an applied object.
fn managed_fields<T: serde::Serialize>(spec: &T) -> Option<Vec<ManagedFieldsEntry>> {
    let fields = serde_json::to_value(spec).unwrap();
    Some(vec![ManagedFieldsEntry {
        manager: Some("visitors-controller".into()),
        operation: Some("Apply".into()),
        api_version: Some("apps/v1".into()),
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(serde_json::json!({ "f:spec": fields }))),
        time: Some(Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap())),
        ..ManagedFieldsEntry::default()
    }])
}

/// The objects a real cluster would hold for one app, with status and managedFields.
fn children(app: &VisitorsApp) -> (StatefulSet, Deployment, Deployment) {
    let mut sts = build::mysql::statefulset(app, "creds", build::mysql::Kept::default(), None);
    sts.metadata.managed_fields = managed_fields(&sts.spec);
    sts.status = Some(StatefulSetStatus { replicas: 1, ready_replicas: Some(1), ..StatefulSetStatus::default() });
    let ready = DeploymentStatus { replicas: Some(1), ready_replicas: Some(1), ..DeploymentStatus::default() };
    let mut backend = build::backend::deployment(app, "creds", None);
    backend.metadata.managed_fields = managed_fields(&backend.spec);
    backend.status = Some(ready.clone());
    let mut frontend = build::frontend::deployment(app);
    frontend.metadata.managed_fields = managed_fields(&frontend.spec);
    frontend.status = Some(ready);
    (sts, backend, frontend)
}

/// Live heap bytes `fill` leaves behind.
fn weigh(fill: impl FnOnce()) -> isize {
    let before = LIVE.load(Ordering::Relaxed);
    fill();
    LIVE.load(Ordering::Relaxed) - before
}

/// Heap and RSS of the three caches filled with `apps` apps: as the controller keeps them (the
/// app trimmed, each workload as [`visitors_controller::cache`] keeps it), or whole as the API
/// server serves them, for comparison; and of the controller's record of what it has seen.
fn memory(apps: usize, as_cached: bool, label: &str) {
    let rss_before = rss_kib();
    let mut app_writer: Writer<VisitorsApp> = Writer::default();
    let mut sts_writer: Writer<StatefulSet> = Writer::default();
    let mut deployment_writer: Writer<Deployment> = Writer::default();
    let mut cached_sts_writer: Writer<CachedStatefulSet> = Writer::default();
    let mut cached_deployment_writer: Writer<CachedDeployment> = Writer::default();
    let seen = Seen::default();
    let objects: Vec<_> = (0..apps)
        .map(|index| {
            let mut app = app(index);
            app.status = Some(status::compute(&app, &converged(), now()));
            app.metadata.managed_fields = managed_fields(&app.spec);
            let children = children(&app);
            (app, children)
        })
        .collect();
    let (mut app_bytes, mut sts_bytes, mut deployment_bytes, mut seen_bytes) = (0, 0, 0, 0);
    for (mut app, (sts, backend, frontend)) in objects {
        if as_cached {
            trim_for_cache(&mut app);
        }
        seen_bytes += weigh(|| {
            seen.record(&app);
            seen.record(&sts);
            seen.record(&backend);
            seen.record(&frontend);
            seen.record_credentials(&app, build::secret::Credentials::generate());
        });
        // Each event is made before it is weighed and dropped after: the store keeps a copy.
        let app = watcher::Event::Apply(app);
        app_bytes += weigh(|| app_writer.apply_watcher_event(&app));
        if as_cached {
            let sts = cached_event(watcher::Event::Apply(sts));
            let deployments = [backend, frontend].map(|d| cached_event(watcher::Event::Apply(d)));
            sts_bytes += weigh(|| cached_sts_writer.apply_watcher_event(&sts));
            deployment_bytes +=
                weigh(|| deployments.iter().for_each(|d| cached_deployment_writer.apply_watcher_event(d)));
        } else {
            let sts = watcher::Event::Apply(sts);
            let deployments = [backend, frontend].map(watcher::Event::Apply);
            sts_bytes += weigh(|| sts_writer.apply_watcher_event(&sts));
            deployment_bytes += weigh(|| deployments.iter().for_each(|d| deployment_writer.apply_watcher_event(d)));
        }
    }
    let rss = rss_kib();
    assert_eq!(app_writer.as_reader().state().len(), apps);
    let per_app = |bytes: isize| format!("{:.2} KiB", bytes as f64 / apps as f64 / 1024.0);
    let caches = app_bytes + sts_bytes + deployment_bytes;
    println!("## memory with {apps} VisitorsApps in the caches (apps, StatefulSets, Deployments), {label}");
    println!("cache heap (live bytes, exact)     {}", mib(caches as f64));
    println!("cache heap per app                 {}", per_app(caches));
    println!("  the app                          {}", per_app(app_bytes));
    println!("  its MySQL StatefulSet            {}", per_app(sts_bytes));
    println!("  its two Deployments              {}", per_app(deployment_bytes));
    println!("what it has seen of the four and the credentials, per app {}", per_app(seen_bytes));
    println!("process RSS before / after         {} / {}", mib(rss_before as f64 * 1024.0), mib(rss as f64 * 1024.0));
}

fn converged() -> Facts {
    let ready = |image: &str| Workload {
        desired: 1,
        ready: 1,
        updated: 1,
        total: 1,
        available: 1,
        current: true,
        image: Some(image.into()),
    };
    Facts {
        secret: "creds".into(),
        mysql: ready("mysql:8.4"),
        database: Database::Connected,
        backend: Some(ready("jdob/visitors-service:1.0.0")),
        backend_held: false,
        quiesced_by: None,
        frontend: ready("jdob/visitors-webui:1.0.0"),
        failed_children: Vec::new(),
        tls: None,
        replication: None,
    }
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// The pure part of one reconcile: validate, build every child, compute the status.
fn pipeline(app: &VisitorsApp, observed: &Facts) -> usize {
    let valid = visitors_controller::validate::app(app).unwrap();
    let inputs = build::Inputs { credentials_secret: &valid.credentials.name, ..build::Inputs::default() };
    let objects = build::children(app, &inputs);
    let status = status::compute(app, observed, now());
    std::hint::black_box((&objects, &status));
    status.conditions.len()
}

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort();
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p) as usize];
    (at(0.5), at(0.99), samples.iter().sum::<Duration>() / samples.len() as u32)
}

fn latency_pure() {
    let mut app = app(1);
    app.status = Some(status::compute(&app, &converged(), now()));
    let observed = converged();
    for _ in 0..1_000 {
        pipeline(&app, &observed);
    }
    let samples: Vec<Duration> = (0..20_000)
        .map(|_| {
            let start = Instant::now();
            pipeline(&app, &observed);
            start.elapsed()
        })
        .collect();
    let (p50, p99, mean) = percentiles(samples);
    println!("## reconcile latency without API time (validate + build 7 children + status), 20000 runs");
    println!("p50 {p50:?}  p99 {p99:?}  mean {mean:?}");
}

fn count(h: &Harness) -> (usize, usize, BTreeMap<String, usize>) {
    let requests = h.api.requests();
    let mut by_kind = BTreeMap::new();
    for r in &requests {
        let kind = if r.path.contains("/events") {
            "POST event".to_string()
        } else {
            format!("{} {}", r.method, last_kind(&r.path))
        };
        *by_kind.entry(kind).or_insert(0) += 1;
    }
    (requests.len(), requests.iter().filter(|r| r.changed).count(), by_kind)
}

fn last_kind(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').collect();
    let at = parts.iter().position(|p| *p == "namespaces").unwrap_or(0);
    let kind = parts.get(at + 2).copied().unwrap_or("?");
    if path.ends_with("/status") { format!("{kind}/status") } else { kind.to_string() }
}

async fn requests_and_latency_with_fake() {
    let h = Harness::new();
    h.create_app(book_spec());
    h.api.clear_requests();
    h.reconcile().await.unwrap();
    let (total, changing, by_kind) = count(&h);
    println!("## API requests, fresh app, first reconcile: {total} ({changing} change something)");
    println!("{by_kind:?}");

    h.mysql_pod_ready();
    h.check.succeed();
    h.reconcile().await.unwrap();
    h.deployment_ready("ex-backend");
    h.deployment_ready("ex-frontend");
    h.reconcile().await.unwrap();
    h.api.clear_requests();
    h.reconcile().await.unwrap();
    let (total, changing, by_kind) = count(&h);
    println!("## API requests, converged app, periodic reconcile: {total} ({changing} change something)");
    println!("{by_kind:?}");

    let samples: Vec<Duration> = {
        let mut samples = Vec::new();
        for _ in 0..2_000 {
            let start = Instant::now();
            h.reconcile().await.unwrap();
            samples.push(start.elapsed());
        }
        samples
    };
    let (p50, p99, mean) = percentiles(samples);
    println!("## converged reconcile against the in-memory API (client encode/decode + fake included), 2000 runs");
    println!("p50 {p50:?}  p99 {p99:?}  mean {mean:?}");
}

fn main() {
    // Cargo passes `--bench`; a filter argument is accepted and ignored.
    // The trimmed run first, in a fresh process heap, so its RSS is the controller's case.
    memory(1_000, true, "as the controller caches them");
    memory(1_000, false, "whole, as served by the API server (for comparison)");
    latency_pure();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(requests_and_latency_with_fake());
}
