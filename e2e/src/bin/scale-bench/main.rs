//! The VisitorsApp controller at scale, on a real API server (bench/controllers/scale.sh runs
//! it): creates `--apps` book VisitorsApps at once, round-robin over `--namespaces` namespaces
//! (`--namespace`, or `<namespace>-000`, `-001`, … for more than one), measures the seconds
//! until each has `observedGeneration` 1, its MySQL StatefulSet and its frontend Deployment (the
//! backend waits for a ready database, which a cluster without a node never has): for the last
//! app, and at the 50th and 99th percentiles, counted from the burst's start and from each app's
//! own creation. Then it reads the controller's `/metrics` over `--idle-seconds` to report what
//! waiting apps cost. Prints one JSON object.
//!
//! `--mode floor` runs no controller: the benchmark itself writes, for each app, what a first
//! reconcile writes (see [`floor`]), as fast as the API server takes it. Its time is the floor
//! the controller's is judged against. It learns of the apps and their children through watches started before the
//! apps are created, so the API server sends each change once instead of the benchmark listing
//! every object again and again during the burst it measures.
//!
//! For each phase (the burst: creation until every app is reconciled; the idle window) it also
//! reports where the work went: the CPU seconds of each process named by `--pid NAME=PID` (the
//! control plane's and the controller's), the API server's requests by verb and resource and
//! their mean server-side latency (its own `/metrics`, so every client's requests, the
//! controller-manager's included), API Priority and Fairness queueing, and the controller's
//! reconciles and their mean duration.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use visitors_api::{VisitorsApp, VisitorsAppSpec};

mod floor;

const CREATE_CONCURRENCY: usize = 64;
const POLL: Duration = Duration::from_secs(1);

struct Options {
    apps: usize,
    namespace: String,
    namespaces: usize,
    mode: Mode,
    metrics: String,
    idle_seconds: u64,
    timeout_seconds: u64,
    /// Processes whose CPU time is reported, by name.
    pids: Vec<(String, u32)>,
}

/// Who makes the apps' first writes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// The VisitorsApp controller, running beside the benchmark.
    Controller,
    /// The benchmark itself, writing what a first reconcile writes: the floor.
    Floor,
    /// The floor and the two requests a first reconcile makes besides its writes: the
    /// finalizer's patch (first) and the read of the data claim's metadata. What the controller
    /// adds beyond them is its own pacing and CPU.
    FloorAndChecks,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Controller => "controller",
            Mode::Floor => "floor",
            Mode::FloorAndChecks => "floor-and-checks",
        }
    }
}

