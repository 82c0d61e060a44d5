//! Where results go: text drawn for the terminal, or JSON or YAML for scripts.

use std::io::{IsTerminal, Write};

use serde::Serialize;

use crate::cli::{Colour, Global, Output};
use crate::error::Error;
use crate::render::Screen;

/// The width used when stdout is not a terminal (a pipe, a file).
const DEFAULT_WIDTH: usize = 120;

pub fn screen(global: &Global) -> Screen {
    let terminal = std::io::stdout().is_terminal();
    let colour = match global.color {
        Colour::Always => true,
        Colour::Never => false,
        Colour::Auto => terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
    };
    let width = console::Term::stdout().size_checked().map_or(DEFAULT_WIDTH, |(_, columns)| usize::from(columns));
    Screen { width: if terminal { width } else { DEFAULT_WIDTH }, colour }
}

/// Prints `data` as JSON or YAML, or `text()` for people.
pub fn print<T: Serialize>(output: Output, data: &T, text: impl FnOnce() -> String) -> Result<(), Error> {
    let rendered = match output {
        Output::Text => text(),
        Output::Json => serde_json::to_string_pretty(data).map_err(|e| Error::Io(e.to_string()))? + "\n",
        Output::Yaml => serde_saphyr::to_string(data).map_err(|e| Error::Io(e.to_string()))?,
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(rendered.as_bytes()).and_then(|()| stdout.flush()).map_err(|e| Error::Io(e.to_string()))
}

/// Whether a person can answer a question on this terminal.
pub fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}
