//! Compares ksched's observation of a case with upstream's, and writes the per-family report.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::cases::Case;
use crate::cluster::Observation;

/// One compared aspect: agreed, disagreed, or not comparable (upstream itself varied between runs,
/// or the aspect does not apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Agree,
    Disagree,
    /// Upstream gave different answers on the same state.
    Nondeterministic,
}

pub const ASPECTS: [&str; 5] = ["outcome", "node", "message", "nominated", "preemption"];

/// The comparison of one case.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub family: &'static str,
    pub case: String,
    /// Per aspect of [`ASPECTS`].
    pub marks: [Mark; 5],
    /// What differed, for the report.
    pub details: Vec<String>,
}

impl Verdict {
    pub fn agrees(&self) -> bool {
        !self.marks.contains(&Mark::Disagree)
    }
}

/// The values of each aspect for one observation, in [`ASPECTS`] order, as comparable strings.
fn aspects(o: &Observation) -> [String; 5] {
    let per_pod = |f: &dyn Fn(&crate::cluster::PodOutcome) -> String| {
        o.pods.iter().map(f).collect::<Vec<_>>().join(" | ")
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
    ]
}

/// Compares `ksched` with `upstream` (one or more runs of upstream on the same state: an aspect on
/// which those runs differ is not compared).
pub fn compare(case: &Case, upstream: &[Observation], ksched: &Observation) -> Verdict {
    let theirs: Vec<[String; 5]> = upstream.iter().map(aspects).collect();
    let ours = aspects(ksched);
    let mut marks = [Mark::Agree; 5];
    let mut details = Vec::new();
    for (i, name) in ASPECTS.iter().enumerate() {
        let reference = &theirs[0][i];
        if theirs.iter().any(|t| &t[i] != reference) {
            marks[i] = Mark::Nondeterministic;
            continue;
        }
        if &ours[i] != reference {
            marks[i] = Mark::Disagree;
            details.push(format!(
                "{name}:\n      upstream: {reference}\n      ksched:   {}",
                ours[i]
            ));
        }
    }
    Verdict {
        family: case.family,
        case: case.name.clone(),
        marks,
        details,
    }
}

/// The report: one row per family, the total, every disagreement, and one summary line (last).
pub fn render(verdicts: &[Verdict], elapsed: std::time::Duration) -> String {
    let mut families: BTreeMap<&str, Vec<&Verdict>> = BTreeMap::new();
    for v in verdicts {
        families.entry(v.family).or_default().push(v);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16} {:>5}  {}",
        "family",
        "cases",
        ASPECTS.map(|a| format!("{a:>17}")).join(" ")
    );
    let row = |out: &mut String, name: &str, vs: &[&Verdict]| {
        let cells: Vec<String> = (0..ASPECTS.len())
            .map(|i| {
                let agree = vs.iter().filter(|v| v.marks[i] == Mark::Agree).count();
                let nd = vs
                    .iter()
                    .filter(|v| v.marks[i] == Mark::Nondeterministic)
                    .count();
                let compared = vs.len() - nd;
                let cell = if nd > 0 {
                    format!("{agree}/{compared} ({nd} nd)")
                } else {
                    format!("{agree}/{compared}")
                };
                format!("{cell:>17}")
            })
            .collect();
        let _ = writeln!(out, "{name:<16} {:>5}  {}", vs.len(), cells.join(" "));
    };
    for (name, vs) in &families {
        row(&mut out, name, vs);
    }
    let all: Vec<&Verdict> = verdicts.iter().collect();
    row(&mut out, "TOTAL", &all);
    let _ = writeln!(
        out,
        "(nd: upstream itself varied between runs; not compared)"
    );
    let disagreeing: Vec<&Verdict> = verdicts.iter().filter(|v| !v.agrees()).collect();
    for v in &disagreeing {
        let _ = writeln!(out, "\nDISAGREE {}:", v.case);
        for d in &v.details {
            let _ = writeln!(out, "  {d}");
        }
    }
    let pct = |i: usize| {
        let compared = all
            .iter()
            .filter(|v| v.marks[i] != Mark::Nondeterministic)
            .count();
        let agree = all.iter().filter(|v| v.marks[i] == Mark::Agree).count();
        if compared == 0 {
            "n/a".to_string()
        } else {
            format!("{:.1} %", 100.0 * agree as f64 / compared as f64)
        }
    };
    let _ = writeln!(
        out,
        "\nfidelity: {} cases in {:.0?}; {}; {} disagreeing",
        all.len(),
        elapsed,
        ASPECTS
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{a} {}", pct(i)))
            .collect::<Vec<_>>()
            .join(", "),
        disagreeing.len()
    );
    out
}
