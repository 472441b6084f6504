//! The cleanup policy `relay` states for the shells it creates: `RELAY_UNUSED_GRACE` and
//! `RELAY_IDLE_EXPIRY` from relay's own environment (the variables the agent reads for its
//! defaults when it starts), so a user's setting applies to the shells this command creates —
//! over SSH too, and with an agent that is already running. Unset: the agent's defaults.
//! The agent checks the values; a bad one fails the connect with its words (`1s to 90d, or off`).

/// The policy text for `SetPolicy`, e.g. `unused=90s;idle=off`, or `""` for the agent's defaults.
pub fn from_env() -> String {
    spec(|var| std::env::var(var).ok())
}

fn spec(var: impl Fn(&str) -> Option<String>) -> String {
    [
        ("unused", "RELAY_UNUSED_GRACE"),
        ("idle", "RELAY_IDLE_EXPIRY"),
    ]
    .into_iter()
    .filter_map(|(condition, name)| {
        let value = var(name)?;
        let value = value.trim();
        (!value.is_empty()).then(|| format!("{condition}={value}"))
    })
    .collect::<Vec<_>>()
    .join(";")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_variables_become_conditions_and_unset_ones_stay_the_agents() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(spec(env(&[])), "");
        assert_eq!(spec(env(&[("RELAY_UNUSED_GRACE", " 90s ")])), "unused=90s");
        assert_eq!(
            spec(env(&[
                ("RELAY_UNUSED_GRACE", "off"),
                ("RELAY_IDLE_EXPIRY", "7d")
            ])),
            "unused=off;idle=7d"
        );
        assert_eq!(spec(env(&[("RELAY_IDLE_EXPIRY", "")])), "");
    }
}
