//! The checks behind relay's fuzz targets (`fuzz_targets/`), kept in a library so each target
//! is a few lines and the checks can be read (and tested) in one place.
//!
//! - [`wire`]: what must hold for any bytes the protocol decoders accept or refuse: decoding
//!   never panics, whatever decodes survives encode → decode unchanged and encodes canonically,
//!   the frame decoder does not depend on how the stream is cut into pieces.
//! - [`agent`]: a real in-process agent (`State` in a temp dir, `connection::serve` on one end
//!   of a socket pair) and a driver that plays the input's frames to it one request at a time.
//!
//! See `docs/fuzzing.md` for how to run them and what they do not cover.

pub mod agent;
pub mod wire;
