//! The reconcile's TLS step: the mode in effect and the certificate MySQL serves, read from the
//! user's Secret (checked), or from the generated one, issued here by the app's own CA and
//! renewed before it expires.

use controller_common::apply::apply;
use controller_common::certificates::{self, KeyedCertificate, SERVER_VALIDITY, issue_server, new_authority};
use controller_common::reconcile::{ApiError, api_err};
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use visitors_api::labels::names;
use visitors_api::visitors_app::{TlsMode, reason, tls_keys};

use crate::build::{self, tls::ServingTls};
use crate::context::Error;
use crate::reconcile::{Reconciler, now};
use crate::validate::{self, Invalid};

/// How often a user-supplied certificate's Secret is read again. Secrets are not watched (that
/// needs list and watch on every Secret), so this is how a renewed certificate (cert-manager's,
/// say) reaches MySQL.
pub const USER_CERTIFICATE_RECHECK: std::time::Duration = std::time::Duration::from_secs(60);

/// The CA's private key in the generated CA Secret.
const CA_KEY: &str = "ca.key";

impl Reconciler<'_> {
    /// The TLS MySQL serves in this reconcile: `None` for plain text. Read at the first
    /// reconcile of each spec and again once [`Self::tls_recheck`] old; in between (a reconcile
    /// woken by a child's status, the most common) it costs no request.
    pub(crate) async fn serving_tls(&self) -> Result<Result<Option<ServingTls>, Invalid>, Error> {
        if let Some(tls) = self.ctx.seen.tls_checked_within(self.app, self.tls_recheck()) {
            return Ok(Ok(tls));
        }
        let found = self.read_serving_tls().await?;
        if let Ok(tls) = &found {
            self.ctx.seen.record_tls(self.app, tls.clone());
        }
        Ok(found)
    }

    /// How long a certificate read stands: a user's Secret is looked at again every
    /// [`USER_CERTIFICATE_RECHECK`] (so that a replaced certificate rolls MySQL soon), a
    /// generated one once a resync period (it is renewed 30 days before it expires).
    pub(crate) fn tls_recheck(&self) -> std::time::Duration {
        if build::tls::is_generated(self.app) {
            self.ctx.runtime.resync
        } else {
            USER_CERTIFICATE_RECHECK.min(self.ctx.runtime.resync)
        }
    }

    async fn read_serving_tls(&self) -> Result<Result<Option<ServingTls>, Invalid>, Error> {
        let existing = self.cached(&self.ctx.stores.statefulsets, &names::mysql(&self.name));
        if build::tls::effective_mode(self.app, existing.as_deref()) == TlsMode::Disabled {
            return Ok(Ok(None));
        }
        let name = build::tls::secret_name(self.app);
        let host = build::mysql::client_host(self.app);
        let now = now().0;
        let found = self.api::<Secret>().get_opt(&name).await.map_err(api_err(format!("reading Secret {name}")))?;
        if !build::tls::is_generated(self.app) {
            return Ok(validate::tls_secret(&name, found.as_ref(), &host, now).map(Some));
        }
        if let Some(secret) = &found {
            if !validate::is_generated_for(&self.name, secret) {
                return Ok(Err(Invalid::ForeignTlsSecret { name }));
            }
            if let Ok(tls) = validate::tls_secret(&name, Some(secret), &host, now)
                && !certificates::due_for_renewal(tls.not_after, now)
            {
                return Ok(Ok(Some(tls)));
            }
        }
        self.issue_server_certificate(found.is_some()).await
    }

    /// Issues a new server certificate with the app's CA into the generated Secret, and says so
    /// by an Event.
    async fn issue_server_certificate(&self, renewal: bool) -> Result<Result<Option<ServingTls>, Invalid>, Error> {
        let authority = match self.authority().await? {
            Ok(authority) => authority,
            Err(invalid) => return Ok(Err(invalid)),
        };
        let now = now().0;
        let names = build::tls::server_names(self.app);
        let server = match issue_server(&authority, &names::mysql(&self.name), &names, now, SERVER_VALIDITY) {
            Ok(server) => server,
            Err(error) => return Ok(Err(Invalid::TlsGeneration { problem: error.to_string() })),
        };
        let desired = build::tls::server_secret(self.app, &server, &authority.certificate_pem);
        let name = names::mysql_tls_secret(&self.name);
        apply(&self.api::<Secret>(), &self.ctx.runtime.field_manager, &desired)
            .await
            .map_err(api_err(format!("writing Secret {name}")))?;
        let tls = validate::tls_secret(&name, Some(&desired), &build::mysql::client_host(self.app), now);
        // A first certificate is progress, in the status only (an Event per new app is
        // thousands of writes at scale); a renewal restarts MySQL and is told.
        if let Ok(tls) = &tls
            && renewal
        {
            let note = format!(
                "renewed MySQL's server certificate in Secret {name}, valid until {}; MySQL restarts once to serve it",
                tls.not_after
            );
            self.ctx.runtime.events.normal(self.app, reason::CERTIFICATE_RENEWED, "RenewCertificate", note).await;
        }
        Ok(tls.map(Some))
    }

    /// The app's CA: the generated CA Secret, created when missing. An existing CA is never
    /// replaced: clients trust it.
    async fn authority(&self) -> Result<Result<KeyedCertificate, Invalid>, Error> {
        let name = names::mysql_ca_secret(&self.name);
        let secrets = self.api::<Secret>();
        let found = secrets.get_opt(&name).await.map_err(api_err(format!("reading Secret {name}")))?;
        let secret = match found {
            Some(secret) => secret,
            None => {
                let authority = match new_authority(&format!("{} CA", names::mysql(&self.name)), now().0) {
                    Ok(authority) => authority,
                    Err(error) => return Ok(Err(Invalid::TlsGeneration { problem: error.to_string() })),
                };
                self.create_secret(&build::tls::ca_secret(self.app, &authority)).await?
            }
        };
        if !validate::is_generated_for(&self.name, &secret) {
            return Ok(Err(Invalid::ForeignTlsSecret { name }));
        }
        let text = |key: &str| validate::secret_value(&secret, key).and_then(|v| String::from_utf8(v).ok());
        match (text(tls_keys::CA), text(CA_KEY)) {
            (Some(certificate_pem), Some(private_key_pem)) => {
                Ok(Ok(KeyedCertificate { certificate_pem, private_key_pem }))
            }
            _ => Ok(Err(Invalid::TlsSecretKeys { name, missing: format!("{} or {CA_KEY}", tls_keys::CA) })),
        }
    }

    /// Creates `secret`; one created meanwhile (by an interrupted reconcile) is read instead.
    async fn create_secret(&self, secret: &Secret) -> Result<Secret, Error> {
        let name = secret.metadata.name.clone().unwrap_or_default();
        let params =
            PostParams { field_manager: Some(self.ctx.runtime.field_manager.clone()), ..PostParams::default() };
        match self.api::<Secret>().create(&params, secret).await {
            Ok(created) => Ok(created),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                Ok(self.api::<Secret>().get(&name).await.map_err(api_err(format!("reading Secret {name}")))?)
            }
            Err(source) => Err(ApiError { action: format!("creating Secret {name}"), source }.into()),
        }
    }
}
