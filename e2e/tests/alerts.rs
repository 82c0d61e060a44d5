//! The chart's alerts against the metrics the controllers really export: after a scheduled
//! backup run with binary log archiving and a restore drill, a restore of it, a reconcile that
//! fails (a ResourceQuota forbids an app's children) and an app with two MySQL servers
//! replicating, the three running controllers are
//! scraped, every expression of helm/visitors-operator/files/prometheus-rules.yaml is parsed
//! with `promql-parser`, and each metric name and label it uses must be in the scrape. The
//! names are read from the rules file only, never listed here.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use promql_parser::label::METRIC_NAME;
use promql_parser::parser::{self, Expr, LabelModifier};
use serde_json::json;
use visitors_api::backup::BackupPhase;
use visitors_api::restore::RestorePhase;
use visitors_api::{MySQLBackup, MySQLRestore, VisitorsApp};
use visitors_e2e::{
    TestNamespace, cluster, controller_metrics, create_book_app, metric_value, ready_app_with_claim_and_rows,
    repo_root, wait_for,
};

const APP: &str = "ex";
const CLAIM: &str = "backups";
const SCHEDULE: &str = "minutely";
const CONTROLLERS: [&str; 3] = ["visitors", "backup", "restore"];

/// An alert of the rules file: its name and expression.
struct Alert {
    name: String,
    expr: String,
}

fn rules_file_alerts() -> Vec<Alert> {
    let path = repo_root().join("helm/visitors-operator/files/prometheus-rules.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rules: serde_json::Value =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
    let alerts: Vec<Alert> = rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|group| group["rules"].as_array().cloned().unwrap_or_default())
        .filter_map(|rule| {
            Some(Alert { name: rule["alert"].as_str()?.to_string(), expr: rule["expr"].as_str()?.to_string() })
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

/// What the alerts need that the scrape lacks, one line per problem (empty: all there).
fn missing(alerts: &[Alert], scraped: &Uses) -> Vec<String> {
    let mut problems = Vec::new();
    for alert in alerts {
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

/// A namespace whose quota forbids Services, StatefulSets and Deployments, with an app in
/// it: every reconcile of the app fails (403 from the quota), as a real failure would.
/// An app with a primary and a replica, replicating: the replication metrics have samples.
async fn a_replicated_app(client: &Client) -> TestNamespace {
    let namespace = TestNamespace::create(client, "e2e-alerts-replicated").await;
    let apps = Api::<VisitorsApp>::namespaced(client.clone(), &namespace.name);
    visitors_e2e::replication::create_replicated_app(&apps, "two", 2).await;
    namespace
}

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

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn every_alert_expression_uses_only_metrics_and_labels_the_controllers_export() {
    let client = cluster().await;
    let alerts = rules_file_alerts();
    let ran = backup_and_restore_ran(&client).await;
    let failing = an_app_whose_reconciles_fail(&client).await;
    let replicated = a_replicated_app(&client).await;

    let texts = wait_for("every metric and label of the alerts in the controllers' scrape", || async {
        let (scraped, texts) = scrape_all(&client).await?;
        let problems = missing(&alerts, &scraped);
        if problems.is_empty() { Ok(texts) } else { Err(problems.join("\n")) }
    })
    .await;
    eprintln!("checked {} alerts: {:?}", alerts.len(), alerts.iter().map(|a| a.name.as_str()).collect::<Vec<_>>());

    // The no-leader alert reads the leader gauge: each controller's only replica leads.
    for key in CONTROLLERS {
        let text = controller_metrics(&client, key).await.unwrap();
        let labels = format!(r#"controller="{key}-controller""#);
        assert_eq!(metric_value(&text, "visitors_operator_leader", &labels), Some(1.0), "{key}:\n{text}");
    }
    // What the alerts read has the values of what happened: nothing failed or is overdue.
    let schedule = format!(r#"namespace="{}",schedule="{SCHEDULE}""#, ran.name);
    assert_eq!(metric_value(&texts, "visitors_operator_backup_schedule_last_run_failed", &schedule), Some(0.0));
    assert_eq!(metric_value(&texts, "visitors_operator_backup_schedule_overdue", &schedule), Some(0.0));
    let restore = format!(r#"namespace="{}",restore="back""#, ran.name);
    assert_eq!(metric_value(&texts, "visitors_operator_restore_failed", &restore), Some(0.0));
    let app = format!(r#"namespace="{}",visitors_app="two""#, replicated.name);
    assert_eq!(metric_value(&texts, "visitors_operator_mysql_replicas_replicating", &app), Some(1.0));
    assert_eq!(metric_value(&texts, "visitors_operator_mysql_writes_acknowledged", &app), Some(1.0));
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
    let alerts = [Alert { name: "A".into(), expr: r#"sum by (ns) (x_total{result="failed"}) > 0"#.into() }];
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
