//! Sending one call to every server at once, each bounded by the per-node timeout.

use std::future::Future;
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::join_all;

use super::{Node, Redlock};
use crate::api::error::{Error, Result};
use crate::backend::scripts::ScriptCall;

impl Redlock {
    /// Runs the script call `call(node)` on every node at once, each bounded by the
    /// per-node timeout; the replies in node order.
    pub(super) async fn on_every_node<'a, C, F>(&'a self, call: F) -> Vec<Result<C::Reply>>
    where
        C: ScriptCall + 'a,
        F: Fn(&'a Node) -> C,
    {
        let timeout = self.node_timeout();
        let call = &call;
        // Each node's call boxed: the calls run side by side in one `join_all`, and their
        // futures, nested in the acquire's, would otherwise make it too deep a type for a
        // caller's compiler.
        join_all(self.nodes.iter().map(|node| {
            Box::pin(within(&self.name, timeout, async move {
                node.client.connection().run(&call(node)).await
            }))
        }))
        .await
    }
}

/// Runs one node's call for the Redlock `name`, counting a reply later than `timeout`
/// as [`Error::TimedOut`].
pub(super) fn within<'a, T>(
    name: &'a str,
    timeout: Duration,
    call: impl Future<Output = Result<T>> + 'a,
) -> impl Future<Output = Result<T>> + 'a {
    tokio::time::timeout(timeout, call).map(move |reply| match reply {
        Ok(reply) => reply,
        Err(_) => Err(Error::TimedOut {
            name: name.to_owned(),
            after: timeout,
        }),
    })
}

/// The answers of the nodes that answered, and the first failure of one that did not.
pub(super) fn answers<T>(replies: Vec<Result<T>>) -> (Vec<T>, Option<Error>) {
    let mut answers = Vec::with_capacity(replies.len());
    let mut first_error = None;
    for reply in replies {
        match reply {
            Ok(answer) => answers.push(answer),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    (answers, first_error)
}
