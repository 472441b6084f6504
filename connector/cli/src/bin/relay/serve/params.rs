//! Reading a call's parameters (docs/embedding.md, "Shapes"): each accessor names the field
//! that is missing or malformed, so every bad call gets an `invalid_params` error that says
//! what to fix.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use relay_protocol::{Binding, PaneKey, PtyId, TermSize};
use serde_json::Value;

use super::rpc::RpcError;

/// Reads the parameters of one call, naming the field that is wrong.
pub struct Params<'a>(pub &'a Value);

impl<'a> Params<'a> {
    fn field(&self, name: &str) -> Option<&'a Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    /// Refuses fields other than `allowed` (a misspelled `command` must not open a login
    /// shell).
    pub fn only(&self, allowed: &[&str]) -> Result<(), RpcError> {
        let Some(fields) = self.0.as_object() else {
            return Ok(());
        };
        let unknown: Vec<&str> = fields
            .keys()
            .map(String::as_str)
            .filter(|k| !allowed.contains(k))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        Err(RpcError::params(format!(
            "unknown field{} {}; this method takes {}",
            if unknown.len() > 1 { "s" } else { "" },
            unknown.join(", "),
            allowed.join(", ")
        )))
    }

    /// A required name (a workspace id): as one part of a pane key.
    pub fn name(&self, name: &str) -> Result<&'a str, RpcError> {
        pane_part(name, self.str(name)?)
    }

    /// A required non-empty string.
    pub fn non_empty(&self, name: &str) -> Result<&'a str, RpcError> {
        let v = self.str(name)?;
        if v.trim().is_empty() {
            return Err(RpcError::params(format!("`{name}` is empty")));
        }
        Ok(v)
    }

    /// An optional argv array (absent: empty).
    pub fn argv(&self, name: &str) -> Result<Vec<String>, RpcError> {
        match self.field(name) {
            None | Some(Value::Array(_)) => self.strings(name),
            Some(_) => Err(RpcError::params(format!(
                "`{name}` must be an argv array, e.g. [\"ls\", \"-la\"]"
            ))),
        }
    }

    /// A required string.
    pub fn str(&self, name: &str) -> Result<&'a str, RpcError> {
        self.opt_str(name)?
            .ok_or_else(|| RpcError::params(format!("`{name}` (a string) is missing")))
    }

    /// An optional string.
    pub fn opt_str(&self, name: &str) -> Result<Option<&'a str>, RpcError> {
        match self.field(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(RpcError::params(format!("`{name}` must be a string"))),
        }
    }

    /// An optional boolean (absent: `false`).
    pub fn flag(&self, name: &str) -> Result<bool, RpcError> {
        match self.field(name) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(RpcError::params(format!("`{name}` must be true or false"))),
        }
    }

    /// An optional unsigned integer.
    pub fn opt_u64(&self, name: &str) -> Result<Option<u64>, RpcError> {
        match self.field(name) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                RpcError::params(format!("`{name}` must be a non-negative integer"))
            }),
        }
    }

    /// An optional array of strings (a single string counts as one).
    pub fn strings(&self, name: &str) -> Result<Vec<String>, RpcError> {
        let bad = || RpcError::params(format!("`{name}` must be an array of strings"));
        match self.field(name) {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_string).ok_or_else(bad))
                .collect(),
            Some(_) => Err(bad()),
        }
    }

    /// Base64 bytes (standard alphabet, padded).
    pub fn bytes(&self, name: &str) -> Result<Vec<u8>, RpcError> {
        let text = self.str(name)?;
        BASE64.decode(text).map_err(|e| {
            RpcError::new(
                "bad_base64",
                format!("`{name}` is not base64 ({e}); encode bytes with the standard alphabet"),
            )
        })
    }

    /// A size `{cols, rows}` (absent: 80×24).
    pub fn size(&self, name: &str) -> Result<TermSize, RpcError> {
        match self.field(name) {
            None => Ok(TermSize::default()),
            Some(v) => size_of(v).ok_or_else(|| {
                RpcError::params(format!(
                    "`{name}` must be {{\"cols\": 1..65535, \"rows\": 1..65535}}"
                ))
            }),
        }
    }

    /// A size given as top-level `cols` and `rows` (as in `pane.resize`).
    pub fn size_fields(&self) -> Result<TermSize, RpcError> {
        size_of(self.0)
            .ok_or_else(|| RpcError::params("`cols` and `rows` must be integers 1..65535"))
    }

    /// A pane key `{workspace, tab, leaf}`; other fields are refused.
    pub fn pane(&self, name: &str) -> Result<PaneKey, RpcError> {
        let v = self
            .field(name)
            .ok_or_else(|| RpcError::params(format!("`{name}` is missing")))?;
        Params(v)
            .only(&["workspace", "tab", "leaf"])
            .map_err(|e| RpcError::params(format!("in `{name}`: {}", e.message)))?;
        let part = |k: &str| -> Result<&str, RpcError> {
            let text = v.get(k).and_then(Value::as_str).ok_or_else(|| {
                RpcError::params(format!(
                    "`{name}` must be {{\"workspace\", \"tab\", \"leaf\"}}, three strings; \
                     `{k}` is missing or not a string"
                ))
            })?;
            pane_part(&format!("{name}.{k}"), text)
        };
        Ok(PaneKey::new(
            part("workspace")?,
            part("tab")?,
            part("leaf")?,
        ))
    }

    /// A PTY id `"<incarnation hex>.<counter>"`.
    pub fn pty(&self, name: &str) -> Result<PtyId, RpcError> {
        self.str(name)?
            .parse()
            .map_err(|e: relay_protocol::ParsePtyIdError| RpcError::params(e.to_string()))
    }

    /// A binding as the sidecar returned it: `{host, pane, pty}`.
    pub fn binding(&self, name: &str) -> Result<(String, Binding), RpcError> {
        let v = self
            .field(name)
            .ok_or_else(|| RpcError::params(format!("`{name}` is missing")))?;
        let inner = Params(v);
        let bad = |e: RpcError| {
            RpcError::params(format!(
                "`{name}` must be a binding as returned by pane.open or pane.attach ({})",
                e.message
            ))
        };
        inner.only(&["host", "pane", "pty"]).map_err(bad)?;
        let host = inner.str("host").map_err(bad)?.to_string();
        let pane = inner.pane("pane").map_err(bad)?;
        let pty = inner.pty("pty").map_err(bad)?;
        Ok((host, Binding { pane, pty }))
    }
}

/// `text` if it can be one part of a pane key, else `invalid_params` naming `field` and the
/// rule it breaks ([`relay_protocol::check_pane_part`]).
fn pane_part<'t>(field: &str, text: &'t str) -> Result<&'t str, RpcError> {
    relay_protocol::check_pane_part(text).map_err(|e| {
        RpcError::params(format!(
            "`{field}`: {e}; it must be {}",
            relay_protocol::PANE_PART_FORM
        ))
    })?;
    Ok(text)
}

fn size_of(v: &Value) -> Option<TermSize> {
    let dim = |k: &str| {
        v.get(k)?
            .as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| *n > 0)
    };
    Some(TermSize {
        cols: dim("cols")?,
        rows: dim("rows")?,
    })
}
