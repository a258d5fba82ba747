//! The kit's ZooKeeper: a standalone server and a three-member ensemble start, serve, and
//! survive a member's death as ZooKeeper should.

use ferrisson_testkit::{ZooKeeper, four_letter_word};

#[test]
fn a_standalone_server_serves_on_its_own_port() -> std::io::Result<()> {
    let zk = ZooKeeper::standalone()?;
    assert_eq!(zk.size(), 1);
    assert_eq!(zk.mode(0)?, "standalone");
    assert_eq!(four_letter_word(zk.client_port(0), "ruok")?, "imok");
    assert!(zk.url().starts_with("zk://127.0.0.1:"), "{}", zk.url());
    assert_eq!(zk.leader(), None);
    let port = zk.client_port(0);
    drop(zk);
    assert!(
        four_letter_word(port, "ruok").is_err(),
        "the server outlived its drop"
    );
    Ok(())
}

#[test]
fn an_ensemble_elects_a_leader_and_replaces_a_killed_one() -> std::io::Result<()> {
    let mut zk = ZooKeeper::ensemble()?;
    assert_eq!(zk.size(), 3);
    assert_eq!(zk.url().matches("127.0.0.1:").count(), 3, "{}", zk.url());
    let leader = zk.leader().expect("a leader once every member serves");
    zk.kill(leader)?;
    assert!(zk.mode(leader).is_err(), "a killed member still answers");
    // The two left form a majority and elect one of themselves.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let new_leader = loop {
        if let Some(index) = zk.leader() {
            break index;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no new leader within 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_ne!(new_leader, leader);
    zk.restart(leader)?;
    assert_eq!(zk.mode(leader)?, "follower");
    Ok(())
}
