//! The machine a lab run ran on, as the report shows it: what a reader needs to weigh
//! its numbers (cores, load, the build, the Redis version, the commit).

use std::process::Command;

use serde::{Deserialize, Serialize};

/// The machine and build of a lab run; every field a best effort (`None`: not known).
/// [`Machine::read`] has an example.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Kernel and architecture (`Linux 6.1.0-27-amd64 x86_64`).
    pub os: String,
    /// The processor's model name.
    pub cpu: Option<String>,
    /// Cores this process may use.
    pub cores: usize,
    /// Memory, GiB.
    pub memory_gib: Option<f64>,
    /// Load average (1, 5, 15 min) when the run started.
    pub load_before: Option<[f64; 3]>,
    /// Load average when it ended.
    pub load_after: Option<[f64; 3]>,
    /// `redis-server --version` of the server binary the lab starts.
    pub redis_server: Option<String>,
    /// `release` or `debug`.
    pub build: String,
    /// The lab's version.
    pub lab_version: String,
    /// `git describe --always --dirty` of the working directory, when it is a repository.
    pub commit: Option<String>,
}

impl Machine {
    /// Reads the machine now (the load average goes in `load_before`).
    ///
    /// ```
    /// let mut machine = seckill_lab::Machine::read();
    /// machine.finish();
    /// assert!(machine.cores >= 1);
    /// ```
    pub fn read() -> Self {
        let os = format!(
            "{} {} {}",
            proc_text("/proc/sys/kernel/ostype").unwrap_or_else(|| std::env::consts::OS.into()),
            proc_text("/proc/sys/kernel/osrelease").unwrap_or_default(),
            std::env::consts::ARCH
        );
        Self {
            os: os.split_whitespace().collect::<Vec<_>>().join(" "),
            cpu: proc_text("/proc/cpuinfo").and_then(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, name)| name.trim().to_owned())
            }),
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            memory_gib: proc_text("/proc/meminfo").and_then(|info| {
                let kib: f64 = info
                    .lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))?
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .ok()?;
                Some((kib / 1024.0 / 1024.0 * 10.0).round() / 10.0)
            }),
            load_before: load_average(),
            load_after: None,
            redis_server: output(
                Command::new(ferrisson_testkit::redis_server_binary()).arg("--version"),
            )
            .map(|v| {
                v.split_whitespace()
                    .find_map(|w| w.strip_prefix("v="))
                    .map_or(v.clone(), str::to_owned)
            }),
            build: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .into(),
            lab_version: env!("CARGO_PKG_VERSION").into(),
            commit: output(Command::new("git").args(["describe", "--always", "--dirty"])),
        }
    }

    /// Records the load average at the end of the run.
    pub fn finish(&mut self) {
        self.load_after = load_average();
    }
}

fn proc_text(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// The 1, 5 and 15 minute load averages.
fn load_average() -> Option<[f64; 3]> {
    let text = proc_text("/proc/loadavg")?;
    let mut fields = text.split_whitespace().map(str::parse::<f64>);
    Some([
        fields.next()?.ok()?,
        fields.next()?.ok()?,
        fields.next()?.ok()?,
    ])
}

/// A command's first line of output, when it ran and succeeded.
fn output(command: &mut Command) -> Option<String> {
    let out = command.stderr(std::process::Stdio::null()).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next()?.trim();
    (!line.is_empty()).then(|| line.to_owned())
}

#[cfg(test)]
mod tests {
    use super::Machine;

    #[test]
    fn reads_this_machine() {
        let m = Machine::read();
        assert!(m.cores >= 1);
        assert!(!m.os.is_empty());
        assert!(m.build == "debug" || m.build == "release");
        if cfg!(target_os = "linux") {
            assert!(m.load_before.is_some(), "{m:?}");
        }
    }
}
