//! Where backups live: the storage shape shared by `MySQLBackup` and `MySQLRestore`.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::validation::{Problems, dns_subdomain};

/// Where backups are stored. Set exactly one of `s3` or `persistentVolumeClaim`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.s3) != has(self.persistentVolumeClaim)").message("set exactly one of s3 or persistentVolumeClaim"))]
pub struct BackupStorage {
    /// An S3-compatible bucket (AWS S3, MinIO, Ceph RGW, Garage, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Storage>,
    /// A PersistentVolumeClaim in the resource's namespace, mounted into the backup Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<PvcStorage>,
}

/// An S3-compatible bucket.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Storage {
    /// The bucket name. It must exist: the operator never creates buckets.
    #[schemars(length(min = 3, max = 63))]
    pub bucket: String,
    /// The endpoint URL, for example `https://minio.storage.svc:9000`. Leave unset for AWS S3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    #[x_kube(validation = Rule::new("self.startsWith('http://') || self.startsWith('https://')").message("endpoint must be an http:// or https:// URL"))]
    pub endpoint: Option<String>,
    /// The bucket's region. Defaults to `us-east-1`, which most S3-compatible servers accept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// A key prefix under which backups are written, for example `prod/visitors`. Each backup
    /// gets its own folder below it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub prefix: Option<String>,
    /// Address the bucket as `<endpoint>/<bucket>` instead of `<bucket>.<endpoint>`. Most
    /// self-hosted servers (MinIO, Ceph) need this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_path_style: Option<bool>,
    /// The Secret that holds the access key. Leave unset to use the ambient credentials of the
    /// Job's pod (for example IAM roles for service accounts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<S3CredentialsSecret>,
}

/// A Secret in the resource's namespace that holds an S3 access key.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3CredentialsSecret {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key that holds the access key id. Defaults to `AWS_ACCESS_KEY_ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id_key: Option<String>,
    /// The key that holds the secret access key. Defaults to `AWS_SECRET_ACCESS_KEY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_access_key_key: Option<String>,
}

/// A PersistentVolumeClaim that holds backups.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PvcStorage {
    /// The claim's name, in the resource's namespace. It must exist.
    #[schemars(length(min = 1, max = 253))]
    pub claim_name: String,
    /// A folder inside the volume under which backups are written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    #[x_kube(validation = Rule::new("!self.startsWith('/') && !self.contains('..')").message("subPath must be relative and must not contain '..'"))]
    pub sub_path: Option<String>,
}

/// Where agent Jobs mount a backup volume, so that a location recorded by a backup Job reads
/// the same in a restore Job.
pub const VOLUME_MOUNT: &str = "/backup";

/// Joins path segments with single slashes, leaving out empty ones.
pub fn join_path(parts: &[&str]) -> String {
    parts.iter().map(|p| p.trim_matches('/')).filter(|p| !p.is_empty()).collect::<Vec<_>>().join("/")
}

/// The default S3 region.
pub const DEFAULT_S3_REGION: &str = "us-east-1";
/// The default key of the access key id in the credentials Secret.
pub const DEFAULT_ACCESS_KEY_ID_KEY: &str = "AWS_ACCESS_KEY_ID";
/// The default key of the secret access key in the credentials Secret.
pub const DEFAULT_SECRET_ACCESS_KEY_KEY: &str = "AWS_SECRET_ACCESS_KEY";

impl S3CredentialsSecret {
    pub fn access_key_id_key(&self) -> &str {
        self.access_key_id_key.as_deref().unwrap_or(DEFAULT_ACCESS_KEY_ID_KEY)
    }

    pub fn secret_access_key_key(&self) -> &str {
        self.secret_access_key_key.as_deref().unwrap_or(DEFAULT_SECRET_ACCESS_KEY_KEY)
    }
}

impl S3Storage {
    pub fn region(&self) -> &str {
        self.region.as_deref().unwrap_or(DEFAULT_S3_REGION)
    }
}

impl BackupStorage {
    /// A human-readable location of the folder `path` inside this storage, such as
    /// `s3://bucket/prefix/path` or `pvc://claim/subPath/path`. Never holds credentials.
    pub fn location(&self, path: &str) -> String {
        match (&self.s3, &self.persistent_volume_claim) {
            (Some(s3), _) => format!("s3://{}/{}", s3.bucket, join_path(&[s3.prefix.as_deref().unwrap_or(""), path])),
            (None, Some(pvc)) => {
                format!("pvc://{}/{}", pvc.claim_name, join_path(&[pvc.sub_path.as_deref().unwrap_or(""), path]))
            }
            (None, None) => String::new(),
        }
    }

    /// The agent's location of the folder `path` inside this storage, as an agent Job sees it:
    /// `s3://bucket/prefix/path`, or `file:///backup/subPath/path` on the claim mounted at
    /// [`VOLUME_MOUNT`].
    pub fn agent_location(&self, path: &str) -> String {
        match (&self.s3, &self.persistent_volume_claim) {
            (Some(_), _) => self.location(path),
            (None, Some(pvc)) => {
                format!("file://{VOLUME_MOUNT}/{}", join_path(&[pvc.sub_path.as_deref().unwrap_or(""), path]))
            }
            (None, None) => String::new(),
        }
    }

