//! Client-side encryption of backups: which Secret holds the keys and which key new runs use.
//! The agent encrypts every stored file with [age](https://age-encryption.org); the manifest
//! records the key's id, never the key.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::validation::{Problems, dns_subdomain};

/// Longest key id (the agent's limit too).
pub const MAX_KEY_ID_LEN: usize = 63;

/// Encryption of a MySQLBackup's runs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupEncryption {
    /// Name of a Secret in this namespace whose entries are keys: each entry's name is a key
    /// id, its value an age identity (`AGE-SECRET-KEY-1...`, as `age-keygen` writes it).
    /// Restores, verifications and drills read the key a run was encrypted with from here, so
    /// keep the entries of older keys while runs encrypted with them are kept.
    #[schemars(length(min = 1, max = 253))]
    pub key_secret: String,
    /// The entry of `keySecret` that new runs are encrypted with. Rotating keys: add a new
    /// entry, then point `keyId` at it.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[A-Za-z0-9._-]+$"))]
    pub key_id: String,
}

impl BackupEncryption {
    pub fn validate(&self, field: &str, problems: &mut Problems) {
        problems.check(&format!("{field}.keySecret"), dns_subdomain(&self.key_secret));
        problems.check(&format!("{field}.keyId"), key_id(&self.key_id));
    }
}

/// A key id: the name of a Secret entry, so `[A-Za-z0-9._-]`, at most 63 characters.
pub fn key_id(id: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if id.is_empty() || id.len() > MAX_KEY_ID_LEN || !id.chars().all(allowed) {
        return Err(format!(
            "{id:?} must be 1 to {MAX_KEY_ID_LEN} letters, digits, '.', '_' or '-' (the name of an entry of the key Secret)"
        ));
    }
    if id == "." || id == ".." {
        return Err(format!("{id:?} is not a usable Secret entry name"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ids_are_secret_entry_names() {
        for good in ["k1", "2026-11", "backup.key_v2"] {
            assert_eq!(key_id(good), Ok(()), "{good}");
        }
        for bad in ["", "a/b", "..", "key id", &"x".repeat(64)] {
            assert!(key_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn each_bad_field_is_named() {
        let mut problems = Problems::default();
        BackupEncryption { key_secret: "Keys".into(), key_id: "a/b".into() }.validate("spec.encryption", &mut problems);
        let fields: Vec<String> = problems.into_result().unwrap_err().0.into_iter().map(|e| e.field).collect();
        assert_eq!(fields, ["spec.encryption.keySecret", "spec.encryption.keyId"]);
    }
}