impl Options {
    /// The namespaces the apps are spread over.
    fn namespaces(&self) -> Vec<String> {
        match self.namespaces {
            1 => vec![self.namespace.clone()],
            count => (0..count).map(|i| format!("{}-{i:03}", self.namespace)).collect(),
        }
    }
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        apps: 100,
        namespace: "scale-bench".into(),
        namespaces: 1,
        mode: Mode::Controller,
        metrics: "http://127.0.0.1:18090/metrics".into(),
        idle_seconds: 300,
        timeout_seconds: 1800,
        pids: Vec::new(),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let [flag, value] = pair else { return Err(format!("{} needs a value", pair[0])) };
        let number = || value.parse::<u64>().map_err(|e| format!("{flag} {value}: {e}"));
        match flag.as_str() {
            "--apps" => options.apps = number()? as usize,
            "--namespace" => options.namespace = value.clone(),
            "--namespaces" => options.namespaces = number()?.max(1) as usize,
            "--mode" => {
                options.mode = match value.as_str() {
                    "controller" => Mode::Controller,
                    "floor" => Mode::Floor,
                    "floor-and-checks" => Mode::FloorAndChecks,
                    other => return Err(format!("--mode {other}: controller, floor or floor-and-checks")),
                }
            }
            "--metrics" => options.metrics = value.clone(),
            "--idle-seconds" => options.idle_seconds = number()?,
            "--timeout-seconds" => options.timeout_seconds = number()?,
            "--pid" => {
                let (name, pid) = value.split_once('=').ok_or_else(|| format!("--pid {value}: NAME=PID"))?;
                let pid = pid.parse().map_err(|e| format!("--pid {value}: {e}"))?;
                options.pids.push((name.to_string(), pid));
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(options)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(problem) => {
            eprintln!(
                "scale-bench: {problem}\nusage: scale-bench [--apps N] [--namespace NS] [--namespaces K] [--mode controller|floor|floor-and-checks] [--metrics URL] [--idle-seconds S] [--timeout-seconds S] [--pid NAME=PID ...]"
            );
            return std::process::ExitCode::from(2);
        }
    };
    let client = visitors_e2e::cluster().await;
    match run(&client, &options).await {
        Ok(report) => {
            println!("{report}");
            std::process::ExitCode::SUCCESS
        }
        Err(problem) => {
            eprintln!("scale-bench: {problem}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(client: &Client, options: &Options) -> Result<serde_json::Value, String> {
    let namespaces = options.namespaces();
    for namespace in &namespaces {
        create_namespace(client, namespace).await?;
    }
    let layout: Vec<(String, String)> =
        (0..options.apps).map(|i| (namespaces[i % namespaces.len()].clone(), format!("app-{i:04}"))).collect();
    let names: Vec<String> = layout.iter().map(|(_, name)| name.clone()).collect();
    let mut progress = Progress::new(&names);
    let mut changes = watch_changes(client);
    wait_until(&mut changes, &mut progress, Progress::listed, Duration::from_secs(60))
        .await
        .map_err(|()| "the watches did not start within 60 s".to_string())?;
    let before_burst = Snapshot::take(client, options).await?;
    let start = Instant::now();
    let timeout = Duration::from_secs(options.timeout_seconds);
    let reconciled = async {
        let outcome = wait_until(&mut changes, &mut progress, |p| p.pending() == 0, timeout).await;
        Ok::<_, String>((start.elapsed().as_secs_f64(), outcome))
    };
    let ((created_seconds, created_at), (converged_seconds, outcome)) =
        futures::future::try_join(create_apps(client, options.mode, &layout, start), reconciled).await?;
    eprintln!("created {} apps in {created_seconds:.1} s", options.apps);
    if outcome.is_err() {
        return Err(format!(
            "{} apps still lacked a first status or children after {converged_seconds:.0} s",
            progress.pending()
        ));
    }
    drop(changes);
    let after_burst = Snapshot::take(client, options).await?;
    let first_status = first_status_times(&progress, &created_at, start);
    let mut report = serde_json::json!({
        "mode": options.mode.name(),
        "apps": options.apps,
        "namespaces": namespaces.len(),
        "create_seconds": round(created_seconds),
        "all_reconciled_seconds": round(converged_seconds),
        "first_status": first_status,
        "burst": after_burst.since(&before_burst, options.apps),
    });
    if options.mode != Mode::Controller || options.idle_seconds == 0 {
        return Ok(report);
    }
    eprintln!("every app reconciled after {converged_seconds:.1} s; measuring {} s of waiting", options.idle_seconds);
    tokio::time::sleep(Duration::from_secs(options.idle_seconds)).await;
    let after_idle = Snapshot::take(client, options).await?;
    let (before, after) = (after_burst.reconciles, after_idle.reconciles);
    let per_app_per_minute = (after - before) / options.apps as f64 / (options.idle_seconds as f64 / 60.0);
    report["idle_window_seconds"] = options.idle_seconds.into();
    report["reconciles_in_window"] = (after - before).into();
    report["reconciles_per_waiting_app_per_minute"] = round(per_app_per_minute).into();
    report["idle"] = after_idle.since(&after_burst, options.apps);
    Ok(report)
}

/// When the apps had their first status and children: counted from the burst's start (`p50`,
/// `p99`, `last`: the time a user creating them all at once waits for each), and from each
/// app's own creation (`latency_*`).
fn first_status_times(progress: &Progress, created_at: &HashMap<String, Instant>, start: Instant) -> serde_json::Value {
    let mut since_start: Vec<f64> = Vec::new();
    let mut latency: Vec<f64> = Vec::new();
    for (app, done) in &progress.completed_at {
        since_start.push(done.duration_since(start).as_secs_f64());
        if let Some(created) = created_at.get(app) {
            latency.push(done.saturating_duration_since(*created).as_secs_f64());
        }
    }
    since_start.sort_by(f64::total_cmp);
    latency.sort_by(f64::total_cmp);
    serde_json::json!({
        "p50_seconds": round(percentile(&since_start, 0.50)),
        "p99_seconds": round(percentile(&since_start, 0.99)),
        "last_seconds": round(percentile(&since_start, 1.0)),
        "latency_p50_seconds": round(percentile(&latency, 0.50)),
        "latency_p99_seconds": round(percentile(&latency, 0.99)),
        "latency_max_seconds": round(percentile(&latency, 1.0)),
    })
}

/// The nearest-rank percentile `fraction` (0 to 1) of `sorted` (ascending); 0 for none.
fn percentile(sorted: &[f64], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (fraction * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// Creates the book's apps, `CREATE_CONCURRENCY` at a time, each in its namespace; in the floor
/// mode each app's first writes follow its creation at once. Returns the seconds since `start`
/// and when each app's creation was answered.
async fn create_apps(
    client: &Client,
    mode: Mode,
    layout: &[(String, String)],
    start: Instant,
) -> Result<(f64, HashMap<String, Instant>), String> {
    let certificates = match mode {
        Mode::Floor | Mode::FloorAndChecks => Some(floor::Certificates::new()?),
        Mode::Controller => None,
    };
    let checks = mode == Mode::FloorAndChecks;
    let certificates = certificates.as_ref();
    let created = futures::stream::iter(layout.iter().cloned())
        .map(|(namespace, name)| async move {
            let apps: Api<VisitorsApp> = Api::namespaced(client.clone(), &namespace);
            let spec = VisitorsAppSpec { size: 1, title: Some("Custom Dashboard Title".into()), ..Default::default() };
            let app = apps
                .create(&PostParams::default(), &VisitorsApp::new(&name, spec))
                .await
                .map_err(|e| format!("{namespace}/{name}: {e}"))?;
            let created = Instant::now();
            if let Some(certificates) = certificates {
                if checks {
                    floor::make_first_checks(client, &app).await?;
                }
                floor::write_first_reconcile(client, &app, certificates).await?;
            }
            Ok::<_, String>((name, created))
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<HashMap<_, _>>()
        .await?;
    Ok((start.elapsed().as_secs_f64(), created))
}

/// The sum of `values`, 0 (not Rust's -0) for none.
fn sum<'a>(values: impl Iterator<Item = &'a f64>) -> f64 {
    values.fold(0.0, |total, value| total + value)
}

fn round(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

async fn create_namespace(client: &Client, name: &str) -> Result<(), String> {
    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
    }))
    .map_err(|e| e.to_string())?;
    Api::<Namespace>::all(client.clone())
        .patch(name, &PatchParams::apply("scale-bench"), &Patch::Apply(&namespace))
        .await
        .map(|_| ())
        .map_err(|e| format!("namespace {name}: {e}"))
}

/// What the benchmark waits for of each app.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Part {
    /// `observedGeneration` 1 in its status.
    FirstStatus,
    /// Its MySQL StatefulSet.
    Database,
    /// Its frontend Deployment.
    Frontend,
}

const PARTS: [Part; 3] = [Part::FirstStatus, Part::Database, Part::Frontend];

/// What a watched object says: the app it belongs to, and whether it gives that app the part.
type Mark = Option<(String, bool)>;

/// One watch's news about one part.
type Change = (Part, watcher::Event<Mark>);

/// The three watches (the apps, and the metadata of StatefulSets and Deployments, in every
/// namespace: app names are unique across the benchmark's) as one stream.
/// Each watch lists once (empty: it starts before the apps are created), then
/// watches from that list's resourceVersion, so every change reaches the benchmark once and the
/// API server encodes nothing twice; a watch that must restart (its resourceVersion too old)
/// lists again, and `Progress` replaces what it knew of that part.
fn watch_changes(client: &Client) -> BoxStream<'static, Change> {
    let config = watcher::Config::default();
    let apps = watcher(Api::<VisitorsApp>::all(client.clone()), config.clone())
        .map_ok(|event| (Part::FirstStatus, mark(event, first_status)));
    let statefulsets = watcher(Api::<PartialObjectMeta<StatefulSet>>::all(client.clone()), config.clone())
        .map_ok(|event| (Part::Database, mark(event, |s| child_of(s, "-mysql"))));
    let deployments = watcher(Api::<PartialObjectMeta<Deployment>>::all(client.clone()), config)
        .map_ok(|event| (Part::Frontend, mark(event, |d| child_of(d, "-frontend"))));
    futures::stream::select_all([
        apps.default_backoff().boxed(),
        statefulsets.default_backoff().boxed(),
        deployments.default_backoff().boxed(),
    ])
    .filter_map(|change| async move {
        change.inspect_err(|problem| eprintln!("scale-bench: watch: {problem} (retrying)")).ok()
    })
    .boxed()
}

fn mark<K>(event: watcher::Event<K>, read: impl Fn(&K) -> Mark) -> watcher::Event<Mark> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(read(&object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(read(&object)),
        watcher::Event::InitApply(object) => watcher::Event::InitApply(read(&object)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

fn first_status(app: &VisitorsApp) -> Mark {
    let observed = app.status.as_ref().and_then(|s| s.observed_generation) == Some(1);
    Some((app.name_any(), observed))
}

fn child_of(child: &impl ResourceExt, suffix: &str) -> Mark {
    child.name_any().strip_suffix(suffix).map(|app| (app.to_string(), true))
}

/// Which apps have which part, as the watches report it.
struct Progress {
    wanted: HashSet<String>,
    has: HashMap<Part, HashSet<String>>,
    /// A restarted watch's list so far, replacing `has` of its part once complete.
    relisting: HashMap<Part, HashSet<String>>,
    /// The parts whose watch has listed at least once.
    listed: HashSet<Part>,
    complete: HashSet<String>,
    /// When each app was first seen complete.
    completed_at: HashMap<String, Instant>,
}

impl Progress {
    fn new(names: &[String]) -> Self {
        Self {
            wanted: names.iter().cloned().collect(),
            has: PARTS.iter().map(|part| (*part, HashSet::new())).collect(),
            relisting: HashMap::new(),
            listed: HashSet::new(),
            complete: HashSet::new(),
            completed_at: HashMap::new(),
        }
    }

    fn listed(&self) -> bool {
        self.listed.len() == PARTS.len()
    }

    /// The apps that lack `observedGeneration` 1, their StatefulSet or their frontend Deployment.
    fn pending(&self) -> usize {
        self.wanted.len() - self.complete.len()
    }

    fn record(&mut self, (part, event): Change) {
        match event {
            watcher::Event::Apply(Some((app, has))) => self.set(part, app, has),
            watcher::Event::Delete(Some((app, _))) => self.set(part, app, false),
            watcher::Event::Init => {
                self.relisting.insert(part, HashSet::new());
            }
            watcher::Event::InitApply(Some((app, true))) => {
                self.relisting.entry(part).or_default().insert(app);
            }
            watcher::Event::InitDone => {
                self.has.insert(part, self.relisting.remove(&part).unwrap_or_default());
                self.listed.insert(part);
                self.recount();
            }
            _ => {}
        }
    }

    fn set(&mut self, part: Part, app: String, has: bool) {
        let apps = self.has.entry(part).or_default();
        if has {
            apps.insert(app.clone())
        } else {
            apps.remove(&app)
        };
        if self.wanted.contains(&app) && self.has_every_part(&app) {
            self.completed_at.entry(app.clone()).or_insert_with(Instant::now);
            self.complete.insert(app);
        } else {
            self.complete.remove(&app);
        }
    }

    fn recount(&mut self) {
        self.complete = self.wanted.iter().filter(|app| self.has_every_part(app)).cloned().collect();
        for app in &self.complete {
            self.completed_at.entry(app.clone()).or_insert_with(Instant::now);
        }
    }

    fn has_every_part(&self, app: &str) -> bool {
        PARTS.iter().all(|part| self.has[part].contains(app))
    }
}

/// Records the watches' changes until `done` holds; `Err` when `timeout` passes first.
async fn wait_until(
    changes: &mut BoxStream<'static, Change>,
    progress: &mut Progress,
    done: impl Fn(&Progress) -> bool,
    timeout: Duration,
) -> Result<(), ()> {
    let deadline = tokio::time::Instant::now() + timeout;
    while !done(progress) {
        match tokio::time::timeout_at(deadline, changes.next()).await {
            Ok(Some(change)) => progress.record(change),
            Ok(None) | Err(_) => return Err(()),
        }
    }
    Ok(())
}

/// Counters at one moment: see the module documentation.
struct Snapshot {
    at: Instant,
    load_average: String,
    cpu_seconds: BTreeMap<String, f64>,
    reconciles: f64,
    reconcile_seconds: f64,
    /// `VERB resource[/subresource]` → requests the API server answered.
    requests: BTreeMap<String, f64>,
    /// `VERB resource[/subresource]` → the controller's own requests (its `/metrics`).
    controller_requests: BTreeMap<String, f64>,
    /// Verb → (sum of seconds, count) of the API server's request durations.
    request_seconds: BTreeMap<String, (f64, f64)>,
    /// Priority level → (sum of seconds, count) of API Priority and Fairness queue waits.
    queue_wait_seconds: BTreeMap<String, (f64, f64)>,
}

const CONTROLLER_LABEL: &str = r#"controller="visitors-controller""#;

/// The `--pid` names of the control plane's processes, whose CPU our controller's is compared with.
const CONTROL_PLANE: [&str; 3] = ["etcd", "kube-apiserver", "kube-controller-manager"];

impl Snapshot {
    async fn take(client: &Client, options: &Options) -> Result<Self, String> {
        let controller = match options.mode {
            Mode::Controller => controller_metrics(&options.metrics).await?,
            Mode::Floor | Mode::FloorAndChecks => String::new(),
        };
        let controller_metric = |name: &str| visitors_e2e::metric_value(&controller, name, CONTROLLER_LABEL);
        let mut controller_requests = BTreeMap::new();
        for (name, labels, value) in controller.lines().filter_map(sample) {
            if name == "visitors_operator_api_requests_total" {
                let label = |key: &str| labels.get(key).cloned().unwrap_or_default();
                *controller_requests.entry(format!("{} {}", label("verb"), label("resource"))).or_insert(0.0) += value;
            }
        }
        let request = http::Request::get("/metrics").body(Vec::new()).map_err(|e| e.to_string())?;
        let apiserver = client.request_text(request).await.map_err(|e| format!("the API server's /metrics: {e}"))?;
        let mut requests = BTreeMap::new();
        let mut request_seconds: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        let mut queue_wait_seconds: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for (name, labels, value) in apiserver.lines().filter_map(sample) {
            let label = |key: &str| labels.get(key).cloned().unwrap_or_default();
            match name {
                "apiserver_request_total" => {
                    let resource = match label("subresource").as_str() {
                        "" => label("resource"),
                        sub => format!("{}/{sub}", label("resource")),
                    };
                    *requests.entry(format!("{} {resource}", label("verb"))).or_insert(0.0) += value;
                }
                "apiserver_request_duration_seconds_sum" => {
                    request_seconds.entry(label("verb")).or_default().0 += value
                }
                "apiserver_request_duration_seconds_count" => {
                    request_seconds.entry(label("verb")).or_default().1 += value
                }
                "apiserver_flowcontrol_request_wait_duration_seconds_sum" => {
                    queue_wait_seconds.entry(label("priority_level")).or_default().0 += value
                }
                "apiserver_flowcontrol_request_wait_duration_seconds_count" => {
                    queue_wait_seconds.entry(label("priority_level")).or_default().1 += value
                }
                _ => {}
            }
        }
        Ok(Self {
            at: Instant::now(),
            load_average: std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_string(),
            // The benchmark's own CPU too: in the floor mode it is the client making the writes.
            cpu_seconds: options
                .pids
                .iter()
                .map(|(name, pid)| (name.clone(), visitors_e2e::process::cpu_seconds(*pid)))
                .chain([("scale-bench".to_string(), visitors_e2e::process::cpu_seconds(std::process::id()))])
                .collect(),
            // Absent until the first reconcile.
            reconciles: controller_metric("visitors_operator_reconciles_total").unwrap_or(0.0),
            reconcile_seconds: controller_metric("visitors_operator_reconcile_duration_seconds_sum").unwrap_or(0.0),
            requests,
            controller_requests,
            request_seconds,
            queue_wait_seconds,
        })
    }

    /// What happened between `earlier` and this snapshot.
    fn since(&self, earlier: &Snapshot, apps: usize) -> serde_json::Value {
        let reconciles = self.reconciles - earlier.reconciles;
        let delta = |now: &BTreeMap<String, f64>, then: &BTreeMap<String, f64>| -> BTreeMap<String, f64> {
            now.iter()
                .map(|(key, value)| (key.clone(), value - then.get(key).copied().unwrap_or(0.0)))
                .filter(|(_, value)| *value > 0.0)
                .collect()
        };
        let mean = |now: &BTreeMap<String, (f64, f64)>,
                    then: &BTreeMap<String, (f64, f64)>|
         -> BTreeMap<String, String> {
            now.iter()
                .filter_map(|(key, (sum, count))| {
                    let (sum0, count0) = then.get(key).copied().unwrap_or_default();
                    let count = count - count0;
                    (count > 0.0).then(|| (key.clone(), format!("{:.1} ms × {count}", (sum - sum0) / count * 1000.0)))
                })
                .collect()
        };
        let requests = delta(&self.requests, &earlier.requests);
        let total = sum(requests.values());
        let ours = delta(&self.controller_requests, &earlier.controller_requests);
        let ours_total = sum(ours.values());
        let per_app = |counts: &BTreeMap<String, f64>| -> BTreeMap<String, f64> {
            counts.iter().map(|(key, value)| (key.clone(), round(value / apps as f64))).collect()
        };
        let cpu = delta(&self.cpu_seconds, &earlier.cpu_seconds);
        let control_plane_cpu: f64 =
            cpu.iter().filter(|(name, _)| CONTROL_PLANE.contains(&name.as_str())).map(|(_, v)| v).sum();
        let share = |part: f64, whole: f64| if whole > 0.0 { round(part / whole) } else { 0.0 };
        let writes: f64 = requests
            .iter()
            .filter(|(key, _)| !["GET ", "LIST ", "WATCH "].iter().any(|v| key.starts_with(v)))
            .map(|(_, v)| v)
            .sum();
        serde_json::json!({
            "seconds": round(self.at.duration_since(earlier.at).as_secs_f64()),
            "load_average_at_end": self.load_average,
            "cpu_seconds": cpu.iter().map(|(k, v)| (k.clone(), round(*v))).collect::<BTreeMap<_, _>>(),
            "controller_share_of_control_plane_cpu": share(cpu.get("controller").copied().unwrap_or(0.0), control_plane_cpu),
            "reconciles": reconciles,
            "reconciles_per_app": round(reconciles / apps as f64),
            "mean_reconcile_seconds": round(if reconciles > 0.0 { (self.reconcile_seconds - earlier.reconcile_seconds) / reconciles } else { 0.0 }),
            "apiserver_requests": total,
            "apiserver_writes": writes,
            "apiserver_requests_per_app_by_verb_and_resource": per_app(&requests),
            "controller_requests": ours_total,
            "controller_requests_per_app_by_verb_and_resource": per_app(&ours),
            "controller_share_of_apiserver_requests": share(ours_total, total),
            "apiserver_mean_latency_by_verb": mean(&self.request_seconds, &earlier.request_seconds),
            "apf_mean_queue_wait_by_priority_level": mean(&self.queue_wait_seconds, &earlier.queue_wait_seconds),
        })
    }
}

/// The controller's `/metrics`, waiting up to a minute for the controller to start serving.
async fn controller_metrics(url: &str) -> Result<String, String> {
    let mut tries = 0;
    loop {
        match visitors_e2e::http_get(url).await {
            Ok(text) => return Ok(text),
            Err(problem) if tries >= 60 => return Err(problem),
            Err(_) => tries += 1,
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One sample of the Prometheus text format: name, labels, value.
fn sample(line: &str) -> Option<(&str, BTreeMap<String, String>, f64)> {
    if line.starts_with('#') {
        return None;
    }
    let (series, value) = line.rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let Some((name, labels)) = series.split_once('{') else { return Some((series, BTreeMap::new(), value)) };
    let labels = labels
        .trim_end_matches('}')
        .split("\",")
        .filter_map(|pair| pair.split_once("=\""))
        .map(|(key, value)| (key.to_string(), value.trim_end_matches('"').to_string()))
        .collect();
    Some((name, labels, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(app: &str, has: bool) -> Mark {
        Some((app.to_string(), has))
    }

    fn record_every_part(progress: &mut Progress, app: &str) {
        for part in PARTS {
            progress.record((part, watcher::Event::Apply(seen(app, true))));
        }
    }

    fn listed_empty(progress: &mut Progress) {
        for part in PARTS {
            progress.record((part, watcher::Event::Init));
            progress.record((part, watcher::Event::InitDone));
        }
    }

    #[test]
    fn an_app_counts_once_it_has_its_first_status_and_both_children() {
        let mut progress = Progress::new(&["a".into(), "b".into()]);
        listed_empty(&mut progress);
        assert!(progress.listed());
        progress.record((Part::FirstStatus, watcher::Event::Apply(seen("a", false))));
        progress.record((Part::Database, watcher::Event::Apply(seen("a", true))));
        progress.record((Part::Frontend, watcher::Event::Apply(seen("a", true))));
        assert_eq!(progress.pending(), 2);
        progress.record((Part::FirstStatus, watcher::Event::Apply(seen("a", true))));
        assert_eq!(progress.pending(), 1);
        progress.record((Part::Frontend, watcher::Event::Delete(seen("a", true))));
        assert_eq!(progress.pending(), 2);
    }

    #[test]
    fn a_restarted_watch_replaces_what_its_part_knew() {
        let mut progress = Progress::new(&["a".into()]);
        listed_empty(&mut progress);
        record_every_part(&mut progress, "a");
        assert_eq!(progress.pending(), 0);
        progress.record((Part::Database, watcher::Event::Init));
        progress.record((Part::Database, watcher::Event::InitDone));
        assert_eq!(progress.pending(), 1, "the relist no longer holds the StatefulSet");
        progress.record((Part::Database, watcher::Event::Init));
        progress.record((Part::Database, watcher::Event::InitApply(seen("a", true))));
        progress.record((Part::Database, watcher::Event::InitDone));
        assert_eq!(progress.pending(), 0);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let cases: [(&[f64], f64, f64); 6] = [
            (&[], 0.5, 0.0),
            (&[3.0], 0.99, 3.0),
            (&[1.0, 2.0, 3.0, 4.0], 0.5, 2.0),
            (&[1.0, 2.0, 3.0, 4.0], 1.0, 4.0),
            (&[1.0, 2.0, 3.0, 4.0], 0.0, 1.0),
            (&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], 0.99, 10.0),
        ];
        for (values, fraction, expected) in cases {
            assert_eq!(percentile(values, fraction), expected, "{values:?} at {fraction}");
        }
    }

    #[test]
    fn an_app_is_timed_from_when_it_was_first_complete() {
        let mut progress = Progress::new(&["a".into()]);
        listed_empty(&mut progress);
        record_every_part(&mut progress, "a");
        let first = progress.completed_at["a"];
        progress.record((Part::Frontend, watcher::Event::Delete(seen("a", true))));
        progress.record((Part::Frontend, watcher::Event::Apply(seen("a", true))));
        assert_eq!(progress.completed_at["a"], first, "a later completion does not move it");
    }

    #[test]
    fn apps_go_round_robin_over_numbered_namespaces_and_one_keeps_its_name() {
        let mut options = options_for(1);
        assert_eq!(options.namespaces(), ["scale"]);
        options.namespaces = 3;
        assert_eq!(options.namespaces(), ["scale-000", "scale-001", "scale-002"]);
    }

    fn options_for(namespaces: usize) -> Options {
        Options {
            apps: 10,
            namespace: "scale".into(),
            namespaces,
            mode: Mode::Controller,
            metrics: String::new(),
            idle_seconds: 0,
            timeout_seconds: 1,
            pids: Vec::new(),
        }
    }

    #[test]
    fn children_of_other_names_are_not_counted() {
        assert_eq!(
            child_of(&StatefulSet { metadata: named("a-mysql"), ..Default::default() }, "-mysql"),
            seen("a", true)
        );
        assert_eq!(child_of(&Deployment { metadata: named("a-backend"), ..Default::default() }, "-frontend"), None);
    }

    fn named(name: &str) -> kube::api::ObjectMeta {
        kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() }
    }
}
