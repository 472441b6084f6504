//! Lifecycle: which detached PTYs the agent may end by itself, and when (DESIGN §4).
//!
//! - [`policy`]: the one pure function from observed facts to a verdict, and policy parsing;
//! - [`timers`]: one timer per detached lease, armed on events, that only triggers a re-check
//!   (rule A5: advancing time alone never ends a shell whose facts changed).
//!
//! The daemon state gathers the facts and carries out ends (`state::lifecycle`).

pub mod policy;
pub mod timers;

pub use policy::{
    decide, Children, Facts, HostPolicy, Keep, LeasePolicy, Rule, SuggestWhy, Verdict,
};
pub use timers::{Owner, PolicyEnd, Timers};
