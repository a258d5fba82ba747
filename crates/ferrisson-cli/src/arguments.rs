//! The rules every argument is checked against before anything connects, and the error
//! that refuses one (exit status 2).
//!
//! The library checks the same values when they reach it, but only once connected: a
//! command refused there would have waited for a server first and reported a refused
//! argument as a failure to talk to it. These functions take the parsed values and touch
//! nothing, so a subcommand checks all of its arguments up front, whatever store it then
//! connects to. A test in this file holds them to the library's own rules.

use std::fmt;
use std::time::Duration;

use ferrisson::redis::{MAX_CANDIDATE_ID_LEN, MAX_ID_PREFIX_LEN, MAX_NAME_LEN, MAX_NAMESPACE_LEN};

use crate::terminal::quoted;

/// The shortest watchdog lease `--lease` takes. The lock (or leadership) is renewed every
/// third of its lease, so one renewal's round trip to the store has two thirds of it
/// (about 66 ms here) before the lease runs out; a shorter lease is lost to a round trip
/// that a network or a busy machine makes now and then, and `--lease 1ms` would be lost
/// at once.
pub const MIN_LEASE: Duration = Duration::from_millis(100);

/// The longest lease the library takes.
const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);

/// An argument refused before anything connected, and why, with what to do.
#[derive(Debug)]
pub struct Refused(String);

impl Refused {
    /// `argument` (as the help text names it: `--lease`, `<NAME>`) refused for `reason`,
    /// without showing its value (long, or it may hold a password).
    pub fn new(argument: &str, reason: impl fmt::Display) -> Self {
        Self(format!("invalid value for '{argument}': {reason}"))
    }

    /// `argument` refused for `reason`, showing `value` (escaped).
    pub fn value(argument: &str, value: &str, reason: impl fmt::Display) -> Self {
        Self(format!(
            "invalid value {} for '{argument}': {reason}",
            quoted(value)
        ))
    }

