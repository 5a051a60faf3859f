//! The pods being scheduled and the cluster events that arrived meanwhile (upstream's
//! `inFlightPods` and `inFlightEvents`): when an attempt fails, the events that arrived after the
//! pod was popped are checked against it, so an event that came during the attempt is not lost.
//!
//! One list in arrival order holds a marker per popped pod and the events; a pod sees the events
//! after its marker. When a pod is done its marker goes, and events older than every remaining
//! marker are dropped, so the list holds only what some in-flight pod may still need.

use std::collections::{HashMap, VecDeque};

use crate::framework::types::{ClusterEvent, EventObject};

/// An event recorded while pods were in flight.
#[derive(Debug, Clone)]
pub struct InFlightEvent {
    pub event: ClusterEvent,
    pub old: Option<EventObject>,
    pub new: Option<EventObject>,
}

#[derive(Debug)]
enum Item {
    Pod,
    /// A pod's marker after it is done, until the items before it are dropped.
    Done,
    Event(InFlightEvent),
}

#[derive(Debug, Default)]
pub struct InFlight {
    items: VecDeque<Item>,
    /// The absolute position of `items[0]`.
    first: u64,
    /// Pod key -> absolute position of its marker.
    pods: HashMap<String, u64>,
}

impl InFlight {
    /// `key` was popped; false if it already was (a bug upstream reports and skips too).
    pub fn pop(&mut self, key: &str) -> bool {
        if self.pods.contains_key(key) {
            return false;
        }
        let at = self.first + self.items.len() as u64;
        self.items.push_back(Item::Pod);
        self.pods.insert(key.to_string(), at);
        true
    }

    pub fn contains(&self, key: &str) -> bool {
        self.pods.contains_key(key)
    }

    pub fn any(&self) -> bool {
        !self.pods.is_empty()
    }

    /// Records `event` when some pod is in flight; whether it was recorded.
    pub fn record(&mut self, event: InFlightEvent) -> bool {
        if !self.any() {
            return false;
        }
        self.items.push_back(Item::Event(event));
        true
    }

    /// The events that arrived since `key` was popped.
    pub fn events_for(&self, key: &str) -> impl Iterator<Item = &InFlightEvent> {
        let after = self
            .pods
            .get(key)
            .map_or(self.items.len(), |at| (at - self.first) as usize + 1);
        self.items.iter().skip(after).filter_map(|i| match i {
            Item::Event(e) => Some(e),
            _ => None,
        })
    }

    /// `key`'s attempt is over: its marker goes, and the events no in-flight pod needs. Returns
    /// the dropped events (for the `scheduler_inflight_events` gauge) and whether `key` was in
    /// flight.
    pub fn done(&mut self, key: &str) -> (Vec<ClusterEvent>, bool) {
        let Some(at) = self.pods.remove(key) else {
            return (Vec::new(), false);
        };
        if let Some(item) = self.items.get_mut((at - self.first) as usize) {
            *item = Item::Done;
        }
        let mut dropped = Vec::new();
        while let Some(front) = self.items.front() {
            match front {
                Item::Pod => break,
                Item::Done => {}
                Item::Event(e) => dropped.push(e.event),
            }
            self.items.pop_front();
            self.first += 1;
        }
        (dropped, true)
    }

    /// Events held (tests).
    #[cfg(test)]
    pub fn len_events(&self) -> usize {
        self.items
            .iter()
            .filter(|i| matches!(i, Item::Event(_)))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::types::{ActionType, EventResource};

    fn event(a: ActionType) -> InFlightEvent {
        InFlightEvent {
            event: ClusterEvent::new(EventResource::Node, a),
            old: None,
            new: None,
        }
    }

    fn actions<'a>(it: impl Iterator<Item = &'a InFlightEvent>) -> Vec<ActionType> {
        it.map(|e| e.event.action_type).collect()
    }

    #[test]
    fn each_pod_sees_the_events_after_it_was_popped() {
        let mut f = InFlight::default();
        assert!(!f.record(event(ActionType::ADD)), "nobody in flight");
        assert!(f.pop("a"));
        assert!(!f.pop("a"));
        f.record(event(ActionType::ADD));
        f.pop("b");
        f.record(event(ActionType::DELETE));
        assert_eq!(
            actions(f.events_for("a")),
            [ActionType::ADD, ActionType::DELETE]
        );
        assert_eq!(actions(f.events_for("b")), [ActionType::DELETE]);
        // b is done first: a still needs both events.
        assert_eq!(f.done("b"), (Vec::new(), true));
        assert_eq!(f.len_events(), 2);
        let (dropped, was) = f.done("a");
        assert!(was);
        assert_eq!(dropped.len(), 2);
        assert_eq!(f.len_events(), 0);
        assert!(!f.any());
        assert_eq!(f.done("a"), (Vec::new(), false));
        // Positions stay right after the list was drained.
        f.pop("c");
        f.record(event(ActionType::UPDATE_NODE_LABEL));
        assert_eq!(actions(f.events_for("c")), [ActionType::UPDATE_NODE_LABEL]);
    }
}
