//! The chart's alerts and Grafana dashboard against the metrics the controllers really export,
//! and in a real Prometheus. After a scheduled backup run with binary log archiving and a
//! restore drill, a restore of it, a restore refused at once, a reconcile that fails (a
//! ResourceQuota forbids an app's children) and an app with two MySQL servers replicating:
//! - the three running controllers are scraped, every expression of
//!   helm/visitors-operator/files/prometheus-rules.yaml and every query of
//!   helm/visitors-operator/files/grafana-dashboard.json is parsed with `promql-parser`, and
//!   each metric name and label it uses must be in the scrape;
//! - `promtool check rules` accepts the rules file, and a Prometheus (Debian's) scraping the
//!   controllers every second with the rules file loaded evaluates every alert without error,
//!   fires VisitorsRestoreFailed for the refused restore alone, offers the scenario's
//!   namespaces in the dashboard's namespace variable, and returns series for every query of
//!   every panel, its variables replaced as Grafana would.
//!
//! The names are read from the rules file and the dashboard only, never listed here.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use promql_parser::label::METRIC_NAME;
use promql_parser::parser::{self, Expr, LabelModifier};
use serde_json::{Value, json};
use visitors_api::backup::BackupPhase;
use visitors_api::restore::RestorePhase;
use visitors_api::{MySQLBackup, MySQLRestore, VisitorsApp};
use visitors_e2e::prometheus::{self, Prometheus};
use visitors_e2e::{
    TestNamespace, archive::rfc3339, cluster, controller_metrics, create_book_app, metric_value,
    ready_app_with_claim_and_rows, repo_root, restore_finished, wait_for,
};

const APP: &str = "ex";
const CLAIM: &str = "backups";
const SCHEDULE: &str = "minutely";
const CONTROLLERS: [&str; 3] = ["visitors", "backup", "restore"];
/// The restore to a time that has not come yet: refused at once, so it ends `Failed`.
const REFUSED: &str = "future";

/// A PromQL expression and what it is: an alert of the rules file, or a query of a panel.
#[derive(Clone, Debug)]
struct Expression {
    name: String,
    expr: String,
}

fn rules_file() -> std::path::PathBuf {
    repo_root().join("helm/visitors-operator/files/prometheus-rules.yaml")
}

fn rules_file_alerts() -> Vec<Expression> {
    let path = rules_file();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rules: serde_json::Value =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
    let alerts: Vec<Expression> = rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|group| group["rules"].as_array().cloned().unwrap_or_default())
        .filter_map(|rule| {
            Some(Expression { name: rule["alert"].as_str()?.to_string(), expr: rule["expr"].as_str()?.to_string() })
        })
        .collect();
    assert!(!alerts.is_empty(), "{} holds no alerts", path.display());
    alerts
}

/// Metric name → the labels an expression needs on it: its own matchers, and the labels
/// of every `by`, `without`, `on`, `ignoring` and `group_*` above it.
type Uses = BTreeMap<String, BTreeSet<String>>;

fn uses_of(expr: &str) -> Result<Uses, String> {
    let parsed = parser::parse(expr)?;
    let mut uses = Uses::new();
    collect(&parsed, &BTreeSet::new(), &mut uses)?;
    Ok(uses)
}

