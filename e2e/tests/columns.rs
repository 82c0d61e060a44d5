//! `kubectl get` on the real API server: the Table form (what kubectl prints) of each kind has
//! the CRD's printer columns, and the rows of a finished backup run and restore show their
//! phase, size and duration from their status.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Value, json};
use visitors_api::backup::BackupPhase;
use visitors_api::restore::RestorePhase;
use visitors_api::{MySQLBackup, MySQLRestore, VisitorsApp};
use visitors_e2e::{TestNamespace, app_ready_at_generation, cluster, ready_app_with_claim_and_rows, wait_for};

const APP: &str = "ex";
const CLAIM: &str = "backups";

/// `kubectl get <plural>` as the API server answers it: a meta.k8s.io/v1 Table.
async fn table(client: &Client, namespace: &str, plural: &str) -> Value {
    let path = format!("/apis/example.com/v1/namespaces/{namespace}/{plural}");
    let request = http::Request::get(&path)
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
    let text = client.request_text(request).await.unwrap_or_else(|e| panic!("GET {path} as Table: {e}"));
    let table: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(table["kind"], "Table", "{text}");
    table
}

fn column_names(table: &Value) -> Vec<String> {
    table["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect()
}

/// The cells of the row of object `name`, by column name.
fn row(table: &Value, name: &str) -> std::collections::BTreeMap<String, Value> {
    let row = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["object"]["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no row for {name} in {table}"));
    column_names(table).into_iter().zip(row["cells"].as_array().unwrap().iter().cloned()).collect()
}

/// The CRD's printer columns as the API server serves them: Name, then each column.
async fn crd_columns(client: &Client, crd: &str) -> Vec<String> {
    let crd = Api::<CustomResourceDefinition>::all(client.clone()).get(crd).await.expect("get the CRD");
    let columns = crd.spec.versions[0].additional_printer_columns.clone().unwrap_or_default();
    std::iter::once("Name".to_string()).chain(columns.into_iter().map(|c| c.name)).collect()
}

