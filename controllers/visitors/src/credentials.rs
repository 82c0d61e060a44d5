//! The database credentials of an app: the user's Secret, checked, or the generated one,
//! created once and owned by the app exactly when its deletion policy is Delete.

use controller_common::reconcile::{ApiError, api_err};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use visitors_api::visitors_app::secret_keys;

use crate::build::{self, secret::Credentials};
use crate::context::Error;
use crate::reconcile::Reconciler;
use crate::validate::{self, Invalid};

impl Reconciler<'_> {
    /// The database credentials: the user's Secret checked, or the generated one (created once).
    pub(crate) async fn credentials(&self) -> Result<Result<Credentials, Invalid>, Error> {
        let name = build::secret::secret_name(self.app);
        let secrets = self.api::<Secret>();
        let existing = secrets.get_opt(&name).await.map_err(api_err(format!("reading Secret {name}")))?;
        let secret = match existing {
            Some(secret) => secret,
            None if build::secret::is_generated(self.app) => match self.generate_secret(&name).await? {
                Ok(secret) => secret,
                Err(invalid) => return Ok(Err(invalid)),
            },
            None => return Ok(Err(Invalid::SecretMissing { name })),
        };
        if build::secret::is_generated(self.app)
            && let Err(invalid) = validate::generated_secret_is_ours(&self.name, &secret)
        {
            return Ok(Err(invalid));
        }
        if let Err(invalid) = validate::user_secret(&name, Some(&secret)) {
            return Ok(Err(invalid));
        }
        if build::secret::is_generated(self.app) {
            self.sync_secret_owner(&secret).await?;
        }
        self.ctx.seen.record_credentials_checked(self.app);
        let text =
            |key: &str| String::from_utf8(validate::secret_value(&secret, key).unwrap_or_default()).unwrap_or_default();
        Ok(Ok(Credentials {
            username: text(secret_keys::USERNAME),
            password: text(secret_keys::PASSWORD),
            root_password: text(secret_keys::ROOT_PASSWORD),
        }))
    }

    async fn generate_secret(&self, name: &str) -> Result<Result<Secret, Invalid>, Error> {
        // New passwords for a volume initialised with the old ones would lock the backend out.
        let claim = build::mysql::claim_name(&self.name);
        let claims = self.api::<PersistentVolumeClaim>();
        if claims
            .get_metadata_opt(&claim)
            .await
            .map_err(api_err(format!("reading PersistentVolumeClaim {claim}")))?
            .is_some()
        {
            return Ok(Err(Invalid::CredentialsLost { secret: name.to_string(), claim }));
        }
        let secret = build::secret::generated(self.app, &Credentials::generate());
        let params =
            PostParams { field_manager: Some(self.ctx.runtime.field_manager.clone()), ..PostParams::default() };
        match self.api::<Secret>().create(&params, &secret).await {
            Ok(created) => Ok(Ok(created)),
            // Created meanwhile (by a previous, interrupted reconcile, or by someone else: the
            // caller checks whose it is).
            Err(kube::Error::Api(status)) if status.code == 409 => {
                Ok(Ok(self.api::<Secret>().get(name).await.map_err(api_err(format!("reading Secret {name}")))?))
            }
            Err(source) => Err(ApiError { action: format!("creating Secret {name}"), source }.into()),
        }
    }

    /// Owns the generated Secret exactly when the deletion policy is Delete; patches only on a
    /// change, so a converged app sends nothing.
    async fn sync_secret_owner(&self, secret: &Secret) -> Result<(), Error> {
        let uid = self.app.uid();
        let current = secret.owner_references();
        let mine = |r: &OwnerReference| Some(&r.uid) == uid.as_ref();
        let wanted = build::secret::owner_references(self.app);
        let have: Vec<&OwnerReference> = current.iter().filter(|r| mine(r)).collect();
        if have.len() == wanted.len() && have.iter().zip(&wanted).all(|(a, b)| *a == b) {
            return Ok(());
        }
        let mut refs: Vec<OwnerReference> = current.iter().filter(|r| !mine(r)).cloned().collect();
        refs.extend(wanted);
        let patch = serde_json::json!({ "metadata": { "ownerReferences": refs, "resourceVersion": secret.resource_version() } });
        let name = secret.name_any();
        self.api::<Secret>()
            .patch_metadata(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(api_err(format!("updating the owner of Secret {name}")))?;
        Ok(())
    }
}
