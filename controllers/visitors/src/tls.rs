//! The reconcile's TLS step: the mode in effect and the certificate MySQL serves, read from the
//! user's Secret (checked), or from the generated one, issued here by the app's own CA and
//! renewed before it expires.

use std::time::Duration;

use controller_common::apply::apply;
use controller_common::certificates::{self, KeyedCertificate, SERVER_VALIDITY, issue_server, new_authority};
use controller_common::error::api_err;
use controller_common::ready;
use controller_common::step::Step;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use visitors_api::VisitorsApp;
use visitors_api::labels::names;
use visitors_api::visitors_app::{TlsMode, reason, tls_keys};

use crate::build::{self, tls::ServingTls};
use crate::context::{AppScope, Error};
use crate::validate::{self, InvalidApp, ValidApp};

/// How often a user-supplied certificate's Secret is read again. Secrets are not watched (that
/// needs list and watch on every Secret), so this is how a renewed certificate (cert-manager's,
/// say) reaches MySQL.
pub const USER_CERTIFICATE_RECHECK: Duration = Duration::from_secs(60);

/// The CA's private key in the generated CA Secret.
const CA_KEY: &str = "ca.key";

/// The TLS MySQL serves in this reconcile: `None` for plain text. Read at the first reconcile of
/// each spec and again once [`recheck`] old; in between (a reconcile woken by a child's status,
/// the most common) it costs no request.
pub async fn serving(scope: &AppScope<'_>, valid: &ValidApp<'_>) -> Result<Step<Option<ServingTls>>, Error> {
    let seen = &scope.ctx.seen;
    if let Some(tls) = seen.tls_checked_within(scope.app, recheck(scope.app, scope.runtime().resync)) {
        return Ok(Step::Ready(tls));
    }
    let found = read(scope, valid).await?;
    if let Step::Ready(tls) = &found {
        seen.record_tls(scope.app, tls.clone());
    }
    Ok(found)
}

/// How long a certificate read stands: a user's Secret is looked at again every
/// [`USER_CERTIFICATE_RECHECK`] (so that a replaced certificate rolls MySQL soon), a generated
/// one once a resync period (it is renewed 30 days before it expires).
pub fn recheck(app: &VisitorsApp, resync: Duration) -> Duration {
    if build::tls::is_generated(app) { resync } else { USER_CERTIFICATE_RECHECK.min(resync) }
}

async fn read(scope: &AppScope<'_>, valid: &ValidApp<'_>) -> Result<Step<Option<ServingTls>>, Error> {
    let existing = scope.cached(&scope.ctx.stores.statefulsets, &names::mysql(&scope.name));
    if build::tls::effective_mode(scope.app, existing.as_ref().map(|sts| sts.mysql().tls_mode.as_deref()))
        == TlsMode::Disabled
    {
        return Ok(Step::Ready(None));
    }
    if valid.tls.generated
        && scope.is_new()
        && let Some(issued) = issue_first_certificate(scope).await?
    {
        return Ok(issued);
    }
    let name = &valid.tls.name;
    let hosts = build::mysql::verified_hosts(scope.app);
    let now = jiff::Timestamp::now();
    let found = scope.api::<Secret>().get_opt(name).await.map_err(api_err(format!("reading Secret {name}")))?;
    if !valid.tls.generated {
        return Ok(checked(validate::tls_secret(name, found.as_ref(), &hosts, now)));
    }
    if let Some(secret) = &found {
        if !validate::is_generated_for(&scope.name, secret) {
            return Ok(InvalidApp::ForeignTlsSecret { name: name.clone() }.into());
        }
        if let Ok(tls) = validate::tls_secret(name, Some(secret), &hosts, now)
            && !certificates::due_for_renewal(tls.not_after, now)
        {
            return Ok(Step::Ready(Some(tls)));
        }
    }
    issue_server_certificate(scope, found.is_some()).await
}

/// A certificate checked: served, or the problem with it.
fn checked(tls: Result<ServingTls, InvalidApp>) -> Step<Option<ServingTls>> {
    match tls {
        Ok(tls) => Step::Ready(Some(tls)),
        Err(invalid) => invalid.into(),
    }
}

