//! The reconcile's credentials step: the user's Secret, checked, or the generated one, created
//! once and owned by the app exactly when its deletion policy is Delete.

use controller_common::error::api_err;
use controller_common::ready;
use controller_common::step::Step;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use visitors_api::visitors_app::secret_keys;

use crate::build::{self, secret::Credentials};
use crate::context::{AppScope, Error};
use crate::validate::{self, InvalidApp, ValidApp};

/// The database credentials: as a read less than a resync period ago found them, else the
/// user's Secret checked, or the generated one (created once).
pub async fn current(scope: &AppScope<'_>, valid: &ValidApp<'_>) -> Result<Step<Credentials>, Error> {
    match scope.ctx.seen.credentials_within(scope.app, scope.runtime().resync) {
        Some(credentials) => Ok(Step::Ready(credentials)),
        None => read(scope, valid).await,
    }
}

/// The database credentials: the user's Secret checked, or the generated one (created once).
async fn read(scope: &AppScope<'_>, valid: &ValidApp<'_>) -> Result<Step<Credentials>, Error> {
    let source = &valid.credentials;
    let name = &source.name;
    let secret = if source.generated && scope.is_new() {
        ready!(generate(scope, name, false).await?)
    } else {
        match read_secret(scope, name).await? {
            Some(secret) => secret,
            None if source.generated => ready!(generate(scope, name, true).await?),
            None => return Ok(InvalidApp::SecretMissing { name: name.clone() }.into()),
        }
    };
    if source.generated
        && let Err(invalid) = validate::generated_secret_is_ours(&scope.name, &secret)
    {
        return Ok(invalid.into());
    }
    if let Err(invalid) = validate::user_secret(name, Some(&secret)) {
        return Ok(invalid.into());
    }
    if source.generated {
        sync_owner(scope, &secret).await?;
    }
    let text =
        |key: &str| String::from_utf8(validate::secret_value(&secret, key).unwrap_or_default()).unwrap_or_default();
    let credentials = Credentials {
        username: text(secret_keys::USERNAME),
        password: text(secret_keys::PASSWORD),
        root_password: text(secret_keys::ROOT_PASSWORD),
    };
    scope.ctx.seen.record_credentials(scope.app, credentials.clone());
    Ok(Step::Ready(credentials))
}

async fn read_secret(scope: &AppScope<'_>, name: &str) -> Result<Option<Secret>, Error> {
    Ok(scope.api::<Secret>().get_opt(name).await.map_err(api_err(format!("reading Secret {name}")))?)
}

/// Creates the generated Secret with new passwords, unless the database volume already exists:
/// new passwords for a volume initialised with the old ones would lock the backend out. A new
/// app's Secret is not read first (`found_absent` false): a volume kept from an earlier app of the
/// same name (deletionPolicy Retain) comes with its Secret, which is read then.
async fn generate(scope: &AppScope<'_>, name: &str, found_absent: bool) -> Result<Step<Secret>, Error> {
    if let Some(claim) = existing_claim(scope).await? {
        let kept = if found_absent { None } else { read_secret(scope, name).await? };
        return Ok(match kept {
            Some(secret) => Step::Ready(secret),
            None => InvalidApp::CredentialsLost { secret: name.to_string(), claim }.into(),
        });
    }
    let secret = build::secret::generated(scope.app, &Credentials::generate());
    Ok(Step::Ready(scope.create_or_read_secret(&secret).await?))
}

/// The name of the app's database volume claim, when it exists.
async fn existing_claim(scope: &AppScope<'_>) -> Result<Option<String>, Error> {
    let claim = build::mysql::claim_name(&scope.name);
    let claims = scope.api::<PersistentVolumeClaim>();
    let found =
        claims.get_metadata_opt(&claim).await.map_err(api_err(format!("reading PersistentVolumeClaim {claim}")))?;
    Ok(found.map(|_| claim))
}

/// Owns the generated Secret exactly when the deletion policy is Delete; patches only on a
/// change, so a converged app sends nothing.
async fn sync_owner(scope: &AppScope<'_>, secret: &Secret) -> Result<(), Error> {
    let uid = scope.app.uid();
    let current = secret.owner_references();
    let mine = |r: &OwnerReference| Some(&r.uid) == uid.as_ref();
    let wanted = build::secret::owner_references(scope.app);
    let have: Vec<&OwnerReference> = current.iter().filter(|r| mine(r)).collect();
    if have.len() == wanted.len() && have.iter().zip(&wanted).all(|(a, b)| *a == b) {
        return Ok(());
    }
    let mut refs: Vec<OwnerReference> = current.iter().filter(|r| !mine(r)).cloned().collect();
    refs.extend(wanted);
    let patch =
        serde_json::json!({ "metadata": { "ownerReferences": refs, "resourceVersion": secret.resource_version() } });
    let name = secret.name_any();
    scope
        .api::<Secret>()
        .patch_metadata(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(api_err(format!("updating the owner of Secret {name}")))?;
    Ok(())
}
