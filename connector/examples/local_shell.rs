//! Creates a pane on the local agent that runs a short command, prints its output until it
//! exits, then prints the exit status.
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

    // A fresh pane name per run, so that create really spawns.
    let pane = PaneKey::new("examples", "local_shell", std::process::id().to_string());
    let spec = SpawnSpec {
        command: vec![
            "sh".into(),
            "-c".into(),
            // Waits for Enter: attaching to a pane whose PTY already ended is refused (rule B),
            // so the command must not finish before we are attached.
            "stty -echo; read _; echo hello from relay; uname -a".into(),
        ],
        ..SpawnSpec::default()
    };
    let created = session.create(pane.clone(), spec).await?;
    println!("created {}", created.binding);

    // Replay from offset 0: output produced before the attach is not missed.
    let mut handle = session
        .attach(pane, Some(created.binding.pty), Some(0))
        .await?;
    // Bindings are captured once and passed explicitly to every mutation (rule C).
    let binding = handle.binding().clone();
    session.input(&binding, b"\n").await?;
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
        }
    }
    Ok(())
}
