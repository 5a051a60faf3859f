//! `ksched render -f FILE...`: the operator's objects for the profiles in the files, with no cluster.

use std::path::PathBuf;

use kube::ResourceExt;

use super::render::{self, RenderOptions};
use crate::api::validate::validate;
use crate::api::{LeafClusterPolicy, SchedulerProfile};
use crate::config::PluginCatalog;
use crate::operator::leaf_render::validate_policy;

/// What a run of `ksched render` printed, and its exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RenderOutput {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// A file as read: its name (for messages) and its text.
pub struct Input {
    pub name: String,
    pub text: String,
}

/// Reads `paths` (`-` is stdin) and renders them; an unreadable file is an error line.
pub(crate) fn render_paths(
    paths: &[PathBuf],
    opts: &RenderOptions,
    catalog: &dyn PluginCatalog,
) -> RenderOutput {
    let mut inputs = Vec::new();
    let mut stderr = String::new();
    for p in paths {
        let read = if p.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin())
        } else {
            std::fs::read_to_string(p)
        };
        match read {
            Ok(text) => inputs.push(Input {
                name: p.display().to_string(),
                text,
            }),
            Err(e) => stderr.push_str(&format!("error: {}: {e}\n", p.display())),
        }
    }
    if !stderr.is_empty() {
        return RenderOutput {
            code: 1,
            stdout: String::new(),
            stderr,
        };
    }
    render_inputs(&inputs, opts, catalog)
}

/// The SchedulerProfiles (with the file each came from) and LeafClusterPolicies in `inputs`
/// (multi-document YAML), and an `error: <path>: <reason>` line for anything else.
#[derive(Debug, Default)]
pub(crate) struct ParsedInputs {
    pub profiles: Vec<(String, SchedulerProfile)>,
    pub policies: Vec<LeafClusterPolicy>,
    pub errors: Vec<String>,
}

/// Sorts the documents of `inputs` into profiles and policies (`ksched render`, `ksched simulate`).
pub(crate) fn parse_inputs(inputs: &[Input]) -> ParsedInputs {
    let mut out = ParsedInputs::default();
    for input in inputs {
        let docs: Vec<serde_json::Value> = match serde_saphyr::from_multiple(&input.text) {
            Ok(d) => d,
            Err(e) => {
                out.errors
                    .push(format!("error: {}: not YAML: {e}", input.name));
                continue;
            }
        };
        for (i, doc) in docs.into_iter().enumerate() {
            if doc.is_null() {
                continue;
            }
            let kind = doc
                .get("kind")
                .and_then(|k| k.as_str())
                .unwrap_or("")
                .to_string();
            let at = format!("{} (document {})", input.name, i + 1);
            let mut doc = doc;
            if let ("SchedulerProfile" | "LeafClusterPolicy", Err(errors)) =
                (kind.as_str(), validate(&kind, &mut doc))
            {
                // What `kubectl apply` would refuse, with the CRD's own schema and rules.
                let name = doc["metadata"]["name"].as_str().unwrap_or("(no name)");
                out.errors.push(format!(
                    "error: {at}: {kind} {name} is refused by its CRD ({} problem(s)):",
                    errors.len()
                ));
                out.errors
                    .extend(errors.iter().map(|e| format!("error:   {e}")));
                continue;
            }
            match kind.as_str() {
                "SchedulerProfile" => match serde_json::from_value::<SchedulerProfile>(doc) {
                    Ok(p) => out.profiles.push((input.name.clone(), p)),
                    Err(e) => out
                        .errors
                        .push(format!("error: {at}: not a valid SchedulerProfile: {e}")),
                },
                "LeafClusterPolicy" => match serde_json::from_value::<LeafClusterPolicy>(doc) {
                    Ok(p) => out.policies.push(p),
                    Err(e) => out
                        .errors
                        .push(format!("error: {at}: not a valid LeafClusterPolicy: {e}")),
                },
                other => out.errors.push(format!(
                    "error: {at}: kind {other:?} is not rendered: expected SchedulerProfile or LeafClusterPolicy"
                )),
            }
        }
    }
    out
}

