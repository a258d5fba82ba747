//! Valkey servers from the kit: a master and a replica writing append-only files, which
//! acknowledge `WAITAOF` (Redis has it only from 7.2). Needs Valkey (`.ci/require-valkey`).

use ferrisson_testkit::{RedisServer, Reply};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

#[test]
fn a_valkey_master_and_replica_acknowledge_their_append_only_files() -> Result {
    let master = RedisServer::builder().valkey().appendonly().start()?;
    let replica = RedisServer::builder()
        .valkey()
        .appendonly()
        .replica_of(&master)
        .start()?;
    let info = master.command(&["INFO", "server"])?;
    assert!(info.contains("server_name:valkey"), "{info}");
    let appendonly = replica.query(&["CONFIG", "GET", "appendonly"])?;
    let value = appendonly
        .elements()
        .and_then(|e| e.get(1))
        .and_then(Reply::text);
    assert_eq!(value, Some("yes"));
    let replication = replica.command(&["INFO", "replication"])?;
    assert!(
        replication.contains("master_link_status:up"),
        "{replication}"
    );
    // The master's own file and the replica's: [1, 1].
    let acks = master.query(&["WAITAOF", "1", "1", "5000"])?;
    let counts: Vec<Option<i64>> = acks
        .elements()
        .ok_or("WAITAOF gave no array")?
        .iter()
        .map(Reply::integer)
        .collect();
    assert_eq!(counts, [Some(1), Some(1)]);
    Ok(())
}

#[test]
fn a_valkey_server_without_an_append_only_file_refuses_local_acknowledgements() -> Result {
    let server = RedisServer::builder().valkey().start()?;
    let refusal = server.query(&["WAITAOF", "1", "0", "100"])?;
    assert!(
        refusal.ok_or_error("WAITAOF").is_err(),
        "WAITAOF 1 0 without appendonly was not refused"
    );
    Ok(())
}