fn collect(expr: &Expr, inherited: &BTreeSet<String>, uses: &mut Uses) -> Result<(), String> {
    match expr {
        Expr::VectorSelector(selector) => selector_uses(selector, inherited, uses),
        Expr::MatrixSelector(matrix) => selector_uses(&matrix.vs, inherited, uses),
        Expr::Aggregate(aggregate) => {
            let labels = with(inherited, aggregate.modifier.as_ref().map(|m| m.labels().labels.as_slice()));
            collect(&aggregate.expr, &labels, uses)?;
            aggregate.param.as_ref().map_or(Ok(()), |param| collect(param, inherited, uses))
        }
        Expr::Binary(binary) => {
            let mut labels = inherited.clone();
            if let Some(modifier) = &binary.modifier {
                labels =
                    with(&labels, modifier.matching.as_ref().map(|m: &LabelModifier| m.labels().labels.as_slice()));
                labels = with(&labels, modifier.card.labels().map(|l| l.labels.as_slice()));
            }
            collect(&binary.lhs, &labels, uses)?;
            collect(&binary.rhs, &labels, uses)
        }
        Expr::Unary(unary) => collect(&unary.expr, inherited, uses),
        Expr::Paren(paren) => collect(&paren.expr, inherited, uses),
        Expr::Subquery(subquery) => collect(&subquery.expr, inherited, uses),
        Expr::Call(call) => call.args.args.iter().try_for_each(|arg| collect(arg, inherited, uses)),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => Ok(()),
    }
}

fn with(labels: &BTreeSet<String>, more: Option<&[String]>) -> BTreeSet<String> {
    labels.iter().cloned().chain(more.unwrap_or_default().iter().cloned()).collect()
}

fn selector_uses(
    selector: &promql_parser::parser::VectorSelector,
    inherited: &BTreeSet<String>,
    uses: &mut Uses,
) -> Result<(), String> {
    let name = selector.name.clone().ok_or_else(|| format!("a selector without a metric name: {selector}"))?;
    let labels = uses.entry(name).or_default();
    labels.extend(inherited.iter().cloned());
    labels.extend(selector.matchers.matchers.iter().map(|m| m.name.clone()).filter(|n| n != METRIC_NAME));
    Ok(())
}

/// Sample name → every label name it carries, from Prometheus text exposition.
fn exported(text: &str) -> Uses {
    let mut out = Uses::new();
    for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = out.entry(line[..name_end].to_string()).or_default();
        if line[name_end..].starts_with('{') {
            labels.extend(label_names(&line[name_end + 1..]));
        }
    }
    out
}

/// The label names of `a="x",b="y\"z"} 1` (what follows a sample's `{`).
fn label_names(mut rest: &str) -> Vec<String> {
    let mut names = Vec::new();
    while let Some((name, after)) = rest.split_once("=\"") {
        names.push(name.trim_start_matches(',').trim().to_string());
        // Skip the quoted value, with its escapes.
        let mut escaped = false;
        let end = after.char_indices().find(|&(_, c)| {
            let closes = c == '"' && !escaped;
            escaped = c == '\\' && !escaped;
            closes
        });
        let Some((end, _)) = end else { break };
        rest = &after[end + 1..];
        if rest.starts_with('}') {
            break;
        }
    }
    names
}

/// What the expressions need that the scrape lacks, one line per problem (empty: all there).
fn missing(expressions: &[Expression], scraped: &Uses) -> Vec<String> {
    let mut problems = Vec::new();
    for alert in expressions {
        let uses = match uses_of(&alert.expr) {
            Ok(uses) => uses,
            Err(e) => {
                problems.push(format!("{}: the expression does not parse: {e}", alert.name));
                continue;
            }
        };
        for (metric, labels) in uses {
            let Some(exported) = scraped.get(&metric) else {
                problems.push(format!("{}: no controller exports {metric}", alert.name));
                continue;
            };
            let absent: Vec<&String> = labels.iter().filter(|l| !exported.contains(*l)).collect();
            if !absent.is_empty() {
                problems.push(format!("{}: {metric} has no label {absent:?} (it has {exported:?})", alert.name));
            }
        }
    }
    problems
}

async fn scrape_all(client: &Client) -> Result<(Uses, String), String> {
    let mut all = Uses::new();
    let mut texts = String::new();
    for key in CONTROLLERS {
        let text = controller_metrics(client, key).await.map_err(|e| format!("{key} controller: {e}"))?;
        for (name, labels) in exported(&text) {
            all.entry(name).or_default().extend(labels);
        }
        texts.push_str(&text);
    }
    Ok((all, texts))
}

