//! The environment variables the agent reads. A Job hands the agent its database and storage
//! this way (credentials only by Secret reference), and its trace context.

pub use visitors_telemetry::{OTLP_ENDPOINT_ENV, SERVICE_NAME_ENV, TRACEPARENT_ENV, TRACESTATE_ENV};

/// The MySQL server's host.
pub const MYSQL_HOST: &str = "MYSQL_HOST";
/// The MySQL server's port (default 3306).
pub const MYSQL_TCP_PORT: &str = "MYSQL_TCP_PORT";
/// The MySQL account (default root).
pub const MYSQL_USER: &str = "MYSQL_USER";
/// The CA certificate file (PEM) the server's certificate must chain to (`--ssl-ca`).
pub const MYSQL_SSL_CA: &str = "MYSQL_SSL_CA";
/// `disabled`, `required`, `verify-ca` or `verify-identity` (`--ssl-mode`).
pub const MYSQL_SSL_MODE: &str = "MYSQL_SSL_MODE";
/// The MySQL password: environment only, never a flag value.
pub const MYSQL_PWD: &str = "MYSQL_PWD";
/// The S3 access key id.
pub const AWS_ACCESS_KEY_ID: &str = "AWS_ACCESS_KEY_ID";
/// The S3 secret key: environment only.
pub const AWS_SECRET_ACCESS_KEY: &str = "AWS_SECRET_ACCESS_KEY";
/// The S3 session token: environment only, optional.
pub const AWS_SESSION_TOKEN: &str = "AWS_SESSION_TOKEN";
/// The S3 region (default us-east-1).
pub const AWS_REGION: &str = "AWS_REGION";
/// An S3-compatible endpoint (http:// allowed).
pub const AWS_ENDPOINT_URL: &str = "AWS_ENDPOINT_URL";
/// `true` to address buckets by path.
pub const AWS_S3_FORCE_PATH_STYLE: &str = "AWS_S3_FORCE_PATH_STYLE";
/// The log filter.
pub const RUST_LOG: &str = "RUST_LOG";
/// The archiver's pod name (the Lease holder) and namespace, from the downward API.
pub const POD_NAME: &str = "POD_NAME";
pub const POD_NAMESPACE: &str = "POD_NAMESPACE";

/// Every variable the agent (or the archiver) reads.
pub const ALL: [&str; 19] = [
    MYSQL_HOST,
    MYSQL_TCP_PORT,
    MYSQL_USER,
    MYSQL_PWD,
    MYSQL_SSL_CA,
    MYSQL_SSL_MODE,
    AWS_ACCESS_KEY_ID,
    AWS_SECRET_ACCESS_KEY,
    AWS_SESSION_TOKEN,
    AWS_REGION,
    AWS_ENDPOINT_URL,
    AWS_S3_FORCE_PATH_STYLE,
    RUST_LOG,
    POD_NAME,
    POD_NAMESPACE,
    OTLP_ENDPOINT_ENV,
    SERVICE_NAME_ENV,
    TRACEPARENT_ENV,
    TRACESTATE_ENV,
];

/// The variables that hold a secret: a Job sets them only from a Secret, never as a value.
pub const SECRETS: [&str; 3] = [MYSQL_PWD, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN];
