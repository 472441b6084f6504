//! Every message body: a known op chosen by the first byte, the rest as its body, through
//! `Message::from_envelope`, with the round trip of whatever decodes. Input layout:
//! `relay_fuzz_inputs::BodyInput`; checks: `wire::check_body`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_fuzz_inputs::BodyInput;

fuzz_target!(|data: &[u8]| {
    if let Some(input) = BodyInput::parse(data) {
        relay_fuzz::wire::check_body(input);
    }
});
