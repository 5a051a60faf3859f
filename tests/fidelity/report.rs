//! Compares ksched's observation of a case with upstream's, and writes the per-family report.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::cases::Case;
use crate::cluster::Observation;

/// One compared aspect: ksched's answer is one of upstream's (over its runs on the same state), or
/// not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Agree,
    Disagree,
}

pub const ASPECTS: [&str; 6] = [
    "outcome",
    "node",
    "message",
    "nominated",
    "preemption",
    "group",
];

/// The comparison of one case.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub family: &'static str,
    pub case: String,
    /// Per aspect of [`ASPECTS`].
    pub marks: [Mark; ASPECTS.len()],
    /// Per aspect: upstream's own runs gave different answers (nondeterministic on this state).
    pub varied: [bool; ASPECTS.len()],
    /// What differed, for the report.
    pub details: Vec<String>,
}

impl Verdict {
    pub fn agrees(&self) -> bool {
        !self.marks.contains(&Mark::Disagree)
    }

    /// Upstream's runs differed on some aspect.
    pub fn nondeterministic(&self) -> bool {
        self.varied.contains(&true)
    }
}

/// The values of each aspect for one observation, in [`ASPECTS`] order, as comparable strings.
/// A group's members are identical pods (the generator makes them so): upstream hands them the
/// group's nodes in any order, so each aspect lists them sorted within their group; the nodes,
/// messages and nominations the group got are the answer, not which member got which.
fn aspects(o: &Observation) -> [String; ASPECTS.len()] {
    let per_pod = |f: &dyn Fn(&crate::cluster::PodOutcome) -> String| {
        let mut values: Vec<String> = o.pods.iter().map(f).collect();
        for members in &o.members {
            if let Some(group) = values.get_mut(members.clone()) {
                group.sort();
            }
        }
        values.join(" | ")
    };
    [
        per_pod(&|p| {
            match (&p.node, p.nominated.is_empty(), p.timed_out) {
                (Some(_), _, _) => "bound",
                (None, _, true) => "no answer",
                (None, false, _) => "nominated, not bound",
                (None, true, _) => "unschedulable",
            }
            .to_string()
        }),
        format!(
            "{} claims {:?}",
            per_pod(&|p| p.node.clone().unwrap_or_else(|| "-".into())),
            o.selected_nodes
        ),
        per_pod(&|p| format!("{:?}", p.messages)),
        per_pod(&|p| format!("{:?}", p.nominated)),
        format!("{:?}", o.deleted),
        format!("{:?}", o.groups),
    ]
}

/// Compares `ksched` with `upstream` (one or more runs of upstream on the same state): an aspect
/// agrees when ksched's answer is one of the answers upstream gave in its runs; one on which those
/// runs differ is marked nondeterministic (and still compared so).
pub fn compare(case: &Case, upstream: &[Observation], ksched: &Observation) -> Verdict {
    let theirs: Vec<[String; ASPECTS.len()]> = upstream.iter().map(aspects).collect();
    let ours = aspects(ksched);
    let mut marks = [Mark::Agree; ASPECTS.len()];
    let mut varied = [false; ASPECTS.len()];
    let mut details = Vec::new();
    for (i, name) in ASPECTS.iter().enumerate() {
        let mut answers: Vec<&String> = theirs.iter().map(|t| &t[i]).collect();
        answers.sort();
        answers.dedup();
        varied[i] = answers.len() > 1;
        if !answers.contains(&&ours[i]) {
            marks[i] = Mark::Disagree;
            let upstream = answers
                .iter()
                .map(|a| a.as_str())
                .collect::<Vec<_>>()
                .join("\n           or: ");
            details.push(format!(
                "{name}:\n      upstream: {upstream}\n      ksched:   {}",
                ours[i]
            ));
        }
    }
    Verdict {
        family: case.family,
        case: case.name.clone(),
        marks,
        varied,
        details,
    }
}

