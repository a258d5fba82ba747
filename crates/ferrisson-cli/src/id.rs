//! `ferrisson id`: make and decode global ids.

use std::io::Write;
use std::process::ExitCode;

use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};
use ferrisson::redis::{Client, IdGenerator};

use crate::arguments::{Refused, check_id_prefix, check_namespace};
use crate::connection::ConnectionArgs;

/// Most ids asked of Redis in one `INCRBY`, so `--count` never holds billions in memory.
const CHUNK: u32 = 65_536;

/// Make or decode global unique ids.
///
/// An id is a 63-bit number: 31 bits of seconds since 2022-01-01T00:00:00Z, then 32 bits
/// of the day's counter, kept in Redis under the key icr:PREFIX:yyyy:MM:dd (behind
/// --namespace). Ids are unique per prefix and grow with time.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(subcommand)]
    command: IdCommand,
}

#[derive(Debug, clap::Subcommand)]
enum IdCommand {
    /// Print new ids for PREFIX, one per line (one INCRBY per 65 536 ids)
    Next {
        #[command(flatten)]
        connection: ConnectionArgs,

        /// The id prefix, e.g. order
        prefix: String,

        /// How many ids to make
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        count: u32,

        /// Key prefix (the client namespace)
        #[arg(long, default_value = "")]
        namespace: String,
    },

    /// Print an id's timestamp (RFC 3339, UTC) and sequence number (no Redis needed)
    Decode {
        /// The id, a non-negative 64-bit integer
        #[arg(value_parser = clap::value_parser!(i64).range(0..))]
        id: i64,
    },

    /// Print the day's counter of PREFIX: the ids made that day (reserved, for batched generators)
    Count {
        #[command(flatten)]
        connection: ConnectionArgs,

        /// The id prefix, e.g. order
        prefix: String,

        /// The UTC day, YYYY-MM-DD [default: today]
        #[arg(long, value_name = "YYYY-MM-DD")]
        date: Option<NaiveDate>,

        /// Key prefix (the client namespace)
        #[arg(long, default_value = "")]
        namespace: String,
    },
}

impl Args {
    /// Refuses what no run could use, before anything connects.
    pub fn check(&self) -> Result<(), Refused> {
        match &self.command {
            IdCommand::Next {
                connection,
                prefix,
                namespace,
                ..
            }
            | IdCommand::Count {
                connection,
                prefix,
                namespace,
                ..
            } => {
                check_id_prefix(prefix)?;
                check_namespace(namespace)?;
                connection
                    .check_redis_only("make ids: the id generator keeps its counters in Redis")
            }
            IdCommand::Decode { .. } => Ok(()),
        }
    }
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    execute(args, &mut out).await?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

async fn execute(args: Args, out: &mut impl Write) -> anyhow::Result<()> {
    match args.command {
        IdCommand::Decode { id } => {
            let decoded = IdGenerator::decode(id)?;
            let timestamp =
                DateTime::<Utc>::from(decoded.timestamp).to_rfc3339_opts(SecondsFormat::Secs, true);
            writeln!(out, "timestamp: {timestamp}")?;
            writeln!(out, "sequence: {}", decoded.sequence)?;
        }
        IdCommand::Next {
            connection,
            prefix,
            count,
            namespace,
        } => {
            let ids = connect(&connection, namespace).await?.id_generator();
            let mut left = count;
            while left > 0 {
                let chunk = left.min(CHUNK);
                for id in ids.next_ids(&prefix, chunk).await? {
                    writeln!(out, "{id}")?;
                }
                left -= chunk;
            }
        }
        IdCommand::Count {
            connection,
            prefix,
            date,
            namespace,
        } => {
            let ids = connect(&connection, namespace).await?.id_generator();
            let date = date.unwrap_or_else(|| Utc::now().date_naive());
            writeln!(out, "{}", ids.count_for_day(&prefix, date).await?)?;
        }
    }
    Ok(())
}

async fn connect(connection: &ConnectionArgs, namespace: String) -> anyhow::Result<Client> {
    // The library's connect error already names the server and the reason.
    Ok(connection.builder()?.namespace(namespace).connect().await?)
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use ferrisson_testkit::RedisServer;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    async fn output(argv: &[&str]) -> anyhow::Result<String> {
        let cli = Cli::try_parse_from(std::iter::once("id").chain(argv.iter().copied()))?;
        let mut out = Vec::new();
        execute(cli.args, &mut out).await?;
        Ok(String::from_utf8(out)?)
    }

    #[tokio::test]
    async fn next_count_and_decode() -> anyhow::Result<()> {
        let server = RedisServer::start()?;
        let url = server.url();
        let printed = output(&[
            "next",
            "order",
            "--url",
            &url,
            "--count",
            "5",
            "--namespace",
            "cli:",
        ])
        .await?;
        let ids: Vec<i64> = printed.lines().map(str::parse).collect::<Result<_, _>>()?;
        assert_eq!(ids.len(), 5);
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        let day = IdGenerator::decode(ids[0])?.date().to_string();
        let counted = output(&[
            "count",
            "order",
            "--url",
            &url,
            "--namespace",
            "cli:",
            "--date",
            &day,
        ])
        .await?;
        assert_eq!(counted, "5\n");
        // Without the namespace it is another counter; --redis is the older name of --url.
        let other = output(&["count", "order", "--redis", &url, "--date", &day]).await?;
        assert_eq!(other, "0\n");
        let decoded = output(&["decode", &ids[4].to_string()]).await?;
        assert!(decoded.ends_with("Z\nsequence: 5\n"), "{decoded}");
        Ok(())
    }

    #[tokio::test]
    async fn decode_prints_rfc3339_and_sequence() -> anyhow::Result<()> {
        // 2026-11-22T12:00:00Z, sequence 42; decoding needs no server.
        let id = ((1_795_348_800_i64 - 1_640_995_200) << 32) + 42;
        let printed = output(&["decode", &id.to_string()]).await?;
        assert_eq!(printed, "timestamp: 2026-11-22T12:00:00Z\nsequence: 42\n");
        let error = output(&["decode", "--", "-1"]).await;
        assert!(error.is_err());
        Ok(())
    }

    #[test]
    fn bad_arguments_are_refused() {
        for argv in [
            &["id", "next", "order", "--count", "0"][..],
            &["id", "decode", "abc"],
            &["id", "count", "order", "--date", "2026-13-01"],
            // Decoding never talks to Redis, so it takes no URL.
            &["id", "decode", "--url", "redis://127.0.0.1:1", "1"],
            &["id", "decode", "--redis", "redis://127.0.0.1:1", "1"],
        ] {
            assert!(Cli::try_parse_from(argv).is_err(), "{argv:?}");
        }
    }
}
