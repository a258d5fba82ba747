//! Builds the clock-shift `LD_PRELOAD` library (`clockshift/shim.rs`) with the same
//! `rustc`, for [`ClockShift`](src/clock.rs) to embed.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = "clockshift/shim.rs";
    println!("cargo:rerun-if-changed={source}");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let output = out_dir.join("libferrisson_clockshift.so");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut command = Command::new(rustc);
    command.args([
        "--edition=2024",
        "--crate-type=cdylib",
        "--crate-name=ferrisson_clockshift",
        "-Copt-level=2",
        "-Cpanic=abort",
        "-Cdebuginfo=0",
    ]);
    if let (Ok(target), Ok(host)) = (std::env::var("TARGET"), std::env::var("HOST"))
        && target != host
    {
        command.arg(format!("--target={target}"));
    }
    command.arg("-o").arg(&output).arg(source);
    let status = command
        .status()
        .expect("running rustc for the clock-shift library");
    assert!(status.success(), "building {source} failed: {status}");
}
