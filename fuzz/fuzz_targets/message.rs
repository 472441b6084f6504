//! One frame body through `Envelope::from_bytes` and `Message::from_bytes`, with the round trip
//! of whatever decodes. Checks: `wire::check_message`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    relay_fuzz::wire::check_message(data);
});
