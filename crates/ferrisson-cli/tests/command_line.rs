//! What every subcommand shares: where the Redis URL comes from, help texts, colours.

use std::process::{Command, Stdio};

use ferrisson_testkit::RedisServer;

mod support;
use support::{FERRISSON, ferrisson, outcome};

/// Which source must win, the flags, the environment.
type UrlCase<'a> = (&'a str, Vec<&'a str>, Vec<(&'a str, &'a str)>);

/// `--url`, then `FERRISSON_URL`, then the older `FERRISSON_REDIS_URL`, then `REDIS_URL`;
/// `--redis` is the older name of `--url`. A wrong URL at every level below the one that
/// must win shows which one was used.
#[test]
fn the_url_comes_from_the_flag_then_the_environment() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let good = server.url();
    let wrong = "redis://127.0.0.1:1";
    let count = ["id", "count", "order"];
    let cases: [UrlCase<'_>; 5] = [
        (
            "--url",
            vec!["--url", &good],
            vec![("FERRISSON_URL", wrong), ("REDIS_URL", wrong)],
        ),
        (
            "--redis",
            vec!["--redis", &good],
            vec![("FERRISSON_URL", wrong)],
        ),
        (
            "FERRISSON_URL",
            vec![],
            vec![
                ("FERRISSON_URL", &good),
                ("FERRISSON_REDIS_URL", wrong),
                ("REDIS_URL", wrong),
            ],
        ),
        (
            "FERRISSON_REDIS_URL",
            vec![],
            vec![("FERRISSON_REDIS_URL", &good), ("REDIS_URL", wrong)],
        ),
        ("REDIS_URL", vec![], vec![("REDIS_URL", &good)]),
    ];
    for (winner, flags, environment) in cases {
        let (code, stdout, stderr) = outcome(ferrisson(&count).args(&flags).envs(environment))?;
        assert_eq!(code, Some(0), "{winner}: {stderr}");
        assert_eq!(stdout, "0\n", "{winner}");
    }
    Ok(())
}

/// Only the subcommands that talk to Redis take a URL.
#[test]
fn subcommands_without_redis_refuse_a_url() -> anyhow::Result<()> {
    for args in [
        &["id", "decode", "--url", "redis://127.0.0.1:1", "1"][..],
        &["id", "decode", "--redis", "redis://127.0.0.1:1", "1"],
    ] {
        let (code, _, stderr) = outcome(&mut ferrisson(args))?;
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("unexpected argument"), "{args:?}: {stderr}");
    }
    Ok(())
}

#[test]
fn help_describes_what_exists() -> anyhow::Result<()> {
    let (code, help, _) = outcome(&mut ferrisson(&["--help"]))?;
    assert_eq!(code, Some(0));
    for subcommand in ["lock", "elect", "id", "ls", "inspect", "unlock", "top"] {
        assert!(
            help.contains(&format!("  {subcommand} ")),
            "{subcommand}: {help}"
        );
    }
    for missing in ["benchmark", "internal"] {
        assert!(!help.contains(missing), "{missing}: {help}");
    }
    assert!(
        !help.contains("chaos"),
        "the fault suite is its own program: {help}"
    );

    let (_, lock, _) = outcome(&mut ferrisson(&["lock", "--help"]))?;
    for documented in [
        "--url <URL>",
        "[alias: --redis]",
        "FERRISSON_URL",
        "--conflict-exit-code <N>",
        "--lost-exit-code <N>",
        "--cacert <FILE>",
        "--cert <FILE>",
        "--key <FILE>",
        "--insecure",
        "125",
        "126, 127",
        "dies with ferrisson",
    ] {
        assert!(lock.contains(documented), "{documented}: {lock}");
    }
    // The inspector's JSON is documented where it is printed.
    for subcommand in ["ls", "inspect", "top"] {
        let (_, help, _) = outcome(&mut ferrisson(&[subcommand, "--help"]))?;
        for documented in [
            "--json",
            "--namespace <NAMESPACE>",
            "--url <URL>",
            "--cacert <FILE>",
        ] {
            assert!(
                help.contains(documented),
                "{subcommand} {documented}: {help}"
            );
        }
    }
    let (_, ls, _) = outcome(&mut ferrisson(&["ls", "--help"]))?;
    for field in ["name ", "kind ", "ttl_ms ", "holders ", "waiting_clients "] {
        assert!(ls.contains(&format!("  {field}")), "{field}: {ls}");
    }
    let (_, unlock, _) = outcome(&mut ferrisson(&["unlock", "--help"]))?;
    assert!(
        unlock.contains("--force") && unlock.contains("--yes"),
        "{unlock}"
    );
    let (_, count, _) = outcome(&mut ferrisson(&["id", "count", "--help"]))?;
    assert!(
        count.contains("--url <URL>") && count.contains("--cacert <FILE>"),
        "{count}"
    );
    Ok(())
}

#[test]
fn chaos_says_where_the_fault_suite_went() -> anyhow::Result<()> {
    let (code, _, stderr) = outcome(&mut ferrisson(&["chaos", "all"]))?;
    assert_eq!(
        code,
        Some(2),
        "refused as an argument this build does not take"
    );
    assert!(
        stderr.starts_with("error: the fault suite is a program of its own")
            && stderr.contains("ferrisson-chaos"),
        "{stderr}"
    );
    Ok(())
}

/// The test kit's server may evict keys, so connecting logs a warning: a log line to look
/// at, written to a pipe, and to a terminal with and without `NO_COLOR`.
#[test]
fn log_lines_are_coloured_only_on_a_terminal_without_no_color() -> anyhow::Result<()> {
    const ESCAPE: char = '\u{1b}';
    let server = RedisServer::start_with_args(&["--maxmemory-policy", "allkeys-lru"])?;
    let url = server.url();
    let args = ["lock", "--url", &url, "colour", "--", "true"];

    let (code, _, piped) = outcome(&mut ferrisson(&args))?;
    assert_eq!(code, Some(0), "{piped}");
    assert!(piped.contains("maxmemory-policy"), "{piped}");
    assert!(!piped.contains(ESCAPE), "{piped:?}");

    // script(1) runs the command on a pseudo-terminal and copies what it wrote.
    let line = std::iter::once(FERRISSON)
        .chain(args)
        .map(|arg| format!("'{arg}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let on_terminal = |no_color: Option<&str>| -> anyhow::Result<String> {
        let mut script = Command::new("script");
        script
            .args(["--quiet", "--return", "--command", &line, "/dev/null"])
            .env_remove("NO_COLOR")
            .env_remove("FERRISSON_LOG")
            .stdin(Stdio::null());
        if let Some(value) = no_color {
            script.env("NO_COLOR", value);
        }
        let (code, terminal, stderr) = outcome(&mut script)?;
        assert_eq!(code, Some(0), "{terminal}{stderr}");
        assert!(terminal.contains("maxmemory-policy"), "{terminal}");
        Ok(terminal)
    };
    assert!(
        on_terminal(None)?.contains(ESCAPE),
        "a person at a terminal"
    );
    assert!(!on_terminal(Some("1"))?.contains(ESCAPE), "NO_COLOR=1");
    assert!(
        on_terminal(Some(""))?.contains(ESCAPE),
        "an empty NO_COLOR is unset"
    );
    Ok(())
}
