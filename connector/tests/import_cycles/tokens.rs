//! Rust source as tokens for the import check: identifiers, `::` and punctuation with their
//! line numbers; comments, string and char literals and lifetimes are skipped.

/// A token of Rust source, comments, literals and lifetimes left out.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    Ident(String),
    PathSep,
    Punct(char),
}

/// The tokens of `src` with their line numbers.
pub(crate) fn tokens(src: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let ident_char = |ch: char| ch.is_alphanumeric() || ch == '_';
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    // Skips a quoted literal that starts at `i` (the opening quote), counting lines.
    let skip_quoted = |i: &mut usize, line: &mut usize, quote: char| {
        *i += 1;
        while *i < c.len() && c[*i] != quote {
            if c[*i] == '\\' {
                *i += 1;
            }
            if at(*i) == '\n' {
                *line += 1;
            }
            *i += 1;
        }
        *i += 1;
    };
    while i < c.len() {
        let ch = c[i];
        let raw = raw_string(&c, i);
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
            }
        } else if let Some((open, hashes)) = raw {
            i = open + 1;
            let closes = |i: usize| c[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#');
            while i < c.len() && !closes(i) {
                line += usize::from(c[i] == '\n');
                i += 1;
            }
            i += 1 + hashes;
        } else if ch == '"' {
            skip_quoted(&mut i, &mut line, '"');
        } else if (ch == 'b' || ch == 'c') && at(i + 1) == '"' {
            i += 1;
            skip_quoted(&mut i, &mut line, '"');
        } else if ch == 'b' && at(i + 1) == '\'' {
            i += 1;
            skip_quoted(&mut i, &mut line, '\'');
        } else if ch == '\'' {
            if at(i + 1) == '\\' || at(i + 2) == '\'' {
                skip_quoted(&mut i, &mut line, '\'');
            } else {
                // A lifetime or label.
                i += 1;
                while ident_char(at(i)) {
                    i += 1;
                }
            }
        } else if ch.is_ascii_digit() {
            while ident_char(at(i)) || (at(i) == '.' && at(i + 1).is_ascii_digit()) {
                i += 1;
            }
        } else if ident_char(ch) {
            if ch == 'r' && at(i + 1) == '#' {
                i += 2;
            }
            let start = i;
            while ident_char(at(i)) {
                i += 1;
            }
            out.push((Tok::Ident(c[start..i].iter().collect()), line));
        } else if ch == ':' && at(i + 1) == ':' {
            out.push((Tok::PathSep, line));
            i += 2;
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

/// Where a raw string literal starting at `i` (`r"`, `r#"`, `br"`, `cr#"`...) has its opening
/// quote, and its number of `#`.
pub(crate) fn raw_string(c: &[char], i: usize) -> Option<(usize, usize)> {
    let r = match c.get(i..i + 2)? {
        ['r', _] => i,
        ['b' | 'c', 'r'] => i + 1,
        _ => return None,
    };
    if i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_') {
        return None;
    }
    let hashes = c[r + 1..].iter().take_while(|&&h| h == '#').count();
    (c.get(r + 1 + hashes) == Some(&'"')).then_some((r + 1 + hashes, hashes))
}
