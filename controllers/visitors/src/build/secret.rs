//! The generated credentials Secret. It is created once (never applied again, so never rotated)
//! and owned by the app only under `deletionPolicy: Delete`: with `Retain` it outlives the app
//! together with the data volume, so that a new app of the same name can open the old data.

use std::collections::BTreeMap;
use std::fmt;

use controller_common::password::random_password;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;
use visitors_api::VisitorsApp;
use visitors_api::labels::{Component, labels, names};
use visitors_api::visitors_app::{DATABASE_USER, DeletionPolicy, secret_keys};

use super::owner_reference;

/// Freshly generated database credentials. `Debug` never shows the passwords.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
    pub root_password: String,
}

impl Credentials {
    /// Random passwords from the operating system's CSPRNG-seeded thread generator.
    pub fn generate() -> Self {
        Self { username: DATABASE_USER.to_string(), password: random_password(), root_password: random_password() }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials").field("username", &self.username).finish_non_exhaustive()
    }
}

/// The name of the Secret the app's pods read: the user's, or the generated one.
pub fn secret_name(app: &VisitorsApp) -> String {
    app.spec.credentials_secret.clone().unwrap_or_else(|| names::credentials_secret(&app.name_any()))
}

/// Whether the controller generates (and may own) the Secret.
pub fn is_generated(app: &VisitorsApp) -> bool {
    app.spec.credentials_secret.is_none()
}

/// Owner references the generated Secret should carry under the app's deletion policy.
pub fn owner_references(app: &VisitorsApp) -> Vec<OwnerReference> {
    match app.spec.deletion_policy() {
        DeletionPolicy::Delete => vec![owner_reference(app)],
        DeletionPolicy::Retain => Vec::new(),
    }
}

/// The generated Secret holding `credentials`.
pub fn generated(app: &VisitorsApp, credentials: &Credentials) -> Secret {
    let data = BTreeMap::from([
        (secret_keys::USERNAME.to_string(), ByteString(credentials.username.clone().into_bytes())),
        (secret_keys::PASSWORD.to_string(), ByteString(credentials.password.clone().into_bytes())),
        (secret_keys::ROOT_PASSWORD.to_string(), ByteString(credentials.root_password.clone().into_bytes())),
    ]);
    Secret {
        metadata: ObjectMeta {
            name: Some(names::credentials_secret(&app.name_any())),
            namespace: app.namespace(),
            labels: Some(labels(&app.name_any(), Component::Mysql)),
            owner_references: Some(owner_references(app)).filter(|refs| !refs.is_empty()),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_string()),
        data: Some(data),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::book_app;

    #[test]
    fn generated_passwords_are_long_random_and_distinct() {
        let a = Credentials::generate();
        let b = Credentials::generate();
        assert_eq!(a.password.len(), controller_common::password::PASSWORD_LEN);
        assert!(a.password.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a.password, b.password);
        assert_ne!(a.password, a.root_password);
        assert_eq!(a.username, DATABASE_USER);
    }

    #[test]
    fn debug_never_shows_passwords() {
        let credentials = Credentials::generate();
        let shown = format!("{credentials:?}");
        assert!(!shown.contains(&credentials.password) && !shown.contains(&credentials.root_password), "{shown}");
    }

    #[test]
    fn secret_holds_the_three_keys() {
        let credentials = Credentials::generate();
        let secret = generated(&book_app(), &credentials);
        assert_eq!(secret.metadata.name.as_deref(), Some("ex-mysql-credentials"));
        let data = secret.data.unwrap();
        for key in secret_keys::REQUIRED {
            assert!(data.contains_key(key), "missing {key}");
        }
        assert_eq!(data[secret_keys::PASSWORD].0, credentials.password.as_bytes());
    }

    #[test]
    fn retained_secret_is_not_owned_and_deleted_one_is() {
        let mut app = book_app();
        assert!(generated(&app, &Credentials::generate()).metadata.owner_references.is_none());
        app.spec.deletion_policy = Some(DeletionPolicy::Delete);
        let secret = generated(&app, &Credentials::generate());
        assert_eq!(secret.metadata.owner_references.unwrap()[0].name, "ex");
    }

    #[test]
    fn user_secret_is_used_instead() {
        let mut app = book_app();
        assert_eq!(secret_name(&app), "ex-mysql-credentials");
        app.spec.credentials_secret = Some("mine".into());
        assert_eq!(secret_name(&app), "mine");
        assert!(!is_generated(&app));
    }
}
