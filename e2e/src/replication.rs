//! What the high-availability scenarios share: a replicated app, its replication status, and
//! the Jobs that write through the primary Service (recording every acknowledged row and the
//! longest wait between two acknowledgements), probe every server's own address for writes, and
//! read one server.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use visitors_api::VisitorsApp;
use visitors_api::conditions::{self, READY, REPLICATING};
use visitors_api::visitors_app::{MemberRole, ReplicationStatus, RoleChange};

use crate::{
    AppInitLock, TLS_PRELUDE, ca_volume, conditions_text, job_completes, job_output, job_output_when_ended, run_job,
    wait_for,
};

/// The MySQL image of the scenarios: the server the test cluster runs is MariaDB, and the
/// controller's statements depend on the family (it asks the server, whatever the image says).
pub const MARIADB_IMAGE: &str = "mariadb:10.11";

/// Creates VisitorsApp `name` with `replicas` MySQL servers and waits until it is Ready, a
/// primary is recorded and every replica replicates from it.
pub async fn create_replicated_app(apps: &Api<VisitorsApp>, name: &str, replicas: i32) -> VisitorsApp {
    create_replicated_app_with(apps, name, replicas, json!({})).await
}

/// [`create_replicated_app`] with `replication` as its `spec.mysql.replication`.
pub async fn create_replicated_app_with(
    apps: &Api<VisitorsApp>,
    name: &str,
    replicas: i32,
    replication: serde_json::Value,
) -> VisitorsApp {
    let app: VisitorsApp = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "VisitorsApp", "metadata": {"name": name},
        "spec": {"size": 1, "mysql": {"replicas": replicas, "image": MARIADB_IMAGE, "replication": replication}},
    }))
    .unwrap();
    {
        let _one_at_a_time = AppInitLock::take().await;
        apps.create(&PostParams::default(), &app).await.expect("create the replicated VisitorsApp");
        wait_for(&format!("VisitorsApp {name}'s servers to start"), || replicating(apps, name, replicas - 1)).await;
    }
    wait_for(&format!("VisitorsApp {name} to become Ready"), || crate::app_ready_at_generation(apps, name, 1)).await
}

/// `Ok` once app `name` records a primary, `replicas` replicas replicate from it and it is
/// Ready; otherwise what it shows.
pub async fn replicating(apps: &Api<VisitorsApp>, name: &str, replicas: i32) -> Result<ReplicationStatus, String> {
    let app = apps.get(name).await.map_err(|e| e.to_string())?;
    let status = app.status.unwrap_or_default();
    let replication = status.replication.clone().unwrap_or_default();
    let all = replication.members.iter().filter(|m| m.role == MemberRole::Replica).count() as i32 == replicas;
    if replication.primary.is_some()
        && all
        && conditions::is_true(&status.conditions, REPLICATING)
        && conditions::is_true(&status.conditions, READY)
    {
        Ok(*replication)
    } else {
        Err(format!("{replication:?}; {}", conditions_text(&status.conditions)))
    }
}

/// The app's replication status as it is.
pub async fn replication_of(apps: &Api<VisitorsApp>, name: &str) -> ReplicationStatus {
    let app = apps.get(name).await.expect("read the app");
    *app.status.and_then(|s| s.replication).unwrap_or_default()
}

/// The stable host name of MySQL pod `pod` of app `app`.
pub fn pod_host(app: &str, namespace: &str, pod: &str) -> String {
    format!("{pod}.{app}-mysql-headless.{namespace}.svc")
}

fn app_user_env(app: &str) -> Vec<serde_json::Value> {
    vec![
        json!({"name": "DB_USER", "valueFrom": {"secretKeyRef": {"name": format!("{app}-mysql-credentials"), "key": "username"}}}),
        json!({"name": "MYSQL_PWD", "valueFrom": {"secretKeyRef": {"name": format!("{app}-mysql-credentials"), "key": "password"}}}),
    ]
}

fn shell_job(
    app: &str,
    name: &str,
    script: &str,
    mut env: Vec<serde_json::Value>,
    extra: &[(&str, String)],
) -> serde_json::Value {
    let (volume, mount) = ca_volume(app);
    env.extend(extra.iter().map(|(name, value)| json!({"name": name, "value": value})));
    json!({
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "sql", "image": "mariadb:11", "command": ["sh", "-c", format!("{TLS_PRELUDE}{script}")],
                            "env": env, "volumeMounts": [mount]}],
            "volumes": [volume],
        }}},
    })
}

