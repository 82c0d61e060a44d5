//! What the high-availability scenarios share: a replicated app, its replication status, and
//! the Jobs that write through the primary Service (recording every acknowledged row and the
//! longest wait between two acknowledgements), probe every server's own address for writes, and
//! read one server.

use std::collections::BTreeSet;

use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use visitors_api::VisitorsApp;
use visitors_api::conditions::{self, READY, REPLICATING};
use visitors_api::visitors_app::{MemberRole, ReplicationStatus};

use crate::{AppInitLock, TLS_PRELUDE, ca_volume, conditions_text, wait_for};

/// The MySQL image of the scenarios: the server the test cluster runs is MariaDB, and the
/// controller's statements depend on the family (it asks the server, whatever the image says).
pub const MARIADB_IMAGE: &str = "mariadb:10.11";

/// Creates VisitorsApp `name` with `replicas` MySQL servers and waits until it is Ready, a
/// primary is recorded and every replica replicates from it.
pub async fn create_replicated_app(apps: &Api<VisitorsApp>, name: &str, replicas: i32) -> VisitorsApp {
    let app: VisitorsApp = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "VisitorsApp", "metadata": {"name": name},
        "spec": {"size": 1, "mysql": {"replicas": replicas, "image": MARIADB_IMAGE}},
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
        Ok(replication)
    } else {
        Err(format!("{replication:?}; {}", conditions_text(&status.conditions)))
    }
}

/// The app's replication status as it is.
pub async fn replication_of(apps: &Api<VisitorsApp>, name: &str) -> ReplicationStatus {
    let app = apps.get(name).await.expect("read the app");
    app.status.and_then(|s| s.replication).unwrap_or_default()
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
/// bounded by 5 s. Its termination message: `acked=<ranges> tries=<n> gap=<longest seconds
/// between two acknowledged rows>`.
pub fn writer_job(app: &str, namespace: &str, name: &str, seconds: u32) -> serde_json::Value {
    let script = r#"set -u
mariadb -h "$HOST" -u "$DB_USER" visitors -e 'CREATE TABLE IF NOT EXISTS ha_writes (id INT PRIMARY KEY)' || exit 1
end=$(( $(date +%s) + SECONDS_TO_RUN )); n=0; runs=""; start=""; last=""; gap=0
prev=$(date +%s.%N)
while [ "$(date +%s)" -lt "$end" ]; do
  n=$((n + 1))
  if [ $((n % 20)) -eq 0 ] && [ "$(timeout 5 mariadb --connect-timeout=2 -h "$HOST" -u "$DB_USER" -N visitors -e \
      "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'visitors' AND table_name = 'ha_stop'" 2>/dev/null)" = 1 ]; then
    break
  fi
  if timeout 5 mariadb --connect-timeout=2 -h "$HOST" -u "$DB_USER" visitors -e "INSERT INTO ha_writes VALUES ($n)" 2>/dev/null; then
    now=$(date +%s.%N)
    gap=$(awk -v a="$prev" -v b="$now" -v g="$gap" 'BEGIN { d = b - a; if (d > g) g = d; printf "%.2f", g }')
    prev=$now
    if [ -n "$last" ] && [ "$last" -eq $((n - 1)) ]; then last=$n; else
      [ -n "$start" ] && runs="$runs$start-$last,"; start=$n; last=$n; fi
  fi
done
[ -n "$start" ] && runs="$runs$start-$last"
echo "acked=$runs tries=$n gap=$gap" > /dev/termination-log
"#;
    let host = format!("{app}-mysql.{namespace}.svc");
    shell_job(app, name, script, app_user_env(app), &[("HOST", host), ("SECONDS_TO_RUN", seconds.to_string())])
}

/// What the writer reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    /// Every row the primary acknowledged.
    pub acked: BTreeSet<u32>,
    pub tries: u32,
    /// The longest wait between two acknowledged rows, in seconds.
    pub gap: f64,
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
        Written { acked, tries: field("tries").parse().unwrap_or(0), gap: field("gap").parse().unwrap_or(0.0) }
    }
}

/// The prober: for `seconds`, tries every server's own address in turn with the app's user, an
/// insert bounded by 2 s each. Its termination message lists, in order, the servers that
/// accepted a write, one letter per acceptance in a row (`accepted=0001112...`, the pods'
/// ordinals).
pub fn prober_job(app: &str, namespace: &str, name: &str, replicas: i32, seconds: u32) -> serde_json::Value {
    let hosts: Vec<String> = (0..replicas).map(|i| pod_host(app, namespace, &format!("{app}-mysql-{i}"))).collect();
    let script = r#"set -u
mariadb -h "$HOST" -u "$DB_USER" visitors -e 'CREATE TABLE IF NOT EXISTS ha_probes (id INT AUTO_INCREMENT PRIMARY KEY, pod INT)' || exit 1
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
    let host = format!("{app}-mysql.{namespace}.svc");
    shell_job(
        app,
        name,
        script,
        app_user_env(app),
        &[("HOST", host), ("HOSTS", hosts.join(" ")), ("SECONDS_TO_RUN", seconds.to_string())],
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writers_report_is_read_back() {
        let written = Written::parse("acked=1-3,5-5,7-9 tries=9 gap=3.25");
        assert_eq!(written.acked, BTreeSet::from([1, 2, 3, 5, 7, 8, 9]));
        assert_eq!((written.tries, written.gap), (9, 3.25));
        assert!(Written::parse("acked= tries=0 gap=0").acked.is_empty());
    }
}
