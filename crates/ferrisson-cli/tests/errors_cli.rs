//! What a user reads when the server refuses them: one short line that says what is
//! wrong and what to do (a missing or wrong password, an ACL user without a permission
//! ferrisson needs), and log lines in the command's words, without the library's module
//! paths.

use ferrisson_testkit::RedisServer;

mod support;
use support::{ferrisson, outcome};

/// Longest a one-line error may be: the issue saw 4,700 characters (one failure per
/// script loaded).
const READABLE: usize = 400;

/// Runs `ferrisson lock --url URL x -- true`, which must fail with exit 125 and one
/// readable line: that line.
fn refused_line(url: &str) -> anyhow::Result<String> {
    let (code, _, stderr) = outcome(&mut ferrisson(&["lock", "--url", url, "x", "--", "true"]))?;
    assert_eq!(code, Some(125), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.len() < READABLE,
        "{} characters: {stderr}",
        stderr.len()
    );
    assert!(
        stderr.starts_with("ferrisson: cannot take lock \"x\": "),
        "{stderr}"
    );
    Ok(stderr)
}

#[test]
fn a_missing_or_wrong_password_says_so_and_what_to_do() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    // Set once the test kit saw the server answer (its PING has no password).
    server.command(&["CONFIG", "SET", "requirepass", "sekret"])?;
    let port = server.port();

    let missing = refused_line(&format!("redis://127.0.0.1:{port}"))?;
    assert!(
        missing.contains("the server requires a password (NOAUTH): put it in the URL"),
        "{missing}"
    );
    let wrong = refused_line(&format!("redis://:guess@127.0.0.1:{port}"))?;
    assert!(
        wrong.contains("the server refused the user name or password (WRONGPASS)")
            && wrong.contains("check the credentials")
            && !wrong.contains("guess"),
        "{wrong}"
    );
    // The right one works.
    let (code, _, stderr) = outcome(&mut ferrisson(&[
        "lock",
        "--url",
        &format!("redis://:sekret@127.0.0.1:{port}"),
        "x",
        "--",
        "true",
    ]))?;
    assert_eq!(code, Some(0), "{stderr}");
    Ok(())
}

/// An ACL user without `SCRIPT LOAD` is refused once, not once per script, and told what
/// to grant; one without `EVALSHA` connects and is refused the same way at its first lock.
#[test]
fn an_acl_user_without_a_permission_is_told_which_to_grant() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    server.command(&[
        "ACL", "SETUSER", "noload", "on", ">pw", "~*", "&*", "+@all", "-script",
    ])?;
    server.command(&[
        "ACL", "SETUSER", "noeval", "on", ">pw", "~*", "&*", "+@all", "-evalsha",
    ])?;
    let port = server.port();

    let no_load = refused_line(&format!("redis://noload:pw@127.0.0.1:{port}"))?;
    assert!(
        no_load.contains(
            "the server's ACL does not let this user run 'script|load' (NOPERM): grant it \
             (ACL SETUSER USER +script|load)"
        ),
        "{no_load}"
    );
    assert_eq!(no_load.matches("NOPERM").count(), 1, "{no_load}");

    let no_eval = refused_line(&format!("redis://noeval:pw@127.0.0.1:{port}"))?;
    assert!(
        no_eval.contains("run 'evalsha' (NOPERM): grant it (ACL SETUSER USER +evalsha)"),
        "{no_eval}"
    );
    Ok(())
}

/// The library's warnings reach the command line as `ferrisson: warning: ...`, never with
/// a module path (a server that may evict keys makes the library warn at connect).
#[test]
fn library_warnings_read_as_the_command_speaks() -> anyhow::Result<()> {
    let server = RedisServer::start_with_args(&["--maxmemory-policy", "allkeys-lru"])?;
    let (code, _, stderr) = outcome(&mut ferrisson(&[
        "lock",
        "--url",
        &server.url(),
        "x",
        "--",
        "true",
    ]))?;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stderr,
        "ferrisson: warning: redis maxmemory-policy can evict lock keys under memory \
         pressure; set it to noeviction (policy allkeys-lru)\n"
    );
    Ok(())
}
