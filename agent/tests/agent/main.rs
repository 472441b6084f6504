//! Integration tests of `relay-agent` against the real binary, real PTYs and real processes.
//! Each test has its own temporary `RELAY_HOME` (so its own daemon), stopped when the test ends.

mod support;

mod bridge;
mod ending;
mod flow;
mod frames;
mod hygiene;
mod input_seq;
mod lifecycle;
mod limits;
mod logs;
mod lossless;
mod malformed;
mod nofile;
mod open;
mod output;
mod peer;
mod policy;
mod restart;
mod rules;
mod stdio_pass;
mod tails;
