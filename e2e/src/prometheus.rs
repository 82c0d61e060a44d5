//! A real Prometheus (Debian's `prometheus` package) on this host for the e2e scenarios: it
//! scrapes targets and evaluates rule files every second, as a production Prometheus does every
//! 15 s or so, and answers PromQL over its HTTP API. Its configuration and TSDB live in a
//! folder of its own, it listens on a free port of 127.0.0.1, and it is killed (and its folder
//! removed) when dropped, also when a test fails. Without the program, a scenario skips its
//! Prometheus part saying why, unless `VISITORS_REQUIRE_PROMETHEUS=1` (CI) makes that a failure.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use serde_json::{Value, json};

/// The variable that turns a missing `prometheus` or `promtool` into a failure.
pub const REQUIRE: &str = "VISITORS_REQUIRE_PROMETHEUS";

/// What Prometheus scrapes: `address` (`host:port`, at `/metrics`) under the label `job`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub job: String,
    pub address: String,
}

/// The controllers listening on this host at the ports of `metrics_ports` (`visitors=18080,...`,
/// as e2e/run.sh --local sets `E2E_METRICS_PORTS`), each its own job, `<key>-controller`.
pub fn controller_targets(metrics_ports: &str) -> Vec<Target> {
    metrics_ports
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, port)| Target { job: format!("{key}-controller"), address: format!("127.0.0.1:{port}") })
        .collect()
}

/// Prometheus' configuration (JSON is YAML): every target scraped and every rule evaluated each
/// second. The scrape keeps the targets' own labels (`honor_labels`), as the chart's
/// ServiceMonitors do.
pub fn config(targets: &[Target], rule_files: &[PathBuf]) -> Value {
    let scrapes: Vec<Value> = targets
        .iter()
        .map(|target| {
            json!({"job_name": target.job, "honor_labels": true, "static_configs": [{"targets": [target.address]}]})
        })
        .collect();
    json!({
        // The timeout may not exceed the interval, and defaults to 10 s.
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": rule_files,
        "scrape_configs": scrapes,
    })
}

