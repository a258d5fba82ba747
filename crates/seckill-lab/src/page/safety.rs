//! The fault suite's verdicts per store, read from the record of its last full run
//! (`docs/safety-run.json` and `docs/safety-run-topologies.json`, built into the lab):
//! which scenario answers which question for which store, and what it answered.

use std::collections::BTreeMap;

use serde::Deserialize;

/// Where the records are, for the page.
pub(crate) const RECORD_FILES: &str = "docs/safety-run.json and docs/safety-run-topologies.json";

const RECORD: &str = include_str!("../../../../docs/safety-run.json");
const TOPOLOGY_RECORD: &str = include_str!("../../../../docs/safety-run-topologies.json");

/// One scenario's line of the record (the fields the page needs).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Scenario {
    #[serde(rename = "scenario")]
    pub name: String,
    pub iterations: u64,
    pub lease_ms: u64,
    pub passed: bool,
    pub counters: Counters,
}

/// The counters the page reads.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Counters {
    pub double_grants: u64,
    pub stale_writes_accepted_fenced: u64,
    pub stale_writes_refused_fenced: u64,
    #[serde(default)]
    pub measures: BTreeMap<String, f64>,
}

/// The questions the store table answers from the record, in its column order.
pub(crate) const QUESTIONS: [(&str, &str); 3] = [
    ("failover", "Held through a failover?"),
    ("late-write", "A paused holder's late write refused?"),
    ("next-holder", "Next holder after a crash"),
];

/// How a scenario's counters answer a question.
#[derive(Debug, Clone, Copy)]
enum Reading {
    /// Held: no two clients believed they held the lock at once.
    NoDoubleGrant,
    /// The stalled holder's writes after the next holder came in were refused by
    /// fencing, none accepted.
    LateWritesRefused,
    /// A measure of the scenario (its maximum over the iterations, ms), after the
    /// event `after`.
    MaxMs {
        measure: &'static str,
        after: &'static str,
    },
}

struct Evidence {
    store: &'static str,
    question: &'static str,
    scenario: &'static str,
    /// The condition, in a few words.
    when: &'static str,
    reading: Reading,
}

const EVIDENCE: [Evidence; 11] = [
    Evidence {
        store: "redis-lock",
        question: "failover",
        scenario: "sentinel-failover-acked",
        when: "Sentinel, replica acks on",
        reading: Reading::NoDoubleGrant,
    },
    Evidence {
        store: "redis-lock",
        question: "failover",
        scenario: "cluster-master-failover",
        when: "Cluster failover",
        reading: Reading::NoDoubleGrant,
    },
    Evidence {
        store: "redis-lock",
        question: "failover",
        scenario: "sentinel-failover",
        when: "Sentinel, no acks",
        reading: Reading::NoDoubleGrant,
    },
    Evidence {
        store: "redis-lock",
        question: "failover",
        scenario: "lagging-replica-promoted",
        when: "lagging replica promoted",
        reading: Reading::NoDoubleGrant,
    },
    Evidence {
        store: "redis-lock",
        question: "late-write",
        scenario: "holder-paused",
        when: "holder paused 2 leases",
        reading: Reading::LateWritesRefused,
    },
    Evidence {
        store: "redis-lock",
        question: "next-holder",
        scenario: "holder-killed",
        when: "holder SIGKILLed",
        reading: Reading::MaxMs {
            measure: "reacquire_after_sigkill",
            after: "after the holder's SIGKILL",
        },
    },
    Evidence {
        store: "fair-lock",
        question: "late-write",
        scenario: "fair-lock-holder-blackholed",
        when: "holder cut off 2 leases",
        reading: Reading::LateWritesRefused,
    },
    Evidence {
        store: "fair-lock",
        question: "next-holder",
        scenario: "fair-lock-holder-blackholed",
        when: "holder cut off, queued waiter",
        reading: Reading::MaxMs {
            measure: "handover_after_holder_deadline",
            after: "after the cut-off holder's lease ran out",
        },
    },
    Evidence {
        store: "redlock",
        question: "failover",
        scenario: "redlock-minority-killed",
        when: "1–2 of 5 servers killed",
        reading: Reading::NoDoubleGrant,
    },
    Evidence {
        store: "redlock",
        question: "failover",
        scenario: "redlock-restarted-after-ttl",
        when: "a server restarted empty after the TTL",
        reading: Reading::NoDoubleGrant,
    },
    Evidence {
        store: "redlock",
        question: "failover",
        scenario: "redlock-restarted-at-once",
        when: "a server restarted empty at once",
        reading: Reading::NoDoubleGrant,
    },
];

