//! Opens a pane on the local agent through a [`Host`] (the handle an app keeps: it reconnects and
//! re-attaches by itself), runs a short command, prints its output until it exits, then prints
//! the exit status. Connection events are printed as they come.
//!
//! Run with `cargo run -p relay-connector --example local_shell` (after
//! `cargo build --workspace --bins`, so that `relay-agent` is next to the example's binary).

use relay_connector::{Host, HostOptions, LocalTransport, PaneEvent};
use relay_protocol::SpawnSpec;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let host = Host::open(
        LocalTransport::new(),
        HostOptions::new("local_shell example"),
    );
    let session = host.session().await?;
    let w = session.welcome();
    println!(
        "connected to relay-agent {} (incarnation {})",
        w.agent_version, w.incarnation
    );

    // A fresh pane name per run, so that open really spawns.
    let workspace = host.workspace("examples");
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
    let leaf = std::process::id().to_string();
    let (created, mut pane) = workspace.open("local_shell", &leaf, spec).await?;
    println!("created {}", created.binding);
    while let Some(event) = pane.next().await {
        match event {
            PaneEvent::Output { data, .. } => print!("{}", String::from_utf8_lossy(&data)),
            PaneEvent::Gap { from, to } => println!("[{} bytes lost]", to - from),
            PaneEvent::Exited { exit, reason, .. } => {
                println!("[pane ended: {exit}, {reason}]");
                break;
            }
            PaneEvent::Interrupted { reason } => println!("[connection lost: {reason}]"),
            PaneEvent::Resumed { from } => println!("[re-attached; output continues at {from}]"),
            other => {
                println!("[{other:?}]");
                if other.is_final() {
                    break;
                }
            }
        }
    }
    Ok(())
}
