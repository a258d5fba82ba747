//! Counts safety violations in a [`History`](crate::History).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::Serialize;

use crate::history::{Event, EventKind, ReleaseOutcome};

/// Every counter the checker keeps. The invariants of the library are the counters
/// that must stay zero (see [`Counters::library_violations`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Acquires that returned a guard.
    pub acquires_ok: u64,
    /// Acquires that failed or found the lock taken.
    pub acquires_failed: u64,
    /// Lost-lock signals seen by holders.
    pub lost_signals: u64,
    /// Times the resource saw a client enter while another was inside.
    pub overlapping_sections: u64,
    /// Pairs of grants of different clients whose validity intervals overlap (each
    /// guard's own belief: from its grant to its last deadline, its loss or release).
    pub double_grants: u64,
    /// Writes by a holder after another client, granted later, entered the resource
    /// (its token reached the resource), accepted by the fencing resource.
    pub stale_writes_accepted_fenced: u64,
    /// Stale writes refused by the fencing resource (without fencing every stale write
    /// is accepted: the sum of both counters).
    pub stale_writes_refused_fenced: u64,
    /// Writes of the latest grantee refused by the fencing resource (the token went
    /// backwards).
    pub fresh_writes_refused: u64,
    /// Grants whose fencing token was not above every earlier grant's.
    pub token_regressions: u64,
    /// Successful releases while a later grant of another client was live.
    pub foreign_releases: u64,
    /// Renewals (deadline moved forward) after another client was granted the lock (a
    /// grant whose reply came after its own deadline does not count: the server granted
    /// it earlier).
    pub foreign_renewals: u64,
    /// Renewals seen after the guard had reported the lock lost or not held.
    pub renewals_after_loss: u64,
    /// Belief samples with `is_held()` true at or after the guard's own deadline.
    pub held_after_deadline: u64,
    /// Lock keys still present one lease after the faults were healed.
    pub keys_left: u64,
    /// Scenario-specific counts, summed (see each scenario's module).
    pub counts: BTreeMap<String, u64>,
    /// Largest value per scenario-specific measurement, in milliseconds.
    pub measures: BTreeMap<String, u64>,
}

impl Counters {
    /// The library's own invariants: releases or renewals touching another owner's
    /// lock, renewals after loss, guards held after their deadline. Must be zero in
    /// every scenario.
    pub fn library_violations(&self) -> u64 {
        self.foreign_releases
            + self.foreign_renewals
            + self.renewals_after_loss
            + self.held_after_deadline
    }

    /// Adds another run's counters (counts are summed, measures keep their maximum).
    pub fn merge(&mut self, other: &Counters) {
        self.acquires_ok += other.acquires_ok;
        self.acquires_failed += other.acquires_failed;
        self.lost_signals += other.lost_signals;
        self.overlapping_sections += other.overlapping_sections;
        self.double_grants += other.double_grants;
        self.stale_writes_accepted_fenced += other.stale_writes_accepted_fenced;
        self.stale_writes_refused_fenced += other.stale_writes_refused_fenced;
        self.fresh_writes_refused += other.fresh_writes_refused;
        self.token_regressions += other.token_regressions;
        self.foreign_releases += other.foreign_releases;
        self.foreign_renewals += other.foreign_renewals;
        self.renewals_after_loss += other.renewals_after_loss;
        self.held_after_deadline += other.held_after_deadline;
        self.keys_left += other.keys_left;
        for (name, value) in &other.counts {
            *self.counts.entry(name.clone()).or_insert(0) += value;
        }
        for (name, value) in &other.measures {
            let entry = self.measures.entry(name.clone()).or_insert(0);
            *entry = (*entry).max(*value);
        }
    }
}

/// A deadline moving forward by less is sampling noise (two clock reads), not a renewal.
const RENEWAL_MIN: Duration = Duration::from_millis(1);

#[derive(Debug, Default)]
struct Grant {
    client: usize,
    ok_at: Duration,
    /// Latest deadline seen while held.
    deadline: Duration,
    /// First time the guard stopped believing: lost, a not-held sample, or release.
    ended_at: Option<Duration>,
    /// When the release was sent.
    release_sent: Option<Duration>,
    /// Its reply arrived at or after its own deadline: it never believed anything.
    void: bool,
}

