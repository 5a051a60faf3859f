//! What a simulation found, and how it is printed: a table for people, JSON or YAML for tools.
//!
//! The JSON/YAML schema (`apiVersion: ksched.io/v1alpha1`, `kind: SimulationReport`):
//!
//! ```yaml
//! mode: Pending | Reschedule | Explain
//! profiles: [scheduler names simulated]
//! nodes: 5                       # nodes in the snapshot
//! warnings: [...]                # what the simulation could not model (empty when none)
//! summary:
//!   pods: 4                      # pods simulated
//!   scheduled: 2
//!   unschedulable: 1             # no node fits and preemption cannot help
//!   wouldPreempt: 1              # no node fits, preemption would make room (victims below)
//!   waiting: 0                   # held at Permit (a gang that never completes)
//!   gated: 0                     # kept out of the queue by a PreEnqueue plugin (scheduling gates)
//!   errors: 0                    # a plugin failed
//!   onHostNodes: 2               # scheduled pods on host / leaf nodes; only when the cluster has leaf nodes
//!   onLeafNodes: 0
//! pods:                          # in the order the scheduler would take them
//! - namespace: default
//!   name: web-1
//!   schedulerName: my-profile
//!   result: Scheduled            # or Unschedulable, WouldPreempt, Waiting, Gated, Error
//!   node: node-3                 # null unless Scheduled
//!   message: ""                  # the FailedScheduling event text otherwise
//!   preemption:                  # WouldPreempt only
//!     node: node-2
//!     victims: [default/batch-7]
//!   nodeReasons:                 # not Scheduled: every node, the plugin that rejected the pod there
//!   - {node: node-1, plugin: NodeResourcesFit, reasons: [Insufficient cpu]}
//! explain:                       # Explain only
//!   pod: default/web-1
//!   preFilter: [{plugin: NodeResourcesFit, code: Success}]
//!   nodes:
//!   - node: node-1
//!     feasible: true
//!     filters: [{plugin: NodeUnschedulable, code: Success}, ...]
//!     scores: [{plugin: NodeResourcesFit, score: 87, weight: 1, weighted: 87}, ...]
//!     totalScore: 310
//! explainGroup:                  # Explain of a PodGroup (`--explain podgroup/NAMESPACE/NAME`) only
//!   group: default/training
//!   policy: gang (minCount 8)    # or basic
//!   placement: every node        # the nodes the group was tried on (no topology constraint)
//!   result: Unschedulable        # its PodGroupInitiallyScheduled condition: Scheduled, Unschedulable, SchedulerError
//!   message: "minCount (8) cannot be satisfied: 4 scheduled, 3 remaining, ..."
//!   members:                     # in the order the group cycle tried them
//!   - {pod: default/training-0, node: null, message: "pod group is unschedulable, ..."}
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::framework::interface::Status;

/// Which question the simulation answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Mode {
    /// Where the pending pods go.
    Pending,
    /// Where running pods would go on an empty cluster.
    Reschedule,
    /// Every plugin's verdict for one pod, or what became of each member of one PodGroup.
    Explain,
}

/// What the group cycle made of one PodGroup: its result as its condition would say it, and
/// each member's node or reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupExplanation {
    pub group: String,
    pub policy: String,
    pub placement: String,
    pub result: String,
    pub message: String,
    pub members: Vec<MemberExplanation>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberExplanation {
    pub pod: String,
    pub node: Option<String>,
    pub message: String,
}

/// What became of one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Outcome {
    Scheduled,
    Unschedulable,
    WouldPreempt,
    Waiting,
    Gated,
    Error,
}

