//! Log lines on stderr in the command's words: `ferrisson: warning: lock lost: its lease
//! ran out before a renewal (lock "jobs")`, as the command's own messages read, not the
//! library's module paths and field syntax. `FERRISSON_LOG` picks what is shown (default
//! `warn`); at `debug` and `trace` a line also names the module it came from, which is
//! what someone reading that much is after.

use std::fmt::{self, Write as _};
use std::io::IsTerminal as _;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::terminal::{quoted, sanitized};

/// Fields whose value is a name from Redis or from the user: shown quoted and escaped.
const NAME_FIELDS: [&str; 4] = ["lock", "name", "election", "channel"];

/// Sends log lines to stderr, from `FERRISSON_LOG` up (default: warnings and errors).
pub fn init() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FERRISSON_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .event_format(CommandLine {
            colour: colour_on_stderr(),
        })
        .init();
}

/// Colour in log lines only for a person at a terminal who did not set `NO_COLOR`
/// (no-color.org: set and not empty), never in redirected output or log files.
fn colour_on_stderr() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The format of a log line.
struct CommandLine {
    colour: bool,
}

impl<S, N> FormatEvent<S, N> for CommandLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _context: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let metadata = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let level = *metadata.level();
        let detailed = level >= Level::DEBUG;
        let line = line(
            level,
            detailed.then(|| metadata.target()),
            &fields,
            self.colour,
        );
        writeln!(writer, "{line}")
    }
}

/// `ferrisson: LEVEL: MESSAGE[: ERROR][ (FIELD VALUE, ...)]`, the module after the level
/// when given.
fn line(level: Level, module: Option<&str>, fields: &Fields, colour: bool) -> String {
    let (word, code) = match level {
        Level::ERROR => ("error", "31"),
        Level::WARN => ("warning", "33"),
        Level::INFO => ("info", "32"),
        Level::DEBUG => ("debug", "34"),
        Level::TRACE => ("trace", "35"),
    };
    let mut line = String::from("ferrisson: ");
    if colour {
        let _ = write!(line, "\u{1b}[{code}m{word}\u{1b}[0m: ");
    } else {
        let _ = write!(line, "{word}: ");
    }
    if let Some(module) = module {
        let _ = write!(line, "{module}: ");
    }
    line.push_str(&fields.message);
    if let Some(error) = &fields.error {
        let _ = write!(line, ": {error}");
    }
    if !fields.others.is_empty() {
        let _ = write!(line, " ({})", fields.others.join(", "));
    }
    line
}

/// An event's fields as the line shows them.
#[derive(Default)]
struct Fields {
    message: String,
    error: Option<String>,
    /// `lock "jobs"`, `policy allkeys-lru`, ...
    others: Vec<String>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // A `%value` field and the message arrive here too, formatted as Display.
        let text = format!("{value:?}");
        match field.name() {
            "message" => self.message = sanitized(&text),
            "error" => self.error = Some(sanitized(&text)),
            name if NAME_FIELDS.contains(&name) => {
                self.others.push(format!("{name} {}", quoted(&text)));
            }
            name => self.others.push(format!("{name} {}", sanitized(&text))),
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.record_debug(field, &format_args!("{value}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(message: &str, error: Option<&str>, others: &[&str]) -> Fields {
        Fields {
            message: message.to_owned(),
            error: error.map(str::to_owned),
            others: others.iter().map(|&o| o.to_owned()).collect(),
        }
    }

    #[test]
    fn a_line_reads_as_the_command_speaks() {
        let lost = fields(
            "lock lost: its lease ran out before a renewal",
            None,
            &["lock \"jobs\""],
        );
        assert_eq!(
            line(Level::WARN, None, &lost, false),
            "ferrisson: warning: lock lost: its lease ran out before a renewal (lock \"jobs\")"
        );
        let failed = fields("lock renewal failed", Some("no reply"), &[]);
        assert_eq!(
            line(Level::ERROR, None, &failed, false),
            "ferrisson: error: lock renewal failed: no reply"
        );
        assert_eq!(
            line(
                Level::DEBUG,
                Some("redis::aio"),
                &fields("x", None, &[]),
                false
            ),
            "ferrisson: debug: redis::aio: x"
        );
        assert_eq!(
            line(Level::WARN, None, &fields("x", None, &[]), true),
            "ferrisson: \u{1b}[33mwarning\u{1b}[0m: x"
        );
    }

    /// What `emit` logs, formatted as on the command line.
    fn logged(emit: impl FnOnce()) -> String {
        use std::sync::{Arc, Mutex, PoisonError};

        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .event_format(CommandLine { colour: false })
            .with_max_level(Level::TRACE)
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        let bytes = buffer
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn library_lines_lose_their_module_and_quote_names() {
        let name = "evil\u{1b}[2J\nrow";
        let policy = "allkeys-lru";
        let text = logged(|| {
            tracing::warn!(lock = %name, "lock lost: its lease ran out before a renewal");
            tracing::warn!(policy = %policy, "set it to noeviction");
            tracing::warn!(name = %"jobs", error = %"bad\rreply", "releasing failed");
        });
        assert_eq!(
            text,
            "ferrisson: warning: lock lost: its lease ran out before a renewal \
             (lock \"evil\\u{1b}[2J\\nrow\")\n\
             ferrisson: warning: set it to noeviction (policy allkeys-lru)\n\
             ferrisson: warning: releasing failed: bad\\rreply (name \"jobs\")\n"
        );
        // Someone who asked for debug lines is told where each comes from.
        let debug = logged(|| tracing::debug!("connected"));
        assert_eq!(
            debug,
            "ferrisson: debug: ferrisson::log::tests: connected\n"
        );
    }
}
