//! Where the lab finds the `seckill` binary and where it writes its results.

use std::path::PathBuf;

use anyhow::Context as _;

/// The `seckill` binary the lab starts instances from: `$SECKILL_BIN` if set, else the
/// `seckill` next to the running program (cargo builds both into one directory; a test
/// program runs from its `deps/` subdirectory).
///
/// # Errors
///
/// When neither exists, with the command that builds it.
pub fn seckill_binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("SECKILL_BIN") {
        let path = PathBuf::from(path);
        anyhow::ensure!(
            path.is_file(),
            "SECKILL_BIN={} is not a file",
            path.display()
        );
        return Ok(path);
    }
    let exe = std::env::current_exe().context("cannot find the running program's path")?;
    let dir = exe
        .parent()
        .context("the running program has no directory")?;
    let name = format!("seckill{}", std::env::consts::EXE_SUFFIX);
    let candidates = [Some(dir.join(&name)), dir.parent().map(|up| up.join(&name))];
    candidates
        .into_iter()
        .flatten()
        .find(|path| path.is_file())
        .with_context(|| {
            format!(
                "no seckill binary next to {}: build it with `cargo build --release -p seckill -p seckill-lab` (./lab does), or set SECKILL_BIN",
                exe.display()
            )
        })
}

/// `lab/` in the cargo target directory the running program was built into
/// (`target/release/seckill-lab` → `target/lab`), wherever that directory is;
/// `target/lab` otherwise.
pub fn default_out() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            let profile_dir = exe.parent()?;
            let name = profile_dir.file_name()?.to_str()?;
            matches!(name, "release" | "debug")
                .then(|| profile_dir.parent().map(|t| t.join("lab")))?
        })
        .unwrap_or_else(|| PathBuf::from("target/lab"))
}
