//! What the lab can be told: the `seckill-lab` flags, their defaults and their checks.

use std::path::PathBuf;
use std::time::Duration;

use seckill::oversell::{LabConfig, Variant};

use crate::in_process::LabVariant;

use crate::topology::Topology;

/// Everything the lab can be told: the `seckill-lab` flags.
///
/// ```no_run
/// # async fn demo() -> anyhow::Result<()> {
/// use seckill::oversell::Variant;
/// use seckill_lab::{LabOptions, Verdict};
///
/// // A small lab: 20 clients x 2 loops against 20 units, two variants, no vouchers.
/// let options = LabOptions {
///     clients: 20,
///     loops: 2,
///     stock: 20,
///     variants: vec![Variant::Naive.into(), Variant::TokenLua.into()],
///     vouchers: false,
///     ..LabOptions::new("target/release/seckill".into())
/// };
/// let report = seckill_lab::run(&options).await?;
/// assert_eq!(report.variants[1].verdict, Verdict::Correct);
/// println!("{}", report.table());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct LabOptions {
    /// The `seckill` binary to start instances from (`seckill-lab` finds the one built
    /// next to it, or takes `$SECKILL_BIN`).
    #[arg(skip)]
    pub binary: PathBuf,
    /// Concurrent clients, all started at once.
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub clients: usize,
    /// Requests per client.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub loops: usize,
    /// Stock to sell in every run.
    #[arg(long, value_name = "UNITS", default_value_t = 200)]
    pub stock: i64,
    /// `seckill serve` processes to start (two or more show local-mutex failing).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub instances: usize,
    /// Variants to run, comma-separated: the service's in this order, then those the lab
    /// runs itself (the database's, the timestamp lock, ZooKeeper, etcd) in this order.
    #[arg(long, value_name = "NAMES", value_delimiter = ',', value_parser = parse_variant, default_values_t = LabVariant::all())]
    pub variants: Vec<LabVariant>,
    /// getset-timestamp-skewed: how far ahead of the others one instance's clock runs
    /// (more than --lab-lease shows the flaw).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    pub clock_skew: Duration,
    /// What Redis the lab starts and every instance uses: one server, a Sentinel group
    /// (1 master, 2 replicas, 3 sentinels) or a Redis Cluster (3 masters, 3 replicas).
    /// The redlock variant always runs on three separate servers of its own.
    #[arg(long, value_enum, value_name = "KIND", default_value_t = Topology::Single, conflicts_with = "redis")]
    pub topology: Topology,
    /// Use this Redis instead of starting one: redis://..., redis+sentinel://.../NAME
    /// or redis+cluster://... (the lab overwrites its `{lab}:*` keys there).
    #[arg(long = "url", visible_alias = "redis", value_name = "URL")]
    pub redis: Option<String>,
    /// Use these Redis servers for the redlock variant instead of starting three (give
    /// the flag once per server, three or more).
    #[arg(long = "redlock-redis", value_name = "URL")]
    pub redlock_redis: Vec<String>,
    /// A PostgreSQL or MySQL/MariaDB server to run on instead of a SQLite file: the lab
    /// creates a schema (PostgreSQL) or database (MySQL) of its own there and drops it
    /// at the end; it never touches the server's other tables.
    #[arg(long, value_name = "URL")]
    pub database: Option<String>,
    /// Where the table, report.json, chart.svg, the page (report.html) and the instances' logs go (the default
    /// is `lab/` in the cargo target directory).
    #[arg(long, value_name = "DIR", default_value_os_t = crate::paths::default_out())]
    pub out: PathBuf,
    /// Watchdog lease of the instances' locks: shorter than `seckill serve`'s 30s, so
    /// that renewals happen during a watchdog stall.
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = humantime::parse_duration)]
    pub watchdog_lease: Duration,
    /// Voucher scenario: buyers.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub users: usize,
    /// Voucher scenario: attempts per buyer, sent at once.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub attempts: usize,
    /// Whether to run the voucher scenario.
    #[arg(long = "no-vouchers", action = clap::ArgAction::SetFalse, help = "Skip the voucher scenario")]
    pub vouchers: bool,
    /// How long each of the three store measurements (uncontended lock + unlock,
    /// hand-offs, 64 locks at once) runs per store after the variants; 0s skips them.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
    pub store_time: Duration,
    /// Whether to draw a progress bar (only ever on a terminal).
    #[arg(long = "no-progress", action = clap::ArgAction::SetFalse, help = "No progress bar")]
    pub progress: bool,
    /// The settings of the lab's routes, passed to every instance.
    #[command(flatten)]
    pub lab: LabConfig,
}

fn parse_variant(name: &str) -> Result<LabVariant, String> {
    LabVariant::parse(name.trim()).ok_or_else(|| {
        let names: Vec<&str> = LabVariant::all().iter().map(|v| v.name()).collect();
        format!("no variant {name:?}; the variants: {}", names.join(", "))
    })
}

