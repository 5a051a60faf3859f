//! The chart's alerts and Grafana dashboard (README "Monitoring"): the PrometheusRule passes
//! `promtool check rules` and the unit tests of tests/monitoring/alerts_test.yaml (`promtool test
//! rules`, Debian's prometheus package, `hack/install-prometheus.sh`), every alert has a test,
//! every metric the rules and the dashboard query is one the scheduler or the operator declares
//! (`ksched::operator::metric_families`), and the README lists every alert and panel.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use promql_parser::parser::{Expr, parse};
use promql_parser::util::{ExprVisitor, walk_expr};
use serde_json::Value;

use support::helm::template;
use support::repo_root;

const NS: &str = "monitoring-test";

/// The PrometheusRule the chart renders with the alerts on (and its defaults otherwise).
fn prometheus_rule() -> Value {
    let docs = template(NS, &["metrics.prometheusRule.enabled=true"]);
    docs.into_iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .expect("metrics.prometheusRule.enabled renders a PrometheusRule")
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(repo_root().join("charts/ksched/dashboards/ksched.json"))
        .expect("charts/ksched/dashboards/ksched.json");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Every alerting rule of the PrometheusRule: (alert name, expression).
fn alerts(rule: &Value) -> Vec<(String, String)> {
    rule["spec"]["groups"]
        .as_array()
        .expect("spec.groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .map(|r| {
            (
                r["alert"].as_str().expect("every rule alerts").to_string(),
                r["expr"].as_str().expect("expr").to_string(),
            )
        })
        .collect()
}

