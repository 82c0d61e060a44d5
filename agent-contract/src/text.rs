//! Small text helpers shared by the agent and the controllers.

/// Cuts `text` to at most `max` bytes without splitting a character.
pub fn truncate_on_char_boundary(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_splits_a_character() {
        assert_eq!(truncate_on_char_boundary("é".repeat(3), 5), "éé");
        assert_eq!(truncate_on_char_boundary("é".repeat(3), 4), "éé");
        assert_eq!(truncate_on_char_boundary("short".into(), 100), "short");
        assert_eq!(truncate_on_char_boundary("é".into(), 1), "");
    }
}