/// A schedule every minute, archiving the binary log and drilling each run, whose first run
/// has succeeded, a restore of that run that has ended, in a namespace with the book's app.
async fn backup_and_restore_ran(client: &Client) -> TestNamespace {
    let seed = "CREATE TABLE IF NOT EXISTS visitors.e2e_rows (id INT PRIMARY KEY); \
                INSERT INTO visitors.e2e_rows SELECT seq FROM seq_1_to_100;";
    let namespace = ready_app_with_claim_and_rows(client, "e2e-alerts", APP, CLAIM, seed).await;
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &namespace.name);
    let schedule = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "MySQLBackup", "metadata": {"name": SCHEDULE},
        "spec": {"source": {"visitorsApp": APP}, "storage": {"persistentVolumeClaim": {"claimName": CLAIM}},
                 "schedule": {"cron": "* * * * *"}, "pointInTime": {"flushSeconds": 2}, "drill": {}},
    }))
    .unwrap();
    backups.create(&PostParams::default(), &schedule).await.expect("create the schedule");
    let run = wait_for("a run of the schedule to succeed", || async {
        let status = backups.get(SCHEDULE).await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        status.last_successful_run.ok_or_else(|| format!("no successful run yet: {:?}", status.conditions))
    })
    .await;
    let suspend = json!({"spec": {"schedule": {"suspend": true}}});
    backups.patch(SCHEDULE, &PatchParams::default(), &Patch::Merge(suspend)).await.expect("suspend the schedule");
    let succeeded = backups.get(&run).await.unwrap().status.unwrap_or_default().phase;
    assert_eq!(succeeded, Some(BackupPhase::Succeeded), "run {run}");

    let restores: Api<MySQLRestore> = Api::namespaced(client.clone(), &namespace.name);
    let restore = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "MySQLRestore", "metadata": {"name": "back"},
        "spec": {"source": {"backup": run}, "target": {"visitorsApp": APP}},
    }))
    .unwrap();
    restores.create(&PostParams::default(), &restore).await.expect("create the restore");
    let phase = wait_for("the restore to end", || async {
        let status = restores.get("back").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        match status.phase {
            Some(phase @ (RestorePhase::Succeeded | RestorePhase::Failed)) => Ok(phase),
            phase => Err(format!("phase {phase:?}: {:?}", status.conditions)),
        }
    })
    .await;
    assert_eq!(phase, RestorePhase::Succeeded);
    namespace
}

/// An app with a primary and a replica, replicating: the replication metrics have samples.
async fn a_replicated_app(client: &Client) -> TestNamespace {
    let namespace = TestNamespace::create(client, "e2e-alerts-replicated").await;
    let apps = Api::<VisitorsApp>::namespaced(client.clone(), &namespace.name);
    visitors_e2e::replication::create_replicated_app(&apps, "two", 2).await;
    namespace
}

/// A namespace whose quota forbids Services, StatefulSets and Deployments, with an app in
/// it: every reconcile of the app fails (403 from the quota), as a real failure would.
async fn an_app_whose_reconciles_fail(client: &Client) -> TestNamespace {
    let namespace = TestNamespace::create(client, "e2e-alerts-quota").await;
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "nothing"},
        "spec": {"hard": {"services": "0", "count/statefulsets.apps": "0", "count/deployments.apps": "0"}},
    }))
    .unwrap();
    Api::<ResourceQuota>::namespaced(client.clone(), &namespace.name)
        .create(&PostParams::default(), &quota)
        .await
        .expect("create the quota");
    // The quota admission needs the quota's status filled in before it refuses anything.
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &namespace.name);
    wait_for("the quota to be counted", || async {
        let quota = quotas.get("nothing").await.map_err(|e| e.to_string())?;
        quota.status.and_then(|s| s.hard).map(|_| ()).ok_or_else(|| "no status.hard yet".to_string())
    })
    .await;
    create_book_app(&Api::<VisitorsApp>::namespaced(client.clone(), &namespace.name), "blocked").await;
    namespace
}