/// The report: one row per family, the total, every disagreement, and one summary line (last).
pub fn render(
    verdicts: &[Verdict],
    elapsed: std::time::Duration,
    upstream_version: &str,
) -> String {
    let mut families: BTreeMap<&str, Vec<&Verdict>> = BTreeMap::new();
    for v in verdicts {
        families.entry(v.family).or_default().push(v);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16} {:>5}  {} {:>7}",
        "family",
        "cases",
        ASPECTS.map(|a| format!("{a:>11}")).join(" "),
        "nondet"
    );
    let row = |out: &mut String, name: &str, vs: &[&Verdict]| {
        let cells: Vec<String> = (0..ASPECTS.len())
            .map(|i| {
                let agree = vs.iter().filter(|v| v.marks[i] == Mark::Agree).count();
                format!("{:>11}", format!("{agree}/{}", vs.len()))
            })
            .collect();
        let nondet = vs.iter().filter(|v| v.nondeterministic()).count();
        let _ = writeln!(
            out,
            "{name:<16} {:>5}  {} {nondet:>7}",
            vs.len(),
            cells.join(" ")
        );
    };
    for (name, vs) in &families {
        row(&mut out, name, vs);
    }
    let all: Vec<&Verdict> = verdicts.iter().collect();
    row(&mut out, "TOTAL", &all);
    let _ = writeln!(
        out,
        "(an aspect agrees when ksched's answer is one of upstream's over its runs on the same state; nondet: cases on which upstream's own runs differed)"
    );
    let disagreeing: Vec<&Verdict> = verdicts.iter().filter(|v| !v.agrees()).collect();
    for v in &disagreeing {
        let _ = writeln!(out, "\nDISAGREE {}:", v.case);
        for d in &v.details {
            let _ = writeln!(out, "  {d}");
        }
    }
    let pct = |i: usize| {
        let agree = all.iter().filter(|v| v.marks[i] == Mark::Agree).count();
        if all.is_empty() {
            "n/a".to_string()
        } else {
            format!("{:.1} %", 100.0 * agree as f64 / all.len() as f64)
        }
    };
    let nondet: Vec<String> = families
        .iter()
        .filter_map(|(name, vs)| {
            let n = vs.iter().filter(|v| v.nondeterministic()).count();
            (n > 0).then(|| format!("{name} {n}"))
        })
        .collect();
    let _ = writeln!(
        out,
        "\nfidelity: {} cases in {:.0?} against {}; {}; {} disagreeing; nondeterministic upstream: {}",
        all.len(),
        elapsed,
        upstream_version,
        ASPECTS
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{a} {}", pct(i)))
            .collect::<Vec<_>>()
            .join(", "),
        disagreeing.len(),
        if nondet.is_empty() {
            "none".to_string()
        } else {
            format!(
                "{} cases ({})",
                all.iter().filter(|v| v.nondeterministic()).count(),
                nondet.join(", ")
            )
        }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::PodOutcome;

    fn bound(nodes: &[&str], group: Option<std::ops::Range<usize>>) -> Observation {
        Observation {
            pods: nodes
                .iter()
                .map(|n| PodOutcome {
                    node: Some(n.to_string()),
                    ..PodOutcome::default()
                })
                .collect(),
            members: group.into_iter().collect(),
            ..Observation::default()
        }
    }

    /// The members of a group may take its nodes in any order; a pod outside a group (or a
    /// group's different nodes) may not.
    #[test]
    fn a_groups_members_compare_as_the_nodes_the_group_got() {
        let case = Case {
            family: "groups",
            name: "groups-000".into(),
            objects: Vec::new(),
            incoming: Vec::new(),
        };
        let upstream = [bound(&["w", "n0", "n1", "n1"], Some(1..4))];
        let node = |v: &Verdict| v.marks[1];
        let swapped = bound(&["w", "n1", "n0", "n1"], Some(1..4));
        assert_eq!(node(&compare(&case, &upstream, &swapped)), Mark::Agree);
        let other_nodes = bound(&["w", "n0", "n0", "n1"], Some(1..4));
        assert_eq!(
            node(&compare(&case, &upstream, &other_nodes)),
            Mark::Disagree
        );
        let alone = [bound(&["n0", "n1"], None)];
        let swapped_alone = bound(&["n1", "n0"], None);
        assert_eq!(
            node(&compare(&case, &alone, &swapped_alone)),
            Mark::Disagree
        );
    }
}
