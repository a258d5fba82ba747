//! The protected resource: sees critical sections and checks fencing tokens.

use std::sync::{Mutex, PoisonError};

use crate::history::{EventKind, Recorder};

/// An in-process stand-in for the storage a lock protects. It records who is inside
/// and judges every write the way a fencing-aware store would: a token is accepted when
/// it is above the highest one it has seen (at entry or in an accepted write), or equal
/// to it from the same client.
///
/// Events are recorded under the resource's own lock, so the history shows the order
/// the resource saw.
///
/// ```
/// use ferrisson_chaos::{History, Resource};
///
/// let history = History::new();
/// let resource = Resource::default();
/// resource.enter(&history.recorder(1), 0, None); // a reader: fences nobody off
/// assert!(resource.write(&history.recorder(0), 0, 5));
/// assert!(!resource.write(&history.recorder(1), 0, 4)); // older token: refused
/// ```
#[derive(Debug, Default)]
pub struct Resource {
    last: Mutex<Option<(u64, usize)>>,
}

impl Resource {
    /// The client enters its critical section, presenting its token: a higher token
    /// fences off every older holder from now on. A client with no token (a reader)
    /// enters without fencing anyone off.
    pub fn enter(&self, recorder: &Recorder, grant: usize, token: Option<u64>) {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(token) = token
            && last.is_none_or(|(max, _)| token > max)
        {
            *last = Some((token, recorder.client()));
        }
        recorder.record(grant, EventKind::Enter { token });
    }

    /// The client leaves its critical section.
    pub fn exit(&self, recorder: &Recorder, grant: usize) {
        let _order = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        recorder.record(grant, EventKind::Exit);
    }

    /// A write with `token`; returns whether the fencing check accepted it.
    pub fn write(&self, recorder: &Recorder, grant: usize, token: u64) -> bool {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let accepted = match *last {
            None => true,
            Some((max, writer)) => token > max || (token == max && writer == recorder.client()),
        };
        if accepted {
            *last = Some((token, recorder.client()));
        }
        recorder.record(grant, EventKind::Write { token, accepted });
        accepted
    }
}
