//! Keeping secrets out of a support report: known secret values wherever they appear, anything
//! shaped like a password, token or private key, and sensitive fields of objects. A report is
//! meant to leave the cluster; none of this may.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

pub const REDACTED: &str = "REDACTED";

/// `password=x`, `"token": "x"`, `MYSQL_PWD=x`, `secret: x`...
static ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)((?:password|passwd|pwd|secret|token|private[_-]?key|api[_-]?key|access[_-]?key)[\w-]*"?\s*[=:]\s*"?)([^\s"',;&}]+)"#)
        .expect("a valid pattern")
});
/// `--password x`.
static FLAG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(--(?:password|passwd|pwd|token|secret)[\w-]*\s+)(\S+)").expect("a valid pattern")
});
static AGE_KEY: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"AGE-SECRET-KEY-1[0-9A-Z]+").expect("a valid pattern"));
static PEM_KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----").expect("a valid pattern")
});

/// What a report must never contain: the values of the Secrets it could read.
#[derive(Debug, Default, Clone)]
pub struct Redactor {
    known: Vec<String>,
}

impl Redactor {
    /// Values shorter than this are left: redacting `1` or `ex` everywhere would garble the
    /// report without protecting anything a password policy would allow.
    const MIN_KNOWN_LEN: usize = 6;

    pub fn knowing(&mut self, value: &str) {
        let value = value.trim();
        if value.len() >= Self::MIN_KNOWN_LEN && !self.known.iter().any(|k| k == value) {
            self.known.push(value.to_string());
            // The longest first, so that a value containing another is replaced whole.
            self.known.sort_by_key(|k| std::cmp::Reverse(k.len()));
        }
    }

    pub fn text(&self, text: &str) -> String {
        let mut text = text.to_string();
        for known in &self.known {
            text = text.replace(known.as_str(), REDACTED);
        }
        let text = PEM_KEY.replace_all(&text, REDACTED);
        let text = AGE_KEY.replace_all(&text, REDACTED);
        let text = FLAG.replace_all(&text, format!("${{1}}{REDACTED}"));
        ASSIGNMENT.replace_all(&text, format!("${{1}}{REDACTED}")).into_owned()
    }

    /// An object as the report keeps it: without managed fields and last-applied copies, with
    /// every sensitive field redacted, then as text through [`Self::text`].
    pub fn object(&self, mut object: Value) -> Value {
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.remove("managedFields");
            if let Some(annotations) = metadata.get_mut("annotations").and_then(Value::as_object_mut) {
                annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
            }
        }
        redact_fields(&mut object);
        self.strings(&mut object);
        object
    }

    fn strings(&self, value: &mut Value) {
        match value {
            Value::String(text) => *text = self.text(text),
            Value::Array(items) => items.iter_mut().for_each(|v| self.strings(v)),
            Value::Object(fields) => fields.values_mut().for_each(|v| self.strings(v)),
            _ => {}
        }
    }
}

/// A field whose value is a secret rather than the name of one.
fn sensitive(key: &str) -> bool {
    let key = key.to_lowercase();
    let names_one = key.ends_with("name") || key.ends_with("ref") || key.ends_with("secret") || key.ends_with("key");
    let secretish = ["password", "passwd", "token", "privatekey", "private_key", "secretaccesskey"];
    secretish.iter().any(|s| key.contains(s)) && !names_one || key == "data" || key == "stringdata"
}

fn redact_fields(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            // An environment variable: {name: DB_PASSWORD, value: ...}.
            let env_secret = fields.get("name").and_then(Value::as_str).is_some_and(|n| {
                let n = n.to_lowercase();
                ["pass", "pwd", "secret", "token", "key"].iter().any(|s| n.contains(s))
            });
            for (key, field) in fields.iter_mut() {
                if sensitive(key) || (env_secret && key == "value") {
                    *field = Value::String(REDACTED.into());
                } else {
                    redact_fields(field);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_fields),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_tokens_and_keys_in_text_are_redacted_and_nothing_else() {
        let mut redactor = Redactor::default();
        redactor.knowing("s3cr3t-Passw0rd");
        redactor.knowing("ex");
        let cases = [
            ("connected with s3cr3t-Passw0rd as root", "connected with REDACTED as root"),
            ("--password=hunter22 --host ex", "--password=REDACTED --host ex"),
            (r#"{"password":"hunter22","user":"root"}"#, r#"{"password":"REDACTED","user":"root"}"#),
            ("MYSQL_PWD=abc123 mysql", "MYSQL_PWD=REDACTED mysql"),
            ("mysql --password hunter22 -h ex", "mysql --password REDACTED -h ex"),
            ("the password was rejected", "the password was rejected"),
            ("token: eyJhbGciOi", "token: REDACTED"),
            ("key AGE-SECRET-KEY-1QQQ9ZX found", "key REDACTED found"),
            ("-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----", "REDACTED"),
            ("backup ex-nightly-1 succeeded: 12 tables", "backup ex-nightly-1 succeeded: 12 tables"),
        ];
        for (text, expected) in cases {
            assert_eq!(redactor.text(text), expected, "{text}");
        }
    }

    #[test]
    fn sensitive_fields_of_objects_go_and_references_to_secrets_stay() {
        let object = serde_json::json!({
            "metadata": {"name": "ex", "managedFields": [{"manager": "x"}],
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"data\":{}}"}},
            "spec": {"credentialsSecret": "ex-mysql-credentials", "tls": {"secretName": "ex-mysql-tls"},
                "containers": [{"env": [
                    {"name": "MYSQL_ROOT_PASSWORD", "value": "literal-pass"},
                    {"name": "MYSQL_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "ex-mysql-credentials", "key": "password"}}},
                    {"name": "MYSQL_DATABASE", "value": "visitors"}]}]},
            "data": {"password": "c2VjcmV0"},
        });
        let redacted = Redactor::default().object(object);
        assert!(redacted["metadata"].get("managedFields").is_none());
        assert!(redacted["metadata"]["annotations"].as_object().unwrap().is_empty());
        assert_eq!(redacted["spec"]["credentialsSecret"], "ex-mysql-credentials");
        assert_eq!(redacted["spec"]["tls"]["secretName"], "ex-mysql-tls");
        let env = &redacted["spec"]["containers"][0]["env"];
        assert_eq!(env[0]["value"], REDACTED);
        assert_eq!(env[1]["valueFrom"]["secretKeyRef"]["name"], "ex-mysql-credentials");
        assert_eq!(env[2]["value"], "visitors");
        assert_eq!(redacted["data"], REDACTED);
    }
}
