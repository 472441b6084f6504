//! Hosts where deploying cannot work fail promptly with an error naming the cause and the fix,
//! instead of hanging on a stalled upload or reporting a bogus corruption.

use super::*;

/// Connects and expects a deploy error within 30 s; returns its message.
async fn deploy_error(host: &SshHost) -> String {
    let transport = trusted(host);
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        Session::connect(&transport, "ssh-tests"),
    )
    .await
    .expect("connect did not finish within 30 s");
    let Err(err) = result else {
        panic!("connect succeeded on a broken host");
    };
    // The property is "a clear error, no hang": the 30 s timeout above bounds it.
    let Error::Deploy { message: msg, .. } = &err else {
        panic!("expected a deploy error, got {err:?}");
    };
    msg.clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn relay_dir_that_is_a_file_fails_promptly_naming_it() {
    let host = SshHost::start().await.unwrap();
    host.exec_ok("echo x > ~/.relay").await.unwrap();
    let msg = deploy_error(&host).await;
    assert!(msg.contains("~/.relay"), "{msg}");
    assert!(msg.contains("(exit 4)"), "{msg}");
    assert!(msg.contains("Not a directory"), "{msg}");
    assert!(!msg.contains("Some("), "{msg}");
}

#[tokio::test(flavor = "multi_thread")]
async fn unwritable_bin_dir_fails_promptly_naming_it() {
    let host = SshHost::start().await.unwrap();
    host.exec_ok("mkdir -p ~/.relay/bin && chmod 500 ~/.relay/bin")
        .await
        .unwrap();
    let msg = deploy_error(&host).await;
    assert!(msg.contains("~/.relay/bin"), "{msg}");
    assert!(msg.contains("(exit 5)"), "{msg}");
    assert!(msg.contains("Permission denied"), "{msg}");
}

#[tokio::test(flavor = "multi_thread")]
async fn host_without_a_sha256_tool_is_refused_before_uploading() {
    let host = SshHost::start().await.unwrap();
    host.exec_as(
        "root",
        "for t in sha256sum shasum; do p=$(command -v $t) && mv \"$p\" \"$p.off\"; done; true",
    )
    .await
    .unwrap();
    assert_ne!(
        host.exec("command -v sha256sum || command -v shasum")
            .await
            .unwrap()
            .code,
        0,
        "the fixture still has a sha256 tool"
    );
    let mut opts = options(&host);
    host.write_known_hosts().unwrap();
    let uploads = counting(&mut opts);
    let err = Session::connect(&SshTransport::new(opts), "ssh-tests")
        .await
        .unwrap_err();
    // A retry cannot fix it: a host supervisor goes to Failed instead of retrying forever.
    let Error::AgentCannotRun(msg) = &err else {
        panic!("expected a permanent agent-cannot-run error, got {err:?}");
    };
    assert!(!err.is_transient());
    assert!(msg.contains("neither sha256sum nor shasum"), "{msg}");
    assert!(msg.contains("coreutils"), "{msg}");
    assert_eq!(uploads.load(Ordering::SeqCst), 0, "it uploaded anyway");
    assert_ne!(host.exec("test -e ~/.relay/bin").await.unwrap().code, 0);
}

/// Regression: a sha256 tool that runs but fails made a good upload look "corrupted in
/// transfer" (and a good installed agent look corrupt on every connect). A failing hash is now
/// reported as such, and nothing is left installed or executed.
#[tokio::test(flavor = "multi_thread")]
async fn failing_sha256_tool_is_reported_as_a_hashing_failure() {
    let host = SshHost::start().await.unwrap();
    host.exec_as(
        "root",
        "p=$(command -v sha256sum) && mv \"$p\" \"$p.off\" && \
         printf '#!/bin/sh\\necho broken-hash-tool >&2\\nexit 1\\n' > \"$p\" && chmod 755 \"$p\"; \
         q=$(command -v shasum) && mv \"$q\" \"$q.off\"; true",
    )
    .await
    .unwrap();
    let msg = deploy_error(&host).await;
    assert!(msg.contains("could not compute the sha256"), "{msg}");
    assert!(!msg.contains("corrupted"), "{msg}");
    let left = host
        .exec("ls -A ~/.relay/bin 2>/dev/null | wc -l")
        .await
        .unwrap();
    assert_eq!(left.out(), "0", "nothing left installed");
}