/// The writer: until a table `ha_stop` exists (or `seconds` passed), inserts rows numbered 1, 2,
/// 3... one at a time, as the app's user, through the client Service (the primary), each try
/// bounded by `try_seconds` (a try that times out counts as not acknowledged). Its termination
/// message: `acked=<ranges> tries=<n> gap=<longest seconds between two acknowledged rows>
/// gaps=<every wait over a second, in order>`.
pub fn writer_job(app: &str, namespace: &str, name: &str, seconds: u32, try_seconds: u32) -> serde_json::Value {
    let script = r#"set -u
mariadb -h "$HOST" -u "$DB_USER" visitors -e 'CREATE TABLE IF NOT EXISTS ha_writes (id INT PRIMARY KEY)' || exit 1
end=$(( $(date +%s) + SECONDS_TO_RUN )); n=0; runs=""; start=""; last=""; gap=0; gaps=""
prev=$(date +%s.%N)
while [ "$(date +%s)" -lt "$end" ]; do
  n=$((n + 1))
  if [ $((n % 20)) -eq 0 ] && [ "$(timeout 5 mariadb --connect-timeout=2 -h "$HOST" -u "$DB_USER" -N visitors -e \
      "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'visitors' AND table_name = 'ha_stop'" 2>/dev/null)" = 1 ]; then
    break
  fi
  if timeout "$TRY_SECONDS" mariadb --connect-timeout=2 -h "$HOST" -u "$DB_USER" visitors -e "INSERT INTO ha_writes VALUES ($n)" 2>/dev/null; then
    now=$(date +%s.%N)
    d=$(awk -v a="$prev" -v b="$now" 'BEGIN { printf "%.2f", b - a }')
    gap=$(awk -v d="$d" -v g="$gap" 'BEGIN { if (d > g) g = d; printf "%.2f", g }')
    if awk -v d="$d" 'BEGIN { exit !(d > 1) }'; then gaps="$gaps$d,"; fi
    prev=$now
    if [ -n "$last" ] && [ "$last" -eq $((n - 1)) ]; then last=$n; else
      [ -n "$start" ] && runs="$runs$start-$last,"; start=$n; last=$n; fi
  fi
done
[ -n "$start" ] && runs="$runs$start-$last"
echo "acked=$runs tries=$n gap=$gap gaps=$gaps" > /dev/termination-log
"#;
    let host = format!("{app}-mysql.{namespace}.svc");
    let env = [("HOST", host), ("SECONDS_TO_RUN", seconds.to_string()), ("TRY_SECONDS", try_seconds.to_string())];
    shell_job(app, name, script, app_user_env(app), &env)
}

/// What the writer reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    /// Every row the primary acknowledged.
    pub acked: BTreeSet<u32>,
    pub tries: u32,
    /// The longest wait between two acknowledged rows, in seconds.
    pub gap: f64,
    /// Every wait between two acknowledged rows longer than a second, in order.
    pub gaps: Vec<f64>,
}

impl Written {
    pub fn parse(output: &str) -> Self {
        let field = |key: &str| {
            output.split_whitespace().find_map(|w| w.strip_prefix(&format!("{key}="))).unwrap_or_default().to_string()
        };
        let mut acked = BTreeSet::new();
        for run in field("acked").split(',').filter(|r| !r.is_empty()) {
            let (a, b) = run.split_once('-').unwrap_or((run, run));
            acked.extend(a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap());
        }
        let gaps = field("gaps").split(',').filter_map(|g| g.parse().ok()).collect();
        Written { acked, tries: field("tries").parse().unwrap_or(0), gap: field("gap").parse().unwrap_or(0.0), gaps }
    }
}

/// The image of the Jobs that run the suite's own test programs (the pooled writer): on the
/// test cluster any name does (the node runs `target/debug`); elsewhere an image that carries
/// them at `/usr/local/bin`.
pub fn tools_image() -> String {
    std::env::var("E2E_TOOLS_IMAGE").unwrap_or_else(|_| "localhost/visitors-operator:dev".into())
}

