//! Turns a spec (and the objects it refers to) into either "go ahead" or one error a user can act
//! on, naming the field. Pure: the controller fetches the Secret and passes it in.

use k8s_openapi::api::core::v1::Secret;
use visitors_api::InvalidSpec;
use visitors_api::conditions::REASON_INVALID_SPEC;
use visitors_api::visitors_app::{VisitorsAppSpec, secret_keys};

/// Why the app cannot be reconciled as it stands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// The spec itself is wrong; only a spec change can fix it.
    #[error(transparent)]
    Spec(#[from] InvalidSpec),
    #[error(
        "spec.credentialsSecret: Secret {name:?} does not exist in this namespace; create it with the keys username, password and root-password"
    )]
    SecretMissing { name: String },
    #[error(
        "spec.credentialsSecret: Secret {name:?} has no non-empty {missing}; it needs username, password and root-password"
    )]
    SecretKeys { name: String, missing: String },
    #[error(
        "spec.credentialsSecret: Secret {name:?} sets username to \"root\"; MySQL's image cannot create root as the application user, choose another name"
    )]
    RootUser { name: String },
    /// The generated Secret is gone but the database volume holds data whose accounts use the
    /// old passwords: generating new ones would lock the backend out.
    #[error(
        "Secret {secret:?} is missing but the database volume {claim:?} already exists: restore the Secret (keys username, password, root-password), point spec.credentialsSecret at a copy, or delete the volume to start empty"
    )]
    CredentialsLost { secret: String, claim: String },
}

impl Invalid {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Invalid::Spec(_) => REASON_INVALID_SPEC,
            Invalid::SecretMissing { .. } | Invalid::SecretKeys { .. } | Invalid::RootUser { .. } => {
                "InvalidCredentialsSecret"
            }
            Invalid::CredentialsLost { .. } => "CredentialsLost",
        }
    }

    /// Whether the fix lives in another object than the VisitorsApp (a Secret, a volume). The
    /// controller does not watch those, so it looks again after a backoff; a bad spec instead
    /// waits for the next spec change and is never retried.
    pub fn fixed_elsewhere(&self) -> bool {
        !matches!(self, Invalid::Spec(_))
    }
}

/// Checks what the spec alone can tell.
pub fn spec(spec: &VisitorsAppSpec) -> Result<(), Invalid> {
    spec.validate().map_err(Invalid::from)
}

/// Checks a user-supplied credentials Secret (`None`: it does not exist).
pub fn user_secret(name: &str, secret: Option<&Secret>) -> Result<(), Invalid> {
    let Some(secret) = secret else {
        return Err(Invalid::SecretMissing { name: name.to_string() });
    };
    let value = |key: &str| secret_value(secret, key).filter(|v| !v.is_empty());
    let missing: Vec<&str> = secret_keys::REQUIRED.into_iter().filter(|key| value(key).is_none()).collect();
    if !missing.is_empty() {
        return Err(Invalid::SecretKeys { name: name.to_string(), missing: missing.join(", ") });
    }
    if value(secret_keys::USERNAME).as_deref() == Some(b"root".as_slice()) {
        return Err(Invalid::RootUser { name: name.to_string() });
    }
    Ok(())
}

/// One value of a Secret, from `data` or (for objects not yet normalised by the API server)
/// `stringData`.
pub fn secret_value(secret: &Secret, key: &str) -> Option<Vec<u8>> {
    secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .map(|bytes| bytes.0.clone())
        .or_else(|| secret.string_data.as_ref().and_then(|data| data.get(key)).map(|s| s.clone().into_bytes()))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;

    fn secret(pairs: &[(&str, &str)]) -> Secret {
        let data =
            pairs.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect::<BTreeMap<_, _>>();
        Secret { data: Some(data), ..Secret::default() }
    }

    #[test]
    fn complete_secret_passes() {
        let s = secret(&[("username", "app"), ("password", "p"), ("root-password", "r")]);
        assert_eq!(user_secret("mine", Some(&s)), Ok(()));
    }

    #[test]
    fn missing_and_empty_keys_are_named() {
        let s = secret(&[("username", "app"), ("password", "")]);
        let err = user_secret("mine", Some(&s)).unwrap_err();
        assert_eq!(err, Invalid::SecretKeys { name: "mine".into(), missing: "password, root-password".into() });
        assert!(err.to_string().starts_with("spec.credentialsSecret:"), "{err}");
        assert!(err.fixed_elsewhere());
    }

    #[test]
    fn absent_secret_and_root_user_are_rejected() {
        assert_eq!(user_secret("mine", None), Err(Invalid::SecretMissing { name: "mine".into() }));
        let s = secret(&[("username", "root"), ("password", "p"), ("root-password", "r")]);
        assert_eq!(user_secret("mine", Some(&s)).unwrap_err().reason(), "InvalidCredentialsSecret");
    }

    #[test]
    fn string_data_counts() {
        let s = Secret {
            string_data: Some(BTreeMap::from([("username".to_string(), "u".to_string())])),
            ..Secret::default()
        };
        assert_eq!(secret_value(&s, "username"), Some(b"u".to_vec()));
    }

    #[test]
    fn bad_spec_is_not_retried() {
        let spec = VisitorsAppSpec { size: 99, ..VisitorsAppSpec::default() };
        let err = super::spec(&spec).unwrap_err();
        assert_eq!(err.reason(), REASON_INVALID_SPEC);
        assert!(!err.fixed_elsewhere());
        assert!(err.to_string().contains("spec.size"), "{err}");
    }
}