/// Issues a new server certificate with the app's CA into the generated Secret, and says so by
/// an Event when it renews one.
async fn issue_server_certificate(scope: &AppScope<'_>, renewal: bool) -> Result<Step<Option<ServingTls>>, Error> {
    let desired = ready!(server_secret(scope, CaSecret::ReadFirst).await?);
    let name = desired.name_any();
    apply(&scope.api::<Secret>(), &scope.runtime().field_manager, &desired)
        .await
        .map_err(api_err(format!("writing Secret {name}")))?;
    let tls = served(scope, &desired);
    // A first certificate is progress, in the status only (an Event per new app is thousands
    // of writes at scale); a renewal restarts MySQL and is told.
    if let Ok(tls) = &tls
        && renewal
    {
        let note = format!(
            "renewed MySQL's server certificate in Secret {name}, valid until {}; MySQL restarts once to serve it",
            tls.not_after
        );
        scope.runtime().events.normal(scope.app, reason::CERTIFICATE_RENEWED, "RenewCertificate", note).await;
    }
    Ok(checked(tls))
}

/// A new app's first certificate and CA, created without reading their Secrets first: `None`
/// when the server certificate's Secret exists (an interrupted reconcile made it, or someone
/// else did), which the read then checks.
async fn issue_first_certificate(scope: &AppScope<'_>) -> Result<Option<Step<Option<ServingTls>>>, Error> {
    let desired = match server_secret(scope, CaSecret::CreateFirst).await?.into_ready() {
        Ok(desired) => desired,
        Err(stopped) => return Ok(Some(stopped)),
    };
    Ok(scope.create_secret(&desired).await?.map(|_| checked(served(scope, &desired))))
}

/// The Secret of a new server certificate for the app's MySQL, issued by the app's CA.
async fn server_secret(scope: &AppScope<'_>, ca: CaSecret) -> Result<Step<Secret>, Error> {
    let authority = ready!(authority(scope, ca).await?);
    let names = build::tls::server_names(scope.app);
    let now = jiff::Timestamp::now();
    Ok(match issue_server(&authority, &names::mysql(&scope.name), &names, now, SERVER_VALIDITY) {
        Ok(server) => Step::Ready(build::tls::server_secret(scope.app, &server, &authority.certificate_pem)),
        Err(error) => InvalidApp::TlsGeneration { problem: error.to_string() }.into(),
    })
}

/// What MySQL serves from the generated Secret `secret`, as the checks of a read find it.
fn served(scope: &AppScope<'_>, secret: &Secret) -> Result<ServingTls, InvalidApp> {
    let now = jiff::Timestamp::now();
    validate::tls_secret(&secret.name_any(), Some(secret), &build::mysql::verified_hosts(scope.app), now)
}

/// How the CA Secret is found: read (and created when missing), or, for a new app, created
/// (and read when it exists).
#[derive(Clone, Copy)]
enum CaSecret {
    ReadFirst,
    CreateFirst,
}

/// The app's CA: the generated CA Secret, created when missing. An existing CA is never
/// replaced: clients trust it.
async fn authority(scope: &AppScope<'_>, ca: CaSecret) -> Result<Step<KeyedCertificate>, Error> {
    let name = names::mysql_ca_secret(&scope.name);
    let found = match ca {
        CaSecret::ReadFirst => {
            scope.api::<Secret>().get_opt(&name).await.map_err(api_err(format!("reading Secret {name}")))?
        }
        CaSecret::CreateFirst => None,
    };
    let secret = match found {
        Some(secret) => secret,
        None => {
            let authority = match new_authority(&format!("{} CA", names::mysql(&scope.name)), jiff::Timestamp::now()) {
                Ok(authority) => authority,
                Err(error) => return Ok(InvalidApp::TlsGeneration { problem: error.to_string() }.into()),
            };
            scope.create_or_read_secret(&build::tls::ca_secret(scope.app, &authority)).await?
        }
    };
    if !validate::is_generated_for(&scope.name, &secret) {
        return Ok(InvalidApp::ForeignTlsSecret { name }.into());
    }
    let text = |key: &str| validate::secret_value(&secret, key).and_then(|v| String::from_utf8(v).ok());
    Ok(match (text(tls_keys::CA), text(CA_KEY)) {
        (Some(certificate_pem), Some(private_key_pem)) => {
            Step::Ready(KeyedCertificate { certificate_pem, private_key_pem })
        }
        _ => InvalidApp::TlsSecretKeys { name, missing: format!("{} or {CA_KEY}", tls_keys::CA) }.into(),
    })
}
