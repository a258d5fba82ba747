//! Log output of the service and the lab: to stderr, filtered by `RUST_LOG`, with colour
//! only on a terminal.

use std::io::IsTerminal as _;

/// Whether to colour output written to stderr: only when it is a terminal, and not when
/// `NO_COLOR` is set to anything but the empty string (<https://no-color.org>).
pub fn stderr_has_colour() -> bool {
    colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

fn colour(terminal: bool, no_colour: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_colour.is_none_or(std::ffi::OsStr::is_empty)
}

/// Logs to stderr with `RUST_LOG`'s filter, or `default` when it is unset or invalid.
pub fn init(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(stderr_has_colour())
        .init();
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::colour;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some(OsStr::new(""))));
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None));
    }
}