/// A restore of the schedule to an hour from now: refused before anything is touched
/// (`TargetInTheFuture`), so it ends `Failed` at once, and its failed gauge is 1.
async fn a_restore_to_a_time_to_come_is_refused(client: &Client, namespace: &str) {
    let restores: Api<MySQLRestore> = Api::namespaced(client.clone(), namespace);
    let target = rfc3339(jiff::Timestamp::now().as_second() + 3600);
    let restore = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "MySQLRestore", "metadata": {"name": REFUSED},
        "spec": {"source": {"pointInTime": {"backup": SCHEDULE, "targetTime": target}}, "target": {"visitorsApp": APP}},
    }))
    .unwrap();
    restores.create(&PostParams::default(), &restore).await.expect("create the restore to a time to come");
    let ended = restore_finished(&restores, REFUSED).await.status.unwrap_or_default();
    assert_eq!(ended.phase, Some(RestorePhase::Failed), "{:?}", ended.conditions);
}

// ---------- the dashboard ----------

fn dashboard() -> Value {
    let path = repo_root().join("helm/visitors-operator/files/grafana-dashboard.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Every panel of a dashboard: the top-level ones and those a (collapsed) row holds.
fn panels(board: &Value) -> Vec<&Value> {
    let top = board["panels"].as_array().into_iter().flatten();
    top.flat_map(|panel| std::iter::once(panel).chain(panel["panels"].as_array().into_iter().flatten())).collect()
}

/// Every query of the dashboard's panels, named after its panel and refId, with Grafana's
/// variables replaced by `values`.
fn panel_queries(board: &Value, values: &[(&str, String)]) -> Result<Vec<Expression>, String> {
    let mut queries = Vec::new();
    for panel in panels(board) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let Some(expr) = target["expr"].as_str() else { continue };
            let name = format!("panel {} query {}", panel["title"], target["refId"]);
            let expr = substitute(expr, values).map_err(|e| format!("{name}: {e}"))?;
            queries.push(Expression { name, expr });
        }
    }
    Ok(queries)
}

/// `expr` with Grafana's `$name` and `${name}` replaced by their `values`; a variable without a
/// value is an error naming it.
fn substitute(expr: &str, values: &[(&str, String)]) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, length) = match after.strip_prefix('{') {
            Some(braced) => {
                let end = braced.find('}').ok_or_else(|| format!("an unclosed ${{ in {expr}"))?;
                (&braced[..end], end + 2)
            }
            None => {
                let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
                (&after[..end], end)
            }
        };
        let (_, value) = values.iter().find(|(n, _)| *n == name).ok_or_else(|| format!("no value for ${name}"))?;
        out.push_str(value);
        rest = &after[length..];
    }
    out.push_str(rest);
    Ok(out)
}

/// What Grafana puts in the queries when a person picks `namespaces` in the namespace variable
/// (a multi-value in a regular expression matcher: `(a|b)`; namespace names hold no regex
/// metacharacter), over the dashboard's default time range.
fn grafana_values(board: &Value, namespaces: &[&str]) -> Vec<(&'static str, String)> {
    let from = board["time"]["from"].as_str().unwrap_or_default();
    let range =
        default_range(from).unwrap_or_else(|| panic!("the dashboard's time.from {from:?} is not now-<duration>"));
    vec![
        ("namespace", format!("({})", namespaces.join("|"))),
        ("__range", range),
        // Grafana's $__rate_interval is at least four scrape intervals: a minute holds sixty of
        // this Prometheus'.
        ("__rate_interval", "1m".to_string()),
    ]
}

/// The duration of a time range `now-<duration>` (`now-24h`: `24h`), in PromQL's words.
fn default_range(from: &str) -> Option<String> {
    let duration = from.strip_prefix("now-")?;
    let units = duration.trim_start_matches(|c: char| c.is_ascii_digit());
    (units.len() < duration.len() && ["s", "m", "h", "d", "w", "y"].contains(&units)).then(|| duration.to_string())
}

