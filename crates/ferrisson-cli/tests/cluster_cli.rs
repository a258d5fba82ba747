//! `ferrisson lock` against a Redis Cluster (3 masters, 3 replicas) that the test kit
//! starts: many processes, one lock, no overlap, every token greater than the last.

use std::process::Command;

use ferrisson_testkit::RedisCluster;

mod support;
use support::FERRISSON;

#[test]
fn sixteen_processes_take_turns_on_a_cluster() -> anyhow::Result<()> {
    const PROCESSES: usize = 16;
    const ROUNDS: usize = 20;
    let cluster = RedisCluster::start()?;
    let dir = tempfile::tempdir()?;
    let counter = dir.path().join("counter");
    let tokens = dir.path().join("tokens");
    std::fs::write(&counter, "0")?;
    std::fs::write(&tokens, "")?;
    // A non-atomic read-modify-write of a file, and the holder's token appended while it
    // holds the lock: only mutual exclusion keeps the count and the order.
    let section = format!(
        "n=$(cat {counter}); echo $FERRISSON_FENCING_TOKEN >> {tokens}; echo $((n+1)) > {counter}",
        counter = counter.display(),
        tokens = tokens.display(),
    );
    let script = format!(
        "for i in $(seq {ROUNDS}); do {FERRISSON} lock --url '{url}' turns -- sh -c '{section}' || exit 1; done",
        url = cluster.url(),
    );
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new("sh")
                .arg("-c")
                .arg(&script)
                .env_remove("FERRISSON_LOG")
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    for mut child in children {
        assert!(child.wait()?.success());
    }
    let total: usize = std::fs::read_to_string(&counter)?.trim().parse()?;
    assert_eq!(total, PROCESSES * ROUNDS);
    let tokens: Vec<u64> = std::fs::read_to_string(&tokens)?
        .lines()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    assert_eq!(tokens.len(), PROCESSES * ROUNDS);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must grow with every holder: {tokens:?}"
    );
    Ok(())
}
