//! The agent's request handling on a connection: the input's frames, one request at a time, to
//! a real in-process agent (`connection::serve` over a socket pair, `State` in a temp dir).
//! Input layout: `relay_fuzz_inputs::AgentInput`; driver and checks: `relay_fuzz::agent`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_fuzz_inputs::AgentInput;

fuzz_target!(|data: &[u8]| {
    if let Some(input) = AgentInput::parse(data) {
        relay_fuzz::agent::run(input);
    }
});
