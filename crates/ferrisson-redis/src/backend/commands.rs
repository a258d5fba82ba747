//! An application's own Redis commands through the client's connection: the same
//! topology (one server, Sentinel's master followed across failovers, Cluster routing by
//! key) and the same rules for sending a call again.

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::backend::client::Client;
use crate::backend::connection::key_of;

impl Client {
    /// A handle for the application's own commands on this client's connection: pass it
    /// to redis-rs wherever it takes a connection (`query_async`, `Script::invoke_async`,
    /// pipelines), and the call goes where the client's own calls go, with their
    /// resend rules:
    ///
    /// - a call the server answered it did not execute (a connection refused, a cluster
    ///   redirection, a cluster or master in transition, a write to a demoted master) is
    ///   sent again, a few times, after the client followed the topology's change;
    /// - a call cut off by a dropped connection (it may or may not have run) is sent
    ///   again only on a [`Commands::resending_after_cut`] handle, for calls that may run
    ///   twice without harm.
    ///
    /// On a Cluster a command is routed by its first key, and a pipeline's or a script's
    /// keys must share a hash slot. The client's namespace is not applied: these are the
    /// application's keys.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson_redis::Client) -> redis::RedisResult<()> {
    /// let mut conn = client.commands();
    /// let stock: Option<i64> = redis::cmd("GET").arg("stock:42").query_async(&mut conn).await?;
    /// # let _ = stock; Ok(()) }
    /// ```
    pub fn commands(&self) -> Commands {
        Commands {
            client: self.clone(),
            resend_after_cut: false,
        }
    }
}

/// The client's connection for an application's own commands; see [`Client::commands`].
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct Commands {
    client: Client,
    resend_after_cut: bool,
}

impl Commands {
    /// The same handle, also sending a call again once after a dropped connection cut it
    /// off: only for calls that may run twice without harm (reads, `SET` of a fixed
    /// value, a script that checks what it already did).
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson_redis::Client) -> redis::RedisResult<()> {
    /// let mut reads = client.commands().resending_after_cut();
    /// let _: Option<String> = redis::cmd("GET").arg("config").query_async(&mut reads).await?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn resending_after_cut(mut self) -> Self {
        self.resend_after_cut = true;
        self
    }
}

impl ConnectionLike for Commands {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            self.client
                .connection()
                .send_with_rules(cmd, key_of(cmd), self.resend_after_cut, None)
                .await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            self.client
                .connection()
                .send_pipeline_with_rules(pipeline, offset, count, self.resend_after_cut)
                .await
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}
