//! Spec validation that the OpenAPI schema cannot express. The controllers run it before
//! building anything and report every problem at once, naming the field.

use std::fmt;

/// One problem with one field of a spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct FieldError {
    /// The field's path from the resource root, for example `spec.mysql.storage.size`.
    pub field: String,
    /// What is wrong and what is expected, in words a user can act on.
    pub problem: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self { field: field.into(), problem: problem.into() }
    }
}

/// Every problem found in a spec; never empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct InvalidSpec(pub Vec<FieldError>);

impl InvalidSpec {
    /// The first offending field, used as the short reason in conditions and events.
    pub fn first_field(&self) -> &str {
        self.0.first().map(|e| e.field.as_str()).unwrap_or("spec")
    }
}

impl fmt::Display for InvalidSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        write!(f, "invalid spec: {}", parts.join("; "))
    }
}

/// Collects field errors while a validator walks a spec.
#[derive(Debug, Default)]
pub struct Problems(Vec<FieldError>);

impl Problems {
    pub fn add(&mut self, field: impl Into<String>, problem: impl Into<String>) {
        self.0.push(FieldError::new(field, problem));
    }

    /// Records the error of a check, if any.
    pub fn check(&mut self, field: &str, result: Result<(), String>) {
        if let Err(problem) = result {
            self.add(field, problem);
        }
    }

    pub fn into_result(self) -> Result<(), InvalidSpec> {
        if self.0.is_empty() { Ok(()) } else { Err(InvalidSpec(self.0)) }
    }
}

/// Checks a container image reference: `[registry[:port]/]path[:tag][@digest]`, with the
/// lowercase path components and tag grammar of the OCI distribution spec.
pub fn image_reference(reference: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("{reference:?} is not a valid image reference: {why}"));
    if reference.is_empty() {
        return bad("it is empty");
    }
    if reference.len() > 255 * 2 {
        return bad("it is too long");
    }
    let (name_and_tag, digest) = match reference.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (reference, None),
    };
    if let Some(digest) = digest {
        let Some((algorithm, hex)) = digest.split_once(':') else {
            return bad("the digest must look like sha256:<hex>");
        };
        let algorithm_ok = !algorithm.is_empty()
            && algorithm.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+.-_".contains(c));
        if !algorithm_ok || hex.len() < 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return bad("the digest must look like sha256:<hex>");
        }
    }
    // A tag is the part after the last ':' when that part holds no '/' (otherwise the ':' was
    // a registry port).
    let (name, tag) = match name_and_tag.rsplit_once(':') {
        Some((n, t)) if !t.contains('/') => (n, Some(t)),
        _ => (name_and_tag, None),
    };
    if let Some(tag) = tag {
        let first_ok = tag.chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !first_ok || tag.len() > 128 || !tag.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
            return bad(
                "the tag may hold letters, digits, '_', '.' and '-' (at most 128, not starting with '.' or '-')",
            );
        }
    }
    let mut components: Vec<&str> = name.split('/').collect();
    if components.len() > 1 && looks_like_registry(components[0]) {
        let registry = components.remove(0);
        if !registry.chars().all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c)) {
            return bad("the registry host holds characters a host name cannot");
        }
    }
    for component in components {
        if !path_component(component) {
            return bad("each path component must be lowercase letters and digits, separated by '.', '_', '__' or '-'");
        }
    }
    Ok(())
}

fn looks_like_registry(first: &str) -> bool {
    first.contains('.') || first.contains(':') || first == "localhost" || first.chars().any(|c| c.is_ascii_uppercase())
}

fn path_component(component: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let starts_and_ends = component.chars().next().is_some_and(alnum) && component.chars().last().is_some_and(alnum);
    starts_and_ends
        && component.chars().all(|c| alnum(c) || "._-".contains(c))
        && !component.contains("..")
        && !component.contains("___")
}

