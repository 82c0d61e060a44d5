//! The book's app with rows and a claim for backups, and a backup of it: what the MySQLBackup
//! scenarios (`tests/backup.rs`, `tests/backup_schedule.rs`) start from.

use kube::Client;
use serde_json::{Value, json};
use visitors_api::MySQLBackup;

use crate::{TestNamespace, ready_app_with_claim_and_rows};

/// The app of every backup scenario.
pub const APP: &str = "ex";
/// The claim backups are stored on.
pub const CLAIM: &str = "backups";

/// A namespace with the book's app Ready, rows written into its database, and a claim for
/// backups.
pub async fn ready_app_with_rows(client: &Client, prefix: &str) -> TestNamespace {
    let sql = "CREATE TABLE IF NOT EXISTS visitors.e2e_rows (id INT PRIMARY KEY, note VARCHAR(64)); \
               INSERT INTO visitors.e2e_rows SELECT seq, CONCAT('row ', seq) FROM seq_1_to_500;";
    ready_app_with_claim_and_rows(client, prefix, APP, CLAIM, sql).await
}

/// A MySQLBackup `name` of [`APP`] to [`CLAIM`], with `extra` fields of its spec.
pub fn backup_object(name: &str, extra: Value) -> MySQLBackup {
    let mut spec = json!({
        "source": {"visitorsApp": APP},
        "storage": {"persistentVolumeClaim": {"claimName": CLAIM}},
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(
        json!({"apiVersion": "example.com/v1", "kind": "MySQLBackup", "metadata": {"name": name}, "spec": spec}),
    )
    .unwrap()
}
