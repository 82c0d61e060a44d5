//! What to do about a reason: the words of docs/troubleshooting.md, where every reason the
//! controllers set is a heading (its tests keep it so), built into the binary.

const TROUBLESHOOTING: &str = include_str!("../../docs/troubleshooting.md");
const DOCS: &str = "https://github.com/visitors-operator/visitors-operator/blob/main/docs/troubleshooting.md";

/// The most of a runbook's text a screen shows; the link has the rest.
const SCREEN_CHARACTERS: usize = 600;

/// The runbook's text for `reason` (a condition or Event reason, or an alert's name), as one
/// paragraph of whole sentences, cut short on a screen; `None` when the page does not explain it.
pub fn what_to_do(reason: &str) -> Option<String> {
    section(TROUBLESHOOTING, reason).map(|text| shortened(&text, SCREEN_CHARACTERS))
}

/// `text` up to the last sentence that ends within `limit` characters, marked when cut.
fn shortened(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    match text[..end].rfind(". ") {
        Some(stop) => format!("{} (more in the runbook)", &text[..=stop]),
        None => format!("{}… (more in the runbook)", &text[..end]),
    }
}

/// Where the full text is.
pub fn link(reason: &str) -> String {
    format!("{DOCS}#{}", reason.to_lowercase())
}

fn section(page: &str, reason: &str) -> Option<String> {
    let headings = [format!("### `{reason}`"), format!("### {reason}")];
    let mut lines = page.lines().skip_while(|line| !headings.iter().any(|h| line.trim_end() == h));
    lines.next()?;
    let mut text = Vec::new();
    let mut in_code = false;
    for line in lines {
        if line.starts_with('#') && !in_code {
            break;
        }
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if !in_code {
            text.push(line.trim());
        }
    }
    let joined = text.into_iter().filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
    (!joined.is_empty()).then_some(joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_gets_its_section_as_one_paragraph_and_an_unknown_one_none() {
        let page = "# T\n\n### `AgentFailed`\nThe agent failed:\nread its log.\n\n```sh\nkubectl logs x\n```\nThen retry.\n\n### `Other`\nno\n## Alerts\n### VisitorsBackupFailed\nA run failed.\n";
        assert_eq!(section(page, "AgentFailed").as_deref(), Some("The agent failed: read its log. Then retry."));
        assert_eq!(section(page, "VisitorsBackupFailed").as_deref(), Some("A run failed."));
        assert_eq!(section(page, "Missing"), None);
        assert_eq!(shortened("One. Two. Three.", 12), "One. Two. (more in the runbook)");
        assert_eq!(shortened("One. Two.", 12), "One. Two.");
    }

    #[test]
    fn the_built_in_page_explains_the_reasons_status_shows_most() {
        for reason in ["AgentFailed", "BackupDefect", "ArchiverDown", "BinlogPurged", "WaitingForMysqlPod"] {
            let text = what_to_do(reason).unwrap_or_else(|| panic!("{reason} is not in docs/troubleshooting.md"));
            assert!(text.len() > 30, "{reason}: {text}");
        }
        assert!(link("AgentFailed").ends_with("troubleshooting.md#agentfailed"));
    }
}
