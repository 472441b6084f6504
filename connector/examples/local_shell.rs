//! Opens a pane on the local agent that runs a short command, prints its output until it exits,
//! then prints the exit status. Needs an agent with the `open` capability (protocol 1.1).
//!
//! Run with `cargo run -p relay-connector --example local_shell` (after
//! `cargo build --workspace --bins`, so that `relay-agent` is next to the example's binary).

use relay_connector::{LocalTransport, PaneEvent, Session};
use relay_protocol::{PaneKey, SpawnSpec};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let session = Session::connect(&LocalTransport::new(), "local_shell example").await?;
    let w = session.welcome();
    println!(
        "connected to relay-agent {} (incarnation {})",
        w.agent_version, w.incarnation
    );

    // A fresh pane name per run, so that open really spawns.
    let pane = PaneKey::new("examples", "local_shell", std::process::id().to_string());
    let spec = SpawnSpec {
        command: vec![
            "sh".into(),
            "-c".into(),
            "echo hello from relay; uname -a".into(),
        ],
        ..SpawnSpec::default()
    };
    // Create and attach in one step, replaying from offset 0: even though the command ends at
    // once, none of its output and not its exit status is missed.
    let (created, mut handle) = session.open(pane, spec, Some(0)).await?;
    println!("created {}", created.binding);
    while let Some(event) = handle.next().await {
        match event {
            PaneEvent::Output { data, .. } => print!("{}", String::from_utf8_lossy(&data)),
            PaneEvent::Gap { from, to } => println!("[{} bytes lost]", to - from),
            PaneEvent::Exited { exit, reason, .. } => {
                println!("[pane ended: {exit}, {reason}]");
                break;
            }
            PaneEvent::Disconnected { reason } => {
                println!("[connection lost: {reason}]");
                break;
            }
            other => println!("[{other:?}]"),
        }
    }
    Ok(())
}
