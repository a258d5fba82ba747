//! Starts `seckill serve` processes on free ports and stops them.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use seckill::OrderFlow;
use seckill::http::LISTENING_PREFIX;
use seckill::oversell::LabConfig;

/// How long an instance may take to print its address and answer `/health`.
const STARTUP_DEADLINE: Duration = Duration::from_secs(30);

/// What every instance of a cluster is started with.
#[derive(Debug, Clone)]
pub struct InstanceArgs {
    /// The `seckill` binary.
    pub binary: PathBuf,
    /// Redis URL.
    pub redis: String,
    /// Database URL.
    pub database: String,
    /// Redlock servers.
    pub redlock: Vec<String>,
    /// The order flow's lock.
    pub order_flow: OrderFlow,
    /// Watchdog lease.
    pub watchdog_lease: Duration,
    /// The lab's knobs.
    pub lab: LabConfig,
    /// Where each instance's log goes (`<order flow>-instance-N.log`); none: discarded.
    pub log_dir: Option<PathBuf>,
    /// More `seckill serve` flags, e.g. `--redis-timeout 300ms`.
    pub extra_args: Vec<String>,
    /// The instances' admin token (given in `SECKILL_ADMIN_TOKEN`, not on the command
    /// line where every user of the machine sees it); `None`: admin routes off.
    pub admin_token: Option<String>,
}

/// A fresh admin token for the instances the lab starts: 32 random hex digits.
///
/// ```
/// let token = seckill_lab::new_admin_token();
/// assert_eq!(token.len(), 32);
/// assert_ne!(token, seckill_lab::new_admin_token());
/// ```
pub fn new_admin_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// How long [`Cluster::stop`] waits for an instance to exit after SIGTERM: past
/// `seckill serve`'s default `--shutdown-timeout` (15 s), the most it takes.
pub const STOP_DEADLINE: Duration = Duration::from_secs(20);

/// Running `seckill serve` processes (separate processes, as in a real cluster).
#[derive(Debug)]
pub struct Cluster {
    children: Vec<Child>,
    urls: Vec<String>,
}

fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

impl Cluster {
    /// Starts `n` instances and waits until each answers `/health`.
    ///
    /// # Errors
    ///
    /// When a process cannot be started or does not become healthy in 30 s.
    pub async fn start(n: usize, args: &InstanceArgs) -> anyhow::Result<Self> {
        let mut cluster = Self {
            children: Vec::new(),
            urls: Vec::new(),
        };
        for i in 0..n {
            let (child, url) = start_one(i, args).await?;
            cluster.children.push(child);
            cluster.urls.push(url);
        }
        let http = reqwest::Client::new();
        for url in &cluster.urls {
            wait_healthy(&http, url).await?;
        }
        Ok(cluster)
    }

    /// The instances' process ids, in the order of [`Cluster::urls`] (`None` for one
    /// that has exited), for tests that pause an instance.
    pub fn pids(&self) -> Vec<Option<u32>> {
        self.children.iter().map(Child::id).collect()
    }

    /// The instances' base URLs (`http://127.0.0.1:PORT`).
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// Stops every instance with SIGTERM and waits for the graceful shutdown (requests
    /// in flight finish, the database pool closes); SIGKILL after [`STOP_DEADLINE`].
    ///
    /// # Errors
    ///
    /// When an instance did not exit with status 0 within [`STOP_DEADLINE`] of SIGTERM.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        for child in &mut self.children {
            if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
        }
        let mut failures = Vec::new();
        for (i, child) in self.children.iter_mut().enumerate() {
            match tokio::time::timeout(STOP_DEADLINE, child.wait()).await {
                Ok(Ok(status)) if status.success() => {}
                Ok(Ok(status)) => failures.push(format!("instance {i} exited with {status}")),
                Ok(Err(e)) => failures.push(format!("instance {i}: {e}")),
                Err(_) => {
                    let _ = child.kill().await;
                    failures.push(format!(
                        "instance {i} ignored SIGTERM for {}",
                        humantime::format_duration(STOP_DEADLINE)
                    ));
                }
            }
        }
        anyhow::ensure!(
            failures.is_empty(),
            "unclean shutdown: {}",
            failures.join("; ")
        );
        Ok(())
    }
}

async fn start_one(index: usize, args: &InstanceArgs) -> anyhow::Result<(Child, String)> {
    let mut cmd = Command::new(&args.binary);
    cmd.arg("serve")
        .args(["--url", &args.redis])
        .args(["--database", &args.database])
        .args(["--listen", "127.0.0.1:0"])
        .args(["--order-flow", args.order_flow.name()])
        .args(["--watchdog-lease", &ms(args.watchdog_lease)])
        .args(["--lab-lease", &ms(args.lab.lease)])
        .args(["--lab-lock-wait", &ms(args.lab.lock_wait)])
        .args(["--lab-fault-at", &args.lab.fault_at.to_string()])
        .args(["--lab-stall", &ms(args.lab.stall)])
        .args(["--lab-stall-every", &args.lab.stall_every.to_string()])
        .args(["--lab-redlock-ttl", &ms(args.lab.redlock_ttl)]);
    for url in &args.redlock {
        cmd.args(["--redlock-redis", url]);
    }
    cmd.args(&args.extra_args);
    let stderr = match &args.log_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            let name = format!("{}-instance-{index}.log", args.order_flow.name());
            let file = std::fs::File::create(dir.join(name))?;
            Stdio::from(file)
        }
        None => Stdio::null(),
    };
    match &args.admin_token {
        Some(token) => cmd.env("SECKILL_ADMIN_TOKEN", token),
        None => cmd.env_remove("SECKILL_ADMIN_TOKEN"),
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .env(
            "RUST_LOG",
            std::env::var("SECKILL_INSTANCE_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", display(&args.binary)))?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let addr = tokio::time::timeout(STARTUP_DEADLINE, async {
        while let Some(line) = lines.next_line().await? {
            if let Some(addr) = line.strip_prefix(LISTENING_PREFIX) {
                return Ok::<_, anyhow::Error>(addr.trim().to_owned());
            }
        }
        anyhow::bail!("instance {index} exited before listening (see its log)")
    })
    .await
    .with_context(|| format!("instance {index} did not start in {STARTUP_DEADLINE:?}"))??;
    // Keep draining stdout so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, format!("http://{addr}")))
}

async fn wait_healthy(http: &reqwest::Client, url: &str) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + STARTUP_DEADLINE;
    loop {
        let reply = http.get(format!("{url}/health")).send().await;
        if matches!(&reply, Ok(r) if r.status().is_success()) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("{url} not healthy after {STARTUP_DEADLINE:?}: {reply:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn display(p: &Path) -> String {
    p.display().to_string()
}
