//! relay connector (work in progress; see docs/ARCHITECTURE.md).
#![deny(missing_docs)]

mod error;
pub mod transport;

pub use error::Error;
