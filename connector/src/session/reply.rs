//! Small helpers of the session's requests: checking a reply's kind, naming a request, and
//! durations in messages.

use std::time::Duration;

use relay_protocol::{Op, Request, Response};

use crate::Error;

pub(super) fn done(what: &str, resp: Response) -> Result<(), Error> {
    match resp {
        Response::Done(_) => Ok(()),
        other => Err(unexpected(what, other.op())),
    }
}

/// The request's name for messages (`status`, `list leases`, ...).
pub(super) fn op_name(req: &Request) -> &'static str {
    match req {
        Request::Create(_) => "create",
        Request::Open(_) | Request::OpenLossless(_) => "open",
        Request::Attach(_) | Request::AttachLossless(_) => "attach",
        Request::Input(_) => "input",
        Request::Resize(_) => "resize",
        Request::Signal(_) => "signal",
        Request::Kill(_) => "kill",
        Request::Detach(_) => "detach",
        Request::Protect(_) => "protect",
        Request::ListLeases(_) => "list leases",
        Request::ListWorkspace(_) => "list a workspace",
        Request::Status(_) => "status",
        Request::Ping(_) => "ping",
        Request::InputSeq(_) => "input",
        _ => "request",
    }
}

/// `10 s`, `1.5 s`, `250 ms`.
pub(super) fn human_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{} s", d.as_secs())
    } else if d.as_secs() > 0 {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// A reply of kind `op` that does not answer `what`.
pub(crate) fn unexpected(what: &str, op: Op) -> Error {
    Error::UnexpectedReply(format!("{op:?} in answer to {what}"))
}
