//! How the commands print: JSON for tools, aligned tables for people, and a quiet
//! stop when whoever reads the output has gone (`list | head -1`).

use std::fmt::Write as _;
use std::io::{ErrorKind, Write as _};

use serde::Serialize;

use crate::failure::{Failure, code};

/// Writes `text` to stdout as it is. A closed pipe is [`Failure::output_closed`]: the
/// tool stops without a word, as a Unix tool killed by `SIGPIPE` would.
pub fn print(text: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|err| match err.kind() {
            ErrorKind::BrokenPipe => Failure::output_closed(),
            _ => Failure::new(code::OS, "cannot write the output").caused_by(err),
        })
}

/// A lock name (or pattern) quoted for a message, shortened past 64 characters: an
/// overlong name is refused, and repeating all of it would bury the reason.
pub fn quoted(name: &str) -> String {
    const SHOWN: usize = 64;
    match name.char_indices().nth(SHOWN) {
        None => format!("{name:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &name[..cut], name.len()),
    }
}

/// Prints `view` as pretty JSON on stdout.
pub fn print_json(view: &impl Serialize) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(view)
        .map_err(|err| Failure::new(code::SOFTWARE, "cannot encode JSON").caused_by(err))?;
    print(&format!("{text}\n"))
}

/// `headers`, then `rows`, each column as wide as its widest cell and two spaces
/// apart, without trailing blanks.
pub fn table<const N: usize>(headers: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = headers.map(|h| h.chars().count());
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; N]| {
        let mut text = String::new();
        for (cell, width) in cells.iter().zip(widths) {
            let _ = write!(text, "{cell:<width$}  ");
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(headers);
    for row in rows {
        line(row.each_ref().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_name_is_shortened_in_messages() {
        assert_eq!(quoted("inventory"), "\"inventory\"");
        let long = "n".repeat(1100);
        assert_eq!(
            quoted(&long),
            format!("{:?}... (1100 bytes)", "n".repeat(64))
        );
        let wide = "ü".repeat(70);
        assert_eq!(
            quoted(&wide),
            format!("{:?}... (140 bytes)", "ü".repeat(64))
        );
    }

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let rows = [
            ["a".to_owned(), "ünïcode".to_owned()],
            ["longer".to_owned(), "-".to_owned()],
        ];
        assert_eq!(
            table(["NAME", "X"], &rows),
            "NAME    X\na       ünïcode\nlonger  -\n"
        );
    }
}
