//! What a grant or a renewal must reach before it counts: replicas that received it
//! (`WAIT`), append-only files that have it on disk (`WAITAOF`).

use std::time::Duration;

use crate::api::error::{Error, Result};

/// Whose append-only files must have a grant or a renewal on disk before it counts
/// ([`ClientBuilder::aof_acks`](crate::ClientBuilder::aof_acks)): the master's own file,
/// the files of some of its replicas, or both.
///
/// ```
/// use ferrisson_redis::AofAcks;
///
/// let both = AofAcks::local().and_replicas(1);
/// assert!(both.local_required());
/// assert_eq!(both.replicas_required(), 1);
/// assert_eq!(AofAcks::replicas(1).and_local(), both);
/// assert!(!AofAcks::replicas(2).local_required());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AofAcks {
    local: bool,
    replicas: u32,
}

impl AofAcks {
    /// The master's own append-only file (`WAITAOF 1 0`): a grant survives a restart of
    /// the master, as far as its `appendfsync` policy keeps what it wrote.
    pub const fn local() -> Self {
        Self {
            local: true,
            replicas: 0,
        }
    }

    /// The append-only files of `replicas` replicas (`WAITAOF 0 replicas`), not the
    /// master's own. A replica counts once it has the write on disk, so this also
    /// requires what [`ClientBuilder::replica_acks`](crate::ClientBuilder::replica_acks)
    /// does for as many replicas.
    pub const fn replicas(replicas: u32) -> Self {
        Self {
            local: false,
            replicas,
        }
    }

    /// These files and the master's own.
    #[must_use]
    pub const fn and_local(self) -> Self {
        Self {
            local: true,
            ..self
        }
    }

    /// These files and those of `replicas` replicas (replacing any replica count
    /// given before).
    #[must_use]
    pub const fn and_replicas(self, replicas: u32) -> Self {
        Self { replicas, ..self }
    }

    /// Whether the master's own file must have the write.
    pub const fn local_required(self) -> bool {
        self.local
    }

    /// How many replicas' files must have the write.
    pub const fn replicas_required(self) -> u32 {
        self.replicas
    }
}

/// How many replicas must acknowledge a grant or a renewal, and how long to wait for them
/// (`WAIT numreplicas timeout` after the write, on the same server).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaAcks {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

/// Whose append-only files must have a grant or a renewal, and how long to wait for them
/// (`WAITAOF numlocal numreplicas timeout` after the write, on the same server).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AofWait {
    pub(crate) acks: AofAcks,
    pub(crate) timeout: Duration,
}

/// Every acknowledgement a grant or a renewal needs before it counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Acknowledgements {
    pub(crate) replicas: Option<ReplicaAcks>,
    pub(crate) aof: Option<AofWait>,
}

impl Acknowledgements {
    /// True when a write counts as soon as the master has it.
    pub(crate) fn is_none(&self) -> bool {
        self.replicas.is_none() && self.aof.is_none()
    }

    /// The `WAIT` still to send: none when the `WAITAOF` counts at least as many
    /// replicas (a replica that has the write on disk has received it).
    pub(crate) fn wait(&self) -> Option<ReplicaAcks> {
        self.replicas.filter(|wait| {
            self.aof
                .is_none_or(|aof| aof.acks.replicas_required() < wait.replicas)
        })
    }

    /// The longest a grant may wait for its acknowledgements (both waits, one after the
    /// other).
    fn longest_wait(&self) -> Duration {
        self.wait().map_or(Duration::ZERO, |wait| wait.timeout)
            + self.aof.map_or(Duration::ZERO, |aof| aof.timeout)
    }

    /// Refuses acknowledgements no grant could have, or whose waits would eat a
    /// renewal's margin: above zero each, at most a third of the watchdog lease together
    /// (a renewal is sent when a third of the lease is left).
    pub(crate) fn validate(&self, watchdog_lease: Duration) -> Result<()> {
        if let Some(wait) = self.replicas {
            if wait.replicas == 0 {
                return Err(Error::invalid(
                    "replica acknowledgements need at least 1 replica",
                ));
            }
            if wait.timeout.is_zero() {
                return Err(Error::invalid(
                    "the replica acknowledgement timeout must be above zero",
                ));
            }
        }
        if let Some(aof) = self.aof {
            if !aof.acks.local_required() && aof.acks.replicas_required() == 0 {
                return Err(Error::invalid(
                    "append-only file acknowledgements need the master's own file or at least 1 replica",
                ));
            }
            if aof.timeout.is_zero() {
                return Err(Error::invalid(
                    "the append-only file acknowledgement timeout must be above zero",
                ));
            }
        }
        let longest = self.longest_wait();
        if longest > watchdog_lease / 3 {
            return Err(Error::invalid(format!(
                "the acknowledgement timeouts must add up to at most a third of the watchdog \
                 lease ({:?}), got {longest:?}",
                watchdog_lease / 3,
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(30);

    fn wait(replicas: u32, millis: u64) -> ReplicaAcks {
        ReplicaAcks {
            replicas,
            timeout: Duration::from_millis(millis),
        }
    }

    fn aof(acks: AofAcks, millis: u64) -> AofWait {
        AofWait {
            acks,
            timeout: Duration::from_millis(millis),
        }
    }

    #[test]
    fn a_waitaof_counting_as_many_replicas_makes_the_wait_unneeded() {
        let both = Acknowledgements {
            replicas: Some(wait(2, 100)),
            aof: Some(aof(AofAcks::replicas(2), 100)),
        };
        assert_eq!(both.wait(), None);
        assert_eq!(both.longest_wait(), Duration::from_millis(100));
        let fewer = Acknowledgements {
            replicas: Some(wait(2, 100)),
            aof: Some(aof(AofAcks::local().and_replicas(1), 200)),
        };
        assert_eq!(fewer.wait(), Some(wait(2, 100)));
        assert_eq!(fewer.longest_wait(), Duration::from_millis(300));
    }

    #[test]
    fn acknowledgements_nobody_could_give_are_refused() {
        let nothing = Acknowledgements {
            replicas: None,
            aof: Some(aof(AofAcks::replicas(0), 100)),
        };
        assert!(nothing.validate(LEASE).is_err());
        let no_time = Acknowledgements {
            replicas: None,
            aof: Some(aof(AofAcks::local(), 0)),
        };
        assert!(no_time.validate(LEASE).is_err());
        // 6 s + 5 s is more than a third of 30 s.
        let too_long = Acknowledgements {
            replicas: Some(wait(2, 6_000)),
            aof: Some(aof(AofAcks::local(), 5_000)),
        };
        assert!(too_long.validate(LEASE).is_err());
        let fine = Acknowledgements {
            replicas: Some(wait(2, 5_000)),
            aof: Some(aof(AofAcks::local(), 5_000)),
        };
        assert!(fine.validate(LEASE).is_ok());
        assert!(Acknowledgements::default().validate(LEASE).is_ok());
    }
}