/// Every panel of the dashboard but rows: (title, queries).
fn panels(dashboard: &Value) -> Vec<(String, Vec<String>)> {
    dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .filter(|p| p["type"] != "row")
        .map(|p| {
            let queries = p["targets"]
                .as_array()
                .map(|t| {
                    t.iter()
                        .filter_map(|t| t["expr"].as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            (p["title"].as_str().expect("title").to_string(), queries)
        })
        .collect()
}

fn promtool(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("promtool")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run promtool (hack/install-prometheus.sh installs it; make testenv runs that)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {}:\n{text}", args.join(" "));
    text
}

#[test]
fn promtool_checks_the_rules_and_runs_a_unit_test_per_alert() {
    let rule = prometheus_rule();
    let dir = tempfile::tempdir().expect("temp dir");
    let rules = serde_saphyr::to_string(&rule["spec"]).expect("rules as YAML");
    std::fs::write(dir.path().join("rules.yaml"), rules).expect("write rules.yaml");
    let tests = std::fs::read_to_string(repo_root().join("tests/monitoring/alerts_test.yaml"))
        .expect("tests/monitoring/alerts_test.yaml");
    std::fs::write(dir.path().join("alerts_test.yaml"), &tests).expect("copy the unit tests");

    promtool(dir.path(), &["check", "rules", "rules.yaml"]);
    promtool(dir.path(), &["test", "rules", "alerts_test.yaml"]);

    // Each alert has a test case in which it fires.
    let cases: Value = serde_saphyr::from_str(&tests).expect("the unit tests are YAML");
    let firing: BTreeSet<String> = cases["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()))
        .filter_map(|c| c["alertname"].as_str().map(String::from))
        .collect();
    let untested: Vec<String> = alerts(&rule)
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| !firing.contains(name))
        .collect();
    assert!(
        untested.is_empty(),
        "alerts without a test case where they fire in tests/monitoring/alerts_test.yaml: {untested:?}"
    );
}

#[test]
fn the_chart_ships_rules_and_dashboard_only_when_asked() {
    let docs = template(NS, &[]);
    assert!(
        !docs
            .iter()
            .any(|d| d["kind"] == "PrometheusRule" || d["kind"] == "ConfigMap"),
        "off by default"
    );
    let docs = template(
        NS,
        &[
            "metrics.grafanaDashboard.enabled=true",
            "metrics.grafanaDashboard.namespace=grafana",
            "metrics.prometheusRule.enabled=true",
            "metrics.prometheusRule.labels.release=kube-prometheus-stack",
            "metrics.prometheusRule.schedulingSliP99Seconds=3",
        ],
    );
    let cm = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap")
        .expect("dashboard ConfigMap");
    assert_eq!(cm["metadata"]["namespace"], "grafana");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: Value =
        serde_json::from_str(cm["data"]["ksched.json"].as_str().expect("ksched.json"))
            .expect("the ConfigMap carries the dashboard JSON");
    assert_eq!(json, dashboard());
    let rule = docs
        .iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .expect("PrometheusRule");
    assert_eq!(
        rule["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    let sli = alerts(rule)
        .into_iter()
        .find(|(name, _)| name == "KschedSchedulingSLIHigh")
        .expect("KschedSchedulingSLIHigh");
    assert!(sli.1.ends_with("> 3"), "{}", sli.1);
}

/// Metric names a PromQL expression reads.
fn metric_names(query: &str) -> Result<BTreeSet<String>, String> {
    struct Names(BTreeSet<String>);
    impl ExprVisitor for Names {
        type Error = String;
        fn pre_visit(&mut self, expr: &Expr) -> Result<bool, String> {
            let selector = match expr {
                Expr::VectorSelector(vs) => Some(vs),
                Expr::MatrixSelector(ms) => Some(&ms.vs),
                _ => None,
            };
            if let Some(vs) = selector {
                let name = vs
                    .name
                    .clone()
                    .ok_or_else(|| format!("a selector without a metric name: {vs}"))?;
                self.0.insert(name);
            }
            Ok(true)
        }
    }
    // Grafana's variables, as Grafana substitutes them.
    let query = query
        .replace("$__rate_interval", "5m")
        .replace("$job", "ksched-.+");
    let expr = parse(&query)?;
    let mut names = Names(BTreeSet::new());
    walk_expr(&mut names, &expr)?;
    Ok(names.0)
}

/// The sample names of every family the scheduler and the operator declare (those without
/// samples yet included): counters `_total`, histograms `_bucket`, `_sum` and `_count`, gauges
/// their own name.
fn exported() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (name, kind) in ksched::operator::metric_families() {
        let suffixes: &[&str] = match kind.as_str() {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            "info" => &["_info"],
            _ => &[""],
        };
        names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    assert!(
        names.contains("scheduler_schedule_attempts_total")
            && names.contains("controller_runtime_reconcile_errors_total")
            && names.contains("ksched_scheduler_profile_ready"),
        "the families were not read right: {names:?}"
    );
    names
}

#[test]
fn every_metric_the_alerts_and_dashboard_query_is_exported() {
    let exported = exported();
    let mut queries: Vec<(String, String)> = alerts(&prometheus_rule())
        .into_iter()
        .map(|(name, expr)| (format!("alert {name}"), expr))
        .collect();
    for (title, targets) in panels(&dashboard()) {
        assert!(!targets.is_empty(), "panel {title:?} has no query");
        queries.extend(targets.into_iter().map(|q| (format!("panel {title:?}"), q)));
    }
    let mut unknown = Vec::new();
    for (what, query) in &queries {
        let names = metric_names(query).unwrap_or_else(|e| panic!("{what}: {query}: {e}"));
        assert!(!names.is_empty(), "{what} queries no metric: {query}");
        for name in names.difference(&exported) {
            unknown.push(format!("{what}: {name}"));
        }
    }
    assert!(
        unknown.is_empty(),
        "metrics neither the scheduler nor the operator exports:\n{}",
        unknown.join("\n")
    );
    // The check itself can fail: a misspelt name is caught.
    let misspelt = metric_names("rate(scheduler_schedule_attempt_total[5m])").expect("parses");
    assert!(misspelt.difference(&exported).next().is_some());
}

#[test]
fn the_readme_lists_every_alert_and_panel() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let section = readme
        .split("\n## Monitoring\n")
        .nth(1)
        .map(|rest| rest.split("\n## ").next().unwrap_or(rest))
        .expect("README has a \"## Monitoring\" section");
    let mut missing = Vec::new();
    for (alert, _) in alerts(&prometheus_rule()) {
        if !section.contains(&format!("`{alert}`")) {
            missing.push(format!("alert `{alert}`"));
        }
    }
    for (title, _) in panels(&dashboard()) {
        if !section.contains(&format!("**{title}**")) {
            missing.push(format!("panel **{title}**"));
        }
    }
    assert!(
        missing.is_empty(),
        "README \"Monitoring\" does not list: {missing:?}"
    );
}
