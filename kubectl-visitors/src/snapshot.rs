//! Reading the suite's state in one pass: every screen is built from one GET or LIST per kind,
//! sent together, never one request per object.

use std::collections::HashMap;

use kube::api::ListParams;
use kube::{Api, ResourceExt};
use visitors_api::labels::{DATABASE_LABEL, SCHEDULE_LABEL};
use visitors_api::{MySQLBackup, MySQLRestore, VisitorsApp};

use crate::client::Session;
use crate::error::Error;

/// One app and everything of the suite that names it.
#[derive(Debug, Clone)]
pub struct AppSnapshot {
    pub app: VisitorsApp,
    /// Schedules, their runs and on-demand backups of the app.
    pub backups: Vec<MySQLBackup>,
    /// Restores into the app.
    pub restores: Vec<MySQLRestore>,
}

/// Every app of a namespace (or of all), with the backups and restores beside them.
#[derive(Debug, Clone)]
pub struct ManySnapshot {
    pub apps: Vec<VisitorsApp>,
    pub backups: Vec<MySQLBackup>,
    pub restores: Vec<MySQLRestore>,
}

impl ManySnapshot {
    /// The snapshot of each app, in order: every backup and restore sorted to its app once.
    pub fn per_app(&self) -> Vec<AppSnapshot> {
        type Key = (Option<String>, String);
        let mut backups: HashMap<Key, Vec<MySQLBackup>> = HashMap::new();
        for backup in &self.backups {
            let key = (backup.namespace(), backup.spec.source.visitors_app.clone());
            backups.entry(key).or_default().push(backup.clone());
        }
        let mut restores: HashMap<Key, Vec<MySQLRestore>> = HashMap::new();
        for restore in &self.restores {
            let key = (restore.namespace(), restore.spec.target.visitors_app.clone());
            restores.entry(key).or_default().push(restore.clone());
        }
        self.apps
            .iter()
            .map(|app| {
                let key = (app.namespace(), app.name_any());
                AppSnapshot {
                    app: app.clone(),
                    backups: backups.remove(&key).unwrap_or_default(),
                    restores: restores.remove(&key).unwrap_or_default(),
                }
            })
            .collect()
    }

    /// The snapshot of one of its apps.
    pub fn of(&self, app: &VisitorsApp) -> AppSnapshot {
        let namespace = app.namespace();
        let name = app.name_any();
        AppSnapshot {
            app: app.clone(),
            backups: self
                .backups
                .iter()
                .filter(|b| b.namespace() == namespace && b.spec.source.visitors_app == name)
                .cloned()
                .collect(),
            restores: self
                .restores
                .iter()
                .filter(|r| r.namespace() == namespace && r.spec.target.visitors_app == name)
                .cloned()
                .collect(),
        }
    }
}

/// App `name` of the session's namespace: four requests, sent at once: the app; its runs (by
/// their app label); the namespace's schedules and unlabelled runs (a schedule or an on-demand
/// run a person created carries no app label); the namespace's restores. Lists are served
/// from the API server's cache, never read through to etcd.
pub async fn read_app(session: &Session, name: &str) -> Result<AppSnapshot, Error> {
    let namespace = &session.namespace;
    let apps: Api<VisitorsApp> = Api::namespaced(session.client.clone(), namespace);
    let runs = ListParams::default().labels(&format!("{DATABASE_LABEL}={name}"));
    let unlabelled = ListParams::default().labels(&format!("!{DATABASE_LABEL}"));
    let (app, mut backups, others, restores) = futures::try_join!(
        async { apps.get(name).await.map_err(|e| Error::from_api("get", "visitorsapps", namespace, Some(name), e)) },
        list::<MySQLBackup>(session, false, "mysqlbackups", runs),
        list::<MySQLBackup>(session, false, "mysqlbackups", unlabelled),
        list::<MySQLRestore>(session, false, "mysqlrestores", ListParams::default()),
    )?;
    backups.extend(others);
    Ok(ManySnapshot { apps: vec![app.clone()], backups, restores }.of(&app))
}

/// Every app of the session's namespace, or of all namespaces: three LISTs, sent at once.
pub async fn read_many(session: &Session, all_namespaces: bool) -> Result<ManySnapshot, Error> {
    let everything = ListParams::default;
    let (apps, backups, restores) = futures::try_join!(
        list::<VisitorsApp>(session, all_namespaces, "visitorsapps", everything()),
        list::<MySQLBackup>(session, all_namespaces, "mysqlbackups", everything()),
        list::<MySQLRestore>(session, all_namespaces, "mysqlrestores", everything()),
    )?;
    Ok(ManySnapshot { apps, backups, restores })
}

async fn list<K>(session: &Session, all_namespaces: bool, resource: &str, params: ListParams) -> Result<Vec<K>, Error>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = if all_namespaces {
        Api::all(session.client.clone())
    } else {
        Api::namespaced(session.client.clone(), &session.namespace)
    };
    let namespace = if all_namespaces { "(all)" } else { session.namespace.as_str() };
    let listed =
        api.list(&params.match_any()).await.map_err(|e| Error::from_api("list", resource, namespace, None, e))?;
    let mut items = listed.items;
    items.sort_by_key(|item| (item.namespace(), item.name_any()));
    Ok(items)
}

/// The schedule a run belongs to, by its label.
pub fn schedule_of(run: &MySQLBackup) -> Option<&str> {
    run.labels().get(SCHEDULE_LABEL).map(String::as_str)
}

/// The newest of `objects` by creation time (then name): the last run of a schedule, the last
/// restore of an app.
pub fn newest<'a, K: ResourceExt + 'a>(objects: impl Iterator<Item = &'a K>) -> Option<&'a K> {
    objects.max_by_key(|o| (o.meta().creation_timestamp.as_ref().map(|t| t.0), o.name_any()))
}
