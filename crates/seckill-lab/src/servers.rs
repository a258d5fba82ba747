//! Redis servers the lab starts itself, on free ports (stopped when dropped).

use anyhow::Context as _;
use ferrisson_testkit::RedisServer;

/// Redis servers the lab started itself (killed when dropped).
pub(crate) struct OwnServers {
    _servers: Vec<RedisServer>,
}

/// Starts `n` servers and returns their URLs.
pub(crate) fn start_servers(n: usize) -> anyhow::Result<(Vec<String>, OwnServers)> {
    let mut servers = Vec::new();
    for _ in 0..n {
        servers.push(
            RedisServer::start()
                .context("cannot start redis-server (install it or pass --redis)")?,
        );
    }
    let urls = servers.iter().map(RedisServer::url).collect();
    Ok((urls, OwnServers { _servers: servers }))
}