    /// Arguments refused together, or a flag missing: `message` says which and why.
    pub fn because(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// A primitive's name (`lock`, `elect`, `inspect`, `unlock`): 1 to [`MAX_NAME_LEN`]
/// bytes, no brace.
pub fn check_name(argument: &str, name: &str) -> Result<(), Refused> {
    if name.is_empty() {
        return Err(Refused::value(argument, name, "a name must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Refused::new(
            argument,
            format!(
                "the name is {} bytes long; a name has at most {MAX_NAME_LEN}",
                name.len()
            ),
        ));
    }
    if name.contains(['{', '}']) {
        return Err(Refused::value(
            argument,
            name,
            "a name cannot hold { or }: they would send the name's keys to different \
             Redis Cluster slots; use another character",
        ));
    }
    Ok(())
}

/// A glob on the names (`ls`, `top`): not empty, no brace (no name holds one).
pub fn check_pattern(argument: &str, pattern: &str) -> Result<(), Refused> {
    if pattern.is_empty() {
        return Err(Refused::value(
            argument,
            pattern,
            "the pattern must not be empty; * matches every name",
        ));
    }
    if pattern.contains(['{', '}']) {
        return Err(Refused::value(
            argument,
            pattern,
            "no name holds { or }, so this pattern would match nothing",
        ));
    }
    Ok(())
}

/// `--namespace`: at most [`MAX_NAMESPACE_LEN`] bytes, no brace; empty is none.
pub fn check_namespace(namespace: &str) -> Result<(), Refused> {
    if namespace.len() > MAX_NAMESPACE_LEN {
        return Err(Refused::new(
            "--namespace",
            format!(
                "the namespace is {} bytes long; a namespace has at most {MAX_NAMESPACE_LEN}",
                namespace.len()
            ),
        ));
    }
    if namespace.contains(['{', '}']) {
        return Err(Refused::value(
            "--namespace",
            namespace,
            "a namespace cannot hold { or }: they would change the keys' Redis Cluster \
             slots; use another character",
        ));
    }
    Ok(())
}

/// A watchdog lease (`--lease`): from [`MIN_LEASE`] to a year.
pub fn check_lease(lease: Duration) -> Result<(), Refused> {
    let shown = humantime::format_duration(lease).to_string();
    if lease < MIN_LEASE {
        return Err(Refused::value(
            "--lease",
            &shown,
            format!(
                "the lease must be at least {}: it is renewed every third of it, and each \
                 renewal's round trip to the store must fit in the two thirds left",
                humantime::format_duration(MIN_LEASE)
            ),
        ));
    }
    if lease > MAX_LEASE {
        return Err(Refused::value(
            "--lease",
            &shown,
            "the lease must be at most a year (365d)",
        ));
    }
    Ok(())
}

/// An election candidate's id (`elect --id`): 1 to [`MAX_CANDIDATE_ID_LEN`] bytes, no
/// control character.
pub fn check_candidate_id(id: &str) -> Result<(), Refused> {
    if id.is_empty() {
        return Err(Refused::value("--id", id, "the id must not be empty"));
    }
    if id.len() > MAX_CANDIDATE_ID_LEN {
        return Err(Refused::new(
            "--id",
            format!(
                "the id is {} bytes long; an id has at most {MAX_CANDIDATE_ID_LEN}",
                id.len()
            ),
        ));
    }
    if id.chars().any(char::is_control) {
        return Err(Refused::value(
            "--id",
            id,
            "an id cannot hold control characters (line breaks, tabs, escape codes)",
        ));
    }
    Ok(())
}

/// An id prefix (`id next`, `id count`): 1 to [`MAX_ID_PREFIX_LEN`] bytes, without
/// whitespace, control characters or any of `{}[]*?\`.
pub fn check_id_prefix(prefix: &str) -> Result<(), Refused> {
    const ARGUMENT: &str = "<PREFIX>";
    if prefix.is_empty() {
        return Err(Refused::value(
            ARGUMENT,
            prefix,
            "the prefix must not be empty",
        ));
    }
    if prefix.len() > MAX_ID_PREFIX_LEN {
        return Err(Refused::new(
            ARGUMENT,
            format!(
                "the prefix is {} bytes long; a prefix has at most {MAX_ID_PREFIX_LEN}",
                prefix.len()
            ),
        ));
    }
    if prefix
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "{}[]*?\\".contains(c))
    {
        return Err(Refused::value(
            ARGUMENT,
            prefix,
            "a prefix cannot hold whitespace, control characters or any of {}[]*?\\",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ferrisson::redis::{Client, Error};
    use ferrisson_testkit::RedisServer;

    use super::*;

    /// Values on both sides of every rule.
    fn texts() -> Vec<String> {
        let mut texts: Vec<String> = [
            "",
            "a",
            "orders:42",
            "a{b",
            "b}",
            "{x}",
            "a b",
            "a\tb",
            "a\nb",
            "\u{1b}[2J",
            "*",
            "a?",
            "[a-z]",
            "a\\b",
            "注文",
            "🔒",
            "\u{85}",
            "\u{202e}",
        ]
        .map(str::to_owned)
        .to_vec();
        for len in [
            MAX_NAMESPACE_LEN,
            MAX_CANDIDATE_ID_LEN,
            MAX_ID_PREFIX_LEN,
            MAX_NAME_LEN,
        ] {
            texts.push("x".repeat(len));
            texts.push("x".repeat(len + 1));
        }
        // Multi-byte characters count in bytes.
        texts.push("é".repeat(MAX_NAME_LEN / 2 + 1));
        texts
    }

    fn refused_by_library<T>(result: ferrisson::Result<T>) -> bool {
        match result {
            Ok(_) => false,
            Err(Error::InvalidArgument(_)) => true,
            Err(other) => panic!("not a refusal: {other}"),
        }
    }

    /// The command refuses exactly what the library would: none of these checks drifts
    /// from the rule it stands in for.
    #[tokio::test]
    async fn the_checks_refuse_what_the_library_refuses() -> anyhow::Result<()> {
        let server = RedisServer::start()?;
        let client = Client::connect(&server.url()).await?;
        let ids = client.id_generator();
        for text in texts() {
            let shown = quoted(&text);
            assert_eq!(
                check_name("<NAME>", &text).is_err(),
                refused_by_library(client.lock(&text)),
                "name {shown}"
            );
            assert_eq!(
                check_pattern("[PATTERN]", &text).is_err(),
                refused_by_library(client.scan(&text).await),
                "pattern {shown}"
            );
            let namespaced = Client::builder(&server.url()).namespace(text.clone());
            assert_eq!(
                check_namespace(&text).is_err(),
                refused_by_library(namespaced.connect().await),
                "namespace {shown}"
            );
            assert_eq!(
                check_candidate_id(&text).is_err(),
                refused_by_library(client.election("e")?.with_candidate_id(text.clone())),
                "candidate id {shown}"
            );
            assert_eq!(
                check_id_prefix(&text).is_err(),
                refused_by_library(ids.next_ids(&text, 1).await),
                "id prefix {shown}"
            );
        }
        // The lease: the library's ceiling, and a floor of the command's own above the
        // library's (1 ms).
        for (lease, command_refuses) in [
            (Duration::ZERO, true),
            (Duration::from_millis(1), true),
            (Duration::from_millis(99), true),
            (MIN_LEASE, false),
            (MAX_LEASE, false),
            (MAX_LEASE + Duration::from_secs(1), true),
        ] {
            assert_eq!(check_lease(lease).is_err(), command_refuses, "{lease:?}");
            if !command_refuses || lease > MIN_LEASE {
                let builder = Client::builder(&server.url()).watchdog_lease(lease);
                assert_eq!(
                    refused_by_library(builder.connect().await),
                    command_refuses,
                    "{lease:?}"
                );
            }
        }
        Ok(())
    }

    #[test]
    fn a_refusal_names_the_argument_and_shows_the_value_escaped() {
        let refused = check_name("<NAME>", "a{\u{1b}[2J")
            .err()
            .map(|r| r.to_string());
        assert_eq!(
            refused.as_deref(),
            Some(
                "invalid value \"a{\\u{1b}[2J\" for '<NAME>': a name cannot hold { or }: they \
                 would send the name's keys to different Redis Cluster slots; use another \
                 character"
            )
        );
        let long = check_name("<NAME>", &"x".repeat(MAX_NAME_LEN + 1))
            .err()
            .map(|r| r.to_string());
        assert_eq!(
            long.as_deref(),
            Some(
                "invalid value for '<NAME>': the name is 1025 bytes long; a name has at most 1024"
            )
        );
        let lease = check_lease(Duration::from_millis(1))
            .err()
            .map(|r| r.to_string())
            .unwrap_or_default();
        assert!(
            lease.starts_with(
                "invalid value \"1ms\" for '--lease': the lease must be at least 100ms: "
            ),
            "{lease}"
        );
    }
}