/// What the pooled writer is asked to do (see `src/bin/pooled-writer.rs`).
#[derive(Debug, Clone)]
pub struct Load {
    /// Sessions, each holding one connection open.
    pub writers: u32,
    /// The longest it runs (it stops earlier once `ha_stop` exists).
    pub seconds: u32,
    /// A statement's timeout: a try that outlives it counts as not acknowledged.
    pub try_seconds: u32,
    /// Servers whose GTID positions it follows (each server's own address): their apply rates
    /// and how soon they catch up once the load stops.
    pub watch: Vec<String>,
}

/// The table the pooled writer Job `name` writes its rows to (one per run: each run is
/// checked on its own), and the table whose creation stops it.
pub fn pooled_tables(name: &str) -> (String, String) {
    let table = format!("pooled_{}", name.replace('-', "_"));
    let stop = format!("{table}_stop");
    (table, stop)
}

/// The pooled writer's Job: `load.writers` sessions committing rows through the client Service as
/// fast as they are acknowledged, as the app's user, over TLS, to its own table
/// ([`pooled_tables`]).
pub fn pooled_writer_job(app: &str, namespace: &str, name: &str, load: &Load) -> serde_json::Value {
    let (volume, mount) = ca_volume(app);
    let mut env = app_user_env(app);
    let (table, stop) = pooled_tables(name);
    let settings = [
        ("HOST", format!("{app}-mysql.{namespace}.svc")),
        ("TABLE", table),
        ("STOP_TABLE", stop),
        ("WRITERS", load.writers.to_string()),
        ("SECONDS", load.seconds.to_string()),
        ("TRY_SECONDS", load.try_seconds.to_string()),
        ("WATCH_HOSTS", load.watch.iter().map(|pod| pod_host(app, namespace, pod)).collect::<Vec<_>>().join(" ")),
    ];
    env.extend(settings.iter().map(|(name, value)| json!({"name": name, "value": value})));
    json!({
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "writer", "image": tools_image(), "command": ["/usr/local/bin/pooled-writer"],
                            "env": env, "volumeMounts": [mount]}],
            "volumes": [volume],
        }}},
    })
}

/// What the pooled writer reports.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Pooled {
    pub acked: u64,
    pub tries: u64,
    /// Acknowledged rows the client Service's server lacks at the end.
    pub missing: u64,
    /// Acknowledgements a second.
    pub rate: f64,
    /// The longest wait between two acknowledgements of any session, in seconds.
    pub gap: f64,
    /// Every wait over a second: `(seconds, unix time it ended)`.
    pub gaps: Vec<(f64, f64)>,
    /// Statements a read-only server refused, and when the last was.
    pub read_only: u64,
    pub last_read_only: f64,
    pub reconnects: u64,
    pub errors: u64,
    /// The most advanced watched server's transactions a second.
    pub commits: f64,
    /// Per watched server: `(host, transactions applied a second, most behind in the last half
    /// of the load, seconds to catch up once it stopped or -1)`.
    pub watched: Vec<(String, f64, u64, f64)>,
}

impl Pooled {
    pub fn parse(output: &str) -> Self {
        let field = |key: &str| {
            output.split_whitespace().find_map(|w| w.strip_prefix(&format!("{key}="))).unwrap_or_default().to_string()
        };
        let number = |key: &str| field(key).parse::<f64>().unwrap_or(0.0);
        let gaps = field("gaps")
            .split(',')
            .filter_map(|g| g.split_once('@'))
            .filter_map(|(wait, at)| Some((wait.parse().ok()?, at.parse().ok()?)))
            .collect();
        let watched = field("watch")
            .split(',')
            .filter_map(|entry| {
                let parts: Vec<&str> = entry.rsplitn(4, ':').collect();
                let [caught_up, behind, applied, host] = parts.as_slice() else { return None };
                Some((host.to_string(), applied.parse().ok()?, behind.parse().ok()?, caught_up.parse().ok()?))
            })
            .collect();
        Pooled {
            acked: number("acked") as u64,
            tries: number("tries") as u64,
            missing: number("missing") as u64,
            rate: number("rate"),
            gap: number("gap"),
            gaps,
            read_only: number("read_only") as u64,
            last_read_only: number("last_read_only"),
            reconnects: number("reconnects") as u64,
            errors: number("errors") as u64,
            commits: number("commits"),
            watched,
        }
    }
}

