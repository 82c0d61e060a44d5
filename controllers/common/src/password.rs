//! Generated passwords.

use rand::Rng;
use rand::distr::Alphanumeric;

/// Length of generated passwords: 32 alphanumerics, about 190 bits, and nothing a shell or SQL
/// string could misread.
pub const PASSWORD_LEN: usize = 32;

/// A random password from the operating system's CSPRNG-seeded thread generator.
pub fn random_password() -> String {
    rand::rng().sample_iter(&Alphanumeric).take(PASSWORD_LEN).map(char::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_long_alphanumeric_and_differ() {
        let (a, b) = (random_password(), random_password());
        assert_eq!(a.len(), PASSWORD_LEN);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, b);
    }
}
