//! The y/N question before shells are ended: asked on stderr, answered on stdin, and only when
//! stdin is a terminal — a script must say `--yes`, it is never taken as a yes.

use std::io::{BufRead, IsTerminal, Write};

/// Asks `question` (e.g. `end these 3 shells?`) unless `yes`; returns whether to go on.
///
/// # Errors
/// Without `--yes` and without a terminal on stdin (the message says to pass `--yes`); a failed
/// read of the answer.
pub async fn confirm(question: &str, yes: bool) -> anyhow::Result<bool> {
    if yes {
        return Ok(true);
    }
    can_ask(question, std::io::stdin().is_terminal())?;
    let question = question.to_string();
    // Read on a blocking thread: the runtime keeps serving the connection (SSH keepalives)
    // while the operator thinks.
    let answer = tokio::task::spawn_blocking(move || {
        ask(
            &question,
            &mut std::io::stdin().lock(),
            &mut std::io::stderr(),
        )
    })
    .await??;
    Ok(answer)
}

/// Refuses to ask without a terminal to answer on.
pub fn can_ask(question: &str, stdin_is_terminal: bool) -> anyhow::Result<()> {
    if !stdin_is_terminal {
        anyhow::bail!(
            "not asking \"{question}\": stdin is not a terminal; pass --yes to go ahead without \
             asking"
        );
    }
    Ok(())
}

/// Writes `question [y/N] ` to `out` and reads one line from `input`: `y` or `yes` (any case)
/// is a yes; anything else, an empty line or the end of input is a no.
pub fn ask(
    question: &str,
    input: &mut impl BufRead,
    out: &mut impl Write,
) -> std::io::Result<bool> {
    write!(out, "{question} [y/N] ")?;
    out.flush()?;
    let mut line = String::new();
    input.read_line(&mut line)?;
    let answer = line.trim().to_ascii_lowercase();
    Ok(answer == "y" || answer == "yes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_terminal_it_refuses_and_says_to_pass_yes() {
        let err = can_ask("end 2 shells?", false).unwrap_err().to_string();
        assert!(
            err.contains("stdin is not a terminal") && err.contains("--yes"),
            "{err}"
        );
        assert!(can_ask("end 2 shells?", true).is_ok());
    }

    #[tokio::test]
    async fn yes_goes_ahead_without_asking() {
        // Under `cargo test` stdin is not a terminal: --yes must not look at it.
        assert!(confirm("end 2 shells?", true).await.unwrap());
    }

    #[test]
    fn only_y_or_yes_is_a_yes() {
        for (typed, expected) in [
            ("y\n", true),
            ("YES\n", true),
            (" yes \n", true),
            ("\n", false),
            ("n\n", false),
            ("yep\n", false),
            ("", false),
        ] {
            let mut out = Vec::new();
            let answer = ask("end 2 shells?", &mut typed.as_bytes(), &mut out).unwrap();
            assert_eq!(answer, expected, "{typed:?}");
            assert_eq!(String::from_utf8(out).unwrap(), "end 2 shells? [y/N] ");
        }
    }
}
