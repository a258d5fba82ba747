//! One node's view of a Redis Cluster, read from its `CLUSTER NODES` reply.

use std::ops::RangeInclusive;

/// One line of `CLUSTER NODES`: a node as the viewing node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeEntry {
    pub(crate) id: String,
    pub(crate) master: bool,
    /// `fail` or `fail?`: the viewer (or the majority) thinks the node is down.
    pub(crate) failing: bool,
    /// Still being introduced (`handshake`) or without a known address (`noaddr`).
    pub(crate) joining: bool,
    /// The master's id, for a replica.
    pub(crate) replica_of: Option<String>,
    /// The slot ranges the node serves (migration markers left out).
    pub(crate) slots: Vec<RangeInclusive<u16>>,
}

/// Every node one node knows, as it knows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterView {
    pub(crate) nodes: Vec<NodeEntry>,
    /// The index in `nodes` of the viewing node (flagged `myself`).
    myself: Option<usize>,
}

impl ClusterView {
    /// Parses a `CLUSTER NODES` reply.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut nodes = Vec::new();
        let mut myself = None;
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            let (node, is_myself) = parse_line(line)?;
            if is_myself {
                myself = Some(nodes.len());
            }
            nodes.push(node);
        }
        Ok(Self { nodes, myself })
    }

    /// The viewing node's own entry.
    pub(crate) fn myself(&self) -> Option<&NodeEntry> {
        self.nodes.get(self.myself?)
    }

    /// The entry of the node with this id.
    pub(crate) fn node(&self, id: &str) -> Option<&NodeEntry> {
        self.nodes.iter().find(|node| node.id == id)
    }

    /// The id of the master serving `slot`, in this view.
    pub(crate) fn owner(&self, slot: u16) -> Option<&str> {
        self.nodes
            .iter()
            .find(|node| node.master && node.slots.iter().any(|range| range.contains(&slot)))
            .map(|node| node.id.as_str())
    }

    /// Every assigned slot range with its master's id, sorted: two nodes agree on the slot
    /// map when these are equal.
    pub(crate) fn slot_map(&self) -> Vec<(u16, u16, &str)> {
        let mut map: Vec<(u16, u16, &str)> = self
            .nodes
            .iter()
            .filter(|node| node.master)
            .flat_map(|node| {
                node.slots
                    .iter()
                    .map(|range| (*range.start(), *range.end(), node.id.as_str()))
            })
            .collect();
        map.sort_unstable();
        map
    }
}

/// One node's entry, and whether it is the viewer's own.
fn parse_line(line: &str) -> Result<(NodeEntry, bool), String> {
    let bad = || format!("unreadable CLUSTER NODES line {line:?}");
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [
        id,
        _address,
        flags,
        master,
        _ping,
        _pong,
        _epoch,
        _link,
        slots @ ..,
    ] = &fields[..]
    else {
        return Err(bad());
    };
    let flags: Vec<&str> = flags.split(',').collect();
    let has = |flag: &str| flags.contains(&flag);
    let slots = slots
        .iter()
        // `[slot->-id]` and `[slot-<-id]` mark a migration, not ownership.
        .filter(|entry| !entry.starts_with('['))
        .map(|entry| parse_range(entry).ok_or_else(bad))
        .collect::<Result<_, _>>()?;
    let entry = NodeEntry {
        id: (*id).to_owned(),
        master: has("master"),
        failing: has("fail") || has("fail?"),
        joining: has("handshake") || has("noaddr"),
        replica_of: (*master != "-").then(|| (*master).to_owned()),
        slots,
    };
    Ok((entry, has("myself")))
}

fn parse_range(entry: &str) -> Option<RangeInclusive<u16>> {
    match entry.split_once('-') {
        Some((start, end)) => Some(start.parse().ok()?..=end.parse().ok()?),
        None => {
            let slot = entry.parse().ok()?;
            Some(slot..=slot)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "\
07c3 127.0.0.1:30004@31004 slave e7d1 0 1426238317239 4 connected
67ed 127.0.0.1:30002@31002,host-b master - 0 1426238316232 2 connected 5461-10922
292f 127.0.0.1:30003@31003 master,fail? - 0 1426238318243 3 connected 10923-16383
e7d1 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 [93->-67ed] 5461x
";

    #[test]
    fn a_line_per_node_with_roles_slots_and_failure_flags() {
        let text = NODES.replace(" 5461x", "");
        let view = ClusterView::parse(&text).expect("view");
        assert_eq!(view.nodes.len(), 4);
        let me = view.myself().expect("myself");
        assert_eq!((me.id.as_str(), me.master), ("e7d1", true));
        assert_eq!(me.slots, vec![0..=5460]);
        let replica = view.node("07c3").expect("replica");
        assert_eq!(replica.replica_of.as_deref(), Some("e7d1"));
        assert!(!replica.master);
        assert!(view.node("292f").expect("failing").failing);
        assert_eq!(
            view.node("67ed").expect("hostname").slots,
            vec![5461..=10922]
        );
        assert_eq!(view.owner(93), Some("e7d1"));
        assert_eq!(view.owner(10923), Some("292f"));
        assert_eq!(
            view.slot_map(),
            vec![
                (0, 5460, "e7d1"),
                (5461, 10922, "67ed"),
                (10923, 16383, "292f")
            ]
        );
    }

    #[test]
    fn a_garbled_line_is_an_error() {
        assert!(ClusterView::parse(NODES).is_err(), "slot 5461x");
        assert!(ClusterView::parse("abc 127.0.0.1:1@2 master").is_err());
        assert!(ClusterView::parse("a b@1 master - 0 0 1 connected 1-x").is_err());
    }
}
