//! Where a connection delivers the push messages of the subscriptions it carries.
//!
//! The connections only pass messages on; what they mean (which waiters wake, which
//! channels to subscribe again) is the shared subscription's business, behind
//! [`PushTarget`].

use std::sync::Arc;

use redis::PushInfo;

/// What receives a connection's push messages.
pub(crate) trait PushTarget: Send + Sync + 'static {
    /// One push message (a published message, a dropped subscription, a disconnection).
    fn push(&self, push: PushInfo);

    /// The subscription connection was replaced by one to another server: messages may
    /// have been missed, and every channel must be subscribed there.
    fn connection_replaced(&self);
}

/// The handler installed on every connection that carries the client's subscriptions.
/// Cheap to clone: a topology that opens new connections (a failover, a cluster node)
/// installs a clone on each.
#[derive(Clone)]
pub(crate) struct PushHandler(Arc<dyn PushTarget>);

impl PushHandler {
    pub(crate) fn new(target: impl PushTarget) -> Self {
        Self(Arc::new(target))
    }

    /// See [`PushTarget::connection_replaced`].
    pub(crate) fn connection_replaced(&self) {
        self.0.connection_replaced();
    }
}

impl redis::aio::AsyncPushSender for PushHandler {
    fn send(&self, push: PushInfo) -> std::result::Result<(), redis::aio::SendError> {
        self.0.push(push);
        Ok(())
    }
}