/// A running Prometheus; killed when dropped.
pub struct Prometheus {
    child: Mutex<Child>,
    dir: PathBuf,
    port: u16,
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` and evaluating `rule_files`, and waits until it
    /// serves; `None`, with a SKIPPED line, when the program is missing.
    pub async fn start(targets: &[Target], rule_files: &[PathBuf]) -> Option<Self> {
        let program = visitors_test_support::programs_or_skip(&["prometheus"], REQUIRE)?.remove(0);
        let dir = fresh_dir();
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, config(targets, rule_files).to_string()).expect("write prometheus.yml");
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("create prometheus.log");
        let port = visitors_test_support::free_port();
        let child = Command::new(program)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus starts");
        let prometheus = Self { child: Mutex::new(child), dir, port };
        prometheus.until_ready().await;
        Some(prometheus)
    }

    async fn until_ready(&self) {
        crate::wait_for("Prometheus to be ready", || async {
            if let Ok(Some(status)) = self.child.lock().unwrap().try_wait() {
                panic!("prometheus exited ({status}) before it was ready:\n{}", self.log());
            }
            let answer = crate::http_get(&format!("http://127.0.0.1:{}/-/ready", self.port)).await?;
            if answer.contains("Ready") { Ok(()) } else { Err(answer) }
        })
        .await
    }

    /// What Prometheus logged so far, for a failure's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// The series of the instant query `promql` now (`data.result`); an error is the query's,
    /// as Prometheus words it, or the request's.
    pub async fn query(&self, promql: &str) -> Result<Vec<Value>, String> {
        let data = self.api("/api/v1/query", &[("query", promql)]).await?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// The values label `label` has in the series `selector` selects, as Grafana's
    /// `label_values(selector, label)` lists them.
    pub async fn label_values(&self, label: &str, selector: &str) -> Result<Vec<String>, String> {
        let data = self.api(&format!("/api/v1/label/{label}/values"), &[("match[]", selector)]).await?;
        Ok(data.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect())
    }

    /// Every rule of every group Prometheus evaluates, with its `health`, `lastError` and, for
    /// an alerting rule, `state` (`/api/v1/rules`).
    pub async fn rules(&self) -> Result<Vec<Value>, String> {
        let data = self.api("/api/v1/rules", &[]).await?;
        let groups = data["groups"].as_array().cloned().unwrap_or_default();
        Ok(groups.iter().flat_map(|group| group["rules"].as_array().cloned().unwrap_or_default()).collect())
    }

    /// The `data` of an answer of Prometheus' HTTP API.
    async fn api(&self, path: &str, parameters: &[(&str, &str)]) -> Result<Value, String> {
        let url = format!("http://127.0.0.1:{}{path}?{}", self.port, query_string(parameters));
        let body = crate::http_get(&url).await?;
        let answer: Value = serde_json::from_str(&body).map_err(|e| format!("{path}: {e}: {body}"))?;
        match answer["status"].as_str() {
            Some("success") => Ok(answer["data"].clone()),
            _ => Err(format!("{path} {parameters:?}: {} {}", answer["errorType"], answer["error"])),
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A new empty folder in the temporary directory, for one Prometheus.
fn fresh_dir() -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let dir = std::env::temp_dir().join(format!("visitors-e2e-prometheus-{}-{nanos:x}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

/// `key=value&...`, percent-encoded (PromQL is full of `{`, `"`, `=`, `+` and spaces).
pub fn query_string(parameters: &[(&str, &str)]) -> String {
    let encode = |text: &str| {
        text.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    parameters.iter().map(|(key, value)| format!("{}={}", encode(key), encode(value))).collect::<Vec<_>>().join("&")
}

/// `promtool check rules` on `rules`: the number of rules it found, or `None` (with a SKIPPED
/// line) without promtool. Fails the test, with promtool's words, when the check fails.
pub fn check_rules(rules: &Path) -> Option<usize> {
    let promtool = visitors_test_support::programs_or_skip(&["promtool"], REQUIRE)?.remove(0);
    let output = Command::new(promtool).args(["check", "rules"]).arg(rules).output().expect("promtool runs");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "promtool check rules {}:\n{text}", rules.display());
    Some(rules_found(&text).unwrap_or_else(|| panic!("promtool said no `SUCCESS: N rules found`:\n{text}")))
}

/// N of promtool's `SUCCESS: N rules found`.
fn rules_found(output: &str) -> Option<usize> {
    output.lines().find_map(|line| line.trim().strip_prefix("SUCCESS: ")?.strip_suffix(" rules found")?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_controller_of_the_metrics_ports_is_a_job_on_this_host() {
        assert_eq!(
            controller_targets("visitors=18080,backup=18081"),
            [
                Target { job: "visitors-controller".into(), address: "127.0.0.1:18080".into() },
                Target { job: "backup-controller".into(), address: "127.0.0.1:18081".into() },
            ]
        );
        assert!(controller_targets("").is_empty());
    }

    #[test]
    fn the_config_scrapes_and_evaluates_every_second_within_a_timeout_prometheus_accepts() {
        let target = Target { job: "backup-controller".into(), address: "127.0.0.1:18081".into() };
        let config = config(&[target], &[PathBuf::from("/r/rules.yaml")]);
        assert_eq!(config["global"]["scrape_interval"], "1s");
        assert_eq!(config["global"]["evaluation_interval"], "1s");
        assert_eq!(config["global"]["scrape_timeout"], "1s");
        assert_eq!(config["rule_files"], json!(["/r/rules.yaml"]));
        let scrape = &config["scrape_configs"][0];
        assert_eq!(scrape["job_name"], "backup-controller");
        assert_eq!(scrape["honor_labels"], true);
        assert_eq!(scrape["static_configs"][0]["targets"], json!(["127.0.0.1:18081"]));
    }

    #[test]
    fn promql_is_percent_encoded() {
        assert_eq!(
            query_string(&[("query", r#"sum by (a) (x{n=~"a|b"}) + 1"#), ("match[]", "{}")]),
            "query=sum%20by%20%28a%29%20%28x%7Bn%3D~%22a%7Cb%22%7D%29%20%2B%201&match%5B%5D=%7B%7D"
        );
    }

    #[test]
    fn promtools_count_of_rules_is_read() {
        let output = "Checking /r/rules.yaml\n  SUCCESS: 14 rules found\n\n";
        assert_eq!(rules_found(output), Some(14));
        assert_eq!(rules_found("Checking /r/rules.yaml\n  FAILED:\n"), None);
    }

    #[test]
    fn promtool_refuses_a_rule_that_does_not_parse() {
        let Some(promtool) = visitors_test_support::programs_or_skip(&["promtool"], REQUIRE) else { return };
        let file = fresh_dir().join("bad.yaml");
        std::fs::write(&file, "groups: [{name: g, rules: [{alert: A, expr: 'sum(('}]}]").unwrap();
        let output = Command::new(&promtool[0]).args(["check", "rules"]).arg(&file).output().unwrap();
        let _ = std::fs::remove_dir_all(file.parent().unwrap());
        assert!(!output.status.success(), "{output:?}");
    }

    /// The helper against the real program: it starts, evaluates a rule file, answers queries
    /// (an error for a broken one), and is gone once dropped.
    #[tokio::test]
    async fn a_started_prometheus_evaluates_its_rules_and_answers_queries() {
        let rules_dir = fresh_dir();
        let rules = rules_dir.join("rules.yaml");
        std::fs::write(&rules, "groups: [{name: g, rules: [{alert: Always, expr: 'vector(1) > 0'}]}]").unwrap();
        let Some(prometheus) = Prometheus::start(&[], std::slice::from_ref(&rules)).await else { return };
        let firing = crate::wait_for("the Always alert to fire", || async {
            let alerts = prometheus.query(r#"ALERTS{alertname="Always",alertstate="firing"}"#).await?;
            if alerts.is_empty() { Err("not firing yet".to_string()) } else { Ok(alerts) }
        })
        .await;
        assert_eq!(firing[0]["metric"]["alertname"], "Always");
        let evaluated = prometheus.rules().await.unwrap();
        assert_eq!(evaluated.len(), 1);
        assert_eq!(evaluated[0]["health"], "ok", "{evaluated:?}");
        let error = prometheus.query("sum((").await.unwrap_err();
        assert!(error.contains("bad_data"), "{error}");
        assert!(prometheus.label_values("alertname", "ALERTS").await.unwrap().contains(&"Always".to_string()));

        let (pid, dir) = (prometheus.child.lock().unwrap().id(), prometheus.dir.clone());
        drop(prometheus);
        let _ = std::fs::remove_dir_all(&rules_dir);
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(state.is_empty(), "prometheus {pid} still runs: {state}");
        assert!(!dir.exists(), "{} is left", dir.display());
    }
}