    /// Checks what the schema cannot, reporting under `field` (for example `spec.storage`).
    pub fn validate(&self, field: &str, problems: &mut Problems) {
        match (&self.s3, &self.persistent_volume_claim) {
            (Some(_), Some(_)) | (None, None) => {
                problems.add(field, "set exactly one of s3 or persistentVolumeClaim");
            }
            (Some(s3), None) => validate_s3(s3, &format!("{field}.s3"), problems),
            (None, Some(pvc)) => {
                problems.check(&format!("{field}.persistentVolumeClaim.claimName"), dns_subdomain(&pvc.claim_name));
                if let Some(sub_path) = &pvc.sub_path {
                    problems.check(&format!("{field}.persistentVolumeClaim.subPath"), relative_path(sub_path));
                }
            }
        }
    }
}

fn validate_s3(s3: &S3Storage, field: &str, problems: &mut Problems) {
    if !bucket_name_ok(&s3.bucket) {
        problems.add(
            format!("{field}.bucket"),
            format!("{:?} is not a bucket name: 3 to 63 lowercase letters, digits, '.' or '-', starting and ending with a letter or digit", s3.bucket),
        );
    }
    if let Some(endpoint) = &s3.endpoint {
        let scheme_ok = endpoint.starts_with("http://") || endpoint.starts_with("https://");
        let host = endpoint.split_once("://").map(|(_, rest)| rest).unwrap_or("");
        if !scheme_ok || host.is_empty() || host.contains(char::is_whitespace) {
            problems.add(
                format!("{field}.endpoint"),
                format!("{endpoint:?} must be an http:// or https:// URL with a host"),
            );
        }
    }
    if let Some(prefix) = &s3.prefix {
        problems.check(&format!("{field}.prefix"), relative_path(prefix));
    }
    if let Some(secret) = &s3.credentials_secret {
        problems.check(&format!("{field}.credentialsSecret.name"), dns_subdomain(&secret.name));
    }
}

fn bucket_name_ok(bucket: &str) -> bool {
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (3..=63).contains(&bucket.len())
        && bucket.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
        && edge_ok(bucket.chars().next())
        && edge_ok(bucket.chars().last())
}

/// Checks a relative path inside a bucket or volume: no leading '/', no '..' component.
pub fn relative_path(path: &str) -> Result<(), String> {
    if path.starts_with('/') {
        return Err(format!("{path:?} must be relative (no leading '/')"));
    }
    if path.contains("..") {
        return Err(format!("{path:?} must not contain '..'"));
    }
    if path.chars().any(|c| c.is_control()) {
        return Err(format!("{path:?} must not contain control characters"));
    }
    Ok(())
}

/// The agent's `--from` for a location a backup run recorded: `s3://` and `file:///backup/`
/// as they are (what the backup's agent wrote to), `pvc://claim/path` as the mounted folder.
pub fn agent_location_of_recorded(recorded: &str) -> Option<String> {
    if recorded.starts_with("s3://") || recorded.starts_with(&format!("file://{VOLUME_MOUNT}/")) {
        return Some(recorded.to_string());
    }
    let (_claim, path) = recorded.strip_prefix("pvc://")?.split_once('/')?;
    Some(format!("file://{VOLUME_MOUNT}/{}", join_path(&[path])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_locations_map_to_what_a_job_mounts() {
        assert_eq!(agent_location_of_recorded("s3://b/p/x").as_deref(), Some("s3://b/p/x"));
        assert_eq!(
            agent_location_of_recorded("file:///backup/mysql/shop/ex/b1").as_deref(),
            Some("file:///backup/mysql/shop/ex/b1")
        );
        assert_eq!(
            agent_location_of_recorded("pvc://backups/mysql/shop/ex/b1").as_deref(),
            Some("file:///backup/mysql/shop/ex/b1")
        );
        assert_eq!(agent_location_of_recorded("file:///etc/passwd"), None, "only the mounted volume");
    }

    fn s3(bucket: &str) -> BackupStorage {
        BackupStorage {
            s3: Some(S3Storage { bucket: bucket.into(), prefix: Some("prod/".into()), ..Default::default() }),
            persistent_volume_claim: None,
        }
    }

    #[test]
    fn location_joins_prefix_and_path() {
        assert_eq!(s3("backups").location("ns/app/run-1"), "s3://backups/prod/ns/app/run-1");
        let pvc = BackupStorage {
            s3: None,
            persistent_volume_claim: Some(PvcStorage { claim_name: "backups".into(), sub_path: None }),
        };
        assert_eq!(pvc.location("run-1"), "pvc://backups/run-1");
    }

    #[test]
    fn exactly_one_storage_kind() {
        let mut problems = Problems::default();
        BackupStorage::default().validate("spec.storage", &mut problems);
        let err = problems.into_result().unwrap_err();
        assert_eq!(err.first_field(), "spec.storage");
    }

    #[test]
    fn names_the_bad_bucket_and_prefix() {
        let mut storage = s3("No_Such");
        storage.s3.as_mut().unwrap().prefix = Some("../escape".into());
        let mut problems = Problems::default();
        storage.validate("spec.storage", &mut problems);
        let fields: Vec<String> = problems.into_result().unwrap_err().0.into_iter().map(|e| e.field).collect();
        assert_eq!(fields, ["spec.storage.s3.bucket", "spec.storage.s3.prefix"]);
    }
}