/// The selector and label of a `label_values(selector, label)` variable query.
fn label_values_query(definition: &str) -> Option<(&str, &str)> {
    let arguments = definition.trim().strip_prefix("label_values(")?.strip_suffix(')')?;
    let (selector, label) = arguments.rsplit_once(',')?;
    Some((selector.trim(), label.trim()))
}

// ---------- Prometheus ----------

/// A Prometheus scraping the three controllers and evaluating the chart's rules file, once
/// `promtool check rules` has accepted it; `None`, saying why, where it cannot run.
async fn prometheus_scraping_the_controllers(alerts: usize) -> Option<Prometheus> {
    let rules = rules_file();
    let found = prometheus::check_rules(&rules)?;
    assert_eq!(found, alerts, "promtool's count of the rules of {}", rules.display());
    let Ok(ports) = std::env::var("E2E_METRICS_PORTS") else {
        eprintln!(
            "SKIPPED: the Prometheus part of this scenario: no E2E_METRICS_PORTS, so the controllers do not \
             listen on this host (e2e/run.sh --local sets it); through the API server's Service proxy each \
             scrape would reach one replica picked at random, and the replicas' series would interleave"
        );
        return None;
    };
    let targets = prometheus::controller_targets(&ports);
    assert_eq!(targets.len(), CONTROLLERS.len(), "E2E_METRICS_PORTS={ports}");
    Prometheus::start(&targets, &[rules]).await
}

/// Every alert of the rules file evaluated by Prometheus, after `since`, healthy (no error, such
/// as a many-to-many match, on the scenario's series), and each expression queried without error.
async fn prometheus_evaluates_every_alert(prometheus: &Prometheus, alerts: &[Expression], since: jiff::Timestamp) {
    wait_for("Prometheus to evaluate every alert on the scenario's series", || async {
        let rules = prometheus.rules().await?;
        let mut waiting = Vec::new();
        for alert in alerts {
            let rule = rules
                .iter()
                .find(|rule| rule["type"] == "alerting" && rule["name"] == alert.name.as_str())
                .unwrap_or_else(|| panic!("Prometheus did not load {}:\n{}", alert.name, prometheus.log()));
            let evaluated = rule["lastEvaluation"].as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok());
            match rule["health"].as_str() {
                Some("ok") if evaluated.is_some_and(|t| t > since) => {}
                Some("ok" | "unknown") => waiting.push(format!("{} (last evaluated {evaluated:?})", alert.name)),
                health => panic!("{}: health {health:?}: {}", alert.name, rule["lastError"]),
            }
        }
        if waiting.is_empty() { Ok(()) } else { Err(format!("not evaluated since {since}: {waiting:?}")) }
    })
    .await;
    for alert in alerts {
        if let Err(error) = prometheus.query(&alert.expr).await {
            panic!("{}: Prometheus refuses its expression: {error}\n{}", alert.name, alert.expr);
        }
    }
}

