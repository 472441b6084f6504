//! Strict known_hosts checking: unknown keys refused with the fingerprint, changed keys refused
//! naming file and line, `accept-new` records a key once.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn unknown_host_key_is_refused_with_its_fingerprint() {
    let host = SshHost::start().await.unwrap();
    let transport = SshTransport::new(options(&host)); // empty known_hosts
    let err = Session::connect(&transport, "ssh-tests").await.unwrap_err();
    let Error::HostKey { message: msg, .. } = &err else {
        panic!("expected a host key error, got {err:?}");
    };
    assert!(!err.is_transient());
    assert!(
        msg.contains("SHA256:") && msg.contains("--accept-new"),
        "{msg}"
    );
    let key_file = host.home().join("host_key.pub");
    std::fs::write(&key_file, &host.files().host_key).unwrap();
    let fp = std::process::Command::new("ssh-keygen")
        .arg("-lf")
        .arg(&key_file)
        .output()
        .unwrap();
    let fp = String::from_utf8_lossy(&fp.stdout);
    let fp = fp.split_whitespace().nth(1).unwrap();
    assert!(msg.contains(fp), "{msg} does not name {fp}");
    // Nothing happened on the host.
    assert_ne!(host.exec("test -e ~/.relay").await.unwrap().code, 0);
    assert!(!host.known_hosts_path().exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn changed_host_key_is_refused_naming_file_and_line() {
    let host = SshHost::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("k");
    let other_pub = relay_tests::fixture::keygen(&other, "").unwrap();
    let other_pub: Vec<&str> = other_pub.split_whitespace().collect();
    let kh = host.known_hosts_path();
    std::fs::write(
        &kh,
        format!(
            "# relay test\n[127.0.0.1]:{} {} {}\n",
            host.port(),
            other_pub[0],
            other_pub[1]
        ),
    )
    .unwrap();
    let mut opts = options(&host);
    opts.host_key_policy = Some(HostKeyPolicy::AcceptNew); // even accept-new refuses a change
    let err = Session::connect(&SshTransport::new(opts), "ssh-tests")
        .await
        .unwrap_err();
    let Error::HostKeyChanged(msg) = &err else {
        panic!("expected a changed-host-key error, got {err:?}");
    };
    assert!(msg.contains("CHANGED"), "{msg}");
    assert!(msg.contains(&format!("{} line 2", kh.display())), "{msg}");
    assert_ne!(host.exec("test -e ~/.relay").await.unwrap().code, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn accept_new_records_the_key_once_then_strict_passes() {
    let host = SshHost::start().await.unwrap();
    let mut opts = options(&host);
    opts.host_key_policy = Some(HostKeyPolicy::AcceptNew);
    drop(
        Session::connect(&SshTransport::new(opts.clone()), "ssh-tests")
            .await
            .unwrap(),
    );
    let text = std::fs::read_to_string(host.known_hosts_path()).unwrap();
    assert_eq!(text.trim(), host.known_hosts_line(), "{text}");
    // Strict now passes, and accept-new adds nothing more.
    drop(
        Session::connect(&SshTransport::new(options(&host)), "ssh-tests")
            .await
            .unwrap(),
    );
    drop(
        Session::connect(&SshTransport::new(opts), "ssh-tests")
            .await
            .unwrap(),
    );
    let text2 = std::fs::read_to_string(host.known_hosts_path()).unwrap();
    assert_eq!(text, text2);
}

#[tokio::test(flavor = "multi_thread")]
async fn revoked_host_key_is_refused_even_with_accept_new() {
    let host = SshHost::start().await.unwrap();
    let kh = host.known_hosts_path();
    let text = format!(
        "{}\n# revoked after a leak\n@revoked * {}\n",
        host.known_hosts_line(),
        host.files().host_key.trim()
    );
    std::fs::write(&kh, &text).unwrap();
    for policy in [None, Some(HostKeyPolicy::AcceptNew)] {
        let mut opts = options(&host);
        opts.host_key_policy = policy;
        let err = Session::connect(&SshTransport::new(opts), "ssh-tests")
            .await
            .unwrap_err();
        let Error::HostKeyChanged(msg) = &err else {
            panic!("expected a changed-host-key error, got {err:?}");
        };
        assert!(msg.contains("REVOKED"), "{msg}");
        assert!(msg.contains(&format!("{} line 3", kh.display())), "{msg}");
    }
    assert_eq!(
        std::fs::read_to_string(&kh).unwrap(),
        text,
        "known_hosts changed"
    );
    assert_ne!(host.exec("test -e ~/.relay").await.unwrap().code, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn host_known_only_by_its_ecdsa_key_connects_strictly() {
    let host = SshHost::start().await.unwrap();
    let ecdsa = host
        .exec_ok("cat /etc/ssh/ssh_host_ecdsa_key.pub")
        .await
        .unwrap();
    let fields: Vec<&str> = ecdsa.stdout.split_whitespace().collect();
    assert!(fields[0].starts_with("ecdsa-sha2-"), "{fields:?}");
    std::fs::write(
        host.known_hosts_path(),
        format!("[127.0.0.1]:{} {} {}\n", host.port(), fields[0], fields[1]),
    )
    .unwrap();
    let session = Session::connect(&SshTransport::new(options(&host)), "ssh-tests")
        .await
        .unwrap();
    session.list_leases().await.unwrap();
}
