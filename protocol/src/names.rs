//! What one part of a [`PaneKey`](crate::PaneKey) (workspace, tab, leaf) may hold, checked
//! alike by every front end that takes a pane name from a person or an app (`relay --pane`,
//! the sidecar's `pane` objects), so that `relayctl` can address and print every key.

use std::fmt;

/// Longest part of a pane key, in bytes.
pub const MAX_PANE_PART: usize = 256;

/// Why a string cannot be one part of a pane key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PanePartError {
    /// The part is empty.
    Empty,
    /// It contains `/`, which separates the parts of a printed key.
    Slash,
    /// It contains this control character (C0, DEL or C1): it would drive the terminal that
    /// prints the key.
    Control(char),
    /// It contains this bidirectional formatting character: it would print the key, or the
    /// text after it on the same line, in another order than it is stored.
    Bidi(char),
    /// It is this many bytes long, over [`MAX_PANE_PART`].
    TooLong(usize),
}

impl fmt::Display for PanePartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PanePartError::Empty => f.write_str("the name is empty"),
            PanePartError::Slash => {
                f.write_str("it contains `/`, which separates the parts of a pane key")
            }
            PanePartError::Control(c) => write!(f, "it contains the control character {c:?}"),
            PanePartError::Bidi(c) => write!(
                f,
                "it contains the bidirectional formatting character U+{:04X}, which would \
                 reorder the text around it when printed",
                *c as u32
            ),
            PanePartError::TooLong(n) => {
                write!(
                    f,
                    "it is {n} bytes long, over the {MAX_PANE_PART}-byte limit"
                )
            }
        }
    }
}

impl std::error::Error for PanePartError {}

/// What a part may hold, in words, for error messages.
pub const PANE_PART_FORM: &str = "a non-empty name without `/`, control characters or \
    bidirectional formatting characters, at most 256 bytes";

/// Checks that `s` can be one part of a pane key.
///
/// # Errors
/// The first rule `s` breaks ([`PanePartError`]).
pub fn check_pane_part(s: &str) -> Result<(), PanePartError> {
    if s.is_empty() {
        return Err(PanePartError::Empty);
    }
    if s.contains('/') {
        return Err(PanePartError::Slash);
    }
    if let Some(c) = s.chars().find(|c| c.is_control()) {
        return Err(PanePartError::Control(c));
    }
    if let Some(c) = s.chars().find(|c| is_bidi_control(*c)) {
        return Err(PanePartError::Bidi(c));
    }
    if s.len() > MAX_PANE_PART {
        return Err(PanePartError::TooLong(s.len()));
    }
    Ok(())
}

/// Whether `c` is one of Unicode's explicit bidirectional formatting characters (UAX #9,
/// "Explicit Directional Embeddings, Overrides and Isolates" and the implicit marks): ALM
/// U+061C, LRM/RLM U+200E–U+200F, LRE/RLE/PDF/LRO/RLO U+202A–U+202E, LRI/RLI/FSI/PDI
/// U+2066–U+2069. A terminal that applies the bidirectional algorithm shows text holding them
/// in another order than it is stored (the "Trojan Source" trick, CVE-2021-42574).
pub fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_checked_rule_by_rule() {
        assert_eq!(check_pane_part("api-server"), Ok(()));
        assert_eq!(check_pane_part("日本語 tab"), Ok(()));
        assert_eq!(check_pane_part(""), Err(PanePartError::Empty));
        assert_eq!(check_pane_part("a/b"), Err(PanePartError::Slash));
        assert_eq!(
            check_pane_part("a\u{1b}[2J"),
            Err(PanePartError::Control('\u{1b}'))
        );
        assert_eq!(
            check_pane_part("a\u{9b}"),
            Err(PanePartError::Control('\u{9b}'))
        );
        for c in [
            '\u{061C}', '\u{200E}', '\u{200F}', '\u{202A}', '\u{202E}', '\u{2066}', '\u{2069}',
        ] {
            assert_eq!(
                check_pane_part(&format!("main{c}txt.exe")),
                Err(PanePartError::Bidi(c))
            );
        }
        // Neighbours of the ranges are ordinary text.
        for c in ['\u{200D}', '\u{2029}', '\u{202F}', '\u{2065}', '\u{206A}'] {
            assert!(!is_bidi_control(c), "{c:?}");
        }
        assert_eq!(
            check_pane_part(&"x".repeat(MAX_PANE_PART + 1)),
            Err(PanePartError::TooLong(MAX_PANE_PART + 1))
        );
        assert_eq!(check_pane_part(&"x".repeat(MAX_PANE_PART)), Ok(()));
        assert!(PANE_PART_FORM.contains(&MAX_PANE_PART.to_string()));
    }
}