/// The prober: for `seconds`, tries every server's own address in turn with the app's user, an
/// insert into `ha_probes` (made beforehand: no statement of the prober may wait unbounded on
/// a frozen server) bounded by 2 s each. Its termination message lists, in order, the servers that
/// accepted a write, one letter per acceptance in a row (`accepted=0001112...`, the pods'
/// ordinals).
pub fn prober_job(app: &str, namespace: &str, name: &str, replicas: i32, seconds: u32) -> serde_json::Value {
    let hosts: Vec<String> = (0..replicas).map(|i| pod_host(app, namespace, &format!("{app}-mysql-{i}"))).collect();
    let script = r#"set -u
end=$(( $(date +%s) + SECONDS_TO_RUN )); seen=""
while [ "$(date +%s)" -lt "$end" ]; do
  i=0
  for h in $HOSTS; do
    if timeout 2 mariadb --connect-timeout=1 -h "$h" -u "$DB_USER" visitors -e "INSERT INTO ha_probes (pod) VALUES ($i)" 2>/dev/null; then
      last=$(printf '%s' "$seen" | tail -c 1)
      [ "$last" = "$i" ] || seen="$seen$i"
    fi
    i=$((i + 1))
  done
done
echo "accepted=$seen" > /dev/termination-log
"#;
    shell_job(
        app,
        name,
        script,
        app_user_env(app),
        &[("HOSTS", hosts.join(" ")), ("SECONDS_TO_RUN", seconds.to_string())],
    )
}

/// A Job that runs `sql` as root on server `pod` itself (its own address, not a Service) and
/// writes its one-line answer to its termination message.
pub fn pod_sql_job(app: &str, namespace: &str, name: &str, pod: &str, sql: &str) -> serde_json::Value {
    let script = r#"mariadb -h "$POD_HOST" -uroot -N -B visitors -e "$SQL" > /dev/termination-log"#;
    let env = vec![
        json!({"name": "MYSQL_PWD", "valueFrom": {"secretKeyRef": {"name": format!("{app}-mysql-credentials"), "key": "root-password"}}}),
    ];
    shell_job(app, name, script, env, &[("POD_HOST", pod_host(app, namespace, pod)), ("SQL", sql.to_string())])
}

/// A Job that tries to insert a row on server `pod` as the app's user; it completes only when
/// the server accepts.
pub fn app_write_job(app: &str, namespace: &str, name: &str, pod: &str) -> serde_json::Value {
    let script = r#"timeout 5 mariadb --connect-timeout=2 -h "$POD_HOST" -u "$DB_USER" visitors -e 'CREATE TABLE IF NOT EXISTS ha_refused (id INT)' 2>/dev/termination-log"#;
    shell_job(app, name, script, app_user_env(app), &[("POD_HOST", pod_host(app, namespace, pod))])
}

/// One replicated app of a scenario or a benchmark, and what it takes to look at it.
pub struct Site {
    pub client: Client,
    pub namespace: String,
    pub app: String,
    pub servers: i32,
    pub apps: Api<VisitorsApp>,
    pub pods: Api<Pod>,
    jobs: u32,
}

impl Site {
    pub fn new(client: &Client, namespace: &str, app: &str, servers: i32) -> Self {
        Site {
            client: client.clone(),
            namespace: namespace.to_string(),
            app: app.to_string(),
            servers,
            apps: Api::namespaced(client.clone(), namespace),
            pods: Api::namespaced(client.clone(), namespace),
            jobs: 0,
        }
    }

    /// A Job name not used yet in this namespace.
    pub fn job(&mut self, what: &str) -> String {
        self.jobs += 1;
        format!("{what}-{}", self.jobs)
    }

    /// Runs `sql` on server `pod` itself, for its effect.
    pub async fn execute(&mut self, pod: &str, sql: &str) {
        let name = self.job("execute");
        run_job(&self.client, &self.namespace, &name, pod_sql_job(&self.app, &self.namespace, &name, pod, sql)).await;
    }

    /// `sql`'s one-line answer on server `pod` itself.
    pub async fn on(&mut self, pod: &str, sql: &str) -> String {
        let name = self.job("on");
        run_job(&self.client, &self.namespace, &name, pod_sql_job(&self.app, &self.namespace, &name, pod, sql)).await;
        job_output(&self.client, &self.namespace, &name).await
    }