/// Renders every SchedulerProfile in `inputs` (multi-document YAML), with the LeafClusterPolicies in
/// them: the objects as one YAML stream on stdout (exit 0), or `error: <path>: <reason>` lines on
/// stderr (exit 1) and nothing on stdout. Warnings go to stderr as `warning: ...` either way.
pub(crate) fn render_inputs(
    inputs: &[Input],
    opts: &RenderOptions,
    catalog: &dyn PluginCatalog,
) -> RenderOutput {
    let ParsedInputs {
        profiles,
        policies,
        errors,
    } = parse_inputs(inputs);
    let mut failed = !errors.is_empty();
    let mut stderr: String = errors.iter().map(|e| format!("{e}\n")).collect();
    if profiles.is_empty() && !failed {
        if policies.is_empty() {
            stderr.push_str("error: no SchedulerProfile or LeafClusterPolicy in the input\n");
            failed = true;
        } else {
            // A policy alone renders nothing of its own: it goes into the profiles it names.
            for policy in &policies {
                let problems = validate_policy(&policy.spec);
                if !problems.is_empty() {
                    failed = true;
                    for e in problems {
                        stderr.push_str(&format!(
                            "error: LeafClusterPolicy {}: {e}\n",
                            policy.name_any()
                        ));
                    }
                    continue;
                }
                stderr.push_str(&format!(
                    "LeafClusterPolicy {} is valid; it renders into the configuration of the profiles it names ({}): give them with -f to see it\n",
                    policy.name_any(),
                    policy.spec.profiles.join(", ")
                ));
            }
        }
    }
    let mut stdout = String::new();
    for (file, profile) in &profiles {
        match render::render(profile, &policies, opts, catalog) {
            Ok(r) => {
                for w in &r.warnings {
                    stderr.push_str(&format!("warning: {w}\n"));
                }
                // The operator leaves an invalid policy out and says so; here the input is wrong.
                for ignored in &r.ignored_policies {
                    stderr.push_str(&format!("error: {ignored}\n"));
                    failed = true;
                }
                match r.to_yaml() {
                    Ok(y) => stdout.push_str(&y),
                    Err(e) => {
                        stderr.push_str(&format!("error: {e}\n"));
                        failed = true;
                    }
                }
            }
            Err(invalid) => {
                failed = true;
                for w in &invalid.warnings {
                    stderr.push_str(&format!("warning: {w}\n"));
                }
                stderr.push_str(&format!(
                    "SchedulerProfile {:?} ({file}) is invalid:\n",
                    profile.name_any()
                ));
                for e in &invalid.errors {
                    stderr.push_str(&format!("error: {}: {}\n", e.path, e.reason));
                }
            }
        }
    }
    if failed {
        return RenderOutput {
            code: 1,
            stdout: String::new(),
            stderr,
        };
    }
    RenderOutput {
        code: 0,
        stdout,
        stderr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::registry::Registry;

    fn run(text: &str) -> RenderOutput {
        render_inputs(
            &[Input {
                name: "in.yaml".into(),
                text: text.into(),
            }],
            &RenderOptions {
                namespace: "ops".into(),
                image: "img:1".into(),
                cluster_minor: None,
            },
            &Registry::in_tree(),
        )
    }

    const PROFILE: &str =
        "apiVersion: ksched.io/v1alpha1\nkind: SchedulerProfile\nmetadata:\n  name: p\nspec: {}\n";

    #[test]
    fn renders_profiles_with_their_policies() {
        let out = run(&format!(
            "{PROFILE}---\napiVersion: ksched.io/v1alpha1\nkind: LeafClusterPolicy\nmetadata:\n  name: leaves\nspec:\n  profiles: [p]\n"
        ));
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert_eq!(out.stdout.matches("---\n").count(), 10);
        assert!(out.stdout.contains("namespace: ops"));
        assert!(out.stdout.contains("image: img:1"));
        assert!(!out.stdout.contains("ownerReferences"), "no uid offline");
    }

    const POLICY: &str = "apiVersion: ksched.io/v1alpha1\nkind: LeafClusterPolicy\nmetadata:\n  name: leaves\nspec:\n  profiles: [p]\n";

    #[test]
    fn an_invalid_policy_is_an_error_naming_its_field() {
        // What the CRD's rules refuse.
        let out = run(&format!("{PROFILE}---\n{POLICY}  leafNodeSelector: {{}}\n"));
        assert_eq!(out.code, 1);
        assert!(out.stdout.is_empty());
        assert!(
            out.stderr.contains(
                "error: in.yaml (document 2): LeafClusterPolicy leaves is refused by its CRD"
            ) && out.stderr.contains(
                "error:   spec: Invalid value: \"object\": leafNodeSelector: {} selects every node"
            ),
            "{}",
            out.stderr
        );
        // What only the operator checks: a selector operator the schema cannot know.
        let out = run(&format!(
            "{PROFILE}---\n{POLICY}  leafNodeSelector:\n    matchExpressions: [{{key: k, operator: Contains}}]\n"
        ));
        assert_eq!(out.code, 1);
        assert!(
            out.stderr.contains(
                "error: LeafClusterPolicy leaves: spec.leafNodeSelector.matchExpressions[0].operator"
            ),
            "{}",
            out.stderr
        );
    }

    #[test]
    fn a_policy_alone_is_checked_and_renders_nothing() {
        let out = run(POLICY);
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.stdout.is_empty());
        assert!(
            out.stderr.contains("LeafClusterPolicy leaves is valid; it renders into the configuration of the profiles it names (p)"),
            "{}",
            out.stderr
        );
        let out = run(&format!(
            "{POLICY}  leafNodeSelector:\n    matchExpressions: [{{key: k, operator: Contains}}]\n"
        ));
        assert_eq!(out.code, 1, "{}", out.stderr);
        assert!(
            out.stderr
                .contains("error: LeafClusterPolicy leaves: spec.leafNodeSelector.matchExpressions[0].operator"),
            "{}",
            out.stderr
        );
        let out = run(&format!("{POLICY}  placement: {{mode: Mix, weight: 3}}\n"));
        assert_eq!(out.code, 1);
        assert!(
            out.stderr.contains("spec.placement: Invalid value: \"object\": placement.weight only applies to mode PreferHost or PreferLeaf"),
            "{}",
            out.stderr
        );
    }

    /// The inputs the API server refuses are refused here too, each with its field.
    #[test]
    fn what_kubectl_apply_refuses_is_refused() {
        for (spec, field) in [
            ("plugin: {}", "spec.plugin: unknown field"),
            (
                "plugins: {score: {enabled: [{name: NodeResourcesFit, weight: 1000}]}}",
                "spec.plugins.score.enabled[0].weight: Invalid value: 1000",
            ),
            ("replicas: -1", "spec.replicas: Invalid value: -1"),
            ("mode: Embedded, replicas: 3", "spec: Invalid value"),
            ("image: ''", "spec.image: Invalid value"),
            ("image: 'ksched:::bad'", "spec.image: Invalid value"),
            ("logLevel: 11", "spec.logLevel: Invalid value: 11"),
            (
                "clientConnection: {qps: -5}",
                "spec.clientConnection.qps: Invalid value",
            ),
            (
                "clientConnection: {qps: 1e300}",
                "spec.clientConnection.qps: Invalid value",
            ),
            (
                "tolerations: [{key: k, operator: Contains}]",
                "spec.tolerations: Invalid value",
            ),
            (
                "resources: {limits: {cpu: '1 core'}}",
                "spec.resources.limits: Invalid value",
            ),
            (
                "leaderElection: {leaseDuration: 2562047h}",
                "spec.leaderElection.leaseDuration: Invalid value",
            ),
        ] {
            let text = format!(
                "apiVersion: ksched.io/v1alpha1\nkind: SchedulerProfile\nmetadata: {{name: p}}\nspec: {{{spec}}}\n"
            );
            let out = run(&text);
            assert_eq!(out.code, 1, "{spec}: accepted");
            assert!(out.stdout.is_empty(), "{spec}");
            assert!(out.stderr.contains(field), "{spec}: {}", out.stderr);
        }
    }

    #[test]
    fn invalid_profile_prints_errors_and_nothing_else() {
        let out = run(
            "kind: SchedulerProfile\nmetadata: {name: p}\nspec:\n  plugins:\n    filter:\n      enabled: [{name: NoSuchPlugin}]\n",
        );
        assert_eq!(out.code, 1);
        assert!(out.stdout.is_empty());
        assert!(
            out.stderr
                .lines()
                .any(|l| l.starts_with("error: spec.plugins.filter.enabled[0]")
                    && l.contains("NoSuchPlugin")),
            "{}",
            out.stderr
        );
    }

    #[test]
    fn other_kinds_and_garbage_are_errors() {
        assert_eq!(run("kind: ConfigMap\nmetadata: {name: x}\n").code, 1);
        assert_eq!(run(": : :\n  - [").code, 1);
        assert_eq!(run("").code, 1);
        let out = run("kind: SchedulerProfile\nmetadata: {name: p}\nspec: {replicas: many}\n");
        assert_eq!(out.code, 1);
        assert!(
            out.stderr
                .contains("spec.replicas: Invalid value: \"many\": must be of type integer"),
            "{}",
            out.stderr
        );
    }
}