impl LabOptions {
    /// The flags' defaults (a test checks that they agree), with instances started from
    /// `binary`.
    pub fn new(binary: PathBuf) -> Self {
        Self {
            binary,
            clients: 200,
            loops: 4,
            stock: 200,
            instances: 2,
            variants: LabVariant::all(),
            clock_skew: Duration::from_secs(5),
            topology: Topology::Single,
            redis: None,
            redlock_redis: Vec::new(),
            database: None,
            out: crate::paths::default_out(),
            watchdog_lease: Duration::from_secs(3),
            users: 1000,
            attempts: 3,
            vouchers: true,
            store_time: Duration::from_secs(1),
            progress: true,
            lab: LabConfig::default(),
        }
    }

    /// The service's variants of `--variants`, in order.
    pub fn service_variants(&self) -> Vec<Variant> {
        self.variants
            .iter()
            .filter_map(|v| match v {
                LabVariant::Service(v) => Some(*v),
                LabVariant::Direct(_) => None,
            })
            .collect()
    }

    /// The variants of `--variants` the lab runs itself, in order.
    pub fn direct_variants(&self) -> Vec<crate::in_process::DirectVariant> {
        self.variants
            .iter()
            .filter_map(|v| match v {
                LabVariant::Direct(v) => Some(*v),
                LabVariant::Service(_) => None,
            })
            .collect()
    }

    /// The topology the instances use: `--url`'s when given, else `--topology`.
    pub fn redis_topology(&self) -> Topology {
        self.redis
            .as_deref()
            .map_or(self.topology, Topology::of_url)
    }

    /// Checks the settings before anything starts.
    ///
    /// # Errors
    ///
    /// The first setting that cannot work, named by its flag.
    pub fn validate(&self) -> anyhow::Result<()> {
        for (flag, value) in [
            ("--clients", self.clients),
            ("--loops", self.loops),
            ("--instances", self.instances),
            ("--users", self.users),
            ("--attempts", self.attempts),
        ] {
            anyhow::ensure!(value > 0, "invalid value for {flag}: it must be at least 1");
        }
        anyhow::ensure!(
            (1..=seckill::oversell::MAX_STOCK).contains(&self.stock),
            "invalid value for --stock: 1 to {}",
            seckill::oversell::MAX_STOCK
        );
        anyhow::ensure!(
            !self.variants.is_empty(),
            "invalid value for --variants: name at least one"
        );
        anyhow::ensure!(
            self.redlock_redis.is_empty()
                || self.redlock_redis.len() >= seckill::settings::MIN_REDLOCK_SERVERS,
            "invalid value for --redlock-redis: give {} or more servers, or none to let the lab start three",
            seckill::settings::MIN_REDLOCK_SERVERS
        );
        anyhow::ensure!(
            self.store_time <= Duration::from_secs(60),
            "invalid value for --store-time: at most 60s per phase (0s skips the store measurement)"
        );
        anyhow::ensure!(
            self.clock_skew <= Duration::from_secs(3600),
            "invalid value for --clock-skew: at most 1h"
        );
        crate::scratch::check_server_url(self.database.as_deref())?;
        anyhow::ensure!(
            (Duration::from_millis(10)..=seckill::settings::MAX_LEASE)
                .contains(&self.watchdog_lease),
            "invalid value for --watchdog-lease: 10ms to 365 days"
        );
        self.lab.validate()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::{Args as _, FromArgMatches as _};

    use super::LabOptions;

    fn parse(args: &[&str]) -> Result<LabOptions, clap::Error> {
        let matches = LabOptions::augment_args(clap::Command::new("seckill-lab"))
            .try_get_matches_from(std::iter::once("seckill-lab").chain(args.iter().copied()))?;
        LabOptions::from_arg_matches(&matches)
    }

    #[test]
    fn new_is_what_the_flags_default_to() {
        let parsed = parse(&[]).expect("no flags parse");
        assert_eq!(parsed, LabOptions::new(parsed.binary.clone()));
        assert!(parsed.validate().is_ok());
    }

    #[test]
    fn flags_parse_and_bad_ones_are_refused() {
        let parsed = parse(&[
            "--variants",
            "naive,token-lua",
            "--no-vouchers",
            "--lab-lease",
            "300ms",
            "--topology",
            "cluster",
        ])
        .expect("parse");
        assert_eq!(parsed.topology, crate::Topology::Cluster);
        assert!(parse(&["--topology", "ring"]).is_err());
        assert!(parse(&["--topology", "sentinel", "--url", "redis://h"]).is_err());
        assert_eq!(parsed.variants.len(), 2);
        assert!(!parsed.vouchers);
        assert_eq!(parsed.lab.lease, std::time::Duration::from_millis(300));
        assert!(parse(&["--variants", "spinlock"]).is_err());
        for bad in [
            &["--clients", "0"][..],
            &["--stock", "0"],
            &["--redlock-redis", "redis://a"],
            &["--lab-lock-wait", "0s"],
            &["--store-time", "2m"],
        ] {
            let options = parse(bad).expect("parses");
            assert!(options.validate().is_err(), "{bad:?}");
        }
    }
}