async fn finished<K, P>(api: &Api<K>, name: &str, phase: impl Fn(&K) -> Option<P>, ended: impl Fn(&P) -> bool) -> K
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    P: std::fmt::Debug,
{
    wait_for(&format!("{name} to finish"), || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        match phase(&object) {
            Some(p) if ended(&p) => Ok(object),
            p => Err(format!("phase {p:?}")),
        }
    })
    .await
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn kubectl_get_shows_phase_size_duration_and_schedule_columns() {
    let client = cluster().await;
    let seed = "CREATE TABLE IF NOT EXISTS visitors.e2e_rows (id INT PRIMARY KEY); \
                INSERT INTO visitors.e2e_rows SELECT seq FROM seq_1_to_100;";
    let namespace: TestNamespace = ready_app_with_claim_and_rows(&client, "e2e-columns", APP, CLAIM, seed).await;
    let ns = namespace.name.as_str();
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), ns);
    let run = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "MySQLBackup", "metadata": {"name": "once"},
        "spec": {"source": {"visitorsApp": APP}, "storage": {"persistentVolumeClaim": {"claimName": CLAIM}}},
    }))
    .unwrap();
    backups.create(&PostParams::default(), &run).await.expect("create the run");
    let schedule = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "MySQLBackup", "metadata": {"name": "yearly"},
        "spec": {"source": {"visitorsApp": APP}, "storage": {"persistentVolumeClaim": {"claimName": CLAIM}},
                 "schedule": {"cron": "0 3 1 1 *"}},
    }))
    .unwrap();
    backups.create(&PostParams::default(), &schedule).await.expect("create the schedule");
    let run = finished(
        &backups,
        "once",
        |b| b.status.as_ref()?.phase,
        |p| matches!(p, BackupPhase::Succeeded | BackupPhase::Failed),
    )
    .await;
    let run_status = run.status.clone().unwrap();
    assert_eq!(run_status.phase, Some(BackupPhase::Succeeded), "{run_status:?}");

    let restores: Api<MySQLRestore> = Api::namespaced(client.clone(), ns);
    let restore = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "MySQLRestore", "metadata": {"name": "back"},
        "spec": {"source": {"backup": "once"}, "target": {"visitorsApp": APP}},
    }))
    .unwrap();
    restores.create(&PostParams::default(), &restore).await.expect("create the restore");
    let restore = finished(
        &restores,
        "back",
        |r| r.status.as_ref()?.phase,
        |p| matches!(p, RestorePhase::Succeeded | RestorePhase::Failed),
    )
    .await;
    let restore_status = restore.status.clone().unwrap();
    assert_eq!(restore_status.phase, Some(RestorePhase::Succeeded), "{restore_status:?}");
    // The backend, stopped during the restore, is back.
    let apps: Api<VisitorsApp> = Api::namespaced(client.clone(), ns);
    let ready_app =
        wait_for("the app to be Ready again after the restore", || app_ready_at_generation(&apps, APP, 1)).await;
    let ready_reason = ready_app.status.unwrap().conditions.into_iter().find(|c| c.type_ == "Ready").unwrap().reason;
    // The schedule has computed its next fire time.
    let yearly = wait_for("the schedule's next fire time", || async {
        let s = backups.get("yearly").await.map_err(|e| e.to_string())?;
        s.status.clone().and_then(|st| st.next_schedule_time.map(|_| s)).ok_or_else(|| "not yet".to_string())
    })
    .await;

    for (plural, crd, at_a_glance) in [
        ("visitorsapps", "visitorsapps.example.com", &["Ready", "Reason", "Age"][..]),
        ("mysqlbackups", "mysqlbackups.example.com", &["Phase", "Size", "Duration", "Last", "Next", "Age"][..]),
        ("mysqlrestores", "mysqlrestores.example.com", &["Phase", "Duration", "Age"][..]),
    ] {
        let table = table(&client, ns, plural).await;
        let columns = column_names(&table);
        assert_eq!(columns, crd_columns(&client, crd).await, "{plural}: the Table's columns are the CRD's");
        for column in at_a_glance {
            let shown = table["columnDefinitions"].as_array().unwrap().iter().find(|c| c["name"] == *column);
            let priority = shown.map(|c| c["priority"].as_i64().unwrap_or(0));
            assert_eq!(priority, Some(0), "{plural}: column {column} is shown by plain `kubectl get`: {columns:?}");
        }
    }

    let runs = table(&client, ns, "mysqlbackups").await;
    let once = row(&runs, "once");
    eprintln!("kubectl get mysqlbackups, row of run once: {once:?}");
    assert_eq!(once["Phase"], "Succeeded");
    assert_eq!(once["Size"], json!(run_status.size_bytes.unwrap()));
    assert!(run_status.size_bytes.unwrap() > 0);
    assert_eq!(once["Duration"].as_f64(), run_status.duration_seconds, "{once:?}");
    assert!(once["Age"].as_str().is_some_and(|age| !age.is_empty()), "{once:?}");
    let yearly_row = row(&runs, "yearly");
    eprintln!("kubectl get mysqlbackups, row of schedule yearly: {yearly_row:?}");
    assert_eq!(yearly_row["Schedule"], "0 3 1 1 *");
    let next = serde_json::to_value(yearly.status.unwrap().next_schedule_time.unwrap()).unwrap();
    assert_eq!(yearly_row["Next"], next, "{yearly_row:?}");

    let restores_table = table(&client, ns, "mysqlrestores").await;
    let back = row(&restores_table, "back");
    eprintln!("kubectl get mysqlrestores, row of back: {back:?}");
    assert_eq!(back["Phase"], "Succeeded");
    assert_eq!(back["Backup"], "once");
    assert_eq!(back["Duration"].as_f64(), restore_status.duration_seconds, "{back:?}");

    let app_table = table(&client, ns, "visitorsapps").await;
    let app = row(&app_table, APP);
    eprintln!("kubectl get visitorsapps, row of {APP}: {app:?}");
    assert_eq!(app["Ready"], "True");
    assert_eq!(app["Reason"], ready_reason.as_str(), "{app:?}");
    namespace.delete().await;
}
