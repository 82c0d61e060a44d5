//! What can go wrong, each with a message a person can act on and an exit code.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot load the kubeconfig: {0}")]
    Kubeconfig(String),
    #[error(
        "you may not {verb} {resource} in namespace {namespace}: {message}\n  ask your cluster admin for a Role that grants it (docs/kubectl-plugin.md lists what each command needs)"
    )]
    Forbidden { verb: &'static str, resource: String, namespace: String, message: String },
    #[error("{kind} {name} not found in namespace {namespace}")]
    NotFound { kind: &'static str, name: String, namespace: String },
    #[error("the API server refused to {action}: {message}")]
    Api { action: String, message: String },
    #[error("{0}")]
    Refused(String),
    #[error("{what} failed: {message}")]
    Failed { what: String, message: String },
    #[error("gave up waiting for {what} after {seconds} s; it goes on: follow it with `kubectl visitors status`")]
    GaveUpWaiting { what: String, seconds: u64 },
    #[error("not confirmed: nothing was created")]
    NotConfirmed,
    #[error("{0}")]
    Io(String),
}

impl Error {
    /// The API error of `verb` on `resource`, read for a person: RBAC refusals and missing
    /// objects named plainly, anything else with the server's own message.
    pub fn from_api(
        verb: &'static str,
        resource: &str,
        namespace: &str,
        name: Option<&str>,
        error: kube::Error,
    ) -> Self {
        match &error {
            kube::Error::Api(status) if status.code == 403 => Error::Forbidden {
                verb,
                resource: resource.to_string(),
                namespace: namespace.to_string(),
                message: status.message.clone(),
            },
            kube::Error::Api(status) if status.code == 404 && name.is_some() => Error::NotFound {
                kind: kind_of(resource),
                name: name.unwrap_or_default().to_string(),
                namespace: namespace.to_string(),
            },
            _ => Error::Api {
                action: match name {
                    Some(name) => format!("{verb} {resource} {name} in namespace {namespace}"),
                    None => format!("{verb} {resource} in namespace {namespace}"),
                },
                message: match error {
                    kube::Error::Api(status) => status.message,
                    other => other.to_string(),
                },
            },
        }
    }

    /// The process's exit code: 1 for a failure of what was asked, 2 for a request refused
    /// before anything was done (kubectl's convention for usage errors is 1; scripts can tell
    /// a refused restore from a failed one).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Refused(_) | Error::NotConfirmed => 2,
            _ => 1,
        }
    }
}

fn kind_of(resource: &str) -> &'static str {
    match resource {
        "visitorsapps" => "VisitorsApp",
        "mysqlbackups" => "MySQLBackup",
        "mysqlrestores" => "MySQLRestore",
        _ => "object",
    }
}