impl Outcome {
    /// The pod would stay Pending (what `--fail-on-pending` fails on). A preemptor gets its node
    /// once the victims are gone; a gated pod waits for whoever set its gates.
    pub fn stays_pending(self) -> bool {
        matches!(
            self,
            Outcome::Unschedulable | Outcome::Waiting | Outcome::Error
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Preemption {
    pub node: String,
    /// `namespace/name` of the pods that would be evicted.
    pub victims: Vec<String>,
}

/// Why one node does not fit a pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeReason {
    pub node: String,
    /// The plugin that rejected the pod there (empty when the node was not evaluated).
    pub plugin: String,
    pub reasons: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodResult {
    pub namespace: String,
    pub name: String,
    pub scheduler_name: String,
    pub result: Outcome,
    pub node: Option<String>,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemption: Option<Preemption>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub node_reasons: Vec<NodeReason>,
}

impl PodResult {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub pods: usize,
    pub scheduled: usize,
    pub unschedulable: usize,
    pub would_preempt: usize,
    pub waiting: usize,
    pub gated: usize,
    pub errors: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_host_nodes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_leaf_nodes: Option<usize>,
}

/// A plugin's status at one extension point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PluginStatus {
    pub plugin: String,
    /// `Success`, `Unschedulable`, `UnschedulableAndUnresolvable`, `Skip`, `Error`, ...
    pub code: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

impl PluginStatus {
    pub fn new(plugin: &str, status: &Status) -> PluginStatus {
        PluginStatus {
            plugin: plugin.to_string(),
            code: status.code().as_str().to_string(),
            reasons: status.reasons().to_vec(),
        }
    }

    fn passed(&self) -> bool {
        self.code == "Success" || self.code == "Skip"
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PluginScore {
    pub plugin: String,
    /// The normalized score, 0..=100.
    pub score: i64,
    pub weight: i64,
    pub weighted: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeExplanation {
    pub node: String,
    pub feasible: bool,
    pub filters: Vec<PluginStatus>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scores: Vec<PluginScore>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_score: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub pod: String,
    pub pre_filter: Vec<PluginStatus>,
    pub nodes: Vec<NodeExplanation>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub api_version: String,
    pub kind: String,
    pub mode: Mode,
    pub profiles: Vec<String>,
    /// The minor whose kube-scheduler was emulated (`1.36`).
    pub kubernetes_version: String,
    pub nodes: usize,
    pub warnings: Vec<String>,
    pub summary: Summary,
    pub pods: Vec<PodResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<Explanation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain_group: Option<GroupExplanation>,
}

/// Node names listed per rejection in the table before "(+N more)".
const NODES_SHOWN: usize = 5;

impl Report {
    /// Whether some pod would stay Pending.
    pub fn has_pending(&self) -> bool {
        self.pods.iter().any(|p| p.result.stays_pending())
    }

    /// The table (warnings are for stderr): one row per pod; for a pod that does not get a node,
    /// its message and the rejecting plugins with the nodes they rejected; then the summary (and,
    /// in Explain mode, every plugin's verdict per node).
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let rows: Vec<[String; 5]> = self
            .pods
            .iter()
            .map(|p| {
                [
                    p.namespace.clone(),
                    p.name.clone(),
                    p.node.clone().unwrap_or_else(|| "<none>".into()),
                    format!("{:?}", p.result),
                    p.message.clone(),
                ]
            })
            .collect();
        let header = ["NAMESPACE", "NAME", "NODE", "RESULT", "MESSAGE"];
        let mut widths = header.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row).take(4) {
                *w = (*w).max(cell.len());
            }
        }
        let line = |cells: [&str; 5]| {
            let mut l = String::new();
            for (i, cell) in cells.iter().enumerate() {
                if i < 4 {
                    let _ = write!(l, "{cell:<w$}  ", w = widths[i]);
                } else {
                    l.push_str(cell);
                }
            }
            l.trim_end().to_string()
        };
        let _ = writeln!(out, "{}", line(header));
        for (row, pod) in rows.iter().zip(&self.pods) {
            let _ = writeln!(
                out,
                "{}",
                line([&row[0], &row[1], &row[2], &row[3], &row[4]])
            );
            if let Some(p) = &pod.preemption {
                let _ = writeln!(
                    out,
                    "    would preempt on {}: {}",
                    p.node,
                    p.victims.join(", ")
                );
            }
            for (what, nodes) in group_reasons(&pod.node_reasons) {
                let more = nodes.len().saturating_sub(NODES_SHOWN);
                let shown = nodes[..nodes.len().min(NODES_SHOWN)].join(", ");
                let more = if more > 0 {
                    format!(" (+{more} more)")
                } else {
                    String::new()
                };
                let _ = writeln!(out, "    {what}: {shown}{more}");
            }
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "{}", self.summary_line());
        if let Some(e) = &self.explain {
            out.push_str(&explain_table(e));
        }
        if let Some(g) = &self.explain_group {
            out.push_str(&group_table(g));
        }
        out
    }

    fn summary_line(&self) -> String {
        let s = &self.summary;
        let mut parts = vec![format!("{} scheduled", s.scheduled)];
        for (n, what) in [
            (s.unschedulable, "unschedulable"),
            (s.would_preempt, "would preempt"),
            (s.waiting, "waiting at Permit"),
            (s.gated, "gated"),
            (s.errors, "failed"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        let mut line = format!(
            "{} pod(s) on {} node(s): {}",
            s.pods,
            self.nodes,
            parts.join(", ")
        );
        if let (Some(host), Some(leaf)) = (s.on_host_nodes, s.on_leaf_nodes) {
            let _ = write!(line, "; on host nodes: {host}, on leaf nodes: {leaf}");
        }
        let _ = write!(line, " (as kube-scheduler {})", self.kubernetes_version);
        line
    }
}

/// `(plugin: reasons)` -> the nodes it rejected, most nodes first.
fn group_reasons(reasons: &[NodeReason]) -> Vec<(String, Vec<&str>)> {
    let mut groups: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for r in reasons {
        let what = match r.plugin.as_str() {
            "" => r.reasons.join("; "),
            p => format!("{p}: {}", r.reasons.join("; ")),
        };
        groups.entry(what).or_default().push(&r.node);
    }
    let mut out: Vec<(String, Vec<&str>)> = groups.into_iter().collect();
    out.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
    out
}

fn status_text(s: &PluginStatus) -> String {
    if s.reasons.is_empty() {
        s.code.clone()
    } else {
        format!("{}: {}", s.code, s.reasons.join("; "))
    }
}

fn group_table(g: &GroupExplanation) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nPodGroup {} ({}), tried on {}:",
        g.group, g.policy, g.placement
    );
    let _ = writeln!(out, "  {}: {}", g.result, g.message);
    for m in &g.members {
        match &m.node {
            Some(node) => {
                let _ = writeln!(out, "  {:<40} {node}", m.pod);
            }
            None => {
                let _ = writeln!(out, "  {:<40} not placed: {}", m.pod, m.message);
            }
        }
    }
    out
}

fn explain_table(e: &Explanation) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "\nPreFilter for {}:", e.pod);
    for s in &e.pre_filter {
        let _ = writeln!(out, "  {:<32} {}", s.plugin, status_text(s));
    }
    for n in &e.nodes {
        let verdict = match (n.feasible, n.total_score) {
            (true, Some(t)) => format!("feasible, score {t}"),
            (true, None) => "feasible".into(),
            (false, _) => "rejected".into(),
        };
        let _ = writeln!(out, "\nnode {}: {verdict}", n.node);
        for f in &n.filters {
            let mark = if f.passed() { " " } else { "x" };
            let _ = writeln!(out, "  {mark} Filter {:<32} {}", f.plugin, status_text(f));
        }
        for s in &n.scores {
            let _ = writeln!(
                out,
                "    Score  {:<32} {:>3} x {} = {}",
                s.plugin, s.score, s.weight, s.weighted
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, result: Outcome, node: Option<&str>) -> PodResult {
        PodResult {
            namespace: "default".into(),
            name: name.into(),
            scheduler_name: "p".into(),
            result,
            node: node.map(String::from),
            message: String::new(),
            preemption: None,
            node_reasons: Vec::new(),
        }
    }

    #[test]
    fn table_groups_rejections_and_summarizes() {
        let mut big = pod("big", Outcome::Unschedulable, None);
        big.message = "0/7 nodes are available: 7 Insufficient cpu.".into();
        big.node_reasons = (1..=7)
            .map(|i| NodeReason {
                node: format!("n{i}"),
                plugin: "NodeResourcesFit".into(),
                reasons: vec!["Insufficient cpu".into()],
            })
            .collect();
        let mut pre = pod("pre", Outcome::WouldPreempt, None);
        pre.preemption = Some(Preemption {
            node: "n2".into(),
            victims: vec!["default/low".into()],
        });
        let report = Report {
            api_version: "ksched.io/v1alpha1".into(),
            kind: "SimulationReport".into(),
            mode: Mode::Pending,
            profiles: vec!["p".into()],
            kubernetes_version: "1.36".into(),
            nodes: 7,
            warnings: vec![],
            summary: Summary {
                pods: 3,
                scheduled: 1,
                unschedulable: 1,
                would_preempt: 1,
                on_host_nodes: Some(1),
                on_leaf_nodes: Some(0),
                ..Summary::default()
            },
            pods: vec![pod("web", Outcome::Scheduled, Some("n1")), big, pre],
            explain: None,
            explain_group: None,
        };
        let table = report.to_table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "NAMESPACE  NAME  NODE    RESULT         MESSAGE");
        assert_eq!(lines[1], "default    web   n1      Scheduled");
        assert_eq!(
            lines[2],
            "default    big   <none>  Unschedulable  0/7 nodes are available: 7 Insufficient cpu."
        );
        assert_eq!(
            lines[3],
            "    NodeResourcesFit: Insufficient cpu: n1, n2, n3, n4, n5 (+2 more)"
        );
        assert_eq!(lines[5], "    would preempt on n2: default/low");
        assert!(
            table.contains("3 pod(s) on 7 node(s): 1 scheduled, 1 unschedulable, 1 would preempt; on host nodes: 1, on leaf nodes: 0 (as kube-scheduler 1.36)"),
            "{table}"
        );
        assert!(report.has_pending());
        let json = serde_json::to_value(&report).expect("json");
        assert_eq!(json["pods"][0]["node"], "n1");
        assert_eq!(json["pods"][1]["node"], serde_json::Value::Null);
        assert_eq!(
            json["pods"][1]["nodeReasons"][0]["plugin"],
            "NodeResourcesFit"
        );
        assert_eq!(json["summary"]["wouldPreempt"], 1);
        assert!(json["pods"][0].get("nodeReasons").is_none());
    }
}
