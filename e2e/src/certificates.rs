//! Certificates of a user's own CA for an app's MySQL, made with openssl as a person would:
//! what the scenarios of `spec.tls.secretName` serve.

use std::path::Path;

use serde_json::{Value, json};

/// A CA and a server certificate naming the MySQL Service of app `app` in `namespace`, made
/// with openssl in `dir`: (ca.crt, tls.crt, tls.key).
pub fn openssl_certificate(dir: &Path, app: &str, namespace: &str) -> (String, String, String) {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "30",
        "-subj",
        "/CN=e2e user CA",
    ]);
    let service = format!("{app}-mysql");
    let subject = format!("/CN={service}");
    run(&["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "tls.key", "-out", "tls.csr", "-subj", &subject]);
    let names = format!("subjectAltName=DNS:{service}.{namespace}.svc,DNS:{service}.{namespace},DNS:{service}\n");
    std::fs::write(dir.join("ext.cnf"), names).unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "tls.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "tls.crt",
        "-days",
        "30",
        "-extfile",
        "ext.cnf",
    ]);
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    (read("ca.crt"), read("tls.crt"), read("tls.key"))
}

/// A `kubernetes.io/tls` Secret `name` (with `ca.crt`) holding a certificate.
pub fn certificate_secret(name: &str, ca: &str, crt: &str, key: &str) -> Value {
    json!({"metadata": {"name": name}, "type": "kubernetes.io/tls",
           "stringData": {"ca.crt": ca, "tls.crt": crt, "tls.key": key}})
}
