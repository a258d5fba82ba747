//! `ferrisson lock` and `ferrisson id` over TLS, against the test kit's TLS
//! `redis-server` with certificates made by the test.

use ferrisson_testkit::{ClientAuth, TlsRedisServer, unrelated_ca_pem};

mod support;

/// Runs `ferrisson ARGS...` to its end.
fn ferrisson(args: &[&str]) -> anyhow::Result<(Option<i32>, String, String)> {
    support::outcome(&mut support::ferrisson(args))
}

/// A command that shows it ran under the lock: its name and fencing token.
const SHOW: [&str; 3] = [
    "sh",
    "-c",
    "echo $FERRISSON_LOCK_NAME $FERRISSON_FENCING_TOKEN",
];

#[test]
fn lock_runs_a_command_over_a_verified_tls_connection() -> anyhow::Result<()> {
    let server = TlsRedisServer::start(ClientAuth::None)?;
    let url = server.url();
    assert!(url.starts_with("rediss://"), "{url}");
    let ca = server.certificates().ca_path().display().to_string();
    let mut args = vec!["lock", "--url", &url, "--cacert", &ca, "tls-job", "--"];
    args.extend(SHOW);
    let (code, stdout, stderr) = ferrisson(&args)?;
    assert_eq!(code, Some(0), "{stderr}");
    assert_name_and_token(&stdout, "tls-job");
    // Released through the TLS connection.
    assert_eq!(server.server().command(&["EXISTS", "{tls-job}"])?, ":0");

    let (code, stdout, stderr) = ferrisson(&[
        "id", "next", "order", "--url", &url, "--cacert", &ca, "--count", "2",
    ])?;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    Ok(())
}

/// A server signed by another CA is refused before anything runs: exit status 125 (ferrisson's
/// own failure), one line that names the server and the certificate problem, no panic.
#[test]
fn a_wrong_ca_is_refused_with_one_line() -> anyhow::Result<()> {
    let server = TlsRedisServer::start(ClientAuth::None)?;
    let url = server.url();
    let dir = tempfile::tempdir()?;
    let wrong = dir.path().join("wrong-ca.pem");
    std::fs::write(&wrong, unrelated_ca_pem()?)?;
    let ran = dir.path().join("ran");
    let (code, stdout, stderr) = ferrisson(&[
        "lock",
        "--url",
        &url,
        "--cacert",
        &wrong.display().to_string(),
        "tls-job",
        "--",
        "touch",
        &ran.display().to_string(),
    ])?;
    assert_eq!(code, Some(125), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("ferrisson: ")
            && stderr.contains(&url)
            && stderr.contains("certificate"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!ran.exists(), "nothing ran");

    // Without --cacert the system's CA certificates are used, which do not know the test CA.
    let (code, _, stderr) = ferrisson(&["lock", "--url", &url, "tls-job", "--", "true"])?;
    assert_eq!(code, Some(125), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    Ok(())
}

#[test]
fn insecure_accepts_an_unknown_ca() -> anyhow::Result<()> {
    let server = TlsRedisServer::start(ClientAuth::None)?;
    let mut args = vec!["lock", "--insecure", "--url"];
    let url = server.url();
    args.extend([url.as_str(), "tls-job", "--"]);
    args.extend(SHOW);
    let (code, stdout, stderr) = ferrisson(&args)?;
    assert_eq!(code, Some(0), "{stderr}");
    assert_name_and_token(&stdout, "tls-job");
    Ok(())
}

#[test]
fn a_client_certificate_from_cert_and_key() -> anyhow::Result<()> {
    let server = TlsRedisServer::start(ClientAuth::Required)?;
    let url = server.url();
    let certificates = server.certificates();
    let ca = certificates.ca_path().display().to_string();
    let cert = certificates.client_path().display().to_string();
    let key = certificates.client_key_path().display().to_string();

    let (code, _, stderr) =
        ferrisson(&["lock", "--url", &url, "--cacert", &ca, "mtls", "--", "true"])?;
    assert_eq!(
        code,
        Some(125),
        "the server wants a client certificate: {stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    let mut args = vec![
        "lock", "--url", &url, "--cacert", &ca, "--cert", &cert, "--key", &key, "mtls", "--",
    ];
    args.extend(SHOW);
    let (code, stdout, stderr) = ferrisson(&args)?;
    assert_eq!(code, Some(0), "{stderr}");
    assert_name_and_token(&stdout, "mtls");

    // A certificate without its key is a usage error; an unreadable file is named.
    let (code, _, _) = ferrisson(&["lock", "--url", &url, "--cert", &cert, "mtls", "--", "true"])?;
    assert_eq!(code, Some(2));
    let (code, _, stderr) = ferrisson(&[
        "lock",
        "--url",
        &url,
        "--cacert",
        "/no/such/ca.pem",
        "mtls",
        "--",
        "true",
    ])?;
    assert_eq!(code, Some(2), "a refused argument: {stderr}");
    assert!(
        stderr.contains("invalid value \"/no/such/ca.pem\" for '--cacert': cannot read the file"),
        "{stderr}"
    );
    Ok(())
}

/// `stdout` is what `SHOW` prints under the lock `name`: the name and a fencing token.
fn assert_name_and_token(stdout: &str, name: &str) {
    let words: Vec<&str> = stdout.split_whitespace().collect();
    assert!(
        words.len() == 2 && words[0] == name && words[1].parse::<u64>().is_ok(),
        "{stdout:?}"
    );
}