/// One answer of the record: yes / no / a figure, with what it rests on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    /// `Some(true)`: safe; `Some(false)`: not; `None`: a figure, not a yes or no.
    pub ok: Option<bool>,
    /// The short answer (`yes`, `no`, `≤ 302 ms`).
    pub short: String,
    /// The condition (for a figure: what it is measured from).
    pub when: String,
    /// The evidence, in words, with the scenario's name.
    pub detail: String,
}

/// The fault suite's record, parsed.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    scenarios: Vec<Scenario>,
}

impl Record {
    /// The record built into the lab; an unreadable record reads as empty (every
    /// answer then says the scenario is not in it).
    pub(crate) fn built_in() -> Self {
        let mut scenarios: Vec<Scenario> = serde_json::from_str(RECORD).unwrap_or_default();
        scenarios
            .extend(serde_json::from_str::<Vec<Scenario>>(TOPOLOGY_RECORD).unwrap_or_default());
        Self { scenarios }
    }

    fn scenario(&self, name: &str) -> Option<&Scenario> {
        self.scenarios.iter().find(|s| s.name == name)
    }

    /// The record's answers to `question` for `store`; empty when the fault suite has no
    /// scenario for it.
    pub(crate) fn answers(&self, store: &str, question: &str) -> Vec<Answer> {
        EVIDENCE
            .iter()
            .filter(|e| e.store == store && e.question == question)
            .map(|e| match self.scenario(e.scenario) {
                Some(s) => answer(e, s),
                None => Answer {
                    ok: None,
                    short: "not recorded".into(),
                    when: e.when.to_owned(),
                    detail: format!("{}: not in the record", e.scenario),
                },
            })
            .collect()
    }
}

fn answer(e: &Evidence, s: &Scenario) -> Answer {
    let c = &s.counters;
    let n = s.iterations;
    let mut when = e.when.to_owned();
    let (ok, short, detail) = match e.reading {
        Reading::NoDoubleGrant => {
            let held = c.double_grants == 0;
            (
                Some(held),
                if held { "yes" } else { "no" }.to_owned(),
                format!("{}: {} double grants in {n} runs", s.name, c.double_grants),
            )
        }
        Reading::LateWritesRefused => {
            let (refused, accepted) = (
                c.stale_writes_refused_fenced,
                c.stale_writes_accepted_fenced,
            );
            (
                Some(accepted == 0 && refused > 0),
                if accepted == 0 && refused > 0 {
                    "yes"
                } else {
                    "no"
                }
                .to_owned(),
                format!(
                    "{}: {refused} late writes refused, {accepted} accepted in {n} runs (fencing token)",
                    s.name
                ),
            )
        }
        Reading::MaxMs { measure, after } => match c.measures.get(measure) {
            Some(ms) => {
                when = format!("{after} (lease {} ms)", s.lease_ms);
                (
                    None,
                    format!("≤ {ms:.0} ms"),
                    format!(
                        "{}: at most {ms:.0} ms {after}, lease {} ms, {n} runs",
                        s.name, s.lease_ms
                    ),
                )
            }
            None => (
                None,
                "not recorded".to_owned(),
                format!("{}: no {measure} in the record", s.name),
            ),
        },
    };
    let detail = if s.passed {
        detail
    } else {
        format!("{detail}; the scenario failed its expectations")
    };
    Answer {
        ok,
        short,
        when,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::{EVIDENCE, QUESTIONS, Record};

    /// Every scenario the table cites is in the record, and says what SAFETY.md says of
    /// it.
    #[test]
    fn the_record_answers_every_question_it_is_asked() {
        let record = Record::built_in();
        for e in &EVIDENCE {
            assert!(record.scenario(e.scenario).is_some(), "{}", e.scenario);
            assert!(QUESTIONS.iter().any(|(q, _)| *q == e.question));
        }
        let failover = record.answers("redis-lock", "failover");
        assert_eq!(failover.len(), 4);
        assert_eq!(failover[0].ok, Some(true), "{failover:?}");
        assert_eq!(failover[2].ok, Some(false), "no acks: double grants");
        let late = record.answers("redis-lock", "late-write");
        assert_eq!(late[0].ok, Some(true), "{late:?}");
        let crash = record.answers("redis-lock", "next-holder");
        assert!(crash[0].short.starts_with("≤ "), "{crash:?}");
        assert!(record.answers("postgres", "failover").is_empty());
    }
}
