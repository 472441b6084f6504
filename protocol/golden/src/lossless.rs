//! Golden rows for lossless delivery (protocol 1.6, capability `lossless`): `OpenLossless` and
//! `AttachLossless` carry the bodies of `Open` and `Attach` under op codes of their own; and
//! for `ListWorkspace` (protocol 1.7, capability `list-workspace`). Split from `mod.rs` only to
//! keep the table readable; same helpers, same rules.

use super::*;
use relay_protocol::message::ListWorkspace;
use relay_protocol::WorkspaceId;

/// Lossless and later samples, in op-code order.
pub fn lossless_cases() -> Vec<Golden> {
    vec![
        golden(
            "open_lossless",
            req(
                50,
                Request::OpenLossless(Open {
                    pane: pane(),
                    spec: SpawnSpec {
                        command: strings(&["sh", "-c", "make test"]),
                        cwd: None,
                        term: None,
                        size: size(),
                        env: vec![],
                    },
                    resume_from: Some(0),
                }),
            ),
            concat!(
                "32 26 23 03617069027431026c32 03 027368 022d63 096d616b652074657374 ",
                "00 00 c80132 00 0100",
            ),
        ),
        golden(
            "attach_lossless",
            req(
                51,
                Request::AttachLossless(Attach {
                    pane: pane(),
                    expect: Some(pty(7)),
                    resume_from: Some(300),
                }),
            ),
            "33 27 18 03617069027431026c32 01ef9bafcdf8acd1910107 01ac02",
        ),
        // Protocol 1.7, capability `list-workspace`: the body is the workspace's name.
        golden(
            "list_workspace",
            req(
                52,
                Request::ListWorkspace(ListWorkspace {
                    workspace: WorkspaceId("api".into()),
                }),
            ),
            "34 28 04 03617069",
        ),
    ]
}
