//! Every sentinel's announcements of a new master, followed as they come.
//!
//! Sentinels publish `+switch-master <name> <old-ip> <old-port> <new-ip> <new-port>` when
//! they adopt a new master, each at its own time: the one leading a failover only when the
//! failover ends, the others as soon as they hear of its newer configuration epoch. The
//! leader announces `+promoted-slave ... @ <name> ...` the moment the replica took the
//! role. A client that listened to the sentinel it first asked would hear late, or not at
//! all if that one went down; so one task per sentinel listens, and any announcement for
//! the master makes the client look the master up again (from every sentinel, newest
//! configuration epoch first: an announcement is a reason to look, not the answer).

use std::sync::Weak;
use std::time::Duration;

use futures_util::StreamExt as _;
use tokio::task::AbortHandle;

use crate::backend::connection::sentinel::Followed;

/// The channels a sentinel announces a new master on.
const CHANNELS: [&str; 2] = ["+switch-master", "+promoted-slave"];
/// The first pause before subscribing again after a lost or refused subscription.
const FIRST_RETRY: Duration = Duration::from_millis(100);
/// The longest such pause.
const LAST_RETRY: Duration = Duration::from_secs(2);

/// Starts one listening task per sentinel client; they end when `followed` is gone, or
/// when aborted through the returned handles.
pub(super) fn watch(
    sentinels: &[redis::Client],
    name: &str,
    connect_timeout: Duration,
    followed: &Weak<Followed>,
) -> Vec<AbortHandle> {
    sentinels
        .iter()
        .map(|sentinel| {
            let task = listen(
                sentinel.clone(),
                name.to_owned(),
                connect_timeout,
                followed.clone(),
            );
            tokio::spawn(task).abort_handle()
        })
        .collect()
}

/// Subscribes to one sentinel's announcements, again after every loss, and looks the
/// master up on each announcement for `name` and after each resubscription (an
/// announcement may have been missed meanwhile).
async fn listen(
    sentinel: redis::Client,
    name: String,
    connect_timeout: Duration,
    followed: Weak<Followed>,
) {
    let mut retry = FIRST_RETRY;
    let mut was_lost = false;
    loop {
        let subscribed = tokio::time::timeout(connect_timeout, async {
            let mut pubsub = sentinel.get_async_pubsub().await?;
            for channel in CHANNELS {
                pubsub.subscribe(channel).await?;
            }
            redis::RedisResult::Ok(pubsub)
        })
        .await;
        match subscribed {
            Ok(Ok(pubsub)) => {
                retry = FIRST_RETRY;
                if was_lost && !look_up(&followed).await {
                    return;
                }
                let mut messages = pubsub.into_on_message();
                while let Some(message) = messages.next().await {
                    let payload: String = message.get_payload().unwrap_or_default();
                    if announces(&payload, &name) && !look_up(&followed).await {
                        return;
                    }
                }
                tracing::debug!("a sentinel's announcements stopped; subscribing again");
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "subscribing to a sentinel's announcements failed");
            }
            Err(_) => tracing::debug!("subscribing to a sentinel's announcements timed out"),
        }
        if followed.strong_count() == 0 {
            return;
        }
        was_lost = true;
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(LAST_RETRY);
    }
}

/// Looks the master up again; false when the client is gone.
async fn look_up(followed: &Weak<Followed>) -> bool {
    let Some(followed) = followed.upgrade() else {
        return false;
    };
    followed.follow_failover().await;
    true
}

/// Whether `payload` announces a new master for `name`: `+switch-master` puts the name
/// first, `+promoted-slave` after the `@`.
fn announces(payload: &str, name: &str) -> bool {
    let mut words = payload.split(' ');
    if words.next() == Some(name) {
        return true;
    }
    payload
        .split_once(" @ ")
        .is_some_and(|(_, master)| master.split(' ').next() == Some(name))
}

#[cfg(test)]
mod tests {
    use super::announces;

    #[test]
    fn announcements_name_the_master() {
        assert!(announces("shop 127.0.0.1 7000 127.0.0.1 7001", "shop"));
        assert!(announces(
            "slave 127.0.0.1:7001 127.0.0.1 7001 @ shop 127.0.0.1 7000",
            "shop"
        ));
        assert!(!announces("other 127.0.0.1 7000 127.0.0.1 7001", "shop"));
        assert!(!announces(
            "slave 127.0.0.1:7001 127.0.0.1 7001 @ other 127.0.0.1 7000",
            "shop"
        ));
    }
}
