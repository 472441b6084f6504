//! Frame decoding: a byte stream, cut into pieces, through `FrameCodec` (and every frame through
//! `Message::from_bytes`). Input layout: `relay_fuzz_inputs::FrameInput`; checks: `wire::check_frames`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_fuzz_inputs::FrameInput;

fuzz_target!(|data: &[u8]| {
    if let Some(input) = FrameInput::parse(data) {
        relay_fuzz::wire::check_frames(input);
    }
});