impl Grant {
    fn belief_end(&self) -> Duration {
        self.ended_at
            .map_or(self.deadline, |end| end.min(self.deadline))
    }
}

/// Counts every violation in `events` (in any order; they are sorted by time).
///
/// ```
/// use std::time::Duration;
/// use ferrisson_chaos::{Event, EventKind, check};
///
/// let ms = Duration::from_millis;
/// let ok = |client, at, token| Event {
///     at: ms(at), client, grant: 0,
///     kind: EventKind::AcquireOk { token: Some(token), deadline: ms(at + 100) },
/// };
/// // Two clients each believing they hold the lock at 50..100 ms.
/// let counters = check(&[ok(0, 0, 1), ok(1, 50, 2)]);
/// assert_eq!(counters.double_grants, 1);
/// ```
#[allow(clippy::too_many_lines)] // one arm per event kind, read as one state machine
pub fn check(events: &[Event]) -> Counters {
    let mut events = events.to_vec();
    events.sort_by_key(|e| e.at);
    let mut c = Counters::default();
    let mut grants: HashMap<(usize, usize), Grant> = HashMap::new();
    // Grants in the order they were handed out.
    let mut order: Vec<(usize, usize)> = Vec::new();
    let mut inside: Vec<usize> = Vec::new();
    let mut max_token: Option<u64> = None;
    let mut entries: Vec<(usize, Duration)> = Vec::new();

    for e in &events {
        let id = (e.client, e.grant);
        // Another client's grant handed out after this grant, before now. A void grant
        // does not count: the server granted it before its reply, which arrived after
        // its deadline, so its reply time says nothing about who came later.
        let later_grant = |grants: &HashMap<(usize, usize), Grant>| {
            grants.get(&id).is_some_and(|g| {
                order.iter().any(|other| {
                    grants.get(other).is_some_and(|h| {
                        h.client != e.client && h.ok_at > g.ok_at && h.ok_at <= e.at && !h.void
                    })
                })
            })
        };
        match &e.kind {
            EventKind::AcquireInvoked | EventKind::ReleaseInvoked => {
                if matches!(e.kind, EventKind::ReleaseInvoked)
                    && let Some(g) = grants.get_mut(&id)
                {
                    g.ended_at.get_or_insert(e.at);
                    g.release_sent.get_or_insert(e.at);
                }
            }
            EventKind::AcquireOk { token, deadline } => {
                c.acquires_ok += 1;
                // A grant whose reply came after its own deadline is void, not a
                // regression; a hold with no token has nothing to compare.
                if let Some(token) = *token
                    && *deadline > e.at
                {
                    if max_token.is_some_and(|max| token <= max) {
                        c.token_regressions += 1;
                    }
                    max_token = max_token.max(Some(token));
                }
                grants.insert(
                    id,
                    Grant {
                        client: e.client,
                        ok_at: e.at,
                        deadline: *deadline,
                        ended_at: None,
                        release_sent: None,
                        void: *deadline <= e.at,
                    },
                );
                order.push(id);
            }
            EventKind::AcquireFailed { .. } => c.acquires_failed += 1,
            EventKind::Belief { held, deadline } => {
                let foreign = later_grant(&grants);
                let Some(g) = grants.get_mut(&id) else {
                    continue;
                };
                if *held {
                    if *deadline <= e.at {
                        c.held_after_deadline += 1;
                    }
                    if *deadline > g.deadline + RENEWAL_MIN {
                        if g.ended_at.is_some() {
                            c.renewals_after_loss += 1;
                        }
                        if foreign {
                            c.foreign_renewals += 1;
                        }
                        if g.ended_at.is_none() {
                            g.deadline = *deadline;
                        }
                    }
                } else {
                    g.ended_at.get_or_insert(e.at);
                }
            }
            EventKind::Lost => {
                c.lost_signals += 1;
                if let Some(g) = grants.get_mut(&id) {
                    g.ended_at.get_or_insert(e.at);
                }
            }
            EventKind::Released { outcome } => {
                if *outcome == ReleaseOutcome::Ok
                    && let Some(g) = grants.get(&id)
                {
                    // The release took effect somewhere between being sent and its reply;
                    // only a grant already live when it was sent proves it foreign.
                    let sent = g.release_sent.unwrap_or(e.at);
                    let live_later = order.iter().any(|other| {
                        grants.get(other).is_some_and(|h| {
                            h.client != e.client
                                && h.ok_at > g.ok_at
                                && h.ok_at < sent
                                && h.belief_end() > sent
                        })
                    });
                    if live_later {
                        c.foreign_releases += 1;
                    }
                }
            }
            EventKind::Enter { .. } => {
                entries.push((e.client, e.at));
                if inside.iter().any(|client| *client != e.client) {
                    c.overlapping_sections += 1;
                }
                inside.push(e.client);
            }
            EventKind::Exit => {
                if let Some(at) = inside.iter().position(|client| *client == e.client) {
                    inside.remove(at);
                }
            }
            EventKind::Write { accepted, .. } => {
                let stale = grants.get(&id).is_some_and(|g| {
                    entries
                        .iter()
                        .any(|(client, at)| *client != e.client && *at > g.ok_at)
                });
                match (stale, *accepted) {
                    (true, true) => c.stale_writes_accepted_fenced += 1,
                    (true, false) => c.stale_writes_refused_fenced += 1,
                    (false, false) => c.fresh_writes_refused += 1,
                    (false, true) => {}
                }
            }
            EventKind::KeysLeft { count } => c.keys_left += count,
            EventKind::Count { name, count } => {
                *c.counts.entry(name.clone()).or_insert(0) += count;
            }
            EventKind::Measure { name, millis } => {
                let entry = c.measures.entry(name.clone()).or_insert(0);
                *entry = (*entry).max(*millis);
            }
        }
    }
    c.double_grants = count_double_grants(&order, &grants);
    c
}

