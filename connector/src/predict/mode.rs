//! The user's choice of when predictions are shown: `--predict=adaptive|always|never`.

use std::fmt;
use std::str::FromStr;

/// When the prediction engine shows typed keys before the host echoes them.
///
/// Parsed from `adaptive`, `always` or `never` (what `relay shell --predict` and
/// `RELAY_PREDICT` take).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum PredictMode {
    /// Show predictions only while the link is slow: on once the smoothed round trip exceeds
    /// 30 ms, off again below 20 ms (mosh's thresholds). The default.
    #[default]
    Adaptive,
    /// Show predictions whatever the round trip; each epoch still waits for its first echo.
    Always,
    /// Predict nothing: the engine only keeps its model of the screen, the painter draws nothing.
    Never,
}

impl PredictMode {
    /// The words [`FromStr`] accepts, in the order the help text lists them.
    pub const NAMES: [&'static str; 3] = ["adaptive", "always", "never"];

    /// The word for this mode, as [`FromStr`] accepts it.
    pub fn as_str(self) -> &'static str {
        match self {
            PredictMode::Adaptive => "adaptive",
            PredictMode::Always => "always",
            PredictMode::Never => "never",
        }
    }
}

impl fmt::Display for PredictMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PredictMode {
    type Err = ParseModeError;

    /// Takes `adaptive`, `always` or `never`, in any letter case, surrounding spaces ignored.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let word = text.trim();
        [
            PredictMode::Adaptive,
            PredictMode::Always,
            PredictMode::Never,
        ]
        .into_iter()
        .find(|mode| mode.as_str().eq_ignore_ascii_case(word))
        .ok_or_else(|| ParseModeError {
            given: text.to_owned(),
        })
    }
}

/// A prediction mode that is none of `adaptive`, `always`, `never`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown prediction mode `{given}`: use adaptive, always or never")]
pub struct ParseModeError {
    /// What was given.
    pub given: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_from_their_names_and_others_are_refused_naming_the_choices() {
        for name in PredictMode::NAMES {
            let mode: PredictMode = name.parse().unwrap();
            assert_eq!(mode.to_string(), name);
        }
        assert_eq!(" Always ".parse(), Ok(PredictMode::Always));
        assert_eq!(PredictMode::default(), PredictMode::Adaptive);
        let err = "sometimes".parse::<PredictMode>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown prediction mode `sometimes`: use adaptive, always or never"
        );
        assert!("".parse::<PredictMode>().is_err());
    }
}