/// VisitorsRestoreFailed fires for the refused restore, and not for the one that succeeded.
async fn the_restore_failed_alert_fires_for_the_refused_restore_alone(prometheus: &Prometheus, namespace: &str) {
    let alerts_of = |restore: &str| {
        format!(r#"ALERTS{{alertname="VisitorsRestoreFailed",namespace="{namespace}",restore="{restore}"}}"#)
    };
    wait_for("Prometheus to fire VisitorsRestoreFailed for the refused restore", || async {
        let series = prometheus.query(&alerts_of(REFUSED)).await?;
        let firing = series.iter().any(|s| s["metric"]["alertstate"] == "firing");
        if firing { Ok(()) } else { Err(format!("{series:?}")) }
    })
    .await;
    assert_eq!(prometheus.query(&alerts_of("back")).await.unwrap(), Vec::<Value>::new(), "the restore that succeeded");
}

/// The dashboard's namespace variable, as Grafana asks Prometheus for its values, offers the
/// scenario's namespaces.
async fn the_namespace_variable_offers(prometheus: &Prometheus, board: &Value, namespaces: &[&str]) {
    let variables = board["templating"]["list"].as_array().cloned().unwrap_or_default();
    let variable = variables.iter().find(|v| v["name"] == "namespace").expect("a namespace variable");
    let definition = variable["definition"].as_str().unwrap_or_default();
    let (selector, label) =
        label_values_query(definition).unwrap_or_else(|| panic!("the namespace variable's query {definition:?}"));
    wait_for("the namespace variable to offer the scenario's namespaces", || async {
        let offered = prometheus.label_values(label, selector).await?;
        let absent: Vec<_> = namespaces.iter().filter(|n| !offered.iter().any(|o| o == *n)).collect();
        if absent.is_empty() { Ok(()) } else { Err(format!("{absent:?} not in {offered:?}")) }
    })
    .await;
}

/// Each query of each panel returns at least one series.
async fn every_panel_returns_series(prometheus: &Prometheus, queries: &[Expression]) {
    wait_for("every panel's query to return series", || async {
        let mut empty = Vec::new();
        for query in queries {
            let series = prometheus
                .query(&query.expr)
                .await
                .unwrap_or_else(|e| panic!("{}: Prometheus refuses `{}`: {e}", query.name, query.expr));
            if series.is_empty() {
                empty.push(format!("{}: {}", query.name, query.expr));
            }
        }
        if empty.is_empty() { Ok(()) } else { Err(format!("no series for:\n{}", empty.join("\n"))) }
    })
    .await;
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn alerts_and_dashboard_read_what_the_controllers_export_and_prometheus_evaluates_them() {
    let client = cluster().await;
    let alerts = rules_file_alerts();
    let board = dashboard();
    // Started before anything happens, so that it sees the runs, the drill and the restores.
    let prometheus = prometheus_scraping_the_controllers(alerts.len()).await;
    let ran = backup_and_restore_ran(&client).await;
    a_restore_to_a_time_to_come_is_refused(&client, &ran.name).await;
    let failing = an_app_whose_reconciles_fail(&client).await;
    let replicated = a_replicated_app(&client).await;
    // The namespaces whose objects have namespaced series (the quota's app has none).
    let namespaces = [ran.name.as_str(), replicated.name.as_str()];
    let queries = panel_queries(&board, &grafana_values(&board, &namespaces)).unwrap();

    // Prometheus evaluates a metric or label that no series has to nothing, without an error:
    // only this parse of each expression catches a misspelt or vanished name, or a `by` label
    // the metric lacks, so it stays beside Prometheus' own evaluation below.
    let checked: Vec<Expression> = alerts.iter().chain(&queries).cloned().collect();
    let texts = wait_for("every metric and label of the alerts and panels in the controllers' scrape", || async {
        let (scraped, texts) = scrape_all(&client).await?;
        let problems = missing(&checked, &scraped);
        if problems.is_empty() { Ok(texts) } else { Err(problems.join("\n")) }
    })
    .await;
    let scraped_at = jiff::Timestamp::now();
    eprintln!("checked {} alerts: {:?}", alerts.len(), alerts.iter().map(|a| a.name.as_str()).collect::<Vec<_>>());
    eprintln!("checked {} panel queries", queries.len());

    // The no-leader alert reads the leader gauge: each controller's only replica leads.
    for key in CONTROLLERS {
        let text = controller_metrics(&client, key).await.unwrap();
        let labels = format!(r#"controller="{key}-controller""#);
        assert_eq!(metric_value(&text, "visitors_operator_leader", &labels), Some(1.0), "{key}:\n{text}");
    }
    // What the alerts read has the values of what happened: nothing failed or is overdue but
    // the restore refused.
    let schedule = format!(r#"namespace="{}",schedule="{SCHEDULE}""#, ran.name);
    assert_eq!(metric_value(&texts, "visitors_operator_backup_schedule_last_run_failed", &schedule), Some(0.0));
    assert_eq!(metric_value(&texts, "visitors_operator_backup_schedule_overdue", &schedule), Some(0.0));
    let restore = format!(r#"namespace="{}",restore="back""#, ran.name);
    assert_eq!(metric_value(&texts, "visitors_operator_restore_failed", &restore), Some(0.0));
    let refused = format!(r#"namespace="{}",restore="{REFUSED}""#, ran.name);
    assert_eq!(metric_value(&texts, "visitors_operator_restore_failed", &refused), Some(1.0));
    let app = format!(r#"namespace="{}",visitors_app="two""#, replicated.name);
    assert_eq!(metric_value(&texts, "visitors_operator_mysql_replicas_replicating", &app), Some(1.0));
    assert_eq!(metric_value(&texts, "visitors_operator_mysql_writes_acknowledged", &app), Some(1.0));

    if let Some(prometheus) = &prometheus {
        // Two scrapes after the check above, the scenario's series are in Prometheus.
        prometheus_evaluates_every_alert(prometheus, &alerts, scraped_at + jiff::SignedDuration::from_secs(2)).await;
        the_restore_failed_alert_fires_for_the_refused_restore_alone(prometheus, &ran.name).await;
        the_namespace_variable_offers(prometheus, &board, &namespaces).await;
        every_panel_returns_series(prometheus, &queries).await;
    }
    drop(prometheus);
    replicated.delete().await;
    failing.delete().await;
    ran.delete().await;
}

#[test]
fn uses_carry_the_grouping_and_matching_labels_down_to_each_metric() {
    let uses = uses_of(
        r#"sum by (controller) (rate(a_total{result="failed"}[5m])) / on (controller) group_left (pod) max(b) > 0"#,
    )
    .unwrap();
    let labels = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(uses["a_total"], labels(&["controller", "pod", "result"]));
    assert_eq!(uses["b"], labels(&["controller", "pod"]));
    assert!(uses_of("sum(").is_err());
    assert!(uses_of(r#"{__name__="x"}"#).is_err(), "a selector must name its metric");
}

#[test]
fn scrape_labels_are_read_past_escaped_quotes_and_commas() {
    let text = "# HELP a_total A\n# TYPE a_total counter\n\
                a_total{controller=\"v\",error=\"a \\\"b\\\", c=\\\"d\"} 1\n\
                b 2\n";
    let scraped = exported(text);
    assert_eq!(scraped["a_total"], ["controller", "error"].iter().map(|s| s.to_string()).collect());
    assert!(scraped["b"].is_empty());
    assert!(!scraped.contains_key("# HELP a_total A"));
}

#[test]
fn a_metric_or_label_the_scrape_lacks_is_reported() {
    let alerts = [Expression { name: "A".into(), expr: r#"sum by (ns) (x_total{result="failed"}) > 0"#.into() }];
    let scraped = exported("x_total{result=\"ok\"} 1\n");
    assert_eq!(missing(&alerts, &scraped), [r#"A: x_total has no label ["ns"] (it has {"result"})"#]);
    assert_eq!(missing(&alerts, &Uses::new()), ["A: no controller exports x_total"]);
    let fine = exported("x_total{result=\"ok\",ns=\"a\"} 1\n");
    assert!(missing(&alerts, &fine).is_empty());
}

#[test]
fn every_alert_expression_of_the_chart_parses_and_names_its_metrics() {
    for alert in rules_file_alerts() {
        let uses = uses_of(&alert.expr).unwrap_or_else(|e| panic!("{}: {e}\n{}", alert.name, alert.expr));
        assert!(!uses.is_empty(), "{} reads no metric", alert.name);
        assert!(uses.keys().all(|m| m.starts_with("visitors_operator_")), "{}: {uses:?}", alert.name);
    }
}

#[test]
fn the_charts_rules_pass_promtool_check_rules() {
    if let Some(found) = prometheus::check_rules(&rules_file()) {
        assert_eq!(found, rules_file_alerts().len());
    }
}

#[test]
fn grafana_variables_are_replaced_in_both_forms_and_an_unknown_one_is_an_error() {
    let values = [("namespace", "(a|b)".to_string()), ("__range", "24h".to_string()), ("__rate", "x".to_string())];
    assert_eq!(
        substitute(r#"increase(m{namespace=~"$namespace"}[$__range]) / ${__rate}"#, &values).unwrap(),
        r#"increase(m{namespace=~"(a|b)"}[24h]) / x"#
    );
    assert_eq!(substitute("no variable", &values).unwrap(), "no variable");
    assert_eq!(substitute("m[$__interval]", &values).unwrap_err(), "no value for $__interval");
    assert_eq!(substitute("${namespace:regex}", &values).unwrap_err(), "no value for $namespace:regex");
    assert!(substitute("${namespace", &values).is_err());
}

#[test]
fn panel_queries_are_found_in_rows_and_collapsed_rows_with_their_variables_replaced() {
    let board = json!({"panels": [
        {"type": "row", "title": "Open", "panels": []},
        {"type": "stat", "title": "One", "targets": [{"refId": "A", "expr": "a{n=~\"$n\"}"}, {"refId": "B", "expr": "b"}]},
        {"type": "row", "title": "Collapsed", "collapsed": true, "panels": [
            {"type": "timeseries", "title": "Two", "targets": [{"refId": "A", "expr": "rate(c[$r])"}]},
        ]},
        {"type": "text", "title": "No query"},
    ]});
    let values = [("n", "x".to_string()), ("r", "1m".to_string())];
    let queries = panel_queries(&board, &values).unwrap();
    let found: Vec<(&str, &str)> = queries.iter().map(|q| (q.name.as_str(), q.expr.as_str())).collect();
    assert_eq!(
        found,
        [
            (r#"panel "One" query "A""#, r#"a{n=~"x"}"#),
            (r#"panel "One" query "B""#, "b"),
            (r#"panel "Two" query "A""#, "rate(c[1m])"),
        ]
    );
    assert!(panel_queries(&board, &values[..1]).unwrap_err().contains("no value for $r"));
}

#[test]
fn every_query_of_the_charts_dashboard_parses_once_grafanas_variables_are_replaced() {
    let board = dashboard();
    let targets = panels(&board).iter().map(|p| p["targets"].as_array().map_or(0, Vec::len)).sum::<usize>();
    let queries = panel_queries(&board, &grafana_values(&board, &["a", "b"])).unwrap();
    assert!(!queries.is_empty());
    assert_eq!(queries.len(), targets, "every target of every panel has a query");
    for query in queries {
        let uses = uses_of(&query.expr).unwrap_or_else(|e| panic!("{}: {e}\n{}", query.name, query.expr));
        assert!(uses.keys().all(|m| m.starts_with("visitors_operator_")), "{}: {uses:?}", query.name);
        assert!(!uses.is_empty(), "{} reads no metric", query.name);
    }
}

#[test]
fn the_default_range_and_the_label_values_query_are_read_as_grafana_writes_them() {
    assert_eq!(default_range("now-24h").as_deref(), Some("24h"));
    assert_eq!(default_range("now-7d").as_deref(), Some("7d"));
    assert_eq!(default_range("now-h"), None);
    assert_eq!(default_range("2024-01-01T00:00:00Z"), None);
    assert_eq!(
        label_values_query(r#"label_values({__name__=~"a_.+", b="c,d"}, namespace)"#),
        Some((r#"{__name__=~"a_.+", b="c,d"}"#, "namespace"))
    );
    assert_eq!(label_values_query("query_result(up)"), None);
}
