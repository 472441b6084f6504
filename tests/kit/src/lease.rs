//! A [`LeaseInfo`] to start a test row from; tests change what they check with struct update
//! syntax (`LeaseInfo { protected: true, ..lease(binding, LeaseState::Detached) }`).

use relay_protocol::{Binding, LeaseInfo, LeaseState, TermSize};

/// A lease of `binding` in `state`: pid `4000 + the PTY counter`, since the epoch (0 ms), no
/// output, no command, no exit, not protected, nothing attached, the default size.
pub fn lease(binding: Binding, state: LeaseState) -> LeaseInfo {
    LeaseInfo {
        pid: Some(4000 + binding.pty.counter as u32),
        binding,
        state,
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