/// A duration such as `720h`, `30d` or `1d12h`, counting a day as 24 hours; longer than zero.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let bad = || format!("{text:?} is not a duration (examples: 720h, 30d, 1d12h)");
    let span: jiff::Span = text.parse().map_err(|_| bad())?;
    let seconds = span.total((jiff::Unit::Second, jiff::SpanRelativeTo::days_are_24_hours())).map_err(|_| bad())?;
    if seconds <= 0.0 {
        return Err(format!("{text:?} must be longer than zero"));
    }
    Ok(std::time::Duration::from_secs_f64(seconds))
}

/// Parses a Kubernetes resource quantity (`1Gi`, `500M`, `1.5e3`) into bytes, rounding up.
pub fn quantity_bytes(quantity: &str) -> Result<u128, String> {
    let bad = || format!("{quantity:?} is not a quantity (examples: 1Gi, 500Mi, 10G)");
    let split =
        quantity.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(quantity.len());
    let (number, suffix) = quantity.split_at(split);
    let multiplier: f64 = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        other => {
            let exponent = other.strip_prefix(['e', 'E']).ok_or_else(bad)?;
            10f64.powi(exponent.parse::<i32>().map_err(|_| bad())?)
        }
    };
    let mantissa = number;
    if mantissa.is_empty() || mantissa == "." {
        return Err(bad());
    }
    let value: f64 = mantissa.parse().map_err(|_| bad())?;
    if !value.is_finite() || value < 0.0 {
        return Err(bad());
    }
    Ok((value * multiplier).ceil() as u128)
}

/// Checks that a name is a valid DNS-1123 label (the rule for Service and most object names).
pub fn dns_label(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} must be a DNS label: at most 63 lowercase letters, digits or '-', starting and ending with a letter or digit"
        ))
    }
}

/// Checks that a name is a valid DNS-1123 subdomain (the rule for Secret and PVC names).
pub fn dns_subdomain(name: &str) -> Result<(), String> {
    let ok = !name.is_empty() && name.len() <= 253 && name.split('.').all(|part| dns_label(part).is_ok());
    if ok {
        Ok(())
    } else {
        Err(format!("{name:?} must be a DNS subdomain: at most 253 lowercase letters, digits, '-' or '.'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_common_image_references() {
        for good in [
            "mysql:8.4",
            "jdob/visitors-service:1.0.0",
            "docker.io/library/mysql:8.4.3",
            "localhost:5000/visitors/webui",
            "ghcr.io/org/image@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "registry.example.com:443/a/b/c:v1_2-3",
            "my_org/image__name",
        ] {
            assert_eq!(image_reference(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn rejects_malformed_image_references() {
        for bad in ["", "MySQL:8", "mysql:", "mysql:-1", "mysql::8", "a//b", "mysql@sha256:xyz", "mysql:8 .4", "-mysql"]
        {
            assert!(image_reference(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn parses_quantities() {
        assert_eq!(quantity_bytes("1Gi"), Ok(1 << 30));
        assert_eq!(quantity_bytes("500M"), Ok(500_000_000));
        assert_eq!(quantity_bytes("1.5Ki"), Ok(1536));
        assert_eq!(quantity_bytes("2e3"), Ok(2000));
        assert_eq!(quantity_bytes("10"), Ok(10));
        assert_eq!(quantity_bytes("1E"), Ok(1_000_000_000_000_000_000));
        for bad in ["", "Gi", "1GB", "1..5Gi", "ten", "-1Gi", "1 Gi"] {
            assert!(quantity_bytes(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn checks_dns_names() {
        assert!(dns_label("ex-mysql").is_ok());
        assert!(dns_label("Ex").is_err());
        assert!(dns_label(&"a".repeat(64)).is_err());
        assert!(dns_subdomain("my.secret-1").is_ok());
        assert!(dns_subdomain("my..secret").is_err());
    }

    #[test]
    fn invalid_spec_names_every_field() {
        let mut problems = Problems::default();
        problems.add("spec.size", "must be at most 50");
        problems.check("spec.title", Err("too long".into()));
        problems.check("spec.ok", Ok(()));
        let err = problems.into_result().unwrap_err();
        assert_eq!(err.first_field(), "spec.size");
        assert_eq!(err.to_string(), "invalid spec: spec.size: must be at most 50; spec.title: too long");
    }
}