    pub async fn replication(&self) -> ReplicationStatus {
        replication_of(&self.apps, &self.app).await
    }

    pub async fn primary(&self) -> String {
        self.replication().await.primary.expect("a primary is recorded")
    }

    /// Whether every replica replicates from the primary and the app is Ready, now.
    pub async fn replication_is_healthy(&self) -> bool {
        replicating(&self.apps, &self.app, self.servers - 1).await.is_ok()
    }

    /// Waits until every replica replicates from the primary again and the app is Ready.
    pub async fn healthy(&self) -> ReplicationStatus {
        wait_for("every replica to replicate from the primary", || replicating(&self.apps, &self.app, self.servers - 1))
            .await
    }

    /// Waits for a failover away from `from` newer than the last one recorded now, and returns
    /// it. Call [`Site::last_failover`] before acting, and pass what it returned.
    pub async fn failover_from(&self, from: &str, before: Option<&RoleChange>) -> RoleChange {
        wait_for(&format!("a failover away from {from}"), || async {
            let replication = self.replication().await;
            match replication.last_failover {
                Some(change) if change.from.as_deref() == Some(from) && Some(&change) != before => Ok(change),
                other => Err(format!("last failover {other:?}; members {:?}", replication.members)),
            }
        })
        .await
    }

    /// The failover the status records now.
    pub async fn last_failover(&self) -> Option<RoleChange> {
        self.replication().await.last_failover
    }

    pub async fn annotate(&self, object: &str, annotations: serde_json::Value, pod: bool) {
        let patch = Patch::Merge(json!({"metadata": {"annotations": annotations}}));
        if pod {
            self.pods.patch(object, &PatchParams::default(), &patch).await.expect("annotate the pod");
        } else {
            self.apps.patch(object, &PatchParams::default(), &patch).await.expect("annotate the app");
        }
    }

    /// How many of the rows in `acked` the server `pod` holds.
    pub async fn held(&mut self, pod: &str, written: &Written) -> usize {
        let ranges = runs(written);
        let condition: Vec<String> = ranges.iter().map(|(a, b)| format!("id BETWEEN {a} AND {b}")).collect();
        let sql = format!("SELECT COUNT(*) FROM ha_writes WHERE {}", condition.join(" OR "));
        self.on(pod, &sql).await.parse().expect("a count")
    }

    /// Waits until every server's copy of the writer's table equals the primary's.
    pub async fn replicas_equal_the_primary(&mut self) {
        self.replicas_hold_what_the_primary_holds("ha_writes").await
    }

    /// Waits until every server's copy of `table` (of the `visitors` database) equals the
    /// primary's, by `CHECKSUM TABLE`.
    pub async fn replicas_hold_what_the_primary_holds(&mut self, table: &str) {
        let primary = self.primary().await;
        let checksum = format!("CHECKSUM TABLE {table}");
        let expected = self.on(&primary, &checksum).await;
        for ordinal in 0..self.servers {
            let pod = format!("{}-mysql-{ordinal}", self.app);
            if pod == primary {
                continue;
            }
            let mut tries = 0;
            loop {
                let theirs = self.on(&pod, &checksum).await;
                if theirs == expected {
                    break;
                }
                tries += 1;
                assert!(tries < 30, "{pod} holds {theirs}, the primary {primary} {expected}");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }

    /// Starts the writer Job `name` (see [`writer_job`]) and waits until it has written rows.
    pub async fn start_writer(&mut self, name: &str, try_seconds: u32) {
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), &self.namespace);
        let job = writer_job(&self.app, &self.namespace, name, 3600, try_seconds);
        jobs.create(&Default::default(), &serde_json::from_value(job).unwrap()).await.expect("start the writer");
        let primary = self.primary().await;
        let mut written = || {
            let name = self.job("writing");
            let (client, namespace) = (self.client.clone(), self.namespace.clone());
            let job = pod_sql_job(&self.app, &namespace, &name, &primary, "SELECT COUNT(*) >= 10 FROM ha_writes");
            async move {
                if job_completes(&client, &namespace, &name, job).await
                    && job_output(&client, &namespace, &name).await == "1"
                {
                    Ok(())
                } else {
                    Err("the writer has written fewer than 10 rows".to_string())
                }
            }
        };
        wait_for("the writer to write", &mut written).await;
    }

