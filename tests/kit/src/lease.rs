//! A [`LeaseInfo`] to start a test row from; tests change what they check with struct update
//! syntax (`LeaseInfo { protected: true, ..lease(pane, 3, LeaseState::Detached) }`).

use relay_protocol::{Binding, Incarnation, LeaseInfo, LeaseState, PaneKey, PtyId, TermSize};

/// The incarnation of every PTY id [`lease`] makes.
pub const INCARNATION: Incarnation = Incarnation(1);

/// A lease of `pane` with PTY id `1.<counter>` in `state`: pid `4000 + counter`, since the epoch
/// (0 ms), no output, no command, no exit, not protected, nothing attached, the default size.
pub fn lease(pane: PaneKey, counter: u64, state: LeaseState) -> LeaseInfo {
    LeaseInfo {
        binding: Binding {
            pane,
            pty: PtyId {
                incarnation: INCARNATION,
                counter,
            },
        },
        state,
        pid: Some(4000 + counter as u32),
        since_ms: 0,
        last_output_ms: None,
        bytes_out: 0,
        command: Vec::new(),
        exit: None,
        reason: None,
        protected: false,
        attached: 0,
        size: TermSize::default(),
    }
}
