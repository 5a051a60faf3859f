//! Why scheduling a pod failed: the [`Diagnosis`] of the nodes, and [`FitError`] with upstream's
//! exact message.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::framework::interface::{Code, NodeToStatus, Status};

/// Why no node fits: per-node statuses and the plugins that rejected the pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnosis {
    pub node_to_status: NodeToStatus,
    /// Plugins that returned Unschedulable or UnschedulableAndUnresolvable (their cluster events
    /// requeue the pod).
    pub unschedulable_plugins: BTreeSet<String>,
    /// Plugins that returned Pending.
    pub pending_plugins: BTreeSet<String>,
    /// The PreFilter rejection message, when PreFilter rejected the pod.
    pub pre_filter_msg: String,
    /// The PostFilter (preemption) message.
    pub post_filter_msg: String,
}

impl Diagnosis {
    /// Records a rejecting status's plugin (upstream's `AddPluginStatus`).
    pub fn add_plugin_status(&mut self, s: &Status) {
        let Some(p) = s.plugin() else { return };
        if s.is_rejected() {
            self.unschedulable_plugins.insert(p.to_string());
        }
        if s.code() == Code::Pending {
            self.pending_plugins.insert(p.to_string());
        }
    }
}

/// No node fits the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FitError {
    pub pod: String,
    pub num_all_nodes: usize,
    pub diagnosis: Diagnosis,
}

impl FitError {
    /// Sets the message PostFilter (preemption) returned: it ends the rendered message.
    pub fn set_post_filter_message(&mut self, msg: impl Into<String>) {
        self.diagnosis.post_filter_msg = msg.into();
    }
}

impl fmt::Display for FitError {
    /// `0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint(s). preemption: ...`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0/{} nodes are available:", self.num_all_nodes)?;
        let d = &self.diagnosis;
        if !d.pre_filter_msg.is_empty() {
            write!(f, " {}.", d.pre_filter_msg)?;
        } else {
            let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
            for (_, s) in d.node_to_status.explicit() {
                for r in s.reasons() {
                    *reasons.entry(r.as_str()).or_insert(0) += 1;
                }
            }
            let explicit = d.node_to_status.len();
            if explicit < self.num_all_nodes {
                for r in d.node_to_status.absent_nodes_status().reasons() {
                    *reasons.entry(r.as_str()).or_insert(0) += self.num_all_nodes - explicit;
                }
            }
            let mut lines: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
            // Go's sort.Strings: byte-wise ascending ("10 x" before "2 y").
            lines.sort();
            if !lines.is_empty() {
                write!(f, " {}.", lines.join(", "))?;
            }
        }
        if !d.post_filter_msg.is_empty() {
            write!(f, " {}", d.post_filter_msg)?;
        }
        Ok(())
    }
}

impl std::error::Error for FitError {}

/// Why scheduling a pod failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The snapshot has no nodes.
    #[error("no nodes available to schedule pods")]
    NoNodesAvailable,
    /// No node fits.
    #[error("{0}")]
    Fit(Box<FitError>),
    /// A plugin failed (code Error).
    #[error("{}", .0.message())]
    Internal(Status),
}

impl ScheduleError {
    /// The status for the pod's condition and requeueing: Unschedulable for fit errors, Error else.
    pub fn to_status(&self) -> Status {
        match self {
            ScheduleError::Fit(e) => Status::new(Code::Unschedulable, e.to_string()),
            other => Status::error(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_error_message_as_upstream() {
        let mut d = Diagnosis::default();
        d.node_to_status
            .set("n1", Status::unschedulable("Insufficient cpu"));
        d.node_to_status
            .set("n2", Status::unschedulable("Insufficient cpu"));
        for n in ["n3", "n4", "n5"] {
            d.node_to_status
                .set(n, Status::unresolvable("node(s) had untolerated taint(s)"));
        }
        let mut e = FitError {
            pod: "default/p".into(),
            num_all_nodes: 5,
            diagnosis: d,
        };
        assert_eq!(
            e.to_string(),
            "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint(s)."
        );
        e.set_post_filter_message(
            "preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling.",
        );
        assert_eq!(
            e.to_string(),
            "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint(s). preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn fit_error_sorts_as_strings_and_counts_absent_nodes() {
        let mut d = Diagnosis::default();
        for i in 0..10 {
            d.node_to_status.set(
                format!("a{i}"),
                Status::unschedulable("Insufficient memory"),
            );
        }
        d.node_to_status.set(
            "b",
            Status::with_reasons(
                Code::Unschedulable,
                vec!["Insufficient cpu".into(), "Insufficient memory".into()],
            ),
        );
        d.node_to_status
            .set_absent_nodes_status(Status::unresolvable(
                "node(s) didn't satisfy plugin(s) [NodeAffinity]",
            ));
        let e = FitError {
            pod: "p".into(),
            num_all_nodes: 13,
            diagnosis: d,
        };
        // "11 ..." sorts before "1 ..." is false: byte order puts "1 " (space) before "11".
        assert_eq!(
            e.to_string(),
            "0/13 nodes are available: 1 Insufficient cpu, 11 Insufficient memory, 2 node(s) didn't satisfy plugin(s) [NodeAffinity]."
        );
        let mut d = Diagnosis {
            pre_filter_msg: "node(s) didn't satisfy plugin A".into(),
            ..Default::default()
        };
        d.node_to_status
            .set("x", Status::unschedulable("ignored when PreFilter failed"));
        let e = FitError {
            pod: "p".into(),
            num_all_nodes: 3,
            diagnosis: d,
        };
        assert_eq!(
            e.to_string(),
            "0/3 nodes are available: node(s) didn't satisfy plugin A."
        );
        assert_eq!(
            ScheduleError::NoNodesAvailable.to_string(),
            "no nodes available to schedule pods"
        );
    }
}