    /// Starts the pooled writer Job `name` and waits until it has committed rows.
    pub async fn start_pooled_writer(&mut self, writer: &str, load: &Load) {
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), &self.namespace);
        let job = pooled_writer_job(&self.app, &self.namespace, writer, load);
        jobs.create(&Default::default(), &serde_json::from_value(job).unwrap()).await.expect("start the pooled writer");
        let primary = self.primary().await;
        wait_for("the pooled writer to write", || {
            let name = self.job("pooled");
            let (client, namespace) = (self.client.clone(), self.namespace.clone());
            let sql = format!("SELECT COUNT(*) >= 100 FROM {}", pooled_tables(writer).0);
            let job = pod_sql_job(&self.app, &namespace, &name, &primary, &sql);
            async move {
                match job_completes(&client, &namespace, &name, job).await
                    && job_output(&client, &namespace, &name).await == "1"
                {
                    true => Ok(()),
                    false => Err(format!("the pooled writer {writer} has committed fewer than 100 rows")),
                }
            }
        })
        .await;
    }

    /// Stops the pooled writer Job `writer` and reads its report.
    pub async fn stop_pooled_writer(&mut self, writer: &str) -> Pooled {
        let name = self.job("stop");
        let sql = format!("CREATE TABLE IF NOT EXISTS {} (id INT)", pooled_tables(writer).1);
        let stop = crate::mariadb_job(&self.app, &self.namespace, &name, &sql);
        run_job(&self.client, &self.namespace, &name, stop).await;
        let output =
            wait_for("the pooled writer to stop", || job_output_when_ended(&self.client, &self.namespace, writer))
                .await;
        Pooled::parse(&output)
    }

    /// The pods of every server, by ordinal.
    pub fn server_pods(&self) -> Vec<String> {
        (0..self.servers).map(|i| format!("{}-mysql-{i}", self.app)).collect()
    }

    /// The app's MySQL pods, by ordinal (those that exist).
    pub async fn mysql_pods(&self) -> Vec<Pod> {
        let mut pods = Vec::new();
        for ordinal in 0..self.servers {
            if let Ok(Some(pod)) = self.pods.get_opt(&format!("{}-mysql-{ordinal}", self.app)).await {
                pods.push(pod);
            }
        }
        pods
    }

    /// Loses server `pod`'s volume: its claim deleted, then its pod. On a cluster whose volumes
    /// outlive their claim on this machine (the test cluster's hostPath volumes, re-bound to a
    /// claim of the same name), the volume's folder is moved away first, as losing the disk
    /// would; elsewhere the StatefulSet's new claim is a new volume. Waits for the new pod.
    pub async fn lose_volume(&self, pod: &str) {
        use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &self.namespace);
        let claim_name = format!("data-{pod}");
        let claim = claims.get(&claim_name).await.expect("read the server's claim");
        let volume = claim.spec.and_then(|s| s.volume_name).expect("a bound claim");
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        let host_path = volumes.get(&volume).await.ok().and_then(|v| v.spec?.host_path).map(|h| h.path);
        let old_uid = self.pods.get(pod).await.ok().and_then(|p| p.metadata.uid);
        claims.delete(&claim_name, &DeleteParams::default()).await.expect("delete the claim");
        if let Some(path) = host_path.filter(|p| std::path::Path::new(p).is_dir()) {
            let lost = format!("{path}.lost-{}", std::process::id());
            std::fs::rename(&path, &lost).expect("move the volume's folder away");
            eprintln!("moved {path} away (the test cluster keeps a deleted claim's folder)");
        }
        self.pods.delete(pod, &DeleteParams::default()).await.expect("delete the server's pod");
        wait_for(&format!("{pod} to come back as a new pod with a new claim"), || async {
            let now = self.pods.get_opt(pod).await.map_err(|e| e.to_string())?.and_then(|p| p.metadata.uid);
            let claim = claims.get_opt(&claim_name).await.map_err(|e| e.to_string())?;
            let new_pod = now.is_some() && now != old_uid;
            let new_claim = claim.is_some_and(|c| c.metadata.deletion_timestamp.is_none());
            if new_pod && new_claim { Ok(()) } else { Err(format!("new pod: {new_pod}, new claim: {new_claim}")) }
        })
        .await;
    }

    /// Purges every server's binary logs before now: the history since the beginning is gone,
    /// as after the days the logs are kept. (The pause lets a replica reading the old log move
    /// on to the new one, which a purge would otherwise skip as in use.)
    pub async fn purge_binary_logs(&mut self) {
        let pods: Vec<String> = (0..self.servers).map(|i| format!("{}-mysql-{i}", self.app)).collect();
        for pod in pods {
            self.execute(&pod, "FLUSH BINARY LOGS; DO SLEEP(1); PURGE BINARY LOGS BEFORE NOW()").await;
        }
    }

    /// Takes the backup run `name` of the app to claim `claim`, with a drill, and waits until
    /// the drill verified it.
    pub async fn verified_run(&self, name: &str, claim: &str) {
        let backups: Api<visitors_api::MySQLBackup> = Api::namespaced(self.client.clone(), &self.namespace);
        let run: visitors_api::MySQLBackup = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "MySQLBackup", "metadata": {"name": name},
            "spec": {"source": {"visitorsApp": self.app}, "storage": {"persistentVolumeClaim": {"claimName": claim}},
                     "drill": {"activeDeadlineSeconds": 600}},
        }))
        .unwrap();
        backups.create(&PostParams::default(), &run).await.expect("create the run");
        wait_for(&format!("run {name} to succeed and pass its drill"), || async {
            let run = backups.get(name).await.map_err(|e| e.to_string())?;
            if run.is_verified() {
                return Ok(());
            }
            let status = run.status.unwrap_or_default();
            Err(format!(
                "phase {:?}, drill {:?}, error {:?}",
                status.phase,
                status.drill.map(|d| d.phase),
                status.error
            ))
        })
        .await;
    }

    /// Waits for an Event of the app with `reason` about server `pod`, and returns its note.
    pub async fn event_about(&self, reason: &str, pod: &str) -> String {
        wait_for(&format!("an Event {reason} about {pod}"), || async {
            let events = crate::events_of(&self.client, &self.namespace, &self.app).await;
            let note = events
                .iter()
                .filter(|e| e.reason.as_deref() == Some(reason))
                .filter_map(|e| e.note.clone())
                .find(|note| note.starts_with(&format!("MySQL server {pod} ")));
            note.ok_or_else(|| format!("no {reason} Event yet"))
        })
        .await
    }

    /// Deletes every MySQL pod at once and waits until each is back as a new pod.
    pub async fn delete_every_pod(&self) {
        let names: Vec<String> = (0..self.servers).map(|i| format!("{}-mysql-{i}", self.app)).collect();
        let mut old = Vec::new();
        for name in &names {
            old.push(self.pods.get(name).await.ok().and_then(|p| p.metadata.uid));
            let _ = self.pods.delete(name, &DeleteParams::default()).await;
        }
        wait_for("every MySQL pod to come back as a new pod", || async {
            for (name, before) in names.iter().zip(&old) {
                let now = self.pods.get_opt(name).await.map_err(|e| e.to_string())?.and_then(|p| p.metadata.uid);
                if now.is_none() || now == *before {
                    return Err(format!("{name} is not back yet"));
                }
            }
            Ok(())
        })
        .await;
    }

    /// Stops the writer Job `writer` and reads what it wrote.
    pub async fn stop_writer(&mut self, writer: &str) -> Written {
        let name = self.job("stop");
        let stop = crate::mariadb_job(&self.app, &self.namespace, &name, "CREATE TABLE ha_stop (id INT)");
        run_job(&self.client, &self.namespace, &name, stop).await;
        let output =
            wait_for("the writer to stop", || job_output_when_ended(&self.client, &self.namespace, writer)).await;
        Written::parse(&output)
    }
}

/// The writer's acknowledged rows as runs of consecutive numbers.
pub fn runs(written: &Written) -> Vec<(u32, u32)> {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for id in &written.acked {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == *id => *last = *id,
            _ => runs.push((*id, *id)),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writers_report_is_read_back() {
        let written = Written::parse("acked=1-3,5-5,7-9 tries=9 gap=3.25 gaps=1.50,3.25,");
        assert_eq!(written.acked, BTreeSet::from([1, 2, 3, 5, 7, 8, 9]));
        assert_eq!((written.tries, written.gap, written.gaps), (9, 3.25, vec![1.5, 3.25]));
        assert!(Written::parse("acked= tries=0 gap=0").acked.is_empty());
    }
}