fn count_double_grants(order: &[(usize, usize)], grants: &HashMap<(usize, usize), Grant>) -> u64 {
    let mut count = 0;
    for (i, a) in order.iter().enumerate() {
        for b in &order[i + 1..] {
            let (Some(a), Some(b)) = (grants.get(a), grants.get(b)) else {
                continue;
            };
            // Overlap of two non-empty intervals: a grant whose reply came after its own
            // deadline never believed anything.
            if a.client != b.client && a.ok_at.max(b.ok_at) < a.belief_end().min(b.belief_end()) {
                count += 1;
            }
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn ev(at: u64, client: usize, kind: EventKind) -> Event {
        Event {
            at: ms(at),
            client,
            grant: 0,
            kind,
        }
    }

    fn ok(at: u64, client: usize, token: u64, deadline: u64) -> Event {
        granted(at, client, Some(token), deadline)
    }

    fn granted(at: u64, client: usize, token: Option<u64>, deadline: u64) -> Event {
        ev(
            at,
            client,
            EventKind::AcquireOk {
                token,
                deadline: ms(deadline),
            },
        )
    }

    fn belief(at: u64, client: usize, held: bool, deadline: u64) -> Event {
        ev(
            at,
            client,
            EventKind::Belief {
                held,
                deadline: ms(deadline),
            },
        )
    }

    fn write(at: u64, client: usize, token: u64, accepted: bool) -> Event {
        ev(at, client, EventKind::Write { token, accepted })
    }

    fn released(at: u64, client: usize, outcome: ReleaseOutcome) -> Event {
        ev(at, client, EventKind::Released { outcome })
    }

    /// A clean hand-off: A holds 0..100, releases at 90; B holds from 120.
    fn clean() -> Vec<Event> {
        vec![
            ev(0, 0, EventKind::AcquireInvoked),
            ok(1, 0, 1, 101),
            ev(2, 0, EventKind::Enter { token: Some(1) }),
            belief(40, 0, true, 140),
            write(50, 0, 1, true),
            ev(60, 0, EventKind::Exit),
            ev(90, 0, EventKind::ReleaseInvoked),
            released(91, 0, ReleaseOutcome::Ok),
            ev(10, 1, EventKind::AcquireInvoked),
            ok(120, 1, 2, 220),
            ev(121, 1, EventKind::Enter { token: Some(2) }),
            write(130, 1, 2, true),
            ev(131, 1, EventKind::Exit),
            ev(140, 1, EventKind::ReleaseInvoked),
            released(141, 1, ReleaseOutcome::Ok),
            ev(500, 0, EventKind::KeysLeft { count: 0 }),
        ]
    }

    #[test]
    fn a_clean_hand_off_counts_nothing() {
        let c = check(&clean());
        assert_eq!(c.acquires_ok, 2);
        assert_eq!(
            c,
            Counters {
                acquires_ok: 2,
                ..Counters::default()
            }
        );
        assert_eq!(c.library_violations(), 0);
    }

    #[test]
    fn overlapping_sections_are_counted() {
        let mut h = clean();
        h.push(ev(125, 0, EventKind::Enter { token: Some(1) }));
        h.push(ev(126, 0, EventKind::Exit));
        assert_eq!(check(&h).overlapping_sections, 1);
    }

    #[test]
    fn double_grant_by_belief_uses_each_guards_validity() {
        // B granted at 80 while A's own deadline is 101 and A has not released yet.
        let h = vec![ok(1, 0, 1, 101), ok(80, 1, 2, 180)];
        assert_eq!(check(&h).double_grants, 1);
        // A reported lost at 70: no overlap of beliefs.
        let h = vec![
            ok(1, 0, 1, 101),
            ev(70, 0, EventKind::Lost),
            ok(80, 1, 2, 180),
        ];
        let c = check(&h);
        assert_eq!(c.double_grants, 0);
        assert_eq!(c.lost_signals, 1);
        // A renewed to 200 (a sample at 50): B's grant at 150 overlaps.
        let h = vec![
            ok(1, 0, 1, 101),
            belief(50, 0, true, 200),
            ok(150, 1, 2, 250),
        ];
        assert_eq!(check(&h).double_grants, 1);
        // A grant delivered after its own deadline overlaps nothing.
        let h = vec![ok(1, 1, 2, 300), ok(150, 0, 1, 149)];
        let c = check(&h);
        assert_eq!(c.double_grants, 0);
        assert_eq!(c.token_regressions, 0, "a void grant is no regression");
    }

    #[test]
    fn stale_writes_are_split_by_the_fencing_verdict() {
        let mut h = clean();
        h.push(write(150, 0, 1, false)); // A writes after B's grant: refused
        h.push(write(151, 0, 1, true)); // and once accepted (fencing off)
        let c = check(&h);
        assert_eq!(c.stale_writes_refused_fenced, 1);
        assert_eq!(c.stale_writes_accepted_fenced, 1);
        assert_eq!(c.fresh_writes_refused, 0);
    }

    #[test]
    fn token_regressions_and_refused_fresh_writes() {
        // A failover to a lagging replica: B's token repeats A's.
        let h = vec![
            ok(1, 0, 7, 101),
            ev(50, 0, EventKind::Lost),
            ok(60, 1, 7, 160),
            write(70, 1, 7, false),
        ];
        let c = check(&h);
        assert_eq!(c.token_regressions, 1);
        assert_eq!(c.fresh_writes_refused, 1);
        // Holds without a token (readers, permits) are not compared, with each other or
        // with the tokens around them.
        let h = vec![
            ok(1, 0, 3, 101),
            granted(200, 1, None, 300),
            granted(400, 0, None, 500),
            ok(600, 1, 4, 700),
        ];
        let c = check(&h);
        assert_eq!(c.token_regressions, 0);
        assert_eq!(c.acquires_ok, 4);
        // A first token of 0 is a token like any other.
        let h = vec![ok(1, 0, 0, 101), ok(200, 1, 0, 300)];
        assert_eq!(check(&h).token_regressions, 1);
    }

    #[test]
    fn release_of_a_later_owners_lock_is_counted() {
        let h = vec![
            ok(1, 0, 1, 101),
            ev(101, 0, EventKind::Lost),
            ok(120, 1, 2, 220),
            ev(140, 0, EventKind::ReleaseInvoked),
            released(150, 0, ReleaseOutcome::Ok),
        ];
        assert_eq!(check(&h).foreign_releases, 1);
        // Sent before B's grant, answered after it: the release may have run first.
        let h = vec![
            ok(1, 0, 1, 101),
            ev(100, 0, EventKind::ReleaseInvoked),
            ok(120, 1, 2, 220),
            released(150, 0, ReleaseOutcome::Ok),
        ];
        assert_eq!(check(&h).foreign_releases, 0);
        let h = vec![
            ok(1, 0, 1, 101),
            ev(101, 0, EventKind::Lost),
            ok(120, 1, 2, 220),
            released(150, 0, ReleaseOutcome::NotOwner),
        ];
        assert_eq!(check(&h).foreign_releases, 0);
    }

    #[test]
    fn renewals_after_loss_and_over_a_later_grant_are_counted() {
        let h = vec![
            ok(1, 0, 1, 101),
            belief(110, 0, false, 110),
            ok(120, 1, 2, 220),
            belief(130, 0, true, 230),
        ];
        let c = check(&h);
        assert_eq!(c.renewals_after_loss, 1);
        assert_eq!(c.foreign_renewals, 1);
        assert_eq!(c.library_violations(), 2);
        assert_eq!(c.double_grants, 0, "a loss ends the belief for good");
    }

    /// A's grant ran on the server first, its reply arrived after its deadline, while B
    /// held and renewed: B's renewal after A's reply touched nobody else's lock.
    #[test]
    fn a_void_grant_makes_no_later_renewal_foreign() {
        let h = vec![
            ok(300, 1, 2, 600),
            ok(450, 0, 1, 450),
            belief(451, 0, false, 450),
            belief(452, 1, true, 700),
        ];
        let c = check(&h);
        assert_eq!(c.foreign_renewals, 0);
        assert_eq!(c.double_grants, 0);
        // The same renewal after a live grant of A's is foreign.
        let h = vec![
            ok(300, 1, 2, 600),
            ok(450, 0, 3, 750),
            belief(452, 1, true, 700),
        ];
        assert_eq!(check(&h).foreign_renewals, 1);
    }

    #[test]
    fn guards_held_past_their_deadline_are_counted() {
        let h = vec![ok(1, 0, 1, 101), belief(101, 0, true, 101)];
        assert_eq!(check(&h).held_after_deadline, 1);
        let h = vec![ok(1, 0, 1, 101), belief(100, 0, true, 101)];
        assert_eq!(check(&h).held_after_deadline, 0);
    }

    #[test]
    fn keys_left_and_measures_are_kept() {
        let h = vec![
            ev(1, 0, EventKind::KeysLeft { count: 2 }),
            ev(
                2,
                0,
                EventKind::Measure {
                    name: "reacquire".into(),
                    millis: 40,
                },
            ),
            ev(
                3,
                0,
                EventKind::Measure {
                    name: "reacquire".into(),
                    millis: 30,
                },
            ),
        ];
        let c = check(&h);
        assert_eq!(c.keys_left, 2);
        assert_eq!(c.measures.get("reacquire"), Some(&40));
        let mut total = c.clone();
        total.merge(&c);
        assert_eq!(total.keys_left, 4);
        assert_eq!(total.measures.get("reacquire"), Some(&40));
    }

    #[test]
    fn counts_are_summed_within_and_across_iterations() {
        let count = |at, name: &str, count| {
            ev(
                at,
                0,
                EventKind::Count {
                    name: name.into(),
                    count,
                },
            )
        };
        let c = check(&[count(1, "silent_losses", 0), count(2, "silent_losses", 1)]);
        assert_eq!(c.counts.get("silent_losses"), Some(&1));
        let mut total = c.clone();
        total.merge(&c);
        total.merge(&check(&[count(3, "waiters_not_granted", 0)]));
        assert_eq!(total.counts.get("silent_losses"), Some(&2));
        assert_eq!(total.counts.get("waiters_not_granted"), Some(&0));
    }
}
