//! ssh_config and authentication: Host alias with User/Port/IdentityFile, ProxyJump, ProxyCommand,
//! encrypted keys with a passphrase callback.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn ssh_config_alias_with_user_port_and_identity_file_is_honoured() {
    let host = SshHost::start().await.unwrap();
    host.write_known_hosts().unwrap();
    let config = host.write_ssh_config("fixture-box", "").unwrap();
    let opts = |config: PathBuf| config_only("fixture-box", config);
    let transport = SshTransport::new(opts(config));
    let cfg = transport.resolve().await.unwrap();
    assert_eq!(cfg.display(), format!("relay@127.0.0.1:{}", host.port()));
    let session = Session::connect(&transport, "ssh-tests").await.unwrap();
    session.list_leases().await.unwrap();

    // Control: the same alias without its IdentityFile cannot log in, and the error says who
    // and what was tried.
    let bare = host.home().join(".ssh/config-no-key");
    std::fs::write(
        &bare,
        format!(
            "Host fixture-box\n  HostName 127.0.0.1\n  User relay\n  Port {}\n  \
             IdentityFile /nonexistent/key\n  UserKnownHostsFile {}\n",
            host.port(),
            host.known_hosts_path().display()
        ),
    )
    .unwrap();
    let err = Session::connect(&SshTransport::new(opts(bare)), "ssh-tests")
        .await
        .unwrap_err();
    let Error::Auth(msg) = &err else {
        panic!("expected an auth error, got {err:?}");
    };
    assert!(!err.is_transient());
    assert!(
        msg.contains("\"relay\"") && msg.contains("127.0.0.1"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_jump_reaches_a_host_through_another() {
    let (jump, target) = relay_tests::fixture::two_hosts().await.unwrap();
    let (jump_ip, target_ip) = (
        jump.bridge_ip().await.unwrap(),
        target.bridge_ip().await.unwrap(),
    );
    let kh = jump.known_hosts_path();
    std::fs::write(
        &kh,
        format!(
            "{}\n{target_ip} {}\n",
            jump.known_hosts_line(),
            jump.files().host_key
        ),
    )
    .unwrap();
    let config = jump.home().join(".ssh/jump_config");
    std::fs::write(
        &config,
        format!(
            "Host jumpbox\n  HostName 127.0.0.1\n  Port {}\nHost inner\n  HostName {target_ip}\n  \
             ProxyJump jumpbox\nHost *\n  User relay\n  IdentityFile {}\n  IdentitiesOnly yes\n  \
             UserKnownHostsFile {}\n",
            jump.port(),
            jump.key_path().display(),
            kh.display()
        ),
    )
    .unwrap();
    let session = Session::connect(
        &SshTransport::new(config_only("inner", config)),
        "ssh-tests",
    )
    .await
    .unwrap();
    session.list_leases().await.unwrap();
    // The target's only SSH peer is the jump host, and the agent runs on the target.
    assert_eq!(ssh_peers(&target).await, vec![jump_ip]);
    assert_eq!(count_procs(&target, "[r]elay-agent-.* bridge").await, 1);
    assert_eq!(count_procs(&jump, "[r]elay-agent-.* bridge").await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_command_carries_the_connection() {
    let host = SshHost::start().await.unwrap();
    let kh = host.known_hosts_path();
    std::fs::write(&kh, format!("proxied.invalid {}\n", host.files().host_key)).unwrap();
    let config = host.home().join(".ssh/proxy_config");
    // The host name does not resolve: only the ProxyCommand can reach the host.
    let hosts = format!(
        "HostName proxied.invalid\n  UserKnownHostsFile {}",
        kh.display()
    );
    let session = through_proxy(&host, &config, &hosts, "").await;
    session.list_leases().await.unwrap();
}

/// Connects to `host` as alias `proxied` through a bash `ProxyCommand` (given `%h` as its `$0`)
/// that runs `first` and then relays to the host's port; `lines` add to the `Host` block.
async fn through_proxy(host: &SshHost, config: &Path, lines: &str, first: &str) -> Session {
    std::fs::write(
        config,
        format!(
            "Host proxied\n  {lines}\n  User relay\n  IdentityFile {}\n  IdentitiesOnly yes\n  \
             ProxyCommand bash -c '{first}exec 3<>/dev/tcp/127.0.0.1/{}; cat <&3 & exec cat >&3' \
             %h\n",
            host.key_path().display(),
            host.port()
        ),
    )
    .unwrap();
    Session::connect(
        &SshTransport::new(config_only("proxied", config.to_path_buf())),
        "ssh-tests",
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn encrypted_key_asks_the_passphrase_callback() {
    let host = SshHost::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("enc_key");
    let public = relay_tests::fixture::keygen(&key, "s3cret").unwrap();
    host.exec_ok(&format!(
        "echo '{}' >> ~/.ssh/authorized_keys",
        public.trim()
    ))
    .await
    .unwrap();
    host.write_known_hosts().unwrap();

    // Without a prompt the key is skipped, and the error says so.
    let mut opts = options(&host);
    opts.auth.identities = vec![key.clone()];
    let err = Session::connect(&SshTransport::new(opts.clone()), "ssh-tests")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Auth(m) if m.contains("encrypted")),
        "{err:?}"
    );

    let asked = Arc::new(AtomicUsize::new(0));
    let n = asked.clone();
    opts.auth.passphrase = Some(Arc::new(move |path: &Path, attempt: u32| {
        n.fetch_add(1, Ordering::SeqCst);
        assert!(path.ends_with("enc_key"));
        Some(if attempt == 1 { "wrong" } else { "s3cret" }.to_string())
    }));
    let session = Session::connect(&SshTransport::new(opts), "ssh-tests")
        .await
        .unwrap();
    session.list_leases().await.unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 2);
}

/// Host and user names reach shells (`ssh -G`, a `ProxyCommand`'s `%h %r %n`).
/// A destination with shell metacharacters is refused before anything runs, by relay itself
/// (also without OpenSSH's own check: the ssh2-config fallback here); and a value substituted
/// into a real ProxyCommand — a `HostName` holding `$(...)` — reaches it as one literal argument
/// and runs nothing, while the connection works.
#[tokio::test(flavor = "multi_thread")]
async fn proxy_command_substitutions_cannot_run_commands() {
    // `ssh -G` lowercases host names: a lowercase path without spaces.
    let dir = PathBuf::from(format!("/tmp/relay-inject-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();

    let typed_marker = dir.join("typed");
    let fallback_config = dir.join("config");
    std::fs::write(
        &fallback_config,
        "Host *\n  User relay\n  ProxyCommand sh -c 'exit 1' %h\n",
    )
    .unwrap();
    let destination = format!("a;>{}", typed_marker.display());
    let out = std::process::Command::new(&bins().relayctl)
        .args(["--ssh", &destination, "status", "-F"])
        .arg(&fallback_config)
        .env("RELAY_SSH", dir.join("no-ssh-client"))
        .env_remove("SSH_AUTH_SOCK")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("contains ';'") && stderr.contains("check the destination"),
        "{stderr}"
    );
    assert!(!typed_marker.exists(), "the destination ran a command");

    let host = SshHost::start().await.unwrap();
    let marker = dir.join("configured");
    let seen = dir.join("seen");
    let hostname = format!("h$(>{})x", marker.display());
    let lines =
        format!("HostName {hostname}\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null");
    let first = format!("echo \"$0\" > {}; ", seen.display());
    let session = through_proxy(&host, &dir.join("proxy_config"), &lines, &first).await;
    session.list_leases().await.unwrap();
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap().trim_end(),
        hostname,
        "the ProxyCommand got the host name as one literal argument"
    );
    assert!(!marker.exists(), "a substituted %h ran a command");
    drop(session);
    let _ = std::fs::remove_dir_all(&dir);
}
